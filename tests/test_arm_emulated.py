"""The arm target, run: every pooling operator and dtype compiled with `--target arm`, run on the
emulated aarch64 device (qemu-aarch64 + Debian's arm64 Python + the aarch64 TVM wheel, see
tvm_pool/emulation.py) and compared with onnxruntime on the host; the deploy examples (Python
runtime-only, C++ cross-compiled) under emulation; the instruction counter; tuning for aarch64
through TVM's RPC tracker with the emulated device as the board.

Oracles: onnxruntime where it runs the node (MaxPool/AveragePool/LpPool/global pools/MaxUnpool in
its dtypes), else tvm_pool's unscheduled compute built for this machine (custom-domain adaptive
and TensorRT nodes, bfloat16, dtypes onnxruntime lacks), the reference the x86 tests check.
Tolerances: ``helpers.TOLERANCES["aarch64"]``. All cases run in one qemu process (Python + TVM start-up
under qemu takes ~10 s).

The device is built once into the cache (``$TVM_POOL_AARCH64_CACHE``, default
``~/.cache/tvm_pool/aarch64``); the tests skip, saying why, only when it cannot be built (no
qemu and no root to install it, or the registries unreachable).
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_pool
from tvm_pool import emulation
from tvm_pool.cli.compile import export_compiler
from tvm_pool.targets import resolve_target

from helpers import CROSS_CXX, assert_matches, emulated_device, needs_cross_compiler, needs_qemu, tolerance
from oracles import IR_VERSION, pool_model, run_onnxruntime, run_tvm_pool
from test_deploy import compile_demo, run_cpp_example
from tuning_helpers import assert_applied, conv_pool_model, free_port, host_processes, start_tracker, tasks, wait_for_server

REPO = Path(__file__).resolve().parents[1]
pytestmark = [needs_cross_compiler, needs_qemu]  # every test runs on the emulated device


@pytest.fixture(scope="session")
def device():
    return emulated_device()


def _input(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype in ("int8", "uint8"):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    x = rng.standard_normal(shape).astype(np.float32)
    return x.astype(ml_dtypes.bfloat16) if dtype == "bfloat16" else x.astype(dtype)


def _custom(op_type, x_shape, outputs, elem=TensorProto.FLOAT, size=None, index_elem=TensorProto.INT64, **attrs):
    inputs = ["X"] + (["S"] if size is not None else [])
    node = helper.make_node(op_type, inputs, list(outputs), domain="tvm_pool", name="n", **attrs)
    outs = [helper.make_tensor_value_info(outputs[0], elem, None)]
    if len(outputs) > 1:
        outs.append(helper.make_tensor_value_info(outputs[1], index_elem, None))
    inits = [numpy_helper.from_array(np.array(size, np.int64), "S")] if size is not None else []
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", elem, x_shape)], outs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("tvm_pool", 1)])
    model.ir_version = IR_VERSION
    return model


def _graph(nodes, x_shape, extra_inputs=(), inits=(), dtype=TensorProto.FLOAT):
    inputs = [helper.make_tensor_value_info("X", dtype, x_shape), *extra_inputs]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("Y", dtype, None)],
                              initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = IR_VERSION
    return onnx.shape_inference.infer_shapes(model)


S2 = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
S1 = dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])


def cases():
    """(name, model, feeds, oracle) with oracle "ort" or "ref" (tvm_pool unscheduled on the host)."""
    c = []
    for dtype in ("float32", "float16", "int8", "uint8"):
        c.append((f"maxpool_s2_{dtype}", pool_model("MaxPool", [1, 8, 20, 20], dtype, **S2), {"X": _input([1, 8, 20, 20], dtype, 1)}, "ort"))
        c.append((f"maxpool_s1_{dtype}", pool_model("MaxPool", [1, 4, 13, 16], dtype, **S1), {"X": _input([1, 4, 13, 16], dtype, 2)}, "ort"))
    c.append(("maxpool_s2_bfloat16", pool_model("MaxPool", [1, 8, 20, 20], "bfloat16", **S2), {"X": _input([1, 8, 20, 20], "bfloat16", 3)}, "ref"))
    c.append(("maxpool_indices_bfloat16", pool_model("MaxPool", [1, 3, 9, 9], "bfloat16", num_outputs=2, **S2),
              {"X": _input([1, 3, 9, 9], "bfloat16", 4)}, "ref"))
    for dtype in ("float32", "float16", "int8", "uint8"):
        c.append((f"maxpool_indices_{dtype}", pool_model("MaxPool", [2, 3, 11, 12], dtype, num_outputs=2, storage_order=0, **S2),
                  {"X": _input([2, 3, 11, 12], dtype, 5)}, "ort"))
    c.append(("maxpool_indices_storage1", pool_model("MaxPool", [1, 3, 7, 9], num_outputs=2, storage_order=1, kernel_shape=[2, 2]),
              {"X": _input([1, 3, 7, 9], "float32", 6)}, "ort"))
    nan = _input([1, 4, 10, 10], "float32", 7)
    nan[0, 1, 3, 4] = np.nan
    nan[0, 2, :, 0] = np.nan
    c.append(("maxpool_nan", pool_model("MaxPool", [1, 4, 10, 10], **S2), {"X": nan}, "ref"))
    c.append(("maxpool_nan_2x2", pool_model("MaxPool", [1, 4, 10, 10], kernel_shape=[2, 2], strides=[2, 2]), {"X": nan}, "ref"))
    # 2x2 s2 and 2x2x2 s2 rows of whole registers: the max of both phases of a de-interleaved
    # load as FMAXP (schedules/strided_loads.py), NaN propagating
    nan16 = _input([1, 4, 8, 32], "float32", 31)
    nan16[0, 1, 2, 5] = nan16[0, 3, :, 17] = np.nan
    c.append(("maxpool_nan_2x2_row16", pool_model("MaxPool", [1, 4, 8, 32], kernel_shape=[2, 2], strides=[2, 2]), {"X": nan16}, "ref"))
    nan3d = _input([1, 2, 4, 6, 24], "float32", 32)
    nan3d[0, 1, 1, 3, 7] = np.nan
    c.append(("maxpool3d_k2_nan", pool_model("MaxPool", [1, 2, 4, 6, 24], kernel_shape=[2, 2, 2], strides=[2, 2, 2]), {"X": nan3d}, "ref"))
    # a long stride-1 max by doubling levels, its padding inlined into the first level
    nan1d = _input([1, 3, 200], "float32", 33)
    nan1d[0, 2, 100] = np.nan
    c.append(("maxpool_1d_k32_s1_p16_nan", pool_model("MaxPool", [1, 3, 200], kernel_shape=[32], strides=[1], pads=[16, 15]), {"X": nan1d}, "ref"))
    c.append(("maxpool_1d_k32_s1_p16", pool_model("MaxPool", [1, 3, 200], kernel_shape=[32], strides=[1], pads=[16, 15]),
              {"X": _input([1, 3, 200], "float32", 34)}, "ort"))
    c.append(("maxpool_ceil_dilated", pool_model("MaxPool", [1, 3, 17, 15], kernel_shape=[3, 2], strides=[2, 3], dilations=[2, 1],
                                                 ceil_mode=1), {"X": _input([1, 3, 17, 15], "float32", 8)}, "ort"))
    c.append(("maxpool_same_lower", pool_model("MaxPool", [1, 3, 10, 11], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER"),
              {"X": _input([1, 3, 10, 11], "float32", 9)}, "ort"))
    c.append(("maxpool_1d", pool_model("MaxPool", [1, 8, 64], kernel_shape=[4], strides=[4]), {"X": _input([1, 8, 64], "float32", 10)}, "ort"))
    c.append(("maxpool_3d", pool_model("MaxPool", [1, 4, 4, 12, 12], kernel_shape=[1, 3, 3], strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1]),
              {"X": _input([1, 4, 4, 12, 12], "float32", 11)}, "ort"))
    c.append(("maxpool_2x2_large", pool_model("MaxPool", [1, 16, 40, 40], kernel_shape=[2, 2], strides=[2, 2]),
              {"X": _input([1, 16, 40, 40], "float32", 12)}, "ort"))
    for dtype in ("float32", "float16", "bfloat16"):
        oracle = "ort" if dtype == "float32" else "ref"
        c.append((f"avgpool_pad_{dtype}", pool_model("AveragePool", [1, 8, 14, 14], dtype, **S1), {"X": _input([1, 8, 14, 14], dtype, 13)}, oracle))
    c.append(("avgpool_include_pad_ceil", pool_model("AveragePool", [1, 3, 13, 13], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                                     count_include_pad=1, ceil_mode=1), {"X": _input([1, 3, 13, 13], "float32", 14)}, "ort"))
    c.append(("avgpool_2x2", pool_model("AveragePool", [1, 16, 28, 28], kernel_shape=[2, 2], strides=[2, 2]),
              {"X": _input([1, 16, 28, 28], "float32", 15)}, "ort"))
    # long windows: vector partial sums (schedules/cpu.py, _vector_partial_sums)
    c.append(("avgpool_1d_k64_s32", pool_model("AveragePool", [1, 4, 800], kernel_shape=[64], strides=[32]),
              {"X": _input([1, 4, 800], "float32", 28)}, "ort"))
    c.append(("avgpool_1d_k57_s19_blocks_padded", pool_model("AveragePool", [2, 3, 500], kernel_shape=[57], strides=[19], pads=[7, 30],
                                                                count_include_pad=1), {"X": _input([2, 3, 500], "float32", 35)}, "ort"))
    c.append(("lppool_1d_k32", pool_model("LpPool", [1, 3, 512], kernel_shape=[32], strides=[16], p=2),
              {"X": _input([1, 3, 512], "float32", 29)}, "ort"))
    c.append(("lppool", pool_model("LpPool", [1, 3, 10, 10], kernel_shape=[3, 3], strides=[2, 2], p=3, pads=[1, 1, 1, 1]),
              {"X": _input([1, 3, 10, 10], "float32", 16)}, "ort"))
    for op in ("GlobalAveragePool", "GlobalMaxPool"):
        for dtype in ("float32", "float16", "bfloat16"):
            oracle = "ort" if dtype == "float32" else "ref"
            c.append((f"{op}_{dtype}", pool_model(op, [1, 32, 7, 7], dtype), {"X": _input([1, 32, 7, 7], dtype, 17)}, oracle))
    for dtype in ("float32", "float16"):  # a plane past the flat plane's: the max of keys in vector partial maxima
        c.append((f"GlobalMaxPool_keyed_{dtype}", pool_model("GlobalMaxPool", [2, 5, 30, 33], dtype),
                  {"X": _input([2, 5, 30, 33], dtype, 19)}, "ort" if dtype == "float32" else "ref"))
    c.append(("global_lppool", pool_model("GlobalLpPool", [1, 8, 5, 6], p=2), {"X": _input([1, 8, 5, 6], "float32", 18)}, "ref"))
    idx_in = helper.make_tensor_value_info("I", TensorProto.INT64, [1, 2, 3, 3])
    idx = np.array([[[[0, 3, 5], [13, 15, 17], [25, 28, 30]], [[37, 39, 41], [49, 52, 54], [60, 63, 65]]]], np.int64)
    c.append(("maxunpool", pool_model("MaxUnpool", [1, 2, 3, 3], opset=11, extra_inputs=[idx_in], kernel_shape=[2, 2], strides=[2, 2]),
              {"X": _input([1, 2, 3, 3], "float32", 19), "I": idx}, "ort"))
    x = _input([2, 3, 13, 10], "float32", 20)
    c.append(("adaptive_max", _custom("AdaptiveMaxPool", list(x.shape), ("Y", "I"), size=[4, 3]), {"X": x}, "ref"))
    xn = x.copy()
    xn[0, 1, 2, 3] = np.nan
    c.append(("adaptive_max_values_nan", _custom("AdaptiveMaxPool", list(x.shape), ("Y",), size=[4, 3]), {"X": xn}, "ref"))
    c.append(("maxpool_dilated_nan", pool_model("MaxPool", [2, 3, 13, 10], kernel_shape=[3, 3], strides=[2, 2], dilations=[2, 2]),
              {"X": xn}, "ref"))
    c.append(("adaptive_avg", _custom("AdaptiveAvgPool", list(x.shape), ("Y",), size=[5, 4]), {"X": x}, "ref"))
    c.append(("tensorrt_blend", _custom("TensorRTPooling", list(x.shape), ("Y",), pooling_type="MAX_AVERAGE_BLEND", window_size=[3, 2],
                                        stride=[2, 2], pre_padding=[1, 0], post_padding=[2, 1], padding_mode="CAFFE_ROUND_UP",
                                        blend_factor=0.3, average_count_excludes_padding=0), {"X": x}, "ref"))
    xi = _input([1, 4, 9, 9], "int8", 21)
    xu = _input([1, 4, 9, 9], "int8", 27)
    c.append(("tensorrt_max_int8", _custom("TensorRTPooling", [1, 4, 9, 9], ("Y",), elem=TensorProto.INT8, pooling_type="MAX",
                                            window_size=[2, 2], stride=[2, 2]), {"X": xu}, "ref"))
    c.append(("tensorrt_avg_int8", _custom("TensorRTPooling", [1, 4, 9, 9], ("Y",), elem=TensorProto.INT8, pooling_type="AVERAGE",
                                           window_size=[3, 3], stride=[2, 2], padding_mode="EXPLICIT_ROUND_UP"), {"X": xi}, "ref"))
    # fused producers and consumers
    bias = numpy_helper.from_array(np.linspace(-1, 1, 16).astype(np.float32).reshape(16, 1, 1), "B")
    c.append(("fused_relu_pool_add", _graph([helper.make_node("Relu", ["X"], ["r"]), helper.make_node("MaxPool", ["r"], ["p"], **S2),
                                             helper.make_node("Add", ["p", "B"], ["Y"])], [1, 16, 24, 24], inits=[bias]),
              {"X": _input([1, 16, 24, 24], "float32", 22)}, "ort"))
    bias1d = numpy_helper.from_array(np.linspace(-1, 1, 6).astype(np.float32).reshape(6, 1), "B")
    c.append(("fused_relu_longavg_add", _graph([helper.make_node("Relu", ["X"], ["r"]),
                                                helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[64], strides=[32]),
                                                helper.make_node("Add", ["p", "B"], ["Y"])], [1, 6, 640], inits=[bias1d]),
              {"X": _input([1, 6, 640], "float32", 31)}, "ort"))
    z = helper.make_tensor_value_info("Z", TensorProto.FLOAT, [1, 8, 12, 12])
    c.append(("pool_concat", _graph([helper.make_node("MaxPool", ["X"], ["p"], **S2), helper.make_node("Concat", ["p", "Z"], ["Y"], axis=1)],
                                    [1, 8, 24, 24], extra_inputs=[z]),
              {"X": _input([1, 8, 24, 24], "float32", 23), "Z": _input([1, 8, 12, 12], "float32", 24)}, "ort"))
    c.append(("avgpool_mul", _graph([helper.make_node("AveragePool", ["X"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                                     helper.make_node("Mul", ["p", "Z"], ["Y"])], [1, 8, 24, 24], extra_inputs=[z]),
              {"X": _input([1, 8, 24, 24], "float32", 25), "Z": _input([1, 8, 12, 12], "float32", 26)}, "ort"))
    return c


def _compile_arm(model, path, **compile_kwargs):
    target = resolve_target("arm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm_pool.compile(tvm_pool.from_onnx(model), target, **compile_kwargs)
    ex.export_library(str(path), fcompile=export_compiler(target))


def _feeds_in_order(model, feeds):
    inits = {t.name for t in model.graph.initializer}
    return [feeds[i.name] for i in model.graph.input if i.name not in inits]


@pytest.fixture(scope="module")
def arm_results(device, tmp_path_factory):
    root = tmp_path_factory.mktemp("arm")
    jobs, table = [], []
    for name, model, feeds, oracle in cases():
        so = root / f"{name}.so"
        _compile_arm(model, so)
        jobs.append({"name": name, "module": so, "inputs": _feeds_in_order(model, feeds)})
        table.append((name, model, feeds, oracle))
    results = emulation.run_artifacts(device, jobs, root / "run", timeout=900)
    return table, results


def test_every_pooling_op_and_dtype_matches_on_emulated_aarch64(arm_results):
    table, results = arm_results
    failures = []
    for (name, model, feeds, oracle), res in zip(table, results):
        if not res.get("ok"):
            failures.append(f"{name}: {res.get('error')}")
            continue
        assert res["runtime_only"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = run_onnxruntime(model, feeds) if oracle == "ort" else run_tvm_pool(model, feeds, schedule=False)
        for k, (got, ref) in enumerate(zip(res["outputs"], want)):
            ref = np.asarray(ref)
            if got.shape != ref.shape or got.dtype != ref.dtype:
                failures.append(f"{name} out{k}: {got.dtype}{got.shape} vs {ref.dtype}{ref.shape}")
                continue
            if ref.dtype.kind in "iu":
                ok = np.array_equal(got, ref)
            else:
                rtol, atol = tolerance(ref.dtype, "aarch64")
                ok = np.allclose(got.astype(np.float32), ref.astype(np.float32), rtol=rtol, atol=atol, equal_nan=True) and \
                    np.array_equal(np.isnan(got.astype(np.float32)), np.isnan(ref.astype(np.float32)))
            if not ok:
                failures.append(f"{name} out{k} differs from {oracle}")
    assert not failures, "\n".join(failures)
    assert len(results) >= 40


def test_instruction_counter_counts_calls(device, tmp_path):
    """The plugin's marks: a 2x bigger pool executes about 2x the instructions per call."""
    jobs = []
    for name, shape in (("small", [1, 16, 32, 32]), ("big", [1, 32, 32, 32])):
        _compile_arm(pool_model("MaxPool", shape, **S2), tmp_path / f"{name}.so")
        jobs.append({"name": name, "module": tmp_path / f"{name}.so", "inputs": [_input(shape, "float32", 0)], "count_calls": 20})
    res = emulation.run_artifacts(device, jobs, tmp_path / "run", count=True)
    small_n, big_n = (r["insns_per_call"] for r in res)
    assert 1000 < small_n < big_n
    assert 1.6 < big_n / small_n < 2.4, (small_n, big_n)


