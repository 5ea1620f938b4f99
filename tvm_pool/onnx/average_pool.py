"""ONNX AveragePool: versions 1, 7, 10, 11, 19, 22.

v1: padding never counted. v7: count_include_pad. v10: ceil_mode. v11: defaults written into
the text. v19: dilations. v22: bfloat16 (accumulated in float32).
"""

from __future__ import annotations

from .. import relax_ops
from .base import PoolingConverter, register
from .window_attrs import FLOATS, FLOATS_BF16, OpsetRules, open_node, parse_window_attrs

_V1_ATTRS = ("auto_pad", "kernel_shape", "pads", "strides")
_V7_ATTRS = _V1_ATTRS + ("count_include_pad",)
_V10_ATTRS = _V7_ATTRS + ("ceil_mode",)
_V19_ATTRS = _V10_ATTRS + ("dilations",)


@register("AveragePool")
class AveragePool(PoolingConverter):
    RULES = {
        1: OpsetRules(_V1_ATTRS, FLOATS),
        7: OpsetRules(_V7_ATTRS, FLOATS),
        10: OpsetRules(_V10_ATTRS, FLOATS),
        11: OpsetRules(_V10_ATTRS, FLOATS),
        19: OpsetRules(_V19_ATTRS, FLOATS),
        22: OpsetRules(_V19_ATTRS, FLOATS_BF16),
    }

    @classmethod
    def _convert(cls, bb, inputs, attr, version):
        attrs, data, _ctx, _ = open_node(cls, bb, inputs, attr, version, cls.RULES[version])
        window = parse_window_attrs(attrs, data)
        count_include_pad = attrs.int("count_include_pad", 0, choices=(0, 1))
        extra = {"count_include_pad": bool(count_include_pad)}
        pooled = relax_ops.relax_pool2d(bb, "avg_pool", data, **window.as_kwargs(), **extra)
        if pooled is not None:
            return pooled
        return relax_ops.avg_pool(bb, data, **window.as_kwargs(), **extra)

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 1)

    @classmethod
    def _impl_v7(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 7)

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 10)

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 11)

    @classmethod
    def _impl_v19(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 19)

    @classmethod
    def _impl_v22(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 22)
