"""The CPU benchmark (``tvm-pool bench``): its workloads, how it times (peers taking turns,
medians of the recorded calls, the copy limit, thread settings), what it does with a peer that
cannot run, and what its report says.

Timings themselves are the benchmark's business; here the peers run one small workload for a
few calls, and everything else runs on fakes whose times are known.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import types

import numpy as np
import onnx
import pytest

from tvm_pool.bench import peers, report, runner, timing, workloads
from tvm_pool.bench.workloads import QUICK
from tvm_pool.thread_pool import BIND_THREADS_VARIABLE

from helpers import needs_package

# The benchmark times its copy limit with torch (bench/timing.py copy_runner), and torch is a peer.
needs_torch = needs_package("torch", "the benchmark's copy limit and its torch peer")


def _workload(name):
    (w,) = [w for w in runner.workloads(quick=False) if w.name == name]
    return w


def test_every_workload_builds_a_valid_model():
    full = runner.workloads(quick=False)
    for w in full:
        model = runner.build_model(w)
        onnx.checker.check_model(model)
        assert runner.make_input(w).shape == tuple(w.shape)
    assert len({w.name for w in full}) == len(full)
    assert [w.name for w in runner.workloads(quick=True)] == [w.name for w in full if w.name in QUICK]
    fused = [w for w in full if w.fused]
    assert fused and [n.op_type for n in runner.build_model(fused[0]).graph.node] == ["Relu", "MaxPool", "Add"]


def test_out_bytes_counts_every_output():
    """The bytes a call writes: the pooled output and, for MaxPool with Indices, its int64 indices."""
    gap = _workload("resnet_gap")  # [1, 2048, 7, 7] -> [1, 2048, 1, 1] float32
    assert runner.out_bytes(runner.build_model(gap)) == 2048 * 4
    with_indices = _workload("maxpool_indices")  # [1, 64, 112, 112], 3x3 s2 p1 -> [1, 64, 56, 56]
    assert runner.out_bytes(runner.build_model(with_indices)) == 64 * 56 * 56 * (4 + 8)


@needs_torch
def test_copy_limit_moves_the_workloads_bytes():
    """The copy limit copies n bytes to n bytes, reading and writing as much as the workload."""
    assert timing.copy_size(1000, 200) == 600
    assert timing.copy_size(10, 10) == 64  # at least a cache line
    dst = runner.copy_runner(1000, 200, threads=1)()
    assert dst.numel() == 600 and bool((dst == 1).all())


def test_every_peer_reads_the_same_aligned_input_and_tvm_takes_it_without_a_copy():
    """The TVM peers read the input array itself (DLPack), as PyTorch, onnxruntime and OpenVINO
    do, not a copy in TVM's own memory (which gets no huge pages: timing.INPUT_ALIGNMENT)."""
    w = next(w for w in workloads.workloads(quick=True) if w.dtype == "float32")
    x = workloads.make_input(w)
    assert x.ctypes.data % timing.INPUT_ALIGNMENT == 0 and x.flags.c_contiguous
    t = timing.tvm_input(x)
    assert t.data_ptr() == x.ctypes.data  # the same memory
    np.testing.assert_array_equal(t.numpy(), x)
    odd = np.zeros(1001, "float32")[1:]  # 4 bytes past an aligned start at best
    a = timing.aligned(odd)
    assert a.ctypes.data % timing.INPUT_ALIGNMENT == 0 and a.shape == odd.shape
    np.testing.assert_array_equal(a, odd)
    np.testing.assert_array_equal(timing.tvm_input(odd).numpy(), odd)  # a copy, same values


def test_sample_times_exclude_warmup_and_include_sync():
    now = [0.0]
    # warmup calls take 1 s each: counting any of them would show
    durations = iter([1.0, 1.0, 0.001, 0.005, 0.002, 0.003, 0.050])

    def call():
        now[0] += next(durations)

    def sync():
        now[0] += 0.0001  # the device finishing: inside the call's time

    times = timing.sample_times(call, repeat=5, warmup=2, sync=sync, clock=lambda: now[0])
    assert times == pytest.approx([0.0011, 0.0051, 0.0021, 0.0031, 0.0501])
    assert timing.median_ms(times) == pytest.approx(3.1)


