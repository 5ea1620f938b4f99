"""torchvision's models through the PyTorch roads into tvm_pool.

Three roads, each model with random weights at a small input (tests/helpers/torchvision_models.py):

- the TorchScript ONNX exporter (``torch.onnx.export(..., dynamo=False)``, opset 17) and the
  dynamo ONNX exporter (``dynamo=True``, onnxscript, opset 18+), then ``tvm_pool.from_onnx``
  and ``tvm_pool.compile``, compared with onnxruntime on the same ONNX model and with torch;
- ``torch.export`` then ``tvm_pool.from_exported_program``, compared with torch.

Each build must also have scheduled every pooling PrimFunc: every PrimFunc holding a pooling
block (tvm_pool's computes, or TVM's own TOPI pools) carries ``tirx.is_scheduled`` right after
tvm_pool's schedule pass. A pool that TVM legalized instead, or that no rule matched, fails.

What the exporters emit for pooling (torch 2.13, torchvision 0.28; the dynamo exporter writes
opset 20): both write MaxPool (with ``ceil_mode`` where GoogLeNet and SqueezeNet ask for it,
``dilations`` always, the dynamo one ``storage_order`` and ``auto_pad`` NOTSET too) and
AveragePool (``count_include_pad`` from Inception v3 and DenseNet; no ``dilations``); an
AdaptiveAvgPool2d whose output divides its input becomes an AveragePool. AdaptiveAvgPool2d(1)
becomes GlobalAveragePool from the TorchScript exporter but ReduceMean over the spatial axes
from the dynamo one (no pooling operator left for tvm_pool), and VGG's AdaptiveAvgPool2d(7) on
a 1x1 map a GatherND + ReduceMean. The TorchScript exporter refuses an adaptive average pool
whose output does not divide its input, so AlexNet and VGG-11 run at 224x224 (their feature
maps are then 6x6 and 7x7). Both exporters drop ``avg_pool2d``'s ``divisor_override`` (none of
these models uses it): their AveragePool then divides by the window, unlike torch.

Default suite: SqueezeNet through all three roads (MaxPool with ceil_mode after Concats, a
global average at the end) and ShuffleNet v2 through the TorchScript exporter (its channel
split written as Shape -> Gather -> Add -> Div -> Mul -> Slice, which tvm_pool.onnx.fold folds;
TVM alone fails to build it). Every other model and road: ``-m slow``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import time
import warnings
from unittest import mock

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_pool
from tvm_pool import lowering
from tvm_pool.onnx.fold import fold_constant_shapes
from tvm_pool.schedules.analysis import TOPI_POOL_RULES
from helpers import tolerance, x86_only
from helpers.torchvision_models import MODELS, build, import_torchvision
from oracles import IR_VERSION, run_onnxruntime

pytestmark = x86_only

EXPORTERS = ("torchscript", "dynamo")
TORCHSCRIPT_OPSET = 17
# The default suite's share (the rest run under -m slow). Measured alone on 2 shared cores
# (export + compile + run): SqueezeNet 9 s / 6 s / 7 s (TorchScript / dynamo / torch.export),
# ShuffleNet v2 10 s / 15 s / 26 s, MobileNet v3 23 s / 28 s / 53 s; the others 5 s (AlexNet
# through torch.export) to 165 s (DenseNet-121 through torch.export) each, 25 min in all.
DEFAULT_ONNX = (("squeezenet1_0", "dynamo"), ("shufflenet_v2_x0_5", "torchscript"))
SLOW_ONNX = [(name, exporter) for name in MODELS for exporter in EXPORTERS if (name, exporter) not in DEFAULT_ONNX]
DEFAULT_EXPORT = ("squeezenet1_0",)
SLOW_EXPORT = [name for name in MODELS if name not in DEFAULT_EXPORT]

# A whole network against another runtime: every conv sums in another order, and the errors
# grow through the layers, so the comparison is to the output's scale (as in
# test_whole_models.py) with the onnxruntime float32 tolerance as its floor.
WHOLE_MODEL_RTOL = 1e-4


# ---------------------------------------------------------------------------------------------
# Roads
# ---------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)  # the default suite reuses ShuffleNet's export once
def exported_onnx(name: str, exporter: str) -> tuple[torch.nn.Module, torch.Tensor, bytes]:
    """Model ``name``, its input and its ONNX export (serialized: each caller parses its own)."""
    model, x = build(name)
    return model, x, export_onnx(model, x, exporter).SerializeToString()


def export_onnx(model: torch.nn.Module, x, exporter: str) -> onnx.ModelProto:
    """``model`` on ``x`` (a tensor or a tuple of them) through one of the two ONNX exporters,
    at an IR version onnxruntime reads."""
    args = x if isinstance(x, tuple) else (x,)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            buffer = io.BytesIO()
            torch.onnx.export(model, args, buffer, dynamo=False, opset_version=TORCHSCRIPT_OPSET)
            proto = onnx.load_from_string(buffer.getvalue())
        else:
            proto = torch.onnx.export(model, args, dynamo=True, verbose=False).model_proto
    proto.ir_version = min(proto.ir_version, IR_VERSION)  # onnx 1.23 writes one onnxruntime refuses
    return proto


def _is_pooling(func: tvm.tirx.PrimFunc) -> bool:
    text = func.script()
    return '"tvm_pool.kind"' in text or any(f'"{rule}"' in text for rule in TOPI_POOL_RULES)


def compile_scheduled(mod: tvm.IRModule, target) -> tuple[relax.VirtualMachine, dict]:
    """``mod`` built by tvm_pool.compile for ``target``, as a VM on the CPU, and its pooling
    PrimFuncs (name -> function) as they left tvm_pool's schedule pass."""
    seen = {}

    @tvm.transform.module_pass(opt_level=0, name="tvm_pool.test.capture_pools")
    def capture(m, _ctx):
        for gvar, func in m.functions_items():
            if isinstance(func, tvm.tirx.PrimFunc) and _is_pooling(func):
                seen[gvar.name_hint] = func
        return m

    real = lowering.schedule_passes
    with mock.patch.object(lowering, "schedule_passes", lambda t: list(real(t)) + [capture]):
        executable = tvm_pool.compile(mod, target)
    return relax.VirtualMachine(executable, tvm.cpu()), seen


