"""The demo model: a small pooling-heavy CNN built in-process (``tvm-pool demo`` compiles it
and checks it against onnxruntime; tests use it as a realistic model)."""

from __future__ import annotations


def demo_model(seed: int = 0):
    """A small pooling-heavy CNN (valid ONNX, opset 19) and one input batch, built in-process.

    x[1,3,32,32] -> Conv3x3 -> Relu -> MaxPool 2x2/2 (with Indices) -> Conv3x3 -> Relu
      -> AveragePool 3x3/2 ceil_mode pads 1 (count_include_pad 0) -> MaxPool 2x2/1 SAME_LOWER
      -> GlobalAveragePool -> Flatten -> Gemm -> logits[1,10]
    Outputs: logits, pool1_indices (MaxPool's second output), pool2 (the ceil-mode AveragePool).
    """
    import numpy as np  # pylint: disable=import-outside-toplevel
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import TensorProto, helper, numpy_helper  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(seed)

    def weight(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        weight("conv1_w", 8, 3, 3, 3),
        weight("conv1_b", 8, scale=0.1),
        weight("conv2_w", 16, 8, 3, 3, scale=0.2),
        weight("conv2_b", 16, scale=0.1),
        weight("fc_w", 10, 16),
        weight("fc_b", 10, scale=0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv1_w", "conv1_b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node(
            "MaxPool", ["r1"], ["p1", "pool1_indices"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node(
            "AveragePool", ["r2"], ["pool2"], name="pool2", kernel_shape=[3, 3], strides=[2, 2],
            pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=0,
        ),
        helper.make_node(
            "MaxPool", ["pool2"], ["p3"], name="pool3", kernel_shape=[2, 2], strides=[1, 1], auto_pad="SAME_LOWER"
        ),
        helper.make_node("GlobalAveragePool", ["p3"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tvm_pool_demo",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10]),
            helper.make_tensor_value_info("pool1_indices", TensorProto.INT64, [1, 8, 16, 16]),
            helper.make_tensor_value_info("pool2", TensorProto.FLOAT, [1, 16, 9, 9]),
        ],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], producer_name="tvm_pool demo")
    model.ir_version = 10  # onnxruntime 1.31 refuses the IR version 14 that onnx 1.23 writes
    onnx.checker.check_model(model, full_check=True)
    inputs = {"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    return model, inputs
