"""The layout compile gives a model's 2-D convolutions (tvm_pool.lowering.CONV_LAYOUTS,
tvm_pool.lowering.choose_conv_layout): on x86 the one the logs cover better (tune starts new
logs in NHWC), the model's own NCHW elsewhere; the ONNX road's 2-D pools are TVM's Relax pool ops, so the layout
carries through them (no transpose around a channel-first pool); tune and compile take the same
tasks."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax
from tvm.s_tir import meta_schedule as ms

import tvm_pool
from tvm_pool import lowering
from tvm_pool.compute.common import LAYOUT_ATTR
from tvm_pool.targets import resolve_target
from tvm_pool.lowering import choose_conv_layout as conv_layout
from tvm_pool.tuning.lookup import coverage
from oracles import IR_VERSION, run_onnxruntime
from primfunc_check import assert_pools_exact, compile_scheduled


def _model(pool: str = "MaxPool", dropout: bool = False, **pool_attrs):
    """Conv 3x3 (5 -> 12) -> Relu -> ``pool`` -> Conv 1x1 (12 -> 7) [-> Dropout]."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((12, 5, 3, 3)).astype("float32"), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((7, 12, 1, 1)).astype("float32"), "w2")
    attrs = pool_attrs or dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node(pool, ["r1"], ["p1"], **attrs),
        helper.make_node("Conv", ["p1", "w2"], ["c2" if dropout else "y"]),
    ]
    if dropout:
        nodes.append(helper.make_node("Dropout", ["c2"], ["y"]))
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 23, 23])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def _pool_funcs(mod, target, layout):
    fused = lowering.fuse(mod, target, layout)
    return {str(gv.name_hint): f for gv, f in fused.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and "pool" in str(gv.name_hint)}


def test_x86_takes_nhwc_when_preferred_or_covered_and_nchw_elsewhere():
    """Without logs the layouts tie: compile keeps NCHW (an untuned model builds as before),
    tune starting a log prefers NHWC; other targets keep NCHW either way."""
    mod = tvm_pool.from_onnx(_model())
    assert conv_layout(mod, "x86", shipped=False) == "NCHW"
    assert conv_layout(mod, "x86", shipped=False, prefer="NHWC") == "NHWC"
    assert conv_layout(mod, "x86", prefer="NHWC") == "NHWC"  # the shipped logs cover neither
    assert conv_layout(mod, "arm", shipped=False, prefer="NHWC") == "NCHW"
    assert conv_layout(mod, "cuda", shipped=False, prefer="NHWC") == "NCHW"
    no_conv = tvm_pool.from_onnx(helper.make_model(helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])], "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION))
    assert conv_layout(no_conv, "x86", shipped=False, prefer="NHWC") == "NCHW"


def test_an_inference_dropout_is_dropped_and_the_model_goes_channel_last():
    """An inference dropout (torch.export keeps eval-mode nn.Dropout) is a no-op:
    canonicalize.drop_dropout removes it, so ConvertLayout, which TVM 0.27 fails on a dropout's
    tuple, can give the convolutions NHWC; the outputs match onnxruntime's."""
    model = _model(dropout=True)
    mod = tvm_pool.from_onnx(model)
    assert lowering.calls_op(mod, "relax.nn.dropout")
    assert conv_layout(mod, "x86", shipped=False, prefer="NHWC") == "NHWC"
    x = np.random.default_rng(1).standard_normal((1, 5, 23, 23)).astype("float32")
    ex = tvm_pool.compile(mod, "x86", shipped_logs=False, conv_layout="NHWC")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
    np.testing.assert_allclose(got.numpy(), run_onnxruntime(model, {"x": x})[0], rtol=1e-5, atol=1e-4)


