"""Build single-node ONNX models and run them through tvm_pool and the oracles.

Oracles: onnxruntime and onnx.reference. Both take the same ModelProto tvm_pool imports.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper

# onnx 1.23 writes IR version 14, which onnxruntime 1.31 refuses.
IR_VERSION = 10

NP_TO_ONNX = {
    "float32": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "float64": TensorProto.DOUBLE,
    "bfloat16": TensorProto.BFLOAT16,
    "int8": TensorProto.INT8,
    "uint8": TensorProto.UINT8,
    "int64": TensorProto.INT64,
    "int32": TensorProto.INT32,
}


def pool_model(
    op_type: str,
    x_shape,
    dtype: str = "float32",
    opset: int = 22,
    num_outputs: int = 1,
    extra_inputs=(),
    initializers=(),
    domain: str = "",
    **attrs,
) -> onnx.ModelProto:
    """A one-node model. ``x_shape`` entries may be strings (symbolic dims)."""
    inputs = [helper.make_tensor_value_info("X", NP_TO_ONNX[dtype], list(x_shape))]
    inputs += list(extra_inputs)
    out_names = ["Y", "Indices"][:num_outputs]
    out_types = [NP_TO_ONNX[dtype], TensorProto.INT64]
    outputs = [helper.make_tensor_value_info(n, t, None) for n, t in zip(out_names, out_types)]
    node_inputs = ["X"] + [i.name for i in extra_inputs] + [t.name for t in initializers]
    node = helper.make_node(op_type, node_inputs, out_names, name=f"{op_type.lower()}_node", domain=domain, **attrs)
    graph = helper.make_graph([node], "pool", inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = IR_VERSION
    return model


def run_tvm_pool(model: onnx.ModelProto, feeds: dict, *, shape_dict=None, schedule=True, target="llvm", device=None):
    """Compile ``model`` for ``target`` and run it on ``device`` (default: the CPU); the outputs
    in the graph's order (:func:`by_name` names them)."""
    import tvm
    from tvm import relax

    import tvm_pool

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = tvm_pool.from_onnx(model, shape_dict=shape_dict)
    ex = tvm_pool.compile(mod, target, schedule=schedule)
    device = device or tvm.cpu()
    vm = relax.VirtualMachine(ex, device)
    names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    result = vm["main"](*[tvm.runtime.tensor(feeds[n], device) for n in names])
    result = [result] if isinstance(result, tvm.runtime.Tensor) else list(result)
    return [r.numpy() for r in result]


def by_name(model: onnx.ModelProto, outputs) -> dict:
    """``outputs`` (a runner's, in the graph's order) by the model's output names."""
    return {o.name: r for o, r in zip(model.graph.output, outputs)}


def run_onnxruntime(model: onnx.ModelProto, feeds: dict):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run_reference(model: onnx.ModelProto, feeds: dict):
    from onnx.reference import ReferenceEvaluator

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(model).run(None, feeds)


def try_run(fn, *args):
    """(outputs, None) or (None, error text): an oracle that refuses a case is data, not a crash."""
    try:
        return fn(*args), None
    except Exception as err:  # noqa: BLE001  (any oracle failure is recorded)
        return None, f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