def test_sample_times_warm_up_for_a_while():
    """A warm-up of at least ``warmup`` calls and ``warmup_s`` seconds: a runner whose first
    calls are slow (its data coming back into the cache) is timed once it has settled."""
    now = [0.0]
    durations = iter([0.004] * 3 + [0.001] * 20)

    def call():
        now[0] += next(durations)

    times = timing.sample_times(call, repeat=3, warmup=2, warmup_s=0.0145, clock=lambda: now[0])
    assert times == pytest.approx([0.001] * 3)
    assert len(list(durations)) == 20 - 3 - 3  # 0.012 s after three calls, 0.015 s after six


def test_peers_take_turns(no_settle):
    """ROUNDS rounds, each running every runner for repeat/ROUNDS calls in turn after its
    warm-up (WARMUP_CALLS calls, the first of them recorded as the turn's first call); a runner
    failing with its runtime's error is dropped with the reason, and the others go on."""
    log = []
    state = {"b_calls": 0}
    per_round = 10 // timing.ROUNDS
    turn = timing.WARMUP_CALLS + per_round

    def b():
        state["b_calls"] += 1
        log.append("b")
        if state["b_calls"] > turn:  # the second round
            raise RuntimeError("kernel crashed\nsecond line")

    runners = {"a": lambda: log.append("a"), "b": b}
    na, first_calls = {}, {}
    samples = timing.take_turns(runners, {"a": (RuntimeError,), "b": (RuntimeError,)}, repeat=10, na=na,
                                first_calls=first_calls)
    expected = ["a"] * turn + ["b"] * turn + ["a"] * turn + ["b"] + ["a"] * turn * (timing.ROUNDS - 2)
    assert log == expected
    assert len(samples["a"]) == timing.ROUNDS * per_round and "b" not in samples
    assert na == {"b": "failed: second line"}
    assert len(first_calls["a"]) == timing.ROUNDS and len(first_calls["b"]) == 1


def test_take_turns_lets_a_bug_through(no_settle):
    """Only a runtime's own errors are recorded; anything else is a bug and stops the run."""
    with pytest.raises(ZeroDivisionError):
        timing.take_turns({"a": lambda: 1 / 0}, {"a": (RuntimeError,)}, repeat=5, na={})


def _samples(ms_by_peer: dict) -> dict:
    """Seconds per call for each peer, with the given medians and spread around them."""
    return {p: [m * 1e-3 * f for f in (0.5, 1.0, 3.0)] for p, m in ms_by_peer.items()}


def test_summarize_medians_and_ratios():
    samples = {"tvm_pool": [0.003, 0.001, 0.002, 0.009], "tvm": [0.010, 0.004, 0.006],
               "onnxruntime": [0.005, 0.003, 0.100], "copy": [0.001, 0.0015, 0.002]}
    row = runner.summarize({"ms": {}, "na": {"torch": "x", "openvino": "y"}}, samples, nbytes=1234, compile_s=0.5)
    assert row["ms"] == pytest.approx({p: statistics.median(samples[p]) * 1e3 for p in ("tvm_pool", "tvm", "onnxruntime")})
    assert row["ms"]["tvm_pool"] == pytest.approx(2.5)  # median of an even count: the mean of the middle two
    assert row["copy_ms"] == pytest.approx(1.5) and row["bytes"] == 1234 and row["compile_s"] == 0.5
    assert row["best_peer"] == "onnxruntime" and row["best_peer_ms"] == pytest.approx(5.0)
    assert row["speedup"] == pytest.approx(5.0 / 2.5) and row["pct_copy"] == pytest.approx(100 * 1.5 / 2.5)


def _table(md: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines() if line.startswith("| ")]