def test_a_graph_convert_layout_fails_on_keeps_nchw():
    """A dropout whose mask is used stays, and TVM 0.27's ConvertLayout raises on it (a tuple
    output): such a model keeps its layout instead of failing to build."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 8, 8), "float32"))
    w = relax.const(np.ones((4, 3, 3, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = bb.emit(relax.op.nn.conv2d(x, w))
            both = bb.emit(relax.op.nn.dropout(conv, 0.5))
            out = bb.emit_output(relax.op.add(relax.TupleGetItem(both, 0), relax.TupleGetItem(both, 1)))
        bb.emit_func_output(out)
    mod = bb.get()
    assert conv_layout(mod, "x86", shipped=False, prefer="NHWC") == "NCHW"
    data = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype("float32")
    got = relax.VirtualMachine(tvm_pool.compile(mod, "x86", shipped_logs=False), tvm.cpu())["main"](tvm.runtime.tensor(data))
    conv_np = np.stack([sum(np.lib.stride_tricks.sliding_window_view(data[0, c], (3, 3)).sum(axis=(2, 3)) for c in range(3))] * 4)
    np.testing.assert_allclose(got.numpy()[0], conv_np + 1.0, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("pool,attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 1, 0], ceil_mode=1)),
])
def test_onnx_pools_go_channel_last_with_the_convolutions_and_match(pool, attrs):
    model = _model(pool, **attrs)
    mod = tvm_pool.from_onnx(model)
    assert lowering.calls_op(mod, "relax.nn.max_pool2d", "relax.nn.avg_pool2d")  # not a call_tir
    funcs = _pool_funcs(mod, "x86", "NHWC")
    assert funcs and all(f'"{LAYOUT_ATTR}": "channel_last"' in f.script() for f in funcs.values()), list(funcs)
    assert not any("transpose" in name for name in funcs), list(funcs)  # no transpose fused around the pool
    x = np.random.default_rng(2).standard_normal((1, 5, 23, 23)).astype("float32")
    want = run_onnxruntime(model, {"x": x})[0]
    for layout in lowering.CONV_LAYOUTS:
        ex = tvm_pool.compile(mod, "x86", shipped_logs=False, conv_layout=layout)
        got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4, err_msg=layout)


def test_channel_last_build_checks_its_pools_against_their_unscheduled_selves(monkeypatch, host):
    """The scheduled-equals-unscheduled check (tests/primfunc_check.py) lowers the unscheduled
    reference in the layout compile chose: a model compiled with NHWC convolutions has its
    channel-last pools checked against channel-last computes (with NCHW ones the reference's
    buffers had other shapes and the check failed on their strides)."""
    monkeypatch.setattr(lowering, "choose_conv_layout", lambda *args, **kwargs: "NHWC")
    model = _model("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    mod = tvm_pool.from_onnx(model)
    executable, pools = compile_scheduled(mod, host)
    assert pools and all(f'"{LAYOUT_ATTR}": "channel_last"' in f.script() for f in pools.values()), list(pools)
    assert_pools_exact(mod, host, pools, "channel-last model")
    x = np.random.default_rng(3).standard_normal((1, 5, 23, 23)).astype("float32")
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, run_onnxruntime(model, {"x": x})[0], rtol=1e-5, atol=1e-4)


def test_pools_relax_cannot_state_stay_tvm_pool_calls():
    """auto_pad and Indices stay tvm_pool's call_tir (Relax's pool ops have neither)."""
    for attrs, outputs in ((dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER"), ["y"]),
                           (dict(kernel_shape=[2, 2], strides=[2, 2]), ["y", "i"])):
        graph = helper.make_graph(
            [helper.make_node("MaxPool", ["x"], outputs, **attrs)], "pool",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT if o == "y" else TensorProto.INT64, None) for o in outputs])
        mod = tvm_pool.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION))
        assert not lowering.calls_op(mod, "relax.nn.max_pool2d"), attrs


def test_tune_takes_nhwc_and_compile_applies_its_records(tmp_path):
    """A fresh log is tuned channel-last on x86; compile with it then takes NHWC (its records
    cover the model there), and the convolutions have records."""
    mod = tvm_pool.from_onnx(_model())
    result = tvm_pool.tune(mod, "host", trials=8, log_dir=str(tmp_path), source="convs", progress=lambda line: None)
    assert result.trials > 0
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    host = resolve_target("host")
    tasks = ms.relax_integration.extract_tasks(lowering.fuse(mod, host, "NHWC"), host)
    assert tasks and all(db.has_workload(t.dispatched[0]) for t in tasks), [t.task_name for t in tasks]
    assert conv_layout(mod, "host", [str(tmp_path)], shipped=False) == "NHWC"
    cov = coverage(mod, "host", [str(tmp_path)], shipped=False)
    assert cov.kernels == len(tasks) - cov.pooling and cov.untuned_flops == 0, cov  # 8 trials: a transpose may miss out


def _matches_onnxruntime_in_both_layouts(model, x):
    x = x.astype("float32")
    want = run_onnxruntime(model, {"x": x})[0]
    for layout in lowering.CONV_LAYOUTS:
        ex = tvm_pool.compile(tvm_pool.from_onnx(model), "x86", shipped_logs=False, conv_layout=layout)
        got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4, err_msg=layout)


def _se_model(pool: str):
    """Conv 3x3 (5 -> 12) -> Relu -> a squeeze-excitation block: ``pool`` -> Conv 1x1 -> Sigmoid,
    times the Relu's output -> Conv 1x1 (12 -> 7)."""
    rng = np.random.default_rng(4)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype("float32"), n)
               for n, s in (("w1", (12, 5, 3, 3)), ("w2", (12, 12, 1, 1)), ("w3", (7, 12, 1, 1)))]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node(pool, ["r1"], ["g"], **({"p": 3} if pool == "GlobalLpPool" else {})),
        helper.make_node("Conv", ["g", "w2"], ["s"]),
        helper.make_node("Sigmoid", ["s"], ["e"]),
        helper.make_node("Mul", ["r1", "e"], ["m"]),
        helper.make_node("Conv", ["m", "w3"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 13, 11])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


