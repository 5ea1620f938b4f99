"""ONNX MaxPool: versions 1, 8, 10, 11, 12, 22.

v1: values only. v8: Indices output and storage_order. v10: ceil_mode and dilations.
v11: defaults for pads/strides/dilations written into the text (same behaviour). v12: int8 and
uint8. v22: bfloat16, and the rule that windows starting in the end padding are dropped
(applied at every version, see tvm_pool/spec.py).
"""

from __future__ import annotations

from .. import relax_ops
from .base import PoolingConverter, register
from .window_attrs import FLOATS, FLOATS_BF16, OpsetRules, open_node, parse_window_attrs

_V1_ATTRS = ("auto_pad", "kernel_shape", "pads", "strides")
_V8_ATTRS = _V1_ATTRS + ("storage_order",)
_V10_ATTRS = _V8_ATTRS + ("ceil_mode", "dilations")
_INT8 = ("int8", "uint8")


@register("MaxPool")
class MaxPool(PoolingConverter):
    RULES = {
        1: OpsetRules(_V1_ATTRS, FLOATS),
        8: OpsetRules(_V8_ATTRS, FLOATS, max_outputs=2),
        10: OpsetRules(_V10_ATTRS, FLOATS, max_outputs=2),
        11: OpsetRules(_V10_ATTRS, FLOATS, max_outputs=2),
        12: OpsetRules(_V10_ATTRS, FLOATS + _INT8, max_outputs=2),
        22: OpsetRules(_V10_ATTRS, FLOATS_BF16 + _INT8, max_outputs=2),
    }

    @classmethod
    def _convert(cls, bb, inputs, attr, version):
        attrs, data, _ctx, num_outputs = open_node(cls, bb, inputs, attr, version, cls.RULES[version])
        window = parse_window_attrs(attrs, data)
        storage_order = attrs.int("storage_order", 0, choices=(0, 1))
        pooled = relax_ops.relax_pool2d(bb, "max_pool", data, **window.as_kwargs()) if num_outputs == 1 else None
        if pooled is not None:
            return pooled
        return relax_ops.max_pool(
            bb,
            data,
            **window.as_kwargs(),
            return_indices=num_outputs == 2,
            storage_order=storage_order,
        )

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 1)

    @classmethod
    def _impl_v8(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 8)

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 10)

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 11)

    @classmethod
    def _impl_v12(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 12)

    @classmethod
    def _impl_v22(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, 22)