def run_vm(vm: relax.VirtualMachine, x: np.ndarray) -> list[np.ndarray]:
    result = vm["main"](tvm.runtime.tensor(x))
    if isinstance(result, tvm.runtime.Tensor):
        return [result.numpy()]
    return [r.numpy() for r in result]


def assert_close(got: np.ndarray, want: np.ndarray, label: str) -> None:
    """``got`` equals ``want`` to the onnxruntime float32 tolerance, relative to the output's
    scale (:data:`WHOLE_MODEL_RTOL`)."""
    assert (got.shape, got.dtype) == (want.shape, want.dtype), f"{label}: {got.shape} {got.dtype}, want {want.shape}"
    rtol, atol = tolerance(want.dtype, "onnxruntime")
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=max(atol, WHOLE_MODEL_RTOL * scale), err_msg=label)


def assert_pools_scheduled(pools: dict, label: str, expect_pools: bool) -> None:
    unscheduled = sorted(name for name, func in pools.items() if "tirx.is_scheduled" not in (func.attrs or {}))
    assert not unscheduled, f"{label}: pooling PrimFuncs left unscheduled: {unscheduled}"
    if expect_pools:
        assert pools, f"{label}: no pooling PrimFunc in the build (a pool was lowered by something else)"


def _has_pool_node(model: onnx.ModelProto) -> bool:
    return any(node.op_type.endswith("Pool") for node in model.graph.node)


