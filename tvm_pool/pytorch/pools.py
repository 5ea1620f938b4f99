"""PyTorch's pooling operators on tvm_pool's computes, with PyTorch's semantics.

Where PyTorch differs from ONNX, the compute takes it as a parameter; nothing else is forked:

- max_pool / adaptive_max_pool indices number each (n, c) plane's spatial positions row-major
  (``index_scope="plane"``), and among NaNs the *last* wins (``nan_index="last"``): the CPU
  kernels test ``val > max || isnan(val)`` at every tap.
- ceil_mode drops a last window that starts in the end padding (the rule the computes apply
  for every road), and avg_pool's ``count_include_pad`` divisor counts the padding but never
  the overhang past it: both are PyTorch's rules already.
- avg_pool's ``divisor_override`` divides every window by that constant; integer inputs divide
  truncating toward zero, as PyTorch's integer kernels do.
- The adaptive bins are ``[floor(i*In/Out), ceil((i+1)*In/Out))``, as in the computes.

``lp_pool*d`` needs no converter: ``torch.nn.functional.lp_pool*d`` is Python over
``avg_pool*d``, ``pow``, ``sign``, ``abs`` and ``relu``, so torch.export already records
PyTorch's formula (``sign(avg) * relu(|avg|) * kernel_size) ** (1/p)``).

Pools that TVM's own Relax ops express exactly under tvm_pool's legalization (max_pool whose
indices nobody reads, avg_pool without ``divisor_override``, adaptive_avg_pool; batched, and
only where the op's inferred output shape is PyTorch's) are emitted as ``relax.op.nn`` pools,
which ``tvm_pool.compile`` legalizes to the same computes: passes such as ``ConvertLayout``
then move them to channel-last with their producers. The others are ``call_tir`` of the
compute directly.

Each converter takes the importer and the fx node; tuple-returning ATen ops (``*_with_indices``,
``adaptive_max_pool*d``) compute their indices only when some node reads them.
"""

from __future__ import annotations

import re

import tvm
from tvm import relax

from .. import compute, spec
from ..legalize_layouts import LAYOUTS
from .arguments import NodeArguments, op_name
from .unpool import max_unpool

CONVERTERS = {}

# PyTorch's max_pool and adaptive_max_pool conventions (see the module docstring).
_INDICES = {"index_scope": "plane", "nan_index": "last", "index_dtype": "int64"}


def converter(*names):
    """Register ``fn(importer, node)`` for the ATen overloads ``names`` (``"avg_pool2d.default"``)."""

    def register(fn):
        for name in names:
            CONVERTERS[name] = fn
        return fn

    return register


def _names(pattern: str, overload: str = "default"):
    return [f"{pattern.format(n)}.{overload}" for n in (1, 2, 3)]


def spatial_rank(node) -> int:
    return int(re.search(r"pool(\d)d", op_name(node)).group(1))


def _input(args: NodeArguments, rank: int) -> relax.Expr:
    """The pooled input: [C, *spatial] or [N, C, *spatial]."""
    return args.tensor("self", (rank + 1, rank + 2))


def _spatial(data: relax.Expr, rank: int) -> list:
    return list(data.ty.shape.values[data.ty.ndim - rank :]) if data.ty.shape is not None else [None] * rank


# The layout of every pool PyTorch records (its memory format never reaches the graph).
CHANNEL_FIRST = {rank: layouts[0] for rank, layouts in LAYOUTS.items()}


def _relax_pool(importer, call: relax.Call, data: relax.Expr, rank: int, out_spatial):
    """``call`` (a ``relax.op.nn`` pool) emitted when the input is batched and its inferred
    spatial output is ``out_spatial``; else None (the caller emits the compute)."""
    if data.ty.ndim != rank + 2:
        return None
    normalized = importer.block_builder.normalize(call)
    shape = normalized.ty.shape
    if shape is None:
        return None
    analyzer = tvm.sym.Analyzer()
    got = list(shape.values[2:])
    if len(got) != len(out_spatial) or not all(
        analyzer.can_prove_equal(g, spec.as_dim(w)) for g, w in zip(got, out_spatial)
    ):
        return None
    return importer.block_builder.emit(normalized)


