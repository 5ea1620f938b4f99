"""Invalid models get a tvm_pool error naming node, operator, opset and attribute, and saying
what is allowed: never a crash inside TVM or a silent wrong answer."""

from __future__ import annotations

import re
import warnings

import pytest
from onnx import TensorProto, helper

import tvm_pool
from oracles import IR_VERSION, pool_model


def import_error(model, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(tvm_pool.TvmPoolError) as info:
            tvm_pool.from_onnx(model, **kwargs)
    return str(info.value)


@pytest.mark.parametrize(
    "op,opset,shape,dtype,attrs,outputs,expected",
    [
        # missing kernel_shape
        ("MaxPool", 12, [1, 1, 4, 4], "float32", {}, 1, [r"kernel_shape", r"is required"]),
        # lengths that do not match the rank
        ("MaxPool", 12, [1, 1, 4, 4], "float32", {"kernel_shape": [2]}, 1, [r"kernel_shape", r"has 1 values; this input needs 2"]),
        ("AveragePool", 19, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2], "pads": [1, 1]}, 1, [r"'pads'", r"needs 4"]),
        ("AveragePool", 19, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2], "strides": [1, 1, 1]}, 1, [r"'strides'", r"needs 2"]),
        ("LpPool", 18, [1, 1, 4], "float32", {"kernel_shape": [2], "dilations": [1, 1]}, 1, [r"'dilations'", r"needs 1"]),
        # negative pads, zero or negative strides, zero kernel
        ("MaxPool", 12, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2], "pads": [0, -1, 0, 0]}, 1, [r"'pads'", r">= 0"]),
        ("MaxPool", 12, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2], "strides": [0, 1]}, 1, [r"'strides'", r">= 1"]),
        ("AveragePool", 11, [1, 1, 4], "float32", {"kernel_shape": [2], "strides": [-2]}, 1, [r"'strides'", r">= 1"]),
        ("MaxPool", 12, [1, 1, 4], "float32", {"kernel_shape": [0]}, 1, [r"'kernel_shape'", r">= 1"]),
        # pads together with auto_pad
        ("MaxPool", 12, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER", "pads": [0, 0, 0, 0]}, 1, [r"'pads'", r"auto_pad=SAME_UPPER"]),
        # values outside the spec
        ("MaxPool", 12, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2], "auto_pad": "SAME"}, 1, [r"'auto_pad'", r"NOTSET, SAME_UPPER, SAME_LOWER, VALID"]),
        ("MaxPool", 12, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2], "storage_order": 2}, 2, [r"'storage_order'", r"allowed values: 0, 1"]),
        ("AveragePool", 11, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2], "count_include_pad": 3}, 1, [r"'count_include_pad'", r"0, 1"]),
        ("MaxPool", 12, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2], "ceil_mode": 5}, 1, [r"'ceil_mode'", r"0, 1"]),
        ("LpPool", 18, [1, 1, 4], "float32", {"kernel_shape": [2], "p": 0}, 1, [r"'p'", r"> 0"]),
        # a dtype the opset does not allow
        ("MaxPool", 11, [1, 1, 4, 4], "int8", {"kernel_shape": [2, 2]}, 1, [r"MaxPool-11", r"int8", r"float16, float32, float64"]),
        ("MaxPool", 12, [1, 1, 4, 4], "bfloat16", {"kernel_shape": [2, 2]}, 1, [r"MaxPool-12", r"bfloat16"]),
        ("AveragePool", 19, [1, 1, 4, 4], "bfloat16", {"kernel_shape": [2, 2]}, 1, [r"AveragePool-19", r"bfloat16"]),
        # more outputs than the opset defines
        ("MaxPool", 1, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2]}, 2, [r"MaxPool-1\b", r"2 outputs", r"at most 1"]),
        # attributes the opset does not define
        ("MaxPool", 8, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2], "dilations": [2, 2]}, 1, [r"MaxPool-8", r"dilations", r"not defined"]),
        ("AveragePool", 11, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2], "dilations": [2, 2]}, 1, [r"AveragePool-11", r"dilations"]),
        ("AveragePool", 1, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2], "count_include_pad": 1}, 1, [r"AveragePool-1\b", r"count_include_pad"]),
        ("MaxPool", 12, [1, 1, 4, 4], "float32", {"kernel_shape": [2, 2], "kernel": [2, 2]}, 1, [r"'kernel'", r"allowed: auto_pad, ceil_mode"]),
        # a kernel that cannot fit
        ("MaxPool", 12, [1, 1, 4, 4], "float32", {"kernel_shape": [5, 2]}, 1, [r"'kernel_shape'", r"does not fit spatial axis 0 of size 4"]),
        # rank too small
        ("MaxPool", 12, [1, 4], "float32", {"kernel_shape": [2]}, 1, [r"rank 2", r"rank >= 3"]),
    ],
)
def test_invalid_node(op, opset, shape, dtype, attrs, outputs, expected):
    model = pool_model(op, shape, dtype, opset, outputs, **attrs)
    message = import_error(model)
    assert f"node '{op.lower()}_node'" in message
    assert op in message
    for pattern in expected:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"


def test_error_names_unnamed_node_by_position():
    model = pool_model("MaxPool", [1, 1, 4, 4], kernel_shape=[2])
    model.graph.node[0].name = ""
    message = import_error(model)
    assert "node 'MaxPool_0'" in message
    # the caller's model is left as it was
    assert model.graph.node[0].name == "" and model.graph.node[0].op_type == "MaxPool"


def test_unsupported_operator_is_one_clear_error():
    node = helper.make_node("NoSuchOp", ["X"], ["Y"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    message = import_error(model)
    assert "NoSuchOp" in message and "not supported" in message


def test_custom_domain_without_opset_import():
    model = pool_model("AdaptiveAvgPool", [1, 1, 4, 4], domain="tvm_pool")
    del model.opset_import[1]
    message = import_error(model)
    assert "opset domain 'tvm_pool'" in message


def test_maxunpool_output_shape_too_small():
    from onnx import numpy_helper
    import numpy as np

    indices = helper.make_tensor_value_info("I", TensorProto.INT64, [1, 1, 2, 2])
    shape = numpy_helper.from_array(np.array([1, 1, 3, 3], dtype=np.int64), "output_shape")
    model = pool_model("MaxUnpool", [1, 1, 2, 2], opset=11, extra_inputs=[indices], initializers=[shape],
                       kernel_shape=[2, 2], strides=[2, 2])
    message = import_error(model)
    assert "output_shape" in message and "smaller than the unpooled shape" in message