def test_report_lists_every_workload_and_peer_with_the_recorded_ratios():
    rows = [
        runner.summarize({"workload": "resnet_maxpool", "dtype": "float32", "ms": {}, "na": {}},
                         _samples({"tvm_pool": 0.032, "tvm": 0.184, "onnxruntime": 0.091, "torch": 3.2, "openvino": 0.41,
                                   "copy": 0.082}), nbytes=1, compile_s=0.88),
        runner.summarize({"workload": "maxpool_int8", "dtype": "int8", "ms": {}, "na": {"torch": "int8 pooling not supported"}},
                         _samples({"tvm_pool": 0.014, "tvm": 0.12, "onnxruntime": 2.05, "openvino": 0.32, "copy": 0.023}),
                         nbytes=1, compile_s=0.11),
    ]
    res = {"threads": 2, "repeat": 50, "rounds": 5, "machine": {"cpu": "znver4"}, "rows": rows,
           "geomean_speedup": runner.geomean([r["speedup"] for r in rows])}
    md = runner.to_markdown([res])
    header, *cells = _table(md)
    assert header == ["workload", "dtype", *runner.PEERS, "best peer", "speedup", "copy limit ms", "% of copy", "compile s"]
    assert [c[0] for c in cells] == ["resnet_maxpool", "maxpool_int8"]
    for row, line in zip(rows, cells):
        by_col = dict(zip(header, line))
        for p in runner.PEERS:
            assert by_col[p] == (f"{row['ms'][p]:.3f}" if p in row["ms"] else f"n/a ({row['na'][p]})")
        ours, best = row["ms"]["tvm_pool"], row["ms"][by_col["best peer"]]
        assert by_col["best peer"] == min((p for p in row["ms"] if p != "tvm_pool"), key=row["ms"].get)
        assert by_col["speedup"] == f"{best / ours:.2f}x"
        assert by_col["% of copy"] == f"{100 * row['copy_ms'] / ours:.0f}%"
        assert by_col["copy limit ms"] == f"{row['copy_ms']:.3f}"
    assert by_col["torch"] == "n/a (int8 pooling not supported)"
    assert "## 2 threads" in md and f"**{np.sqrt(rows[0]['speedup'] * rows[1]['speedup']):.2f}x**" in md


def _fake_starters(monkeypatch, **overrides):
    def fine(model, x, threads, w=None):
        return (lambda: None), None

    for peer in runner.PEERS:
        monkeypatch.setitem(peers.STARTERS, peer, overrides.get(peer, fine))


@needs_torch
def test_a_peer_that_cannot_run_is_recorded_and_the_rest_run(monkeypatch, no_settle, capsys):
    def tvm_refuses(model, x, threads, w=None):
        raise peers.NotAvailable("Missing outputs during conversion")

    def ort_fails(model, x, threads, w=None):
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : session refused")

    def torch_crashes_later(model, x, threads, w=None):
        def call():
            raise RuntimeError("kernel crashed")
        return call, None

    def tvm_pool_ok(model, x, threads, w=None):
        return (lambda: None), 0.25

    _fake_starters(monkeypatch, tvm=tvm_refuses, onnxruntime=ort_fails, torch=torch_crashes_later, tvm_pool=tvm_pool_ok)
    monkeypatch.setitem(peers.OPTIONAL_MODULES, "openvino", "tvm_pool_bench_no_such_module")
    row = runner.run_workload(_workload("resnet_gap"), threads=1, repeat=5)
    assert set(row["ms"]) == {"tvm_pool"} and row["compile_s"] == 0.25
    assert row["na"]["tvm"] == "Missing outputs during conversion"
    assert row["na"]["onnxruntime"] == "failed: [ONNXRuntimeError] : 1 : FAIL : session refused"
    assert row["na"]["torch"] == "failed: kernel crashed"
    assert row["na"]["openvino"].startswith("not installed (No module named 'tvm_pool_bench_no_such_module'")
    assert "best_peer" not in row and "speedup" not in row
    assert row["bytes"] == 2048 * 7 * 7 * 4 + 2048 * 4  # input read + output written, from the shape
    assert "[1t] resnet_gap: tvm_pool" in capsys.readouterr().err


@needs_torch
def test_a_bug_in_a_peer_stops_the_benchmark(monkeypatch, no_settle):
    def buggy(model, x, threads, w=None):
        return {}["no such key"]

    _fake_starters(monkeypatch, torch=buggy)
    with pytest.raises(KeyError):
        runner.run_workload(_workload("resnet_gap"), threads=1, repeat=5)


