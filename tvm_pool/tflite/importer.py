"""TVM's TFLite ``OperatorConverter`` with tvm_pool's pooling converters.

TVM builds its converter table in ``OperatorConverter.__init__``; the subclass here replaces
MAX_POOL_2D, AVERAGE_POOL_2D and L2_POOL_2D (:mod:`tvm_pool.tflite.pools`) and keeps every
other converter, wrapped so that a failure inside TVM's converter is one line naming the
operator (:class:`~tvm_pool.errors.UnsupportedError`). TVM's check for operators it cannot
convert (unknown or quantized ones) is redone per operator for the same reason.
"""

from __future__ import annotations

import functools

from tvm.relax.frontend.tflite import tflite_frontend as tvm_tflite

from ..errors import TvmPoolError, UnsupportedError
from .pools import KINDS, convert_pool, node_context

# What TVM's TFLite converters raise when they cannot convert an operator: tvm.error.OpError
# (RuntimeError, NotImplementedError, AttributeError), their asserts, and the builtins below.
_TVM_CONVERTER_ERRORS = (RuntimeError, ValueError, TypeError, AttributeError, KeyError, IndexError, AssertionError)


def one_line(err: Exception) -> str:
    """``err`` as one line: its type and the first line of its message (at most 300 characters)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class PoolingOperatorConverter(tvm_tflite.OperatorConverter):
    """OperatorConverter whose pooling converters are tvm_pool's."""

    def __init__(self, model, subgraph, exp_tab, ctx, conversion_state=None):
        super().__init__(model, subgraph, exp_tab, ctx, conversion_state)
        for name, convert in list(self.convert_map.items()):
            self.convert_map[name] = functools.partial(self._tvm_converter, convert)
        for name, kind in KINDS.items():
            self.convert_map[name] = functools.partial(convert_pool, self, kind=kind)

    def tensor_name(self, tensor) -> str:
        return tvm_tflite.get_tensor_name(self.subgraph, tensor.tensor_idx)

    def _tvm_converter(self, convert, op):
        try:
            return convert(op=op)
        except TvmPoolError:
            raise
        except _TVM_CONVERTER_ERRORS as err:
            message = f"TVM's TFLite converter cannot convert it: {one_line(err)}"
            raise UnsupportedError(node_context(self, op), message) from None

    def check_unsupported_ops(self):
        """TVM's check, one operator at a time, so that the error names the first operator
        TVM refuses: one it has no converter for, a quantized one that is not among TVM's
        quantized operators (tvm_pool's pools are), or one with dynamic-range weights."""
        for index in range(self.subgraph.OperatorsLength()):
            op = self.subgraph.Operators(index)
            reason = self._refusal(op, self.get_op_code_str(op))
            if reason:
                raise UnsupportedError(node_context(self, op), reason)

    def _refusal(self, op, name: str) -> str:
        if name not in self.convert_map:
            return "TVM's TFLite frontend has no converter for this operator"
        if name in KINDS:
            return ""
        inputs, outputs = self.get_input_tensors(op), self.get_output_tensors(op)
        quantized_data = any(t.qnn_params is not None for t in [*inputs[:1], *outputs])
        quantized_weights = any(t.qnn_params is not None for t in inputs[1:])
        if quantized_weights and not quantized_data:
            return ("its weights are quantized and its data is not (dynamic-range quantization), which TVM's "
                    "TFLite frontend does not convert: use full integer quantization")
        if (quantized_data or quantized_weights) and name not in self._SUPPORTED_QUANTIZED_OPS:
            return f"TVM's TFLite frontend does not convert quantized {name}"
        return ""


def from_tflite(model, shape_dict=None, dtype_dict=None, op_converter=PoolingOperatorConverter):
    """See :func:`tvm_pool.from_tflite`."""
    return tvm_tflite.from_tflite(model, shape_dict, dtype_dict, op_converter=op_converter)