def check_onnx_road(name: str, exporter: str, target) -> dict:
    """Export model ``name`` with ``exporter``, compile it with tvm_pool, compare with
    onnxruntime and torch, check its pools are scheduled; seconds per step."""
    times = {}
    start = time.perf_counter()
    model, x, serialized = exported_onnx(name, exporter)
    proto = onnx.load_from_string(serialized)
    with torch.no_grad():
        want_torch = model(x).numpy()
    times["export"] = time.perf_counter() - start
    (input_name,) = [i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
    feeds = {input_name: x.numpy()}

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = tvm_pool.from_onnx(proto)
    vm, pools = compile_scheduled(mod, target)
    times["compile"] = time.perf_counter() - start

    start = time.perf_counter()
    (got,) = run_vm(vm, x.numpy())
    (want_ort,) = run_onnxruntime(proto, feeds)
    times["run"] = time.perf_counter() - start

    label = f"{name} via {exporter}"
    assert_close(got, want_ort, f"{label} vs onnxruntime")
    assert_close(got, want_torch, f"{label} vs torch")
    assert_pools_scheduled(pools, label, expect_pools=_has_pool_node(proto))
    return times


def _module_has_pool_op(mod: tvm.IRModule) -> bool:
    return "pool" in mod["main"].script()


def check_export_road(name: str, target) -> dict:
    """torch.export model ``name``, import it with from_exported_program, compile with
    tvm_pool, compare with torch, check its pools are scheduled; seconds per step."""
    times = {}
    start = time.perf_counter()
    model, x = build(name)
    with torch.no_grad():
        want = model(x).numpy()
        exported = torch.export.export(model, (x,))
    times["export"] = time.perf_counter() - start

    start = time.perf_counter()
    mod = tvm_pool.from_exported_program(exported)
    vm, pools = compile_scheduled(mod, target)
    times["compile"] = time.perf_counter() - start

    start = time.perf_counter()
    (got,) = run_vm(vm, x.numpy())
    times["run"] = time.perf_counter() - start
    assert_close(got, want, f"{name} via torch.export vs torch")
    assert_pools_scheduled(pools, f"{name} via torch.export", expect_pools=_module_has_pool_op(mod))
    return times


# ---------------------------------------------------------------------------------------------
# The models
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,exporter", DEFAULT_ONNX)
def test_onnx_exporters(name, exporter, host):
    check_onnx_road(name, exporter, host)


@pytest.mark.parametrize("name", DEFAULT_EXPORT)
def test_torch_export(name, host):
    check_export_road(name, host)


@pytest.mark.slow
@pytest.mark.parametrize("name,exporter", SLOW_ONNX)
def test_onnx_exporters_all(name, exporter, host):
    check_onnx_road(name, exporter, host)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_EXPORT)
def test_torch_export_all(name, host):
    check_export_road(name, host)


