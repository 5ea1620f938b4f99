"""Converters for tvm_pool's custom ONNX domain ``tvm_pool`` (operator version 1).

- ``AdaptiveMaxPool(X, output_size) -> (Y, Indices?)``: OpenVINO AdaptiveMaxPool-8. Attribute
  ``index_element_type`` ("i32" | "i64", default "i64"). ``output_size`` is a 1-D int32/int64
  tensor with one value per spatial axis: an initializer (static output shape) or a graph input
  (output shape known only at run time; one compiled module serves every size).
- ``AdaptiveAvgPool(X, output_size) -> Y``: OpenVINO AdaptiveAvgPool-8, same bins.
- ``TensorRTPooling(X) -> Y``: TensorRT IPoolingLayer. Attributes ``pooling_type`` ("MAX" |
  "AVERAGE" | "MAX_AVERAGE_BLEND", required), ``window_size`` (2 or 3 ints, required),
  ``stride`` (default 1s), ``pre_padding`` / ``post_padding`` (default 0s), ``padding_mode``
  (``tvm_pool.spec.TRT_PADDING_MODES``, default "EXPLICIT_ROUND_DOWN"), ``blend_factor`` (float
  in [0, 1], default 0), ``average_count_excludes_padding`` (0 | 1, default 1).

Example node::

    onnx.helper.make_node("AdaptiveMaxPool", ["X", "size"], ["Y", "I"], domain="tvm_pool",
                          index_element_type="i32")

with ``onnx.helper.make_opsetid("tvm_pool", 1)`` in the model's opset_import.
"""

from __future__ import annotations

from tvm import tirx

from .. import relax_ops, spec
from ..compute import checks
from ..compute.tensorrt import POOLING_TYPES
from ..errors import InvalidModelError
from .base import (
    CUSTOM_DOMAIN,
    NodeAttributes,
    PoolingConverter,
    check_dtype,
    check_outputs,
    register,
    static_int_values,
    tensor_type,
)

ADAPTIVE_DTYPES = ("float16", "float32", "float64")
TENSORRT_DTYPES = ("float32", "float16", "int8")


def _adaptive_inputs(cls, inputs, attr, version, allowed, max_outputs):
    ctx = cls.context(attr, version)
    attrs = NodeAttributes(ctx, attr, allowed)
    if len(inputs) < 2 or inputs[0] is None or inputs[1] is None:
        raise InvalidModelError(ctx, "needs two inputs: X and output_size")
    data = inputs[0]
    ty = tensor_type(ctx, data)
    check_dtype(ctx, ty.dtype, ADAPTIVE_DTYPES)
    if ty.ndim not in (3, 4, 5):
        raise InvalidModelError(ctx, f"input X has rank {ty.ndim}; allowed: 3, 4 or 5 (N, C, 1-3 spatial dims)")
    num_outputs = check_outputs(ctx, attr, max_outputs)
    rank = ty.ndim - 2
    size = inputs[1]
    values = static_int_values(ctx, size, "input output_size")
    if values is not None:
        if len(values) != rank:
            raise InvalidModelError(ctx, f"input output_size has {len(values)} values; X of rank {ty.ndim} needs {rank}")
        if any(v < 1 for v in values):
            raise InvalidModelError(ctx, f"input output_size values must be >= 1, got {values}")
        lead = [d for d in ty.shape.values[:2] if isinstance(d, tirx.IntImm)]
        if not checks.fits_allocation([int(d) for d in lead] + values):
            raise InvalidModelError(ctx, f"input {checks.too_large_message('output_size')}: got {values}")
        return attrs, data, values, num_outputs
    size_ty = tensor_type(ctx, size, "input output_size")
    length = size_ty.shape.values[0] if size_ty.ndim == 1 and size_ty.shape is not None else None
    if size_ty.ndim != 1 or not isinstance(length, tirx.IntImm):
        raise InvalidModelError(ctx, "input output_size must be a 1-D tensor of statically known length")
    if int(length) != rank:
        raise InvalidModelError(ctx, f"input output_size has {int(length)} values; X of rank {ty.ndim} needs {rank}")
    return attrs, data, size, num_outputs


def _runtime_prefix(cls, attr) -> str:
    """How the module's run-time checks of ``output_size`` start their messages: like the
    importer's (``node 'n' (tvm_pool::AdaptiveMaxPool-1): input ``)."""
    return f"{cls.context(attr, 1).describe()}: input "


