"""ONNX LpPool: versions 1, 2, 11, 18, 22.

v1: ``p`` is a float (default 2.0). v2: ``p`` is an int (default 2). v11: defaults written
into the text. v18: ceil_mode and dilations. v22: bfloat16.
"""

from __future__ import annotations

from .. import relax_ops
from .base import PoolingConverter, register
from .window_attrs import FLOATS, FLOATS_BF16, OpsetRules, open_node, parse_window_attrs

_V1_ATTRS = ("auto_pad", "kernel_shape", "p", "pads", "strides")
_V18_ATTRS = _V1_ATTRS + ("ceil_mode", "dilations")


def read_p(attrs, version: int) -> float:
    """``p`` is a float in version 1 and an int from version 2 on; it must be positive."""
    p = attrs.float("p", 2.0) if version == 1 else attrs.int("p", 2)
    if p <= 0:
        raise attrs.error("p", f"must be > 0, got {p}")
    return float(p)


@register("LpPool")
class LpPool(PoolingConverter):
    RULES = {
        1: OpsetRules(_V1_ATTRS, FLOATS),
        2: OpsetRules(_V1_ATTRS, FLOATS),
        11: OpsetRules(_V1_ATTRS, FLOATS),
        18: OpsetRules(_V18_ATTRS, FLOATS),
        22: OpsetRules(_V18_ATTRS, FLOATS_BF16),
    }

    @classmethod
    def _convert(cls, bb, inputs, attr, version):
        attrs, data, _ctx, _ = open_node(cls, bb, inputs, attr, version, cls.RULES[version])
        window = parse_window_attrs(attrs, data)
        return relax_ops.lp_pool(bb, data, **window.as_kwargs(), p=read_p(attrs, version))

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 1)

    @classmethod
    def _impl_v2(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 2)

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 11)

    @classmethod
    def _impl_v18(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 18)

    @classmethod
    def _impl_v22(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 22)