# ---------------------------------------------------------------------------------------------
# Deployment under emulation
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_arm(tmp_path_factory):
    return compile_demo(tmp_path_factory.mktemp("deploy_arm"), "--target", "arm")


def test_python_runtime_only_example_on_emulated_aarch64(device, demo_arm):
    root, so, _, want = demo_arm
    out = root / "py_out.npz"
    res = device.run([REPO / "examples" / "deploy_python.py", so, "--inputs", root / "inputs.npz", "-o", out], cwd=root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "TVM runtime only: True; tvm_pool loaded: False" in res.stdout
    with np.load(out) as got:
        assert_matches({k: got[k] for k in got.files}, want)


def test_cpp_example_cross_compiled_on_emulated_aarch64(device, demo_arm):
    root, so, inputs, want = demo_arm
    binary = root / "deploy_aarch64"
    env = dict(os.environ, PYTHON=str(device.wrapper), CXX=CROSS_CXX)
    build = subprocess.run(["sh", str(REPO / "examples" / "deploy_cpp" / "build.sh"), str(binary)],
                           capture_output=True, text=True, timeout=600, env=env)
    assert build.returncode == 0, build.stdout + build.stderr
    assert b"\xb7\x00" == binary.read_bytes()[18:20]  # EM_AARCH64
    run_cpp_example([emulation.QEMU, "-L", device.root, binary], so, root, inputs, want, timeout=300)


@pytest.mark.slow
def test_rpc_server_under_qemu(device, tmp_path):
    """The emulated board as a TVM RPC device: upload an arm artifact, run it remotely."""
    from tvm import rpc

    port = free_port()
    model = _graph([helper.make_node("MaxPool", ["X"], ["Y"], **S2)], [1, 8, 16, 16])
    so = tmp_path / "pool_arm.so"
    _compile_arm(model, so)
    x = _input([1, 8, 16, 16], "float32", 30)
    emulation.rpc_start(port)
    try:
        got = _run_remote(rpc.connect("127.0.0.1", port, session_timeout=240), so, x)
    finally:
        assert emulation.rpc_stop(port)
    np.testing.assert_array_equal(got, run_onnxruntime(model, {"X": x})[0])


def _run_remote(remote, so, x):
    """Upload the module ``so`` through the RPC session ``remote``, run its main on ``x`` there."""
    import tvm
    from tvm import relax

    remote.upload(str(so))
    dev = remote.cpu()
    vm = relax.VirtualMachine(remote.load_module(so.name), dev)
    return vm["main"](tvm.runtime.tensor(x, dev)).numpy()


@pytest.mark.slow  # ~2-3 min on 2 cores; test_rpc_server_under_qemu keeps the RPC path in the default suite
def test_tune_through_the_rpc_tracker_on_emulated_aarch64(device, tmp_path, capsys):
    """Issue 13's flow for a new device, on a farm (issue 23): TVM's RPC tracker on the host, two
    emulated boards' RPC servers registered with it under one key, `tvm-pool tune --target arm
    --rpc-tracker ... --rpc-key ...` (cross-compiled candidates, uploaded and timed on both
    boards at once; the timings are emulated and the command says so). The log is TVM's
    JSONDatabase with records for every task; the model compiled with it runs on a board and
    matches onnxruntime."""
    from tvm import rpc
    from tvm.s_tir import meta_schedule as ms

    from tvm_pool import cli, tuning

    model = conv_pool_model()
    path = tmp_path / "conv_pool.onnx"
    onnx.save(model, path)
    log_dir = tmp_path / "log"
    key = "tvm-pool-aarch64"
    server_ports = []
    with host_processes() as start:
        port = start_tracker(start)
        try:
            for _ in range(2):
                server_port = free_port()
                emulation.rpc_start(server_port, tracker=f"127.0.0.1:{port}", key=key)
                server_ports.append(server_port)
            wait_for_server(port, key, count=2)
            assert cli.main(["tune", str(path), "--target", "arm", "--rpc-tracker", f"127.0.0.1:{port}", "--rpc-key", key,
                             "--trials", "4", "--log-dir", str(log_dir)]) == 0
            out, err = capsys.readouterr()
            assert out.startswith(f"wrote {log_dir}: 2 tasks"), out
            assert "note: measured on qemu-aarch64 user-mode emulation" in out and "timings are emulated" in out, out
            assert f"measuring on 2 devices (key '{key}') under qemu-aarch64" in err, err

            target = resolve_target("arm")
            mod = tvm_pool.from_onnx(model)
            database = ms.database.JSONDatabase(work_dir=str(log_dir))
            for task in tasks(mod, target):
                assert database.has_workload(task.dispatched[0]), task.task_name
                top = database.get_top_k(database.commit_workload(task.dispatched[0]), 1)
                assert top and top[0].run_secs, task.task_name  # measured on the board
            assert_applied(mod, str(log_dir), target)
            run = json.loads((log_dir / tuning.META_FILE).read_text())["runs"][-1]
            assert run["rpc"] is True and "qemu-aarch64" in run["emulated"]

            so = tmp_path / "conv_pool_arm.so"
            _compile_arm(model, so, tuning_logs=[str(log_dir)], shipped_logs=False)
            x = _input([1, 3, 16, 16], "float32", 31)
            got = _run_remote(rpc.connect_tracker("127.0.0.1", port).request(key, session_timeout=240), so, x)
        finally:
            for server_port in server_ports:
                assert emulation.rpc_stop(server_port)
    np.testing.assert_allclose(got, run_onnxruntime(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