def _out_spatial(data, rank, kernel, stride, padding, dilation, ceil_mode):
    windows = spec.resolve_windows(_spatial(data, rank), kernel, stride, dilation, padding + padding, "NOTSET", ceil_mode)
    return [w.out_size for w in windows]


def _check_windows(args, data, rank, kernel, stride, padding, dilation, ceil_mode):
    """PyTorch's pool shape checks: pad at most half the (dilated) kernel, output size >= 1."""
    for axis in range(rank):
        effective = spec.effective_kernel(kernel[axis], dilation[axis])
        if padding[axis] > effective // 2:
            raise args.error(
                "padding",
                f"must be at most half of the effective kernel size on spatial axis {axis}: "
                f"got pad {padding[axis]}, kernel {kernel[axis]}, dilation {dilation[axis]}",
            )
    for axis, size in enumerate(_spatial(data, rank)):
        if size is None or not spec.is_static(size):
            continue
        out = spec.explicit_output_size(
            int(size), kernel[axis], stride[axis], dilation[axis], padding[axis], padding[axis], ceil_mode
        )
        if out < 1:
            raise args.error(
                "kernel_size",
                f"gives output size {out} < 1 on spatial axis {axis} (input {int(size)}, kernel {kernel[axis]}, "
                f"stride {stride[axis]}, padding {padding[axis]}, dilation {dilation[axis]})",
            )


@converter(*_names("max_pool{}d"), *_names("max_pool{}d_with_indices"))
def max_pool(importer, node):
    args = NodeArguments(node, importer.env)
    rank = spatial_rank(node)
    data = _input(args, rank)
    kernel = args.ints("kernel_size", rank, minimum=1)
    stride = args.ints("stride", rank, minimum=1, empty=kernel)
    padding = args.ints("padding", rank, minimum=0)
    dilation = args.ints("dilation", rank, minimum=1)
    ceil_mode = args.flag("ceil_mode")
    _check_windows(args, data, rank, kernel, stride, padding, dilation, ceil_mode)
    tuple_result = "with_indices" in op_name(node)
    with_indices = tuple_result and args.result_used(1)
    result = None
    if not with_indices:
        op = getattr(relax.op.nn, f"max_pool{rank}d")
        call = op(data, kernel, stride, padding + padding, dilation, ceil_mode, layout=CHANNEL_FIRST[rank])
        result = _relax_pool(importer, call, data, rank, _out_spatial(data, rank, kernel, stride, padding, dilation, ceil_mode))
    result = result if result is not None else importer.block_builder.emit_te(
        compute.max_pool, data, kernel, stride, dilation, padding + padding, "NOTSET", ceil_mode,
        return_indices=with_indices, **_INDICES, primfunc_name_hint="tvm_pool_max_pool",
    )
    if tuple_result and not with_indices:
        return (result, None)
    return result


