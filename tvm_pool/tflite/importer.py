"""TVM's TFLite ``OperatorConverter`` with tvm_pool's pooling converters.

TVM builds its converter table in ``OperatorConverter.__init__``; the subclass here replaces
MAX_POOL_2D, AVERAGE_POOL_2D and L2_POOL_2D (:mod:`tvm_pool.tflite.pools`) and MEAN over H and
W (:mod:`tvm_pool.tflite.mean`; any other MEAN falls back to TVM's) and keeps every other
converter, wrapped so that a failure inside TVM's converter (or in normalizing what it
returned) is one line naming the operator (:class:`~tvm_pool.errors.UnsupportedError`). TVM's check for operators it cannot
convert (unknown or quantized ones) is redone per operator for the same reason.
"""

from __future__ import annotations

import functools

from tvm import relax
from tvm.relax.frontend.tflite import tflite_frontend as tvm_tflite

from ..block_builders import close_builder
from ..errors import TvmPoolError, UnsupportedError
from .mean import convert_mean
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
        if "MEAN" in self.convert_map:  # over H and W: tvm_pool's; any other MEAN: TVM's (wrapped above)
            self.convert_map["MEAN"] = functools.partial(convert_mean, self, fallback=self.convert_map["MEAN"])

    def tensor_name(self, tensor) -> str:
        return tvm_tflite.get_tensor_name(self.subgraph, tensor.tensor_idx)

    def _tvm_converter(self, convert, op):
        try:
            ret = convert(op=op)
            # TVM's loop normalizes what a converter returns (inferring its type): done here, a
            # failure there (relax.mean of repeated axes, ...) is this operator's one line too
            return self.bb.normalize(ret) if isinstance(ret, relax.Expr) else ret
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
    """See :func:`tvm_pool.from_tflite`. Where the conversion raises, the Relax BlockBuilders it
    left open are closed (:func:`tvm_pool.block_builders.close_builder`) before the error goes
    on: TVM's main builder (the one the operator converter is given) and any other builder the
    failing frames hold (:func:`builders_in`)."""
    builders = []

    def converter(model, subgraph, exp_tab, ctx, *args, **kwargs):
        builders.append(ctx)  # TVM's main BlockBuilder
        return op_converter(model, subgraph, exp_tab, ctx, *args, **kwargs)

    try:
        return tvm_tflite.from_tflite(model, shape_dict, dtype_dict, op_converter=converter)
    except BaseException as err:
        seen = set()
        for bb in builders + builders_in(err.__traceback__):
            if id(bb) not in seen:
                seen.add(id(bb))
                close_builder(bb)
        raise


def builders_in(traceback) -> list:
    """The Relax BlockBuilders the frames of ``traceback`` hold: TVM's ``from_tflite`` holds its
    main one in ``bb`` (also where it raises before the operator converter exists: a string
    input), a control-flow operator's converter the one of its subgraph. TVM's ``from_tflite``
    builds in ``with bb.function("main"): with bb.dataflow():``; when a converter raises, the
    dataflow scope's exit ends the dataflow block and begins a binding block, and the function
    scope's exit ends none, so the builder keeps that block and its C++ destructor prints
    "BlockBuilder destroyed with remaining blocks!" whenever the garbage collector gets to it."""
    found = []
    while traceback is not None:
        found += [v for v in traceback.tb_frame.f_locals.values() if isinstance(v, relax.BlockBuilder)]
        traceback = traceback.tb_next
    return found
