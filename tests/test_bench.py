"""The benchmark runner: every peer runs one small workload, rows and reports are well formed.

Timings themselves are the benchmark's business (``tvm-pool bench``); this only keeps the
runner working.
"""

from __future__ import annotations

import onnx
import pytest

from tvm_pool.bench import runner


def test_every_workload_builds_a_valid_model():
    for w in runner.workloads(quick=False):
        model = runner.build_model(w)
        onnx.checker.check_model(model)
        assert runner.make_input(w).shape == tuple(w.shape)
    fused = [w for w in runner.workloads(quick=False) if w.fused]
    assert fused and [n.op_type for n in runner.build_model(fused[0]).graph.node] == ["Relu", "MaxPool", "Add"]


def test_one_workload_every_peer(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "_settle", lambda: None)
    res = runner.run_threads(1, quick=True, repeat=5, only={"resnet_gap"})
    (row,) = res["rows"]
    assert set(row["ms"]) == set(runner.PEERS), row["na"]
    assert all(t > 0 for t in row["ms"].values())
    assert row["copy_ms"] > 0 and row["speedup"] > 0 and row["best_peer"] != "tvm_pool"
    assert res["geomean_speedup"] == pytest.approx(row["speedup"])
    md = runner.to_markdown([res])
    assert "| resnet_gap |" in md and "geomean speedup" in md
    runner.plot([res], str(tmp_path / "bench.png"))
    assert (tmp_path / "bench.png").stat().st_size > 1000