def test_child_env_thread_settings():
    env = timing.child_env(3, environ={"PATH": "/bin"})
    assert env == {"PATH": "/bin", "TVM_NUM_THREADS": "3", "OMP_NUM_THREADS": "3", "OMP_WAIT_POLICY": "PASSIVE",
                   BIND_THREADS_VARIABLE: "0"}
    assert timing.child_env(1, environ={BIND_THREADS_VARIABLE: "1"})[BIND_THREADS_VARIABLE] == "1"  # the user's choice stays


def test_main_runs_one_child_per_thread_count_and_writes_the_report(monkeypatch, tmp_path):
    assert runner.parse_args([]).threads == "2,1" and runner.parse_args([]).output_dir == runner.RESULTS_DIR
    calls = []

    def fake_run(cmd, env, stdout, text, check):
        calls.append((cmd, env["TVM_NUM_THREADS"]))
        t = int(cmd[cmd.index("--threads") + 1])
        res = {"threads": t, "quick": True, "repeat": 15, "rounds": 5, "machine": {}, "geomean_speedup": 2.0,
               "rows": [{"workload": "resnet_gap", "dtype": "float32", "ms": {"tvm_pool": 0.01, "tvm": 0.02}, "na": {},
                         "copy_ms": 0.02, "best_peer": "tvm", "speedup": 2.0, "pct_copy": 200.0, "compile_s": 0.1}]}
        return types.SimpleNamespace(returncode=0, stdout="progress\n" + json.dumps(res) + "\n")

    monkeypatch.setattr(runner, "subprocess", types.SimpleNamespace(run=fake_run, PIPE=subprocess.PIPE))
    assert runner.main(["--threads", "2,1", "--quick", "--only", "resnet_gap", "--output-dir", str(tmp_path)]) == 0
    assert [t for _, t in calls] == ["2", "1"]
    assert calls[0][0][1:] == ["-m", "tvm_pool.bench", "--child", "--threads", "2", "--repeat", "15", "--quick",
                               "--only", "resnet_gap"]
    results = json.loads((tmp_path / "bench.json").read_text())
    assert [r["threads"] for r in results] == [2, 1]
    assert (tmp_path / "bench.md").read_text() == report.to_markdown(results)
    assert (tmp_path / "bench.png").stat().st_size > 1000


@needs_torch
def test_one_workload_every_peer(no_settle):
    """The real peers on one small workload: all of them run, and the row's figures follow
    from its times."""
    res = runner.run_threads(1, quick=True, repeat=5, only={"resnet_gap"})
    (row,) = res["rows"]
    assert set(row["ms"]) == set(runner.PEERS), row["na"]
    assert row["bytes"] == 2048 * 7 * 7 * 4 + 2048 * 4
    others = {p: t for p, t in row["ms"].items() if p != "tvm_pool"}
    assert row["best_peer"] == min(others, key=others.get)
    assert row["speedup"] == pytest.approx(others[row["best_peer"]] / row["ms"]["tvm_pool"])
    assert row["pct_copy"] == pytest.approx(100 * row["copy_ms"] / row["ms"]["tvm_pool"])
    assert res["geomean_speedup"] == pytest.approx(row["speedup"]) and res["rounds"] == timing.ROUNDS
    assert "| resnet_gap | float32 |" in runner.to_markdown([res])


def test_arm_markdown_without_a_stock_build():
    """`arm_instructions --only maxpool_indices` (no workload stock TVM builds) still reports."""
    from tvm_pool.bench import arm_instructions

    row = {"workload": "maxpool_indices", "base": "maxpool_indices", "layout": "channel_first", "dtype": "float32",
           "tvm_pool": 9.5e6, "tvm": None, "tvm_error": "import fails", "lower_bound": 3.5e5, "ratio": None,
           "vs_lower_bound": 27.0, "outputs": 200704, "tvm_pool_match": True}
    summary = {"geomean_ratio": None, "n_ratio": 0, "below_stock": 0, "geomean_vs_bound": 27.0, "channel_last": {},
               "machine": "x86_64 host, 2 cores", "qemu": "qemu-aarch64 version 7.2"}
    md = arm_instructions.to_markdown([row], summary)
    assert "| maxpool_indices | float32 | 9.500 |" in md and "stock TVM builds none of these workloads" in md
