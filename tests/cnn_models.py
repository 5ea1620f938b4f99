"""Small pooling-heavy CNNs built in-process (no downloads): VGG-, GoogLeNet- and ResNet-like."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from oracles import IR_VERSION


class GraphBuilder:
    def __init__(self, seed: int = 0):
        self.nodes, self.inits = [], []
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def name(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}"

    def node(self, op, inputs, n_out=1, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op + "_"), **attrs))
        return outs if n_out > 1 else outs[0]

    def weight(self, shape, scale=0.2):
        name = self.name("w")
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype("float32"), name))
        return name

    def conv(self, x, cin, cout, k=3, stride=1, pad=1):
        return self.node("Conv", [x, self.weight([cout, cin, k, k]), self.weight([cout], 0.05)],
                         kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)

    def conv_relu(self, x, cin, cout, **kw):
        return self.node("Relu", [self.conv(x, cin, cout, **kw)])

    def model(self, x_shape, outputs, opset=13, input_name="X"):
        graph = helper.make_graph(
            self.nodes, "cnn", [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(o, TensorProto.INT64 if "maxpool" in o and o.endswith("_idx") else TensorProto.FLOAT, None)
             for o in outputs],
            initializer=self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = IR_VERSION
        return model


def vgg_like(batch=1, size=32):
    g = GraphBuilder(1)
    x, c = "X", 3
    for cout in (8, 16, 16):
        x = g.conv_relu(x, c, cout)
        x = g.conv_relu(x, cout, cout)
        x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        c = cout
    x = g.node("Flatten", [x])
    y = g.node("Gemm", [x, g.weight([10, c * (size // 8) ** 2]), g.weight([10])], transB=1)
    return g.model([batch, 3, size, size], [y])


def googlenet_like(batch=1, size=28):
    """Stem with a ceil-mode MaxPool, an inception block whose pool branch is a 3x3 s1 p1
    MaxPool, an AveragePool 5x5 s3 head (as in GoogLeNet's aux classifier) and GlobalAveragePool."""
    g = GraphBuilder(2)
    x = g.conv_relu("X", 3, 8, k=3, stride=2, pad=1)
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    b1 = g.conv_relu(x, 8, 4, k=1, pad=0)
    b2 = g.conv_relu(g.conv_relu(x, 8, 4, k=1, pad=0), 4, 6)
    b3 = g.conv_relu(g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]), 8, 4, k=1, pad=0)
    x = g.node("Concat", [b1, b2, b3], axis=1)
    aux = g.node("AveragePool", [x], kernel_shape=[5, 5], strides=[3, 3], ceil_mode=1, count_include_pad=0)
    y = g.node("GlobalAveragePool", [x])
    return g.model([batch, 3, size, size], [y, aux])


def resnet_like(batch=1, size=32):
    """ResNet stem (7x7 s2 conv, 3x3 s2 p1 MaxPool with Indices exported), a residual block, GAP."""
    g = GraphBuilder(3)
    x = g.conv_relu("X", 3, 8, k=7, stride=2, pad=3)
    pooled, indices = g.node("MaxPool", [x], n_out=2, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    indices_out = g.node("Identity", [indices])
    y = g.conv_relu(pooled, 8, 8)
    y = g.conv(y, 8, 8)
    y = g.node("Relu", [g.node("Add", [y, pooled])])
    y = g.node("GlobalAveragePool", [y])
    y = g.node("Flatten", [y])
    logits = g.node("Gemm", [y, g.weight([5, 8]), g.weight([5])], transB=1)
    model = g.model([batch, 3, size, size], [logits, indices_out])
    model.graph.output[1].type.tensor_type.elem_type = TensorProto.INT64
    return model


MODELS = {"vgg_like": vgg_like, "googlenet_like": googlenet_like, "resnet_like": resnet_like}
