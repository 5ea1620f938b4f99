"""PyTorch's ``max_unpool2d`` / ``max_unpool3d`` (``max_unpool1d`` is max_unpool2d in torch).

Each value of ``self`` is written at the position its index gives within its own (n, c) plane
of an output of spatial size ``output_size``; the rest is zero. PyTorch's decomposition turns
the op into an ``index_put`` over the flattened tensor, which writes wherever an index points;
here every index is checked in the compiled module first (``[0, plane size)``, the bound
PyTorch's own kernel checks), like ONNX MaxUnpool. Repeated indices leave the result
unspecified in PyTorch; here the last write in row-major order wins.
"""

from __future__ import annotations

from tvm import tirx

from ..compute import checks
from ..errors import InvalidModelError
from .arguments import NodeArguments, op_name


def max_unpool(importer, node):
    args = NodeArguments(node, importer.env)
    rank = 3 if op_name(node).startswith("max_unpool3d") else 2
    data = args.tensor("self", (rank + 1, rank + 2))
    indices = args.tensor("indices", (data.ty.ndim,))
    if str(indices.ty.dtype) != "int64":
        raise args.error("indices", f"has type {indices.ty.dtype}; allowed: int64")
    size = args.ints("output_size", rank, minimum=0)
    if rank == 3:
        args.ints("stride", rank, minimum=1)
        args.ints("padding", rank, minimum=0)
    x_dims, i_dims = list(data.ty.shape.values), list(indices.ty.shape.values)
    static = all(isinstance(d, tirx.IntImm) for d in x_dims + i_dims)
    if static and [int(d) for d in x_dims] != [int(d) for d in i_dims]:
        raise args.error("indices", f"has shape {_fmt(i_dims)}; it must have the shape of self, {_fmt(x_dims)}")
    shape = x_dims[: data.ty.ndim - rank] + size
    if not checks.fits_allocation([int(d) for d in shape if isinstance(d, (int, tirx.IntImm))]):
        raise args.error("output_size", checks.too_large_message(f"output_size {size}"))
    plane = 1
    for s in size:
        plane *= s
    out_of_bounds = InvalidModelError(
        args.ctx, f"argument 'indices' has an index out of bounds; valid range is [0, {plane}) within each plane"
    )
    wrong_shape = InvalidModelError(args.ctx, "argument 'indices' must have the shape of self")
    return importer.block_builder.emit_te(
        checks.unpool_scatter, data, indices, shape, str(out_of_bounds), str(wrong_shape), plane_rank=rank,
        primfunc_name_hint="tvm_pool_unpool_scatter",
    )


def _fmt(dims) -> str:
    return "[" + ", ".join(str(int(d)) if isinstance(d, tirx.IntImm) else str(d) for d in dims) + "]"
