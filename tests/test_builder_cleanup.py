"""Importers close their Relax BlockBuilder on every error path (tvm_pool/block_builders.py).

TVM's C++ builder, destroyed with a block still open, writes "BlockBuilder destroyed with
remaining blocks!" to stderr (fd 2) from C++; capfd captures fd 2, so each case makes the
importer fail, drops every reference to the error (its traceback holds the builder), collects
garbage and reads what was written. The first test shows that this catches a builder left open.
(conftest.py also fails any test during which the warning appears in the captured stderr.)
"""

from __future__ import annotations

import contextlib
import gc
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx as stock_from_onnx

import tvm_pool
from tvm_pool.block_builders import close_builder, closed_on_error
from conftest import BUILDER_LEAK
from oracles import IR_VERSION, pool_model


def leaked_builders(capfd, fail) -> tuple[int, str]:
    """How many builders ``fail()`` left open (the warnings that collecting them wrote on fd 2),
    and the one-line error it raised."""
    gc.collect()
    capfd.readouterr()
    message = _message_of(fail)  # the error and its traceback are gone when this returns
    gc.collect()
    return capfd.readouterr().err.count(BUILDER_LEAK), message


def _message_of(fail) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fail()
        except Exception as err:  # pylint: disable=broad-except
            return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    raise AssertionError("expected an error")


def _open_builder_then_raise(close: bool):
    """What a frontend does: a converter raises inside `with bb.function()` / `bb.dataflow()`."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([2], "float32"))
    with closed_on_error(bb) if close else contextlib.nullcontext():
        with bb.function("main", [x]):
            with bb.dataflow():
                bb.emit(relax.op.add(x, x))
                raise ValueError("a converter failed")


def test_the_check_sees_a_builder_left_open(capfd):
    """The control: without closing, TVM's warning reaches fd 2 when the builder is collected;
    closed_on_error silences it, and the builder context is popped either way."""
    assert leaked_builders(capfd, lambda: _open_builder_then_raise(close=False))[0] == 1
    assert leaked_builders(capfd, lambda: _open_builder_then_raise(close=True)) == (0, "ValueError: a converter failed")
    assert relax.BlockBuilder.current() is None


def test_close_builder_ends_every_open_block_and_is_idempotent():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([2], "float32"))
    with pytest.raises(ValueError):
        with bb.function("outer", [x]):
            with bb.dataflow():
                bb.emit(relax.op.add(x, x))
                with bb.function("inner", [relax.Var("y", relax.TensorType([2], "float32"))]):
                    raise ValueError
    assert close_builder(bb) == 2  # the inner function's binding block and the outer dataflow's successor
    assert close_builder(bb) == 0


def test_without_a_builder_the_abandoned_ones_in_the_failing_frames_are_closed(capfd):
    """closed_on_error() around code whose builder is out of reach (TVM's own importer): the
    builders the error took out of the context are closed; one still in use is left alone."""
    model = pool_model("MaxPool", [1, 1, 4, 4], num_outputs=2, opset=12, kernel_shape=[2, 2])

    def stock(close):
        with closed_on_error() if close else contextlib.nullcontext():
            stock_from_onnx(model)  # stock TVM 0.27 drops Indices: "Missing outputs"

    assert leaked_builders(capfd, lambda: stock(close=False))[0] == 1
    leaked, message = leaked_builders(capfd, lambda: stock(close=True))
    assert leaked == 0 and "Missing outputs" in message, message

    outer = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([2], "float32"))
    with outer.function("main", [x]):
        with pytest.raises(ValueError), closed_on_error():
            outer.emit(relax.op.add(x, x))
            raise ValueError
        assert relax.BlockBuilder.current() is outer
        outer.emit_func_output(outer.emit(relax.op.add(x, x)))  # still usable: not closed
    assert "main" in [gv.name_hint for gv in outer.get().get_global_vars()]


def _onnx(nodes, inputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
                              initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    return model


def _if_model_with_bad_pool():
    """An If whose then-branch holds a MaxPool without kernel_shape (no dataflow block: TVM
    converts If bodies into the function's binding blocks)."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, 4, 4])
    cond = numpy_helper.from_array(np.array(True), "cond")

    def branch(name, node):
        return helper.make_graph([node], name, [], [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)])

    then = branch("then", helper.make_node("MaxPool", ["X"], ["A"], name="bad_pool"))
    other = branch("else", helper.make_node("Relu", ["X"], ["B"], name="relu"))
    node = helper.make_node("If", ["cond"], ["Y"], name="if", then_branch=then, else_branch=other)
    return _onnx([node], [x], [cond])


def _conv_of_wrong_channels():
    """TVM's own Conv converter raises (tvm_pool reports it as UnsupportedError)."""
    w = numpy_helper.from_array(np.zeros((3, 4, 3, 3), np.float32), "W")
    return _onnx([helper.make_node("Conv", ["X", "W"], ["Y"], name="conv")],
                 [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2, 5, 5])], [w])