class PoolVariants(torch.nn.Module):
    """The pooling arguments torchvision's models do not all use, each its own output: what
    the exporters write for them (attributes, opset 20 for dynamo) must convert and schedule."""

    def forward(self, x1, x2, x3):
        values, indices = F.max_pool2d(x2, 2, 2, return_indices=True)
        return (
            F.max_pool2d(x2, 3, 2, 1, dilation=2, ceil_mode=True),
            F.avg_pool2d(x2, 3, 2, 1, ceil_mode=True, count_include_pad=True),
            F.avg_pool2d(x2, 3, 2, 1, ceil_mode=True, count_include_pad=False),
            F.adaptive_avg_pool2d(x2, 4),  # 12 -> 4: an AveragePool 3/3
            F.adaptive_max_pool2d(x2, 3),  # 12 -> 3: a MaxPool 4/4
            F.lp_pool2d(x2, 2, 3, 2),
            values, indices,
            F.avg_pool1d(x1, 3, 2, 1, ceil_mode=True),
            F.max_pool3d(x3, 3, 2, 1, ceil_mode=True),
            F.avg_pool3d(x3, 3, 2, 1, count_include_pad=False),
        )


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_exporters_pool_attributes(exporter, host):
    gen = torch.Generator().manual_seed(3)
    args = (torch.randn(1, 3, 12, generator=gen), torch.randn(1, 3, 12, 12, generator=gen),
            torch.randn(1, 2, 7, 7, 7, generator=gen))
    module = PoolVariants().eval()
    want_torch = [t.numpy() for t in module(*args)]
    proto = export_onnx(module, args, exporter)
    names = [i.name for i in proto.graph.input]
    feeds = dict(zip(names, [a.numpy() for a in args]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vm, pools = compile_scheduled(tvm_pool.from_onnx(proto), host)
    result = vm["main"](*[tvm.runtime.tensor(feeds[n]) for n in names])
    got = [r.numpy() for r in result]
    for index, (g, w, t) in enumerate(zip(got, run_onnxruntime(proto, feeds), want_torch)):
        if t.dtype.kind in "iu":  # the indices: exactly
            np.testing.assert_array_equal(g, w, err_msg=f"output {index} vs onnxruntime")
            np.testing.assert_array_equal(g, t, err_msg=f"output {index} vs torch")
        else:
            assert_close(g, w, f"{exporter} output {index} vs onnxruntime")
            assert_close(g, t, f"{exporter} output {index} vs torch")
    assert_pools_scheduled(pools, f"pool variants via {exporter}", expect_pools=True)


def test_torchvision_models_build():
    """Every builder gives a model in eval mode with random weights, and torchvision's operator
    schemas are there (its own or the helper's) without its C++ kernels being needed."""
    import_torchvision()
    assert hasattr(torch.ops.torchvision, "nms")
    for name in MODELS:
        builder, shape = MODELS[name]
        assert len(shape) in (4, 5), name
    model, x = build("squeezenet1_0")
    assert not model.training and tuple(x.shape) == MODELS["squeezenet1_0"][1]


def test_shufflenet_torchscript_export_folds():
    """The TorchScript exporter writes ShuffleNet v2's channel split as Shape -> Gather -> Add ->
    Div -> Mul -> Slice: from_onnx folds the chain, so the Slices get constant bounds and the
    model imports with static shapes only."""
    proto = onnx.load_from_string(exported_onnx("shufflenet_v2_x0_5", "torchscript")[2])
    assert any(node.op_type == "Shape" for node in proto.graph.node)
    folded = fold_constant_shapes(proto)
    assert folded is not proto
    assert not any(node.op_type in ("Shape", "Gather", "Div") for node in folded.graph.node)
    assert any(node.op_type == "Shape" for node in proto.graph.node)  # the caller's model is untouched
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = tvm_pool.from_onnx(proto)
    assert "ndim=" not in mod["main"].script(), "a tensor of unknown shape is left"


# ---------------------------------------------------------------------------------------------
# tvm_pool.onnx.fold on hand-built graphs
# ---------------------------------------------------------------------------------------------

def _chunk_model(x_shape, opset=17) -> onnx.ModelProto:
    """Y = X[:, :C/2]: the TorchScript exporter's chunk, Shape -> Gather -> Add -> Div -> Mul ->
    Slice, then a Relu."""
    const = lambda name, value: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=numpy_helper.from_array(np.array(value, dtype=np.int64), name))
    nodes = [
        helper.make_node("Shape", ["X"], ["shape"], name="shape"),
        const("one", [1]), const("zero", [0]), const("two", [2]),
        helper.make_node("Gather", ["shape", "one"], ["channels"], name="gather", axis=0),
        helper.make_node("Add", ["channels", "one"], ["plus"], name="add"),
        helper.make_node("Div", ["plus", "two"], ["half"], name="div"),
        helper.make_node("Mul", ["half", "one"], ["end"], name="mul"),
        helper.make_node("Slice", ["X", "zero", "end", "one"], ["sliced"], name="slice"),
        helper.make_node("Relu", ["sliced"], ["Y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "chunk", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    return model


def test_fold_shape_chain():
    model = _chunk_model([2, 6, 3, 3])
    before = model.SerializeToString()
    folded = fold_constant_shapes(model)
    assert model.SerializeToString() == before  # the caller's model is untouched
    ops = [(node.op_type, node.output[0]) for node in folded.graph.node]
    # Shape -> Gather -> Add -> Div -> Mul is one Constant; the Constant only Add read is gone
    assert ops == [("Constant", "one"), ("Constant", "zero"), ("Constant", "end"), ("Slice", "sliced"), ("Relu", "Y")]
    end = next(n for n in folded.graph.node if n.output[0] == "end")
    assert end.name == "mul"  # the folded node's name stays (errors name it)
    assert numpy_helper.to_array(end.attribute[0].t).tolist() == [3]
    x = np.random.default_rng(0).standard_normal((2, 6, 3, 3)).astype(np.float32)
    np.testing.assert_array_equal(run_onnxruntime(folded, {"X": x})[0], run_onnxruntime(model, {"X": x})[0])


def test_fold_partial_shape_and_shape_dict():
    """A symbolic batch: the channel count is still known, so the chain folds; with
    ``shape_dict`` the whole shape is, as the importer will see it."""
    folded = fold_constant_shapes(_chunk_model(["N", 6, 3, 3]))
    assert [n.op_type for n in folded.graph.node] == ["Constant"] * 3 + ["Slice", "Relu"]
    unknown = _chunk_model(["N", "C", 3, 3])
    assert fold_constant_shapes(unknown) is unknown  # nothing known, nothing changed
    folded = fold_constant_shapes(unknown, {"X": [1, 8, 3, 3]})
    end = next(n for n in folded.graph.node if n.output[0] == "end")
    assert numpy_helper.to_array(end.attribute[0].t).tolist() == [4]


def test_fold_leaves_other_models_alone():
    """Nothing to fold, or nothing known to fold with: the same object comes back."""
    from oracles import pool_model

    model = pool_model("MaxPool", [1, 2, 5, 5], kernel_shape=[2, 2])
    assert fold_constant_shapes(model) is model
    opaque = _chunk_model([2, 6, 3, 3])  # the shape read is of an operator inference cannot see into
    opaque.graph.node.insert(0, helper.make_node("Opaque", ["X"], ["X2"], name="opaque", domain="test.opaque"))
    opaque.graph.node[1].input[0] = "X2"
    opaque.opset_import.append(helper.make_opsetid("test.opaque", 1))
    assert fold_constant_shapes(opaque) is opaque


def test_unconvertible_node_is_one_line_error():
    """A chain that cannot fold (the channel count is symbolic) into a Reshape that infers a
    dimension: TVM cannot convert the Reshape, and the error names it in one line."""
    model = _chunk_model(["N", "C", 3, 3])
    model.graph.node[-1].output[0] = "relu"
    model.graph.node.extend([
        helper.make_node("Constant", [], ["flat"], value=numpy_helper.from_array(np.array([0, -1], dtype=np.int64))),
        helper.make_node("Reshape", ["relu", "flat"], ["Y"], name="flatten"),
    ])
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        with pytest.raises(tvm_pool.UnsupportedError) as info:
            tvm_pool.from_onnx(model)
    message = str(info.value)
    assert message.startswith("node 'flatten' (Reshape): ") and "\n" not in message, message
    assert "only known at run time" in message


@pytest.mark.slow
def test_fold_is_exact_on_onnx_backend_cases():
    """Every ONNX backend node case that reads a Shape or Size (261 in onnx 1.23: the expanded
    functions, LayerNormalization, attention, ...) computes the same outputs, bit for bit, by
    the reference implementation after folding as before."""
    from onnx.backend.test.case.node import collect_testcases
    from oracles import run_reference

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = [c for c in collect_testcases(None) if any(n.op_type in ("Shape", "Size") for n in c.model.graph.node)]
    assert len(cases) >= 200
    for case in cases:
        folded = fold_constant_shapes(case.model)
        names = [i.name for i in case.model.graph.input]
        for inputs, _ in case.data_sets:
            feeds = dict(zip(names, inputs))
            for before, after in zip(run_reference(case.model, feeds), run_reference(folded, feeds)):
                before, after = np.asarray(before), np.asarray(after)
                assert before.dtype == after.dtype and before.shape == after.shape, case.name
                np.testing.assert_array_equal(after, before, err_msg=case.name)


def test_folded_chunk_compiles(host):
    """The hand-built chunk through from_onnx and compile matches onnxruntime."""
    model = _chunk_model([2, 6, 3, 3])
    x = np.random.default_rng(1).standard_normal((2, 6, 3, 3)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = tvm_pool.from_onnx(model)
    vm = relax.VirtualMachine(tvm_pool.compile(mod, host), tvm.cpu())
    np.testing.assert_array_equal(run_vm(vm, x)[0], run_onnxruntime(model, {"X": x})[0])
