"""``tvm-pool bench --device cuda`` on its CPU-only paths: it refuses cleanly without a GPU (or
without TVM's CUDA runtime), times with the device synchronised inside each call, records a
peer that cannot run, and its report names the GPU and driver and follows from the times. On a
GPU it runs."""

from __future__ import annotations

import argparse
import json
import os
import re
import types
from pathlib import Path

import numpy as np
import pytest
import tvm

from tvm_pool.bench import cuda as bench_cuda
from tvm_pool.bench import runner

from helpers import cuda_device_present, has_package, needs_gpu


@pytest.mark.skipif(cuda_device_present(), reason="a CUDA device is present: the refusal path does not apply")
def test_refuses_without_a_gpu(tmp_path, capsys):
    code = runner.main(["--device", "cuda", "--quick", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "no CUDA device" in err and "nothing timed" in err
    assert not list(tmp_path.iterdir())  # no results written


@pytest.mark.skipif(cuda_device_present(), reason="a CUDA device is present")
def test_cli_refuses_without_a_gpu(capsys):
    from tvm_pool import cli  # pylint: disable=import-outside-toplevel

    assert cli.main(["bench", "--device", "cuda", "--quick"]) == 2
    assert "tvm-pool bench --device cuda: no CUDA device found" in capsys.readouterr().err


def test_a_missing_cuda_runtime_is_a_clear_reason(monkeypatch, tmp_path, capsys):
    """TVM built without CUDA fails on tvm.cuda(0) itself: the refusal says so, in one line."""
    def no_runtime(index):
        raise RuntimeError("Traceback (most recent call last):\n  ...\nDevice API cuda is not enabled.")

    monkeypatch.setattr(tvm, "cuda", no_runtime)
    with pytest.raises(bench_cuda.NoDevice, match=r"^TVM's CUDA runtime is unavailable \(Device API cuda is not enabled\.\)$"):
        bench_cuda.device_or_reason()
    assert runner.main(["--device", "cuda", "--output-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == ("tvm-pool bench --device cuda: TVM's CUDA runtime is unavailable "
                                       "(Device API cuda is not enabled.); nothing timed\n")


def test_arch_names():
    assert bench_cuda.arch_of("8.0") == "sm_80"
    assert bench_cuda.arch_of("9.0") == "sm_90"
    assert bench_cuda.arch_of("7.5") == "sm_75"
    assert str(bench_cuda.gpu_target("sm_80").kind.name) == "cuda"


def test_gpu_info_names_gpu_and_driver(monkeypatch):
    assert bench_cuda.cuda_version(12080) == "12.8" and bench_cuda.cuda_version(11040) == "11.4"
    # libcuda answers on a machine with the driver; without it the reason is given
    assert re.fullmatch(r"\d+\.\d+|unknown \(.+\)", bench_cuda.driver_version())
    monkeypatch.setattr(bench_cuda, "driver_version", lambda: "12.8")
    dev = types.SimpleNamespace(device_name="NVIDIA H100 80GB HBM3", api_version=12040)
    assert bench_cuda.gpu_info(dev, "sm_90") == {"name": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "driver": "12.8",
                                                 "tvm_cuda": "12.4"}


def _result():
    rows = [
        {"workload": "resnet_maxpool", "dtype": "float32", "min_bytes": 4_000_000, "copy_ms": 0.008,
         "ms": {"tvm_pool": 0.01, "tvm": 0.03, "torch": 0.02}, "na": {}},
        {"workload": "vgg_maxpool", "dtype": "float32", "min_bytes": 8_000_000, "copy_ms": 0.016,
         "ms": {"tvm_pool": 0.02, "tvm": 0.05, "torch": 0.01}, "na": {}},
        {"workload": "maxpool_int8", "dtype": "int8", "min_bytes": 1_000_000, "copy_ms": 0.004,
         "ms": {"tvm_pool": 0.005, "tvm": 0.01}, "na": {"torch": "int8 pooling not supported"}},
    ]
    gpu = {"name": "NVIDIA A100-SXM4-40GB", "arch": "sm_80", "driver": "12.8", "tvm_cuda": "12.4"}
    return bench_cuda.with_geomeans({"device": "CUDA sm_80", "gpu": gpu, "rows": [bench_cuda.summarize(r) for r in rows]})


def test_markdown_table():
    """Each row: % of the device-to-device copy limit, speedups over torch and the best peer;
    the summary: their geometric means (torch over the rows that have a torch time); the
    heading: the GPU, its arch and the driver."""
    result = _result()
    first, second, third = result["rows"]
    assert first["pct_copy"] == pytest.approx(80.0) and first["speedup_vs_torch"] == pytest.approx(2.0)
    assert second["speedup_vs_torch"] == pytest.approx(0.5) and second["speedup"] == pytest.approx(0.5)
    assert "speedup_vs_torch" not in third and third["speedup"] == pytest.approx(2.0)
    assert result["geomean_speedup_vs_torch"] == pytest.approx(1.0) and result["n_speedup_vs_torch"] == 2
    assert result["geomean_speedup"] == pytest.approx(2 ** (1 / 3)) and result["n_speedup"] == 3
    md = bench_cuda.to_markdown(result)
    assert md.startswith("GPU benchmark on CUDA sm_80 (NVIDIA A100-SXM4-40GB, CUDA driver 12.8, TVM built with CUDA 12.4):")
    assert "| resnet_maxpool | float32 | 0.0100 | 0.0300 | 0.0200 | - | 4.00 | 400.0 | 80% | 2.00x | 2.00x |" in md
    assert "| maxpool_int8 | int8 | 0.0050 | 0.0100 | n/a (int8 pooling not supported) | - | 1.00 | 200.0 | 80% | - | 2.00x |" in md
    assert "geomean speedup of tvm_pool vs PyTorch: **1.00x** (2 workloads); vs the best peer: **1.26x** (3 workloads)" in md


def test_copy_runner_copies():
    """The copy limit's runner (TVM's device-to-device copy), run on the CPU device: it copies
    n bytes to n bytes, as many as the workload reads and writes together."""
    call = bench_cuda.copy_runner(tvm.cpu(), 1000, 200)
    dst = call()
    assert dst.shape == (600,) and np.array_equal(dst.numpy(), np.ones(600, "uint8"))


def test_time_ms_median_with_sync_inside():
    now = [0.0]
    calls = []
    # warmup calls take 1 s each: counting any of them would show
    durations = iter([1.0, 1.0, 0.001, 0.004, 0.002, 0.003, 0.009])

    def call():
        calls.append(1)
        now[0] += next(durations)

    def sync():
        now[0] += 0.0005  # the device finishing the call: part of its time

    ms = bench_cuda.time_ms(call, sync, repeat=5, warmup=2, clock=lambda: now[0])
    assert len(calls) == 7 and ms == pytest.approx(3.5)


def test_torch_peer_refuses_without_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch has a CUDA device")
    w = runner.workloads(quick=True)[0]
    with pytest.raises(runner.NotAvailable, match="no CUDA device"):
        bench_cuda.peer_torch(w, None, runner.make_input(w), None, "sm_80")


def test_a_peer_that_cannot_run_is_recorded(monkeypatch):
    """On the CPU device with fake peers: stock TVM's importer refusing (an assert) and torch
    without a kernel are "n/a (reason)"; tvm_pool is timed; the row's bytes follow from the shape."""
    def fine(w, model, x, dev, arch):
        return (lambda: None), dev.sync

    def importer_asserts(w, model, x, dev, arch):
        raise AssertionError("Missing outputs during conversion. Expected 2 but Got 1 in MaxPool.")

    def no_kernel(w, model, x, dev, arch):
        raise runner.NotAvailable("int8 pooling not supported by torch CUDA kernels")

    for peer, fake in (("tvm_pool", fine), ("tvm", importer_asserts), ("torch", no_kernel), ("torch_graph", no_kernel)):
        monkeypatch.setitem(bench_cuda.STARTERS, peer, fake)
    (w,) = [w for w in runner.workloads(quick=True) if w.name == "resnet_gap"]
    row = bench_cuda.time_workload(w, tvm.cpu(), "sm_80", repeat=3)
    assert set(row["ms"]) == {"tvm_pool"} and row["copy_ms"] > 0
    assert row["na"] == {"tvm": "Missing outputs during conversion. Expected 2 but Got 1 in MaxPool.",
                         "torch": "int8 pooling not supported by torch CUDA kernels",
                         "torch_graph": "int8 pooling not supported by torch CUDA kernels"}
    assert row["min_bytes"] == 2048 * 7 * 7 * 4 + 2048 * 4
    assert "speedup" not in row and row["pct_copy"] == pytest.approx(100 * row["copy_ms"] / row["ms"]["tvm_pool"])


@pytest.mark.gpu
@needs_gpu
def test_gpu_bench_one_workload(tmp_path):
    args = argparse.Namespace(quick=True, repeat=3, only="resnet_gap", output_dir=str(tmp_path))
    assert bench_cuda.main(args) == 0
    result = json.loads((tmp_path / "bench_cuda.json").read_text())
    (row,) = result["rows"]
    assert set(row["ms"]) == set(bench_cuda.PEERS), row["na"]
    assert result["gpu"]["name"] == str(tvm.cuda(0).device_name) and result["device"] == f"CUDA {result['gpu']['arch']}"
    md = (tmp_path / "bench_cuda.md").read_text()
    assert result["gpu"]["name"] in md and f"CUDA driver {result['gpu']['driver']}" in md and "| resnet_gap |" in md


def test_bundle_runs_with_the_runtime_only(tmp_path):
    """The GPU bundle's path, on the CPU: ``--export`` builds (here with --arch cpu) modules,
    inputs' recipes and expected samples; bench/cuda_replay.py runs them in a process with
    TVM's runtime only (no compiler, no tvm_pool), checks every output before timing, and
    ``--replayed`` makes the GPU report of its JSON. A wrong expected value fails its check."""
    import subprocess
    import sys

    from tvm_pool.bench import cuda_bundle

    import tvm_pool
    from tvm import relax

    bundle = cuda_bundle.Bundle(str(tmp_path / "b"), "cpu")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 2, 6, 6], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.max_pool2d(x, [3, 3], [2, 2], [1, 1, 1, 1]))
        bb.emit_func_output(out)
    ex = tvm_pool.compile(bb.get(), target="llvm")
    xs = np.arange(72, dtype="float32").reshape(1, 2, 6, 6)
    want = xs.reshape(1, 2, 3, 2, 3, 2)[:, :, :, 1, :, 1]  # 3x3 s2 p1 on a rising ramp: the bottom-right tap
    cuda_bundle.add_check(bundle, "ramp", ex, [xs], [want], True)
    cuda_bundle.add_check(bundle, "ramp_wrong", ex, [xs], [want + 1], True)
    for w in bench_cuda.select(runner.workloads(True), {"resnet_gap"}) + bench_cuda.select(
            bench_cuda.channel_last_workloads(True), {"nhwc_resnet_maxpool"}):
        cuda_bundle.add_workload(bundle, w)
    bundle.save()
    replay = Path(runner.__file__).with_name("cuda_replay.py")
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1", "PYTHONPATH": ""}
    proc = subprocess.run([sys.executable, "-c", "import sys, runpy; sys.modules['tvm_pool'] = None; "
                           f"sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')",
                           str(replay), str(tmp_path / "b"), str(tmp_path / "out"), "--device", "cpu", "--repeat", "3",
                           "--number", "2"], env=env, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # ramp_wrong fails
    run = json.loads((tmp_path / "out" / "bench_cuda_replay.json").read_text())
    assert [(c["name"], c["ok"]) for c in run["checks"]] == [("ramp", True), ("ramp_wrong", False)]
    assert "18 of 18 values differ" in run["checks"][1]["problems"][0]
    if not has_package("torch"):  # bench/cuda_replay.py's bench_row imports it
        pytest.skip("torch is not installed: the replay's benchmark rows did not run (its checks did, and passed)")
    (row,) = run["rows"]
    assert row["workload"] == "resnet_gap" and {"tvm_pool", "tvm"} <= set(row["ms"]), row["na"]
    (cl,) = run["channel_last_rows"]
    assert {"tvm_pool", bench_cuda.CHANNEL_FIRST} <= set(cl["ms"]), cl["na"]
    result = bench_cuda.replayed(run)
    assert result["checks"] == {"passed": 1, "total": 2, "failed": {"ramp_wrong": run["checks"][1]["problems"]}}
    md = bench_cuda.to_markdown(result)
    assert "GPU checks (the gpu-marked tests' cases, tests/gpu_bundle.py): 1 of 2 passed; failed: ramp_wrong" in md
    assert "| resnet_gap |" in md and "| nhwc_resnet_maxpool |" in md


def test_export_from_the_command_line(tmp_path, capsys):
    """``tvm-pool bench --device cuda --export DIR --arch ARCH``: the bundle's manifest, every
    selected workload with tvm_pool's and stock TVM's modules (here for the CPU: no nvcc run)."""
    assert runner.main(["--device", "cuda", "--export", str(tmp_path), "--arch", "cpu", "--quick",
                        "--only", "resnet_gap"]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    (entry,) = manifest["bench"]
    assert manifest["arch"] == "cpu" and entry["workload"] == "resnet_gap"
    assert set(entry["modules"]) == {"tvm_pool", "tvm"} and all((tmp_path / m).exists() for m in entry["modules"].values())
    assert entry["torch"]["fn"] == "adaptive_avg_pool2d" and entry["input"]["gen"] == "normal"
    assert str(tmp_path / "manifest.json") in capsys.readouterr().out


def test_replayed_report_from_the_command_line(tmp_path):
    """``--device cuda --replayed JSON`` writes the GPU report of a bundle's run, no device needed."""
    run = {"device": "CUDA sm_90", "gpu": {"name": "NVIDIA H100", "arch": "sm_90", "driver": "13.0", "tvm_cuda": "13.1"},
           "rows": [{"workload": "resnet_gap", "dtype": "float32", "min_bytes": 409600, "copy_ms": 0.005,
                     "ms": {"tvm_pool": 0.006, "tvm": 0.007, "torch": 0.012}, "na": {}}],
           "channel_last_rows": [], "checks": [{"name": "a", "ok": True, "problems": []}]}
    (tmp_path / "run.json").write_text(json.dumps(run))
    assert runner.main(["--device", "cuda", "--replayed", str(tmp_path / "run.json"), "--output-dir",
                        str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "bench_cuda.md").read_text()
    assert "GPU checks (the gpu-marked tests' cases, tests/gpu_bundle.py): 1 of 1 passed" in md
    assert "| resnet_gap | float32 | 0.0060 | 0.0070 | 0.0120 |" in md and "back-to-back calls" in md


def test_replay_refuses_an_input_it_cannot_regenerate_and_a_missing_gpu(tmp_path, capsys):
    """The replay regenerates large inputs from their recipe and stops, naming the shape, when
    the sum differs (another numpy stream); without a CUDA device it refuses with status 2."""
    from tvm_pool.bench import cuda_replay

    recipe = {"shape": [2, 3], "dtype": "float32", "gen": "normal", "seed": 0, "sum": 1e9}
    with pytest.raises(SystemExit, match=r"input of shape \[2, 3\] regenerated differently"):
        cuda_replay.make_input(recipe)
    good = dict(recipe, sum=float(np.random.default_rng(0).standard_normal([2, 3]).astype("float32").astype(np.float64).sum()))
    assert cuda_replay.make_input(good).shape == (2, 3)
    if cuda_device_present():
        return
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.json").write_text(json.dumps({"arch": "sm_90", "bench": [], "checks": []}))
    assert cuda_replay.main([str(tmp_path / "b"), str(tmp_path / "out")]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_kernel_bound_workloads_move_50_mb_each():
    """The kernel-bound table (issue 39): every kind of the small table at a size that moves at
    least 50 MB per call, each named kb_..., selected by the kernel_bound group; their PyTorch
    calls exist (Lp as lp_pool2d, adaptive pools as themselves) and bfloat16 inputs are real
    bfloat16."""
    from tvm_pool.bench import workloads as W
    from tvm_pool.bench.peers import torch_spec

    kb = W.kernel_bound_workloads()
    for w in kb:
        x_bytes = int(np.prod(w.shape)) * np.dtype(W.numpy_dtype(w.dtype)).itemsize
        assert x_bytes >= 50e6 or (w.op.startswith("Global") and x_bytes >= 50e6), (w.name, x_bytes)
        assert w.name.startswith("kb_") and w.large
    kinds = {(w.op, w.dtype, w.road, w.indices, w.fused, len(w.shape)) for w in kb}
    assert {("MaxPool", d, "onnx", False, False, 4) for d in ("float32", "float16", "bfloat16", "int8")} <= kinds
    assert {op for op, *_ in kinds} >= {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool", "LpPool",
                                          "adaptive_max_pool2d", "adaptive_avg_pool2d"}
    assert any(w.attrs.get("ceil_mode") and w.shape[-1] % 2 for w in kb)
    assert {w.layout for w in kb if w.road == "nhwc"} == {"NHWC", "NDHWC"}
    assert any(w.indices for w in kb) and any(w.fused for w in kb) and any(len(w.shape) == 5 for w in kb)
    assert bench_cuda.select(kb + W.workloads(True), {"kernel_bound"}) == kb
    lp = next(w for w in kb if w.op == "LpPool")
    assert torch_spec(lp) == {"fn": "lp_pool2d", "args": [2.0], "fused": False,
                              "kwargs": {"kernel_size": [3, 3], "stride": [2, 2], "ceil_mode": False}}
    adaptive = next(w for w in kb if w.op == "adaptive_max_pool2d")
    assert torch_spec(adaptive)["fn"] == "adaptive_max_pool2d"
    assert W.make_input(W.Workload("t", "", "MaxPool", [2, 3], dtype="bfloat16")).dtype.name == "bfloat16"


def test_kernel_bound_table_and_clocks_in_the_report(tmp_path):
    """A replayed run's kernel-bound rows get their own table (with stock TVM, PyTorch eager and
    in a CUDA graph, the copy limit and % of copy), its geometric means and the workloads under
    80% of copy or slower than stock; the small table is labelled launch-bound; the clocks that
    nvidia-smi read head the report."""
    clocks = {"clocks.sm": "1980", "clocks.mem": "2619", "clocks.max.sm": "1980", "clocks.max.mem": "2619",
              "power.draw": "300", "power.limit": "700", "temperature.gpu": "40"}
    kb = {"workload": "kb_max3x3s2", "dtype": "float32", "min_bytes": 128_000_000, "copy_ms": 0.050, "table": "kernel_bound",
          "ms": {"tvm_pool": 0.0625, "tvm": 0.050, "torch": 0.125, "torch_graph": 0.100}, "na": {}}
    small = {"workload": "resnet_gap", "dtype": "float32", "min_bytes": 409600, "copy_ms": 0.005,
             "ms": {"tvm_pool": 0.006, "tvm": 0.007, "torch": 0.012}, "na": {}}
    run = {"device": "CUDA sm_90", "gpu": {"name": "NVIDIA H200", "arch": "sm_90", "driver": "13.0", "tvm_cuda": "13.0",
                                           "clocks_start": clocks, "clocks_end": clocks},
           "rows": [small, kb], "channel_last_rows": [], "checks": []}
    result = bench_cuda.replayed(run)
    assert [r["workload"] for r in result["rows"]] == ["resnet_gap"]
    table = result["kernel_bound"]
    (row,) = table["rows"]
    assert row["pct_copy"] == pytest.approx(80.0) and row["speedup_vs_tvm"] == pytest.approx(0.8)
    assert row["speedup_vs_torch_graph"] == pytest.approx(1.6) and table["geomean_pct_copy"] == pytest.approx(80.0)
    md = bench_cuda.to_markdown(result)
    assert "Clocks before timing: SM 1980 MHz (max 1980), memory 2619 MHz (max 2619), 300 W of 700, 40 C" in md
    assert md.index("Kernel-bound workloads") < md.index("Launch-bound workloads")
    assert "| kb_max3x3s2 | float32 | 0.0625 | 0.0500 | 0.1250 | 0.1000 | - | 128.00 | 2048.0 | 80% |" in md
    assert "Slower than stock TVM: kb_max3x3s2" in md and "Below 80% of copy: none" in md
    if has_package("matplotlib"):  # the report's chart of the kernel-bound rows
        out = tmp_path / "report"
        assert bench_cuda.write_report(result, str(out)) == 0
        assert (out / "bench_cuda.png").stat().st_size > 0 and (out / "bench_cuda.md").read_text() == md


def test_replay_compiles_a_missing_kernel_with_nvcc_directly():
    """A kernel missing from the bundle is compiled on the GPU machine by nvcc itself with TVM's
    flags (``tvm.support.nvcc`` needs TVM's compiler, which the runtime-only TVM there lacks)."""
    import shutil

    from tvm_pool.bench import cuda_replay

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    source = 'extern "C" __global__ void k(float* __restrict__ y) { y[threadIdx.x] = 1.0f; }\n'
    fatbin = cuda_replay.nvcc_fatbin(source, "sm_90")
    assert bytes(fatbin[:4]) == bytes.fromhex("50ed55ba")  # the fatbin magic, little-endian
    assert "--use_fast_math" in cuda_replay.NVCC_FLAGS
    with pytest.raises(RuntimeError, match="nvcc failed"):
        cuda_replay.nvcc_fatbin("this is not CUDA", "sm_90")


def test_a_peer_known_to_crash_the_device_is_not_exported(tmp_path, monkeypatch):
    """cuda_bundle.DEVICE_CRASHES: a peer whose module took the GPU machine's process down is
    left out of a GPU bundle (no module to load there) and its row says why; a CPU bundle
    (the tests' own) still builds it."""
    from tvm_pool.bench import cuda_bundle

    (w,) = [w for w in runner.workloads(quick=True) if w.name == "resnet_gap"]
    monkeypatch.setattr(cuda_bundle, "DEVICE_CRASHES", {("resnet_gap", "tvm"): "segfaulted at its first call"})
    gpu = cuda_bundle.add_workload(cuda_bundle.Bundle(str(tmp_path / "gpu"), "sm_80"), w)
    assert gpu["na"] == {"tvm": "segfaulted at its first call"} and set(gpu["modules"]) == {"tvm_pool"}
    cpu = cuda_bundle.add_workload(cuda_bundle.Bundle(str(tmp_path / "cpu"), "cpu"), w)
    assert set(cpu["modules"]) == {"tvm_pool", "tvm"}
