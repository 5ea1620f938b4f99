"""ONNX GlobalMaxPool (1, 22), GlobalAveragePool (1, 22), GlobalLpPool (1, 2, 22).

v22 adds bfloat16 to each. GlobalLpPool's ``p`` is a float in v1 and an int from v2.
"""

from __future__ import annotations

from .. import relax_ops
from ..errors import InvalidModelError
from .base import PoolingConverter, register
from .lp_pool import read_p
from .window_attrs import FLOATS, FLOATS_BF16, OpsetRules, open_node


class _GlobalPool(PoolingConverter):
    KIND = ""
    RULES: dict = {}

    @classmethod
    def _convert(cls, bb, inputs, attr, version):
        attrs, data, ctx, _ = open_node(cls, bb, inputs, attr, version, cls.RULES[version])
        if data.ty.ndim < 3:
            raise InvalidModelError(ctx, f"input X has rank {data.ty.ndim}; needs N x C x D1 ... (rank >= 3)")
        p = read_p(attrs, version) if cls.KIND == "lp" else 2.0
        return relax_ops.global_pool(bb, data, cls.KIND, p=p)

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 1)

    @classmethod
    def _impl_v22(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 22)


@register("GlobalMaxPool")
class GlobalMaxPool(_GlobalPool):
    KIND = "max"
    RULES = {1: OpsetRules((), FLOATS), 22: OpsetRules((), FLOATS_BF16)}


@register("GlobalAveragePool")
class GlobalAveragePool(_GlobalPool):
    KIND = "avg"
    RULES = {1: OpsetRules((), FLOATS), 22: OpsetRules((), FLOATS_BF16)}


@register("GlobalLpPool")
class GlobalLpPool(_GlobalPool):
    KIND = "lp"
    RULES = {1: OpsetRules(("p",), FLOATS), 2: OpsetRules(("p",), FLOATS), 22: OpsetRules(("p",), FLOATS_BF16)}

    @classmethod
    def _impl_v2(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 2)