@register("AdaptiveMaxPool", CUSTOM_DOMAIN)
class AdaptiveMaxPool(PoolingConverter):
    """OpenVINO AdaptiveMaxPool-8 as tvm_pool::AdaptiveMaxPool-1."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        attrs, data, size, num_outputs = _adaptive_inputs(cls, inputs, attr, 1, ("index_element_type",), 2)
        index_type = attrs.string("index_element_type", "i64", ("i32", "i64"))
        return relax_ops.adaptive_max_pool(
            bb, data, size, index_type, return_indices=num_outputs == 2, error_prefix=_runtime_prefix(cls, attr)
        )


@register("AdaptiveAvgPool", CUSTOM_DOMAIN)
class AdaptiveAvgPool(PoolingConverter):
    """OpenVINO AdaptiveAvgPool-8 as tvm_pool::AdaptiveAvgPool-1."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        _, data, size, _ = _adaptive_inputs(cls, inputs, attr, 1, (), 1)
        return relax_ops.adaptive_avg_pool(bb, data, size, error_prefix=_runtime_prefix(cls, attr))


_TRT_ATTRS = (
    "pooling_type",
    "window_size",
    "stride",
    "pre_padding",
    "post_padding",
    "padding_mode",
    "blend_factor",
    "average_count_excludes_padding",
)


@register("TensorRTPooling", CUSTOM_DOMAIN)
class TensorRTPooling(PoolingConverter):
    """TensorRT IPoolingLayer as tvm_pool::TensorRTPooling-1."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        ctx = cls.context(attr, 1)
        attrs = NodeAttributes(ctx, attr, _TRT_ATTRS)
        data = inputs[0]
        ty = tensor_type(ctx, data)
        check_dtype(ctx, ty.dtype, TENSORRT_DTYPES)
        check_outputs(ctx, attr, 1)
        if not attrs.has("pooling_type"):
            raise attrs.error("pooling_type", f"is required; allowed values: {', '.join(POOLING_TYPES)}")
        pooling_type = attrs.string("pooling_type", "MAX", POOLING_TYPES)
        if not attrs.has("window_size"):
            raise attrs.error("window_size", "is required (2 or 3 ints)")
        raw = attrs.attr["window_size"]
        rank = 1 if isinstance(raw, int) else len(raw)
        if rank not in (2, 3):
            raise attrs.error("window_size", f"has {rank} values; allowed: 2 (2-D windows) or 3 (3-D windows)")
        if ty.ndim < rank + 1:
            raise InvalidModelError(
                ctx, f"input X has rank {ty.ndim}; a {rank}-D window needs rank >= {rank + 1}", attribute="window_size"
            )
        window = attrs.ints("window_size", None, rank, minimum=1, required=True)
        stride = attrs.ints("stride", [1] * rank, rank, minimum=1)
        pre = attrs.ints("pre_padding", [0] * rank, rank, minimum=0)
        post = attrs.ints("post_padding", [0] * rank, rank, minimum=0)
        mode = attrs.string("padding_mode", "EXPLICIT_ROUND_DOWN", spec.TRT_PADDING_MODES)
        blend = attrs.float("blend_factor", 0.0)
        if not 0.0 <= blend <= 1.0:
            raise attrs.error("blend_factor", f"must be in [0, 1], got {blend}")
        excludes = attrs.int("average_count_excludes_padding", 1, choices=(0, 1))
        spatial = list(ty.shape.values[ty.ndim - rank :]) if ty.shape is not None else None
        if spatial is not None:
            for axis, w in enumerate(spec.trt_windows(spatial, window, stride, pre, post, mode)):
                if spec.is_static(w.out_size) and spec.as_dim(w.out_size) < 1:
                    raise attrs.error(
                        "window_size",
                        f"gives output size {w.out_size} < 1 on spatial axis {axis} "
                        f"(input {spec.as_dim(w.in_size)}, {mode})",
                    )
        return relax_ops.tensorrt_pool(
            bb, data, pooling_type, window, stride, pre, post, mode, blend, bool(excludes)
        )


__all__ = ["AdaptiveAvgPool", "AdaptiveMaxPool", "TensorRTPooling"]