def _custom_domain_without_opset():
    model = pool_model("AdaptiveAvgPool", [1, 1, 4, 4], domain="tvm_pool")
    del model.opset_import[1]
    return model


ONNX_FAILURES = {
    # a tvm_pool converter refuses the node, inside the dataflow block
    "tvm_pool_converter": (lambda: pool_model("MaxPool", [1, 1, 4, 4], opset=12), "InvalidModelError: node 'maxpool_node'"),
    # TVM's converter raises
    "tvm_converter": (_conv_of_wrong_channels, "UnsupportedError: node 'conv' (Conv): TVM's ONNX converter"),
    # the importer refuses a custom-domain node
    "custom_domain": (_custom_domain_without_opset, "InvalidModelError: node 'adaptiveavgpool_node'"),
    # inside an If branch (no dataflow block)
    "if_branch": (_if_model_with_bad_pool, "InvalidModelError: node 'bad_pool'"),
}


@pytest.mark.parametrize("case", sorted(ONNX_FAILURES))
def test_onnx_importer_closes_its_builder(case, capfd):
    make, expected = ONNX_FAILURES[case]
    model = make()
    leaked, message = leaked_builders(capfd, lambda: tvm_pool.from_onnx(model))
    assert message.startswith(expected), message
    assert leaked == 0 and relax.BlockBuilder.current() is None


def _torch_failures():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    class Fn(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return self.fn(x)

    def export(fn):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.export.export(Fn(fn), (torch.zeros(1, 2, 6, 6),))

    def bad_padding():
        """max_pool2d with a padding over half the kernel (torch.export checks it, so edit the graph)."""
        ep = export(lambda x: F.max_pool2d(torch.relu(x), 3, 1, 1))
        (node,) = [n for n in ep.graph.nodes if n.op == "call_function" and "max_pool2d" in str(n.target)]
        node.args = (node.args[0], node.args[1], node.args[2], [2, 2], *node.args[4:])
        return tvm_pool.from_exported_program(ep, run_ep_decomposition=False)

    def converter_raises():
        """A caller's converter raising, after tvm_pool's pool converted (both inside the builder)."""
        def refuse(node, importer):
            raise NotImplementedError("no relu here")

        ep = export(lambda x: torch.relu(F.avg_pool2d(x, 2)))
        return tvm_pool.from_exported_program(ep, run_ep_decomposition=False, custom_convert_map={"relu.default": refuse})

    return {"tvm_pool_converter": (bad_padding, "InvalidModelError: node"),
            "custom_converter": (converter_raises, "NotImplementedError: no relu here")}


@pytest.mark.parametrize("case", ["tvm_pool_converter", "custom_converter"])
def test_pytorch_importer_closes_its_builder(case, capfd):
    fail, expected = _torch_failures()[case]
    leaked, message = leaked_builders(capfd, fail)
    assert message.startswith(expected), message
    assert leaked == 0 and relax.BlockBuilder.current() is None
