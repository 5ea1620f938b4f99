"""The whole-model benchmark (``tvm-pool bench --models``, bench/models.py and
bench/models_report.py): every peer's output is checked against PyTorch eager before it is
timed, a peer whose output differs is reported and not timed, the row carries tvm_pool's
tuning coverage, the report and chart are written, and the command line reaches it. A tiny CNN
stands in for torchvision's models here (the real ones run under -m slow)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from tvm_pool.bench import models, models_report, runner, timing  # noqa: E402


class TinyCnn(torch.nn.Module):
    """conv -> relu -> max pool 3x3 s2 p1 -> global average -> linear: a classifier's shape."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 3, 2, 1)
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def _tiny(name):
    assert name == "tiny"
    return TinyCnn().eval(), torch.from_numpy(np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32"))


@pytest.fixture
def quick_turns(monkeypatch, no_settle):
    monkeypatch.setattr(models, "ROUNDS", 1)
    monkeypatch.setattr(models, "TURN_SECONDS", 0.0)


def test_every_peer_is_checked_then_timed(quick_turns):
    row = models.run_model("tiny", 1, builder=_tiny)
    ran = set(row["ms"]) | set(row["na"])
    assert ran == set(models.PEERS)
    for peer in ("tvm_pool", "tvm_pool_export", "onnxruntime", "torch", "tvm"):
        assert peer in row["ms"], row["na"].get(peer)
        assert row["error"][peer] <= models.RTOL and row["ms"][peer] > 0
    assert row["tvm_pool_vs_onnxruntime"] == pytest.approx(row["ms"]["tvm_pool"] / row["ms"]["onnxruntime"])
    assert {"tvm_pool", "tvm_pool_export"} <= set(row["compile_s"])
    cov = row["coverage"]["tvm_pool"]
    assert cov["kernels"] >= 1 and 0 <= cov["untuned"] <= cov["kernels"] and 0.0 <= cov["untuned_share"] <= 1.0


def test_a_peer_with_wrong_outputs_is_not_timed(monkeypatch, quick_turns):
    real = models.start

    def start(peer, subject, threads):
        run, output, compile_s = real(peer, subject, threads)
        return (run, (lambda: output() + 1.0), compile_s) if peer == "onnxruntime" else (run, output, compile_s)

    monkeypatch.setattr(models, "start", start)
    row = models.run_model("tiny", 1, peers=("tvm_pool", "onnxruntime"), builder=_tiny)
    assert "onnxruntime" not in row["ms"] and "tvm_pool" in row["ms"]
    assert row["na"]["onnxruntime"].startswith("wrong outputs (relative error")
    assert "tvm_pool_vs_onnxruntime" not in row


def test_a_slow_peer_gets_one_call_a_turn_and_one_warm_up(monkeypatch, no_settle):
    """A peer slower than a turn: a warm-up and MIN_CALLS timed calls in the first round (it is not
    known to be slow yet), then one timed call a round and no warm-up; a fast one: a warm-up and
    at least MIN_CALLS a round."""
    monkeypatch.setattr(models, "ROUNDS", 3)
    monkeypatch.setattr(models, "TURN_SECONDS", 0.01)
    calls = {"slow": 0, "fast": 0}

    def runner(name, secs):
        def run():
            calls[name] += 1
            time.sleep(secs)
        return run

    samples = models.take_turns({"slow": runner("slow", 0.02), "fast": runner("fast", 0.0)}, {})
    assert len(samples["slow"]) == models.MIN_CALLS + 2 and calls["slow"] == len(samples["slow"]) + 1
    assert len(samples["fast"]) >= 3 * models.MIN_CALLS and calls["fast"] == len(samples["fast"]) + 3


def test_the_model_input_is_one_aligned_array_that_every_peer_reads():
    """build() makes the input aligned, so that the TVM peers take its memory through DLPack
    (timing.tvm_input) instead of a copy in TVM's own: the array the other peers read."""
    _, x = models.build("squeezenet1_1")
    xn = x.numpy()
    assert timing.is_aligned(xn)
    assert timing.tvm_input(xn).data_ptr() == xn.ctypes.data


def test_relative_error():
    assert models.relative_error([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert models.relative_error([1.0, 2.5], [1.0, 2.0]) == pytest.approx(0.25)
    assert models.relative_error([1.0], [1.0, 2.0]) == float("inf")


def _row(name, ms, na=None, untuned=0, elsewhere=0):
    r = {"model": name, "input": [1, 3, 224, 224], "ms": ms, "na": na or {}, "error": {}, "compile_s": {},
         "coverage": {"tvm_pool": {"kernels": 20, "untuned": untuned, "untuned_share": untuned / 20,
                                   "elsewhere": elsewhere, "elsewhere_cpus": ["znver4"] if elsewhere else []},
                      "tvm_pool_export": {"error": "export failed"}}}
    for peer in ("tvm_pool", "tvm_pool_export"):
        if peer in ms and "onnxruntime" in ms:
            r[f"{peer}_vs_onnxruntime"] = ms[peer] / ms["onnxruntime"]
    return r


def _result(threads=2):
    rows = [_row("a", {"tvm_pool": 10.0, "onnxruntime": 20.0, "torch": 30.0, "tvm": 900.0}, elsewhere=20),
            _row("b", {"tvm_pool": 30.0, "tvm_pool_export": 15.0, "onnxruntime": 10.0},
                 na={"openvino": "not installed (No module named 'openvino')"}, untuned=5)]
    summary = {p: {"geomean_vs_reference": None, "worst": None, "n": 0} for p in ("tvm_pool", "tvm_pool_export")}
    summary["tvm_pool"] = {"geomean_vs_reference": (0.5 * 3.0) ** 0.5, "worst": 3.0, "n": 2}
    return {"threads": threads, "rows": rows, "summary": summary, "reference": "onnxruntime", "rtol": 1e-4,
            "rounds": 3, "turn_seconds": 0.3}


def test_report_table_notes_and_chart(tmp_path):
    md = models_report.write([_result(2), _result(1)], str(tmp_path))
    assert "## 2 thread(s)" in md and "## 1 thread(s)" in md
    assert "tvm_pool (ONNX): **1.22x** onnxruntime's latency on the geometric mean over 2 model(s), worst 3.00x" in md
    lines = [l for l in md.splitlines() if l.startswith("| b |")]
    cells = [c.strip() for c in lines[0].strip("|").split("|")]
    assert cells[1:4] == ["30.00", "15.00", "10.00"] and cells[4].startswith("n/a [")
    assert cells[-4:] == ["3.00x", "1.50x", "5/20 untuned (25% of FLOPs)", "n/a"]
    row_a = [l for l in md.splitlines() if l.startswith("| a |")][0]
    assert "all 20 tuned, 20 on znver4" in row_a  # records measured on another CPU model
    assert "b, OpenVINO: not installed" in md
    assert json.loads((tmp_path / "models.json").read_text())[0]["threads"] == 2
    assert (tmp_path / "models.png").stat().st_size > 1000


def test_main_with_models_runs_a_child_per_thread_count(monkeypatch, tmp_path):
    calls = []

    def fake_run(cmd, env, stdout, text, check):
        calls.append((cmd, env["TVM_NUM_THREADS"]))
        return types.SimpleNamespace(returncode=0, stdout="progress\n" + json.dumps(_result(int(env["TVM_NUM_THREADS"]))))

    monkeypatch.setattr(runner, "subprocess", types.SimpleNamespace(run=fake_run, PIPE=subprocess.PIPE))
    assert runner.main(["--models", "--only", "resnet18", "--output-dir", str(tmp_path)]) == 0
    assert [c[0][1:] for c in calls] == [["-m", "tvm_pool.bench", "--child", "--threads", t, "--models", "--only",
                                          "resnet18"] for t in ("2", "1")]
    assert [c[1] for c in calls] == ["2", "1"] and (tmp_path / "models.md").exists()


def test_unknown_model_is_refused(capsys):
    from tvm_pool import cli

    assert cli.main(["bench", "--models", "--only", "resnet7"]) == 2
    assert "unknown model(s) resnet7; allowed: resnet18, resnet50" in capsys.readouterr().err
    assert runner.main(["--models", "--device", "cuda"]) == 2
    assert models.unknown({"resnet101", "vgg16"}) == [] and models.unknown({"resnet7"}) == ["resnet7"]


@pytest.mark.slow
def test_a_torchvision_model_end_to_end(tmp_path):
    """The real thing on the smallest classic CNN, one thread: every peer that is installed
    runs and agrees with PyTorch eager."""
    proc = subprocess.run([sys.executable, "-m", "tvm_pool.bench", "--models", "--only", "squeezenet1_1", "--threads",
                           "1", "--output-dir", str(tmp_path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (res,) = json.loads((tmp_path / "models.json").read_text())
    row = res["rows"][0]
    assert {"tvm_pool", "tvm_pool_export", "onnxruntime", "torch", "tvm"} <= set(row["ms"]), row["na"]