@pytest.mark.parametrize("pool", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_onnx_global_pools_go_channel_last_with_the_convolutions_and_match(pool):
    """ConvertLayout does not know tvm_pool's global pools (a call_tir): with NHWC convolutions
    each read a transpose of its input. legalize_layouts.global_pools_in_layout computes the
    average and the max in the graph's layout (no transpose left); the Lp pool, whose p the call
    does not carry, stays channel-first."""
    model = _se_model(pool)
    funcs = _pool_funcs(tvm_pool.from_onnx(model), "x86", "NHWC")
    assert len(funcs) == 1, list(funcs)
    (name, func), = funcs.items()
    if pool == "GlobalLpPool":
        assert "transpose" in name and f'"{LAYOUT_ATTR}": "channel_last"' not in func.script(), name
    else:
        assert "transpose" not in name and f'"{LAYOUT_ATTR}": "channel_last"' in func.script(), name
    _matches_onnxruntime_in_both_layouts(model, np.random.default_rng(5).standard_normal((2, 5, 13, 11)))


def _shuffle_model():
    """Conv 3x3 (5 -> 12) -> Relu -> channel shuffle (2 groups) -> split in halves -> Conv 1x1 on
    the second -> Concat -> channel shuffle -> Conv 1x1 (12 -> 7): ShuffleNetV2's unit."""
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype("float32"), n)
             for n, s in (("w1", (12, 5, 3, 3)), ("w2", (6, 6, 1, 1)), ("w3", (7, 12, 1, 1)))]
    inits += [numpy_helper.from_array(np.array(v, "int64"), n) for n, v in (
        ("grouped", [2, 2, 6, 9, 7]), ("merged", [2, 12, 9, 7]))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"])]
    for i, src in ((1, "r1"), (2, "cat")):
        nodes += [helper.make_node("Reshape", [src, "grouped"], [f"g{i}"]),
                  helper.make_node("Transpose", [f"g{i}"], [f"t{i}"], perm=[0, 2, 1, 3, 4]),
                  helper.make_node("Reshape", [f"t{i}", "merged"], [f"s{i}"])]
        if i == 1:
            nodes += [helper.make_node("Split", ["s1"], ["a", "b"], axis=1, num_outputs=2),
                      helper.make_node("Conv", ["b", "w2"], ["cb"]),
                      helper.make_node("Concat", ["a", "cb"], ["cat"], axis=1)]
    nodes.append(helper.make_node("Conv", ["s2", "w3"], ["y"]))
    graph = helper.make_graph(nodes, "shuffle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 9, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


def test_channel_shuffles_slices_and_concats_go_channel_last_and_match():
    """ConvertLayout knows no reshape: a channel shuffle, and the slices and concatenations after
    it, stayed channel-first between transposes. channel_last.channel_last_fixups moves them to
    the convolutions' layout: no transpose of an activation is left but the model's input and
    output, and the outputs match onnxruntime's in both layouts."""
    model = _shuffle_model()
    fused = lowering.fuse(tvm_pool.from_onnx(model), "x86", "NHWC")
    transposes = [f for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
                  and "transpose" in gv.name_hint and "reshape" not in gv.name_hint]  # the shuffles' own stay
    assert len(transposes) <= 2, [gv.name_hint for gv, _ in fused.functions_items()]
    _matches_onnxruntime_in_both_layouts(model, np.random.default_rng(7).standard_normal((2, 5, 9, 7)))


@pytest.mark.parametrize("covered,want", [
    ({"NCHW": (0.0, 1.0), "NHWC": (0.05, 0.05)}, "NCHW"),  # this CPU's few records lose to another's all
    ({"NCHW": (0.0, 1.0), "NHWC": (0.999, 0.999)}, "NHWC"),  # a tiny untuned kernel does not outweigh them
    ({"NCHW": (0.0, 1.0), "NHWC": (1.0, 1.0)}, "NHWC"),
    ({"NCHW": (0.0, 0.0), "NHWC": (0.0, 0.0)}, "NCHW"),  # nothing covers it: the model's own layout
    # this CPU's NCHW records against another CPU's NHWC ones: NHWC (ResNet-18 on the znver4 with
    # the Intel machine's NHWC records: 13.8 ms against 25.5 with its own NCHW ones)
    ({"NCHW": (1.0, 1.0), "NHWC": (0.0, 1.0)}, "NHWC"),
    ({"NCHW": (1.0, 1.0), "NHWC": (0.5, 0.9)}, "NCHW"),  # covered less: coverage still comes first
])
def test_any_cpus_coverage_comes_before_this_cpus(monkeypatch, covered, want):
    """choose_conv_layout ranks by the share any CPU's records cover (to 1%), then NHWC, then by
    this CPU's: MobileNetV3-Large on the Intel CPU went channel-last for the few kernels it shares
    with other models' Intel records, and ran 173 ms against 7.4 ms."""
    monkeypatch.setattr(lowering, "_covered", lambda mod, target, dirs, shipped, layout: covered[layout])
    monkeypatch.setattr(lowering, "_CHOSEN", [])
    assert conv_layout(tvm_pool.from_onnx(_model()), "x86") == want


def test_coverage_leaves_out_untuned_elementwise_kernels(monkeypatch):
    """A kernel tvm_pool's elementwise rule schedules (a concat and a scale, as DenseNet's batch
    norms after a concat on the torch.export road) does not count against a layout whose
    convolutions all have records; a convolution without one does."""
    host = resolve_target("host")
    if not lowering.is_x86(host):
        pytest.skip("the layout choice and the elementwise rule are x86's")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), "float32"))
    rng = np.random.default_rng(5)
    with bb.function("main", [x]):
        with bb.dataflow():
            convs = [bb.emit(relax.op.nn.conv2d(x, relax.const(rng.standard_normal((4, 4, 3, 3)).astype("float32")),
                                                padding=1)) for _ in range(2)]
            cat = bb.emit(relax.op.concat(convs, axis=1))
            out = bb.emit_output(relax.op.multiply(cat, relax.const(rng.standard_normal((1, 8, 1, 1)).astype("float32"))))
        bb.emit_func_output(out)
    mod = bb.get()
    tasks = ms.relax_integration.extract_tasks(lowering.fuse(mod, host, "NHWC"), host)
    names = [t.task_name for t in tasks]
    assert any("conv2d" in n for n in names) and any("concatenate" in n for n in names), names

    def records(with_conv: bool):
        def task_records(*_args, **_kwargs):
            for task in tasks:
                tuned = "conv2d" in task.task_name and with_conv
                yield task, (type("Record", (), {"target": host})() if tuned else None), "log"
        return task_records

    monkeypatch.setattr(lowering, "task_records", records(True))
    assert lowering._covered(mod, host, None, False, "NHWC") == (1.0, 1.0)  # pylint: disable=protected-access
    monkeypatch.setattr(lowering, "task_records", records(False))
    assert lowering._covered(mod, host, None, False, "NHWC") == (0.0, 0.0)  # pylint: disable=protected-access


def test_layout_covered_all_over_in_nhwc_is_scored_alone(monkeypatch):
    """A model the logs cover all over in NHWC is fused in that layout only: no other layout can
    score higher, so the choice does not fuse it in NCHW as well (about 1 s for ResNet-50)."""
    asked = []

    def covered(mod, target, dirs, shipped, layout):
        asked.append(layout)
        return {"NCHW": (1.0, 1.0), "NHWC": (0.0, 1.0)}[layout]

    monkeypatch.setattr(lowering, "_covered", covered)
    monkeypatch.setattr(lowering, "_CHOSEN", [])
    assert conv_layout(tvm_pool.from_onnx(_model()), "x86") == "NHWC"
    assert asked == ["NHWC"]
