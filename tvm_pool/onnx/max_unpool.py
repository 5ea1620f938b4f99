"""ONNX MaxUnpool: versions 9, 11, 22.

Scatters X into zeros at the flat positions given by I (indices over the whole tensor, as
MaxPool's Indices output numbers them) of the inferred shape
``(in - 1) * stride + kernel - pad_begin - pad_end`` per spatial axis. With the optional
``output_shape`` input (an initializer, or a runtime tensor giving a dynamic shape), that
result sits in the leading corner of a zero tensor of ``output_shape``: this is what ONNX's
backend test and onnx.reference do (onnxruntime instead scatters the flat indices into
``output_shape`` directly; see docs/conformance.md). v11 changed only the text; v22 adds bfloat16.
"""

from __future__ import annotations

from functools import reduce

from tvm import relax, te, tirx

from ..compute import checks

from ..errors import InvalidModelError
from .base import PoolingConverter, check_dtype, register, static_int_values
from .window_attrs import FLOATS, FLOATS_BF16, OpsetRules, open_node

_ATTRS = ("kernel_shape", "pads", "strides")


@register("MaxUnpool")
class MaxUnpool(PoolingConverter):
    RULES = {9: OpsetRules(_ATTRS, FLOATS), 11: OpsetRules(_ATTRS, FLOATS), 22: OpsetRules(_ATTRS, FLOATS_BF16)}

    @classmethod
    def _convert(cls, bb, inputs, attr, version):
        attrs, data, ctx, _ = open_node(cls, bb, inputs, attr, version, cls.RULES[version])
        indices = inputs[1] if len(inputs) > 1 else None
        if indices is None:
            raise InvalidModelError(ctx, "input I (the indices) is required")
        ndim = data.ty.ndim
        if ndim < 3:
            raise InvalidModelError(ctx, f"input X has rank {ndim}; MaxUnpool needs N x C x D1 ... (rank >= 3)")
        check_dtype(ctx, indices.ty.dtype, ("int64",), what="input I")
        cls._check_same_shape(ctx, data, indices)
        rank = ndim - 2
        kernel = attrs.ints("kernel_shape", None, rank, minimum=1, required=True)
        strides = attrs.ints("strides", [1] * rank, rank, minimum=1)
        pads = attrs.ints("pads", [0] * (2 * rank), 2 * rank, minimum=0)
        inferred = cls._inferred_shape(attrs, data, kernel, strides, pads)
        total = reduce(lambda a, b: a * b, inferred.values)
        cls._check_static_indices(ctx, indices, total)
        output_shape = inputs[2] if len(inputs) > 2 else None
        # The requested shape is bound first: FuseOps orders fused calls by their tensor
        # dependencies only, so a runtime shape's match_cast must come before every op here.
        requested = None
        if output_shape is not None:
            requested = cls._requested_shape(bb, ctx, output_shape, inferred, data)
        unpooled = bb.emit_te(
            checks.unpool_scatter,
            data,
            indices,
            list(inferred.values),
            str(InvalidModelError(ctx, f"input I has an index out of bounds; valid range is [0, {_fmt(total)})")),
            str(InvalidModelError(ctx, "input I must have the shape of input X")),
            primfunc_name_hint="tvm_pool_unpool_scatter",
        )
        if requested is None:
            return unpooled
        canvas = bb.emit(relax.op.zeros(requested, data.ty.dtype))
        return bb.emit_te(_place_in_corner, unpooled, canvas, primfunc_name_hint="tvm_pool_unpool_place")

    @staticmethod
    def _check_same_shape(ctx, data, indices):
        x_dims, i_dims = list(data.ty.shape.values), list(indices.ty.shape.values) if indices.ty.shape else None
        if i_dims is None:
            return
        static = all(isinstance(d, tirx.IntImm) for d in x_dims + i_dims)
        if len(x_dims) != len(i_dims) or (static and [int(d) for d in x_dims] != [int(d) for d in i_dims]):
            raise InvalidModelError(
                ctx, f"input I has shape {_fmt(i_dims)}; it must have the shape of input X, {_fmt(x_dims)}"
            )

    @staticmethod
    def _check_static_indices(ctx, indices, total):
        values = static_int_values(ctx, indices, "input I")
        if values is None or not isinstance(total, tirx.IntImm):
            return
        bad = [v for v in values if not 0 <= v < int(total)]
        if bad:
            raise InvalidModelError(
                ctx, f"input I has index {bad[0]} out of bounds; valid range is [0, {int(total)})"
            )

    @staticmethod
    def _inferred_shape(attrs, data, kernel, strides, pads):
        """``(in - 1) * stride + kernel - pad_begin - pad_end`` per spatial axis, in Python ints
        where the input dim is static (checked: >= 1, and the whole shape allocatable)."""
        dims = [int(d) if isinstance(d, tirx.IntImm) else d for d in data.ty.shape.values]
        rank = len(kernel)
        spatial = []
        for i in range(rank):
            size = (dims[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + rank]
            if isinstance(size, int) and size < 1:
                raise attrs.error(
                    "pads",
                    f"gives output size {size} < 1 on spatial axis {i} (input {dims[2 + i]}, "
                    f"kernel {kernel[i]}, stride {strides[i]}, pads ({pads[i]}, {pads[i + rank]}))",
                )
            spatial.append(size)
        shape = dims[:2] + spatial
        if not checks.fits_allocation([d for d in shape if isinstance(d, int)]):
            raise attrs.error("kernel_shape", checks.too_large_message(f"the unpooled shape {_fmt(shape)}"))
        return relax.ShapeExpr([tirx.IntImm("int64", d) if isinstance(d, int) else d for d in shape])

    @staticmethod
    def _requested_shape(bb, ctx, output_shape, inferred, data):
        ndim = data.ty.ndim
        smaller = f"input output_shape is smaller than the unpooled shape {_fmt(inferred.values)}"
        too_large = checks.too_large_message("input output_shape")
        values = static_int_values(ctx, output_shape, "input output_shape")
        if values is not None:
            if len(values) != ndim:
                raise InvalidModelError(ctx, f"input output_shape has {len(values)} values; X has rank {ndim}")
            if any(isinstance(i, tirx.IntImm) and v < int(i) for v, i in zip(values, inferred.values)):
                raise InvalidModelError(ctx, f"{smaller}: got {values}")
            if not checks.fits_allocation(values):
                raise InvalidModelError(ctx, f"{too_large}: got {values}")
            return relax.ShapeExpr(values)
        ty = output_shape.ty
        length = ty.shape.values[0] if ty.ndim == 1 and ty.shape is not None else None
        if not isinstance(length, tirx.IntImm):
            raise InvalidModelError(ctx, "input output_shape must be a 1-D tensor of statically known length")
        if int(length) != ndim:
            raise InvalidModelError(ctx, f"input output_shape has {int(length)} values; X has rank {ndim}")
        if str(ty.dtype) != "int64":
            output_shape = bb.emit(relax.op.astype(output_shape, "int64"))
        # Known only at run time: checked in the module (the same rules), then given fresh names.
        minimums = list(inferred.values)
        checked = bb.emit_te(
            lambda sizes, x: checks.checked_sizes(
                sizes,
                [],
                lambda vals: [(tirx.all(*[v >= m for v, m in zip(vals, minimums)]), str(InvalidModelError(ctx, smaller)))],
                str(InvalidModelError(ctx, too_large)),
                shape_of=x,
            ),
            output_shape,
            data,
            primfunc_name_hint="tvm_pool_check_output_shape",
        )
        shape_var = bb.emit(relax.op.tensor_to_shape(checked))
        dims = [tirx.Var(f"unpool_d{i}", "int64") for i in range(ndim)]
        bb.match_cast(shape_var, relax.ShapeType(dims))
        return relax.ShapeExpr(dims)

    @classmethod
    def _impl_v9(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 9)

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 11)

    @classmethod
    def _impl_v22(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 22)


def _fmt(dims) -> str:
    if not isinstance(dims, (list, tuple)) and not hasattr(dims, "__len__"):
        return str(int(dims)) if isinstance(dims, tirx.IntImm) else str(dims)
    return "[" + ", ".join(str(int(d)) if isinstance(d, tirx.IntImm) else str(d) for d in dims) + "]"


def _place_in_corner(unpooled: te.Tensor, canvas: te.Tensor):
    """``canvas`` (zeros) with ``unpooled`` in its leading corner."""
    def value(*idx):
        inside = tirx.all(*[i < n for i, n in zip(idx, unpooled.shape)])
        clamped = [tirx.min(i, n - 1) for i, n in zip(idx, unpooled.shape)]
        return tirx.if_then_else(inside, unpooled[tuple(clamped)], canvas[idx])

    return te.compute(canvas.shape, value, name="unpool_place")
