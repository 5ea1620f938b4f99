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

from tvm import relax, te, tirx

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
        check_dtype(ctx, indices.ty.dtype, ("int64",), what="input I")
        ndim = data.ty.ndim
        rank = ndim - 2
        kernel = attrs.ints("kernel_shape", None, rank, minimum=1, required=True)
        strides = attrs.ints("strides", [1] * rank, rank, minimum=1)
        pads = attrs.ints("pads", [0] * (2 * rank), 2 * rank, minimum=0)
        inferred = cls._inferred_shape(data, kernel, strides, pads)
        output_shape = inputs[2] if len(inputs) > 2 else None
        # The requested shape is bound first: FuseOps orders fused calls by their tensor
        # dependencies only, so a runtime shape's match_cast must come before every op here.
        requested = None
        if output_shape is not None:
            requested = cls._requested_shape(bb, ctx, output_shape, inferred, data.ty.ndim)
        zeros = bb.emit(relax.op.zeros(inferred, data.ty.dtype))
        flat = relax.op.scatter_elements(
            relax.op.reshape(zeros, [-1]),
            relax.op.reshape(indices, [-1]),
            relax.op.reshape(data, [-1]),
            axis=0,
        )
        unpooled = bb.emit(relax.op.reshape(bb.emit(flat), inferred))
        if requested is None:
            return unpooled
        canvas = bb.emit(relax.op.zeros(requested, data.ty.dtype))
        return bb.emit_te(_place_in_corner, unpooled, canvas, primfunc_name_hint="tvm_pool_unpool_place")

    @staticmethod
    def _inferred_shape(data, kernel, strides, pads):
        dims = list(data.ty.shape.values)
        rank = len(kernel)
        spatial = [(dims[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + rank] for i in range(rank)]
        return relax.ShapeExpr(dims[:2] + spatial)

    @staticmethod
    def _requested_shape(bb, ctx, output_shape, inferred, ndim):
        values = static_int_values(ctx, output_shape, "input output_shape")
        if values is not None:
            if len(values) != ndim:
                raise InvalidModelError(ctx, f"input output_shape has {len(values)} values; X has rank {ndim}")
            smaller = [
                (v, i) for v, i in zip(values, inferred.values) if isinstance(i, tirx.IntImm) and v < int(i)
            ]
            if smaller:
                raise InvalidModelError(
                    ctx,
                    f"input output_shape {values} is smaller than the unpooled shape "
                    f"{[int(i) if isinstance(i, tirx.IntImm) else str(i) for i in inferred.values]}",
                )
            return relax.ShapeExpr(values)
        # Known only at run time: give each dim a fresh symbolic name.
        shape_var = bb.emit(relax.op.tensor_to_shape(output_shape))
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


def _place_in_corner(unpooled: te.Tensor, canvas: te.Tensor):
    """``canvas`` (zeros) with ``unpooled`` in its leading corner."""
    def value(*idx):
        inside = tirx.all(*[i < n for i, n in zip(idx, unpooled.shape)])
        clamped = [tirx.min(i, n - 1) for i, n in zip(idx, unpooled.shape)]
        return tirx.if_then_else(inside, unpooled[tuple(clamped)], canvas[idx])

    return te.compute(canvas.shape, value, name="unpool_place")