@converter(*_names("avg_pool{}d"))
def avg_pool(importer, node):
    args = NodeArguments(node, importer.env)
    rank = spatial_rank(node)
    data = _input(args, rank)
    kernel = args.ints("kernel_size", rank, minimum=1)
    stride = args.ints("stride", rank, minimum=1, empty=kernel)
    padding = args.ints("padding", rank, minimum=0)
    ceil_mode = args.flag("ceil_mode")
    count_include_pad = args.flag("count_include_pad")
    divisor = args.optional_int("divisor_override")
    if divisor is not None and divisor == 0:
        raise args.error("divisor_override", "must not be zero")
    for axis in range(rank):
        if padding[axis] > kernel[axis] // 2:
            raise args.error(
                "padding",
                f"must be at most half of kernel_size on spatial axis {axis}: got pad {padding[axis]}, kernel {kernel[axis]}",
            )
    _check_windows(args, data, rank, kernel, stride, padding, [1] * rank, ceil_mode)
    if divisor is None:
        op = getattr(relax.op.nn, f"avg_pool{rank}d")
        call = op(data, kernel, stride, padding + padding, [1] * rank, ceil_mode, count_include_pad, layout=CHANNEL_FIRST[rank])
        out = _out_spatial(data, rank, kernel, stride, padding, [1] * rank, ceil_mode)
        result = _relax_pool(importer, call, data, rank, out)
        if result is not None:
            return result
    return importer.block_builder.emit_te(
        compute.avg_pool, data, kernel, stride, None, padding + padding, "NOTSET", ceil_mode,
        count_include_pad=count_include_pad, divisor_override=divisor, primfunc_name_hint="tvm_pool_avg_pool",
    )


def _adaptive_input(args, node):
    rank = spatial_rank(node)
    data = _input(args, rank)
    size = args.ints("output_size", rank, minimum=1)
    return data, size


@converter(*_names("adaptive_avg_pool{}d"), *_names("_adaptive_avg_pool{}d")[1:])
def adaptive_avg_pool(importer, node):
    args = NodeArguments(node, importer.env)
    data, size = _adaptive_input(args, node)
    rank = len(size)
    call = getattr(relax.op.nn, f"adaptive_avg_pool{rank}d")(data, size, layout=CHANNEL_FIRST[rank])
    result = _relax_pool(importer, call, data, rank, size)
    if result is not None:
        return result
    return importer.block_builder.emit_te(
        compute.adaptive_avg_pool, data, size, primfunc_name_hint="tvm_pool_adaptive_avg_pool"
    )


@converter(*_names("adaptive_max_pool{}d"))
def adaptive_max_pool(importer, node):
    args = NodeArguments(node, importer.env)
    data, size = _adaptive_input(args, node)
    with_indices = args.result_used(1)
    result = importer.block_builder.emit_te(
        compute.adaptive_max_pool, data, size, return_indices=with_indices,
        index_dtype="int64", nan_index="last", primfunc_name_hint="tvm_pool_adaptive_max_pool",
    )
    return result if with_indices else (result, None)


@converter("fractional_max_pool2d.default", "fractional_max_pool3d.default")
def fractional_max_pool(importer, node):
    """The random samples are an input of the op (``_random_samples``, or ``torch.rand`` in the
    graph when the caller gave none), so the windows are computed in the module."""
    args = NodeArguments(node, importer.env)
    rank = spatial_rank(node)
    data = _input(args, rank)
    kernel = args.ints("kernel_size", rank, minimum=1)
    size = args.ints("output_size", rank, minimum=1)
    samples = args.tensor("random_samples", (3,))
    if str(data.ty.dtype) == "bfloat16":
        raise args.unsupported("bfloat16 fractional_max_pool is not supported (TVM 0.27 cannot lower its window arithmetic in bfloat16); float16, float32 and float64 are")
    if str(samples.ty.dtype) != str(data.ty.dtype):
        raise args.error("random_samples", f"has type {samples.ty.dtype}; it must have the type of self, {data.ty.dtype}")
    for axis, n in enumerate(_spatial(data, rank)):
        if n is not None and spec.is_static(n) and size[axis] + kernel[axis] - 1 > int(n):
            raise args.error(
                "output_size",
                f"output_size {size[axis]} + kernel_size {kernel[axis]} - 1 exceeds the input size {int(n)} "
                f"on spatial axis {axis}",
            )
    return importer.block_builder.emit_te(
        compute.fractional_max_pool, data, samples, kernel, size, primfunc_name_hint="tvm_pool_fractional_max_pool"
    )


CONVERTERS["max_unpool2d.default"] = max_unpool
CONVERTERS["max_unpool3d.default"] = max_unpool
