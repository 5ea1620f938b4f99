"""The layers benchmark (``tvm-pool bench --layers``, bench/layers.py and bench/layers_report.py):
tracing finds the pooling calls of modules and of functional code, equal layers from several
models are merged, each kind of layer becomes the right workload, the report sorts and counts,
and the command line reaches it. Nothing here times anything: peers are fakes or start once.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import types

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tvm_pool.bench import layers, layers_report, peers, runner  # noqa: E402
from tvm_pool.bench.workloads import torch_function  # noqa: E402


class Tiny(torch.nn.Module):
    """Pools as modules and as functional calls, one of them calling another (lp_pool2d calls
    avg_pool2d: one layer, not two)."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.MaxPool2d(3, 2, 1)
        self.head = torch.nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        x = self.stem(x)  # 8x16x16 -> 8x8x8
        y = F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)
        z = F.lp_pool2d(y, 2, kernel_size=2)  # -> 8x4x4
        z = F.max_pool2d(z, kernel_size=(2, 1), stride=(2, 1), ceil_mode=True)  # -> 8x2x4
        return self.head(z)


def _traced(model=None, shape=(1, 8, 16, 16)):
    with layers.recorder() as rec, torch.no_grad():
        (model or Tiny())(torch.zeros(shape))
    return rec.calls


def test_tracing_finds_modules_and_functional_calls():
    calls = _traced()
    assert [c["fn"] for c in calls] == ["max_pool2d", "avg_pool2d", "lp_pool2d", "max_pool2d", "adaptive_avg_pool2d"]
    stem, avg, lp, functional_max, head = calls
    assert stem == {"fn": "max_pool2d", "shape": [8, 16, 16], "out_shape": [8, 8, 8], "dtype": "float32",
                    "params": {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1], "dilation": [1, 1],
                               "ceil_mode": False, "return_indices": False}}
    assert avg["params"] == {"kernel_size": [3, 3], "stride": [1, 1], "padding": [1, 1], "ceil_mode": False,
                             "count_include_pad": False, "divisor_override": None}
    assert lp["params"] == {"norm_type": 2.0, "kernel_size": [2, 2], "stride": [2, 2], "ceil_mode": False}
    assert functional_max["params"]["kernel_size"] == [2, 1] and functional_max["params"]["ceil_mode"] is True
    assert head["shape"] == [8, 2, 4] and head["params"] == {"output_size": [1, 1]}
    assert F.max_pool2d.__name__ == "max_pool2d" and not hasattr(F.max_pool2d, "__wrapped__")  # restored


def test_tracing_normalizes_what_calls_leave_out():
    class Odd(torch.nn.Module):
        def forward(self, x):
            a = F.adaptive_max_pool2d(x, (None, 3), return_indices=True)[0]
            b = F.max_pool1d(x.flatten(2), 4)
            return a.sum() + b.sum()

    adaptive, one_d = _traced(Odd(), (1, 2, 6, 9))
    assert adaptive["fn"] == "adaptive_max_pool2d"
    assert adaptive["params"] == {"output_size": [6, 3], "return_indices": True}  # None: the input's size
    assert one_d["shape"] == [2, 54] and one_d["params"]["stride"] == [4]  # stride None: the kernel


def test_trace_a_torchvision_model():
    """squeezenet1_1 at 224x224 on the meta device: three ceil-mode maxima and the head."""
    if importlib.util.find_spec("torchvision") is None:  # importorskip would import it without the workaround
        pytest.skip("torchvision is not installed")
    calls = layers.trace_model("squeezenet1_1")
    assert [layers.layer_name(c) for c in calls] == [
        "max_pool2d_64x111x111_k3s2_ceil", "max_pool2d_128x55x55_k3s2_ceil", "max_pool2d_256x27x27_k3s2_ceil",
        "adaptive_avg_pool2d_1000x13x13_to1"]


def test_merge_names_every_model_of_a_layer():
    a, b = _traced(), _traced(Tiny(), (1, 8, 32, 32))
    merged = layers.merge({"model_a": a + a[:1], "model_b": b[:1] + a[-1:]})
    by_name = {m["name"]: m for m in merged}
    assert len(merged) == len(a) + 1  # b's stem has another shape; its head equals a's
    assert by_name["max_pool2d_8x16x16_k3s2p1"]["models"] == ["model_a"]
    assert by_name["max_pool2d_8x16x16_k3s2p1"]["uses"] == 2
    assert by_name["max_pool2d_8x32x32_k3s2p1"]["models"] == ["model_b"]
    assert by_name["adaptive_avg_pool2d_8x2x4_to1"]["models"] == ["model_a", "model_b"]
    assert len(by_name) == len(merged)


def _layer(fn, shape, **params):
    """A traced layer, as the Recorder writes it, named and with one model."""
    call = layers.normalize(fn, (), params, (1, *shape), (1, *shape))
    call.update(dtype="float32", models=["m"], uses=1)
    call["name"] = layers.layer_name(call)
    return call


@pytest.mark.parametrize("fn, shape, params, op, attrs", [
    ("max_pool2d", [4, 12, 12], dict(kernel_size=3, stride=2, padding=1), "MaxPool",
     dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    # ceil_mode that changes the output (11 -> 5 windows of 3 s2 ... ceil 6 with the overhang)
    ("max_pool2d", [4, 12, 12], dict(kernel_size=3, stride=2, ceil_mode=True), "MaxPool",
     dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    # ceil_mode that changes nothing (GoogLeNet's 3x3 s1 p1): left out
    ("max_pool2d", [4, 7, 7], dict(kernel_size=3, stride=1, padding=1, ceil_mode=True), "MaxPool",
     dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ("max_pool2d", [4, 12, 12], dict(kernel_size=2, dilation=2), "MaxPool",
     dict(kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 2])),
    ("max_pool1d", [4, 30], dict(kernel_size=4), "MaxPool", dict(kernel_shape=[4], strides=[4])),
    ("max_pool3d", [2, 4, 8, 8], dict(kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)), "MaxPool",
     dict(kernel_shape=[1, 3, 3], strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1])),
    ("avg_pool2d", [4, 12, 12], dict(kernel_size=3, stride=1, padding=1), "AveragePool",
     dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("avg_pool2d", [4, 12, 12], dict(kernel_size=3, stride=1, padding=1, count_include_pad=False), "AveragePool",
     dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=0)),
    ("avg_pool2d", [4, 12, 12], dict(kernel_size=2, stride=2), "AveragePool",
     dict(kernel_shape=[2, 2], strides=[2, 2], count_include_pad=1)),
    ("adaptive_avg_pool2d", [4, 7, 7], dict(output_size=1), "GlobalAveragePool", {}),
    ("adaptive_max_pool2d", [4, 7, 7], dict(output_size=(1, 1)), "GlobalMaxPool", {}),
    ("adaptive_avg_pool2d", [4, 12, 8], dict(output_size=(6, 4)), "AveragePool",
     dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("adaptive_avg_pool2d", [4, 7, 7], dict(output_size=7), "AveragePool", dict(kernel_shape=[1, 1], strides=[1, 1])),
    ("adaptive_max_pool2d", [4, 12, 12], dict(output_size=4), "MaxPool", dict(kernel_shape=[3, 3], strides=[3, 3])),
    ("lp_pool2d", [4, 12, 12], dict(norm_type=2, kernel_size=2), "LpPool",
     dict(kernel_shape=[2, 2], strides=[2, 2], p=2)),
    # a ceil-mode average counting its padding: the overhang window divided as PyTorch does
    ("avg_pool2d", [4, 12, 12], dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), "AveragePool",
     dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1)),
    # 5 wide, k2 s2 p1, ceil: PyTorch drops the window that would start in the right padding, and
    # its output is the floor mode's (ONNX's formula would keep it): ceil_mode left out
    ("max_pool2d", [4, 5, 5], dict(kernel_size=2, stride=2, padding=1, ceil_mode=True), "MaxPool",
     dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1])),
])
def test_onnx_workload_of_each_kind(fn, shape, params, op, attrs):
    layer = _layer(fn, shape, **params)
    for batch in (1, 8):
        w = layers.to_workload(layer, batch)
        assert (w.road, w.op, w.attrs, w.shape) == ("onnx", op, attrs, [batch, *shape])
        assert w.name == f"{layer['name']}_b{batch}" and w.source == "m"
        assert w.torch_op == {"fn": fn, "args": [], "kwargs": layer["params"]}
        onnx.checker.check_model(runner.build_model(w))
    assert layers.check([layer]) == []  # onnxruntime against the layer's own PyTorch call


@pytest.mark.parametrize("fn, shape, params, reason", [
    ("adaptive_avg_pool2d", [4, 13, 13], dict(output_size=5), "unequal sizes"),
    ("adaptive_max_pool2d", [4, 13, 13], dict(output_size=6), "unequal sizes"),
    ("max_pool2d", [4, 12, 12], dict(kernel_size=2, return_indices=True), "indices"),
    ("avg_pool2d", [4, 12, 12], dict(kernel_size=3, divisor_override=4), "divisor_override"),
    ("lp_pool2d", [4, 12, 12], dict(norm_type=1.5, kernel_size=2), "fractional p"),
    ("lp_pool2d", [4, 12, 12], dict(norm_type=1, kernel_size=2), "odd"),
    ("lp_pool2d", [4, 11, 11], dict(norm_type=2, kernel_size=2, ceil_mode=True), "ceil_mode"),
])
def test_what_onnx_cannot_say_takes_the_torch_road(fn, shape, params, reason):
    layer = _layer(fn, shape, **params)
    w = layers.to_workload(layer, 8)
    assert w.road == "torch" and w.op == fn and reason in w.road_reason
    assert w.indices == bool(params.get("return_indices"))
    assert "return_indices" not in w.attrs
    x = torch.from_numpy(runner.make_input(w))
    got, want = runner.build_model(w).module()(x), torch_function(w)(x)  # the program is the layer's call
    for g, e in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
        assert torch.equal(g, e) or torch.allclose(g, e, equal_nan=True)  # NaN: a negative mean to the power 1.5


def test_output_sizes_follow_pytorch():
    """The ceil-mode rule the mapping relies on: PyTorch drops a last window that would start in
    the right padding; ONNX's formula does not."""
    for n, k, s, p, ceil in [(5, 2, 2, 1, True), (12, 3, 2, 0, True), (12, 3, 2, 1, False), (7, 3, 1, 1, True),
                             (109, 3, 2, 0, True), (6, 2, 2, 1, True)]:
        out = F.max_pool1d(torch.zeros(1, 1, n), k, s, p, ceil_mode=ceil).shape[-1]
        assert layers._pooled(n, k, s, p, 1, ceil) == out  # pylint: disable=protected-access
    assert layers._onnx_pooled(5, 2, 2, 1, 1, True) == 4  # pylint: disable=protected-access


def test_the_torch_road_checks_an_average_within_rounding(no_settle):
    """tvm_pool on an adaptive average of unequal windows (torch.export): its result differs
    from PyTorch eager's by float rounding only, and it starts."""
    w = layers.to_workload(_layer("adaptive_avg_pool2d", [8, 13, 13], output_size=5), 1)
    program, x = runner.build_model(w), runner.make_input(w)
    run, compile_s = peers.start("tvm_pool", program, x, 1, w)
    assert compile_s > 0 and run()[0].numpy().shape == (1, 8, 5, 5)
    with pytest.raises(peers.NotAvailable, match="ONNX"):
        peers.start("onnxruntime", program, x, 1, w)


def test_the_torch_peer_times_the_layers_own_call():
    w = layers.to_workload(_layer("adaptive_avg_pool2d", [4, 7, 7], output_size=7), 1)
    assert peers.torch_spec(w) == {"fn": "adaptive_avg_pool2d", "args": [], "kwargs": {"output_size": [7, 7]},
                                   "fused": False}
    x = runner.make_input(w)
    call, _ = peers.start("torch", runner.build_model(w), x, 1, w)
    assert np.array_equal(call().numpy(), x)


def _fake_list(tmp_path):
    """A layer list as bench/layers.json holds it: three layers from two models."""
    merged = layers.merge({"model_a": _traced()[:2], "model_b": _traced()[-1:]})
    data = {"torch": "x", "torchvision": "y", "image_size": 224, "image_sizes": {}, "no_pooling": ["model_c"],
            "models": {"model_a": 2, "model_b": 1, "model_c": 0}, "layers": merged}
    path = tmp_path / "layers.json"
    layers.write_layers(data, str(path))
    return str(path), merged


def test_layer_workloads_select_and_quick(tmp_path):
    _, merged = _fake_list(tmp_path)
    ws, skipped = layers.layer_workloads(merged)
    assert [w.name for w in ws] == [f"{m['name']}_b{b}" for m in merged for b in layers.BATCHES] and not skipped
    stem = merged[0]["name"]
    ws, _ = layers.layer_workloads(merged, only={stem, f"{merged[1]['name']}_b8"})
    assert [w.name for w in ws] == [f"{stem}_b1", f"{stem}_b8", f"{merged[1]['name']}_b8"]
    assert layers.known_names(merged) >= {stem, f"{stem}_b1", f"{stem}_b8"}
    assert len(layers.quick_layers(merged, n=2)) == 2


def test_the_committed_layer_list():
    """bench/layers.json: unique names, models named, every layer a workload at both batches."""
    data = layers.load_layers()
    names = [m["name"] for m in data["layers"]]
    assert len(names) == len(set(names)) > 50
    assert all(m["models"] and m["uses"] >= len(m["models"]) for m in data["layers"])
    ws, skipped = layers.layer_workloads(data["layers"])
    assert len(ws) == 2 * len(names) and not skipped
    assert {"vit_b_16", "mnasnet1_0"} <= set(data["no_pooling"]) and "resnet50" in data["models"]
    assert len(layers.quick_layers(data["layers"])) == layers.QUICK_LAYERS


def _row(name, batch, speedup=None, tvm_pool=0.01, na=None, models=("m1",)):
    ms = {"tvm_pool": tvm_pool}
    row = {"workload": f"{name}_b{batch}", "layer": name, "batch": batch, "models": list(models), "ms": ms,
           "na": dict(na or {}), "copy_ms": 0.02, "road": "onnx"}
    if tvm_pool is None:
        del ms["tvm_pool"]
    if speedup is not None:
        ms["onnxruntime"] = tvm_pool * speedup
        row.update(best_peer="onnxruntime", best_peer_ms=ms["onnxruntime"], speedup=speedup,
                   pct_copy=100 * 0.02 / tvm_pool)
    return row


def test_report_sorts_and_counts():
    rows = [_row("a", 1, 2.0), _row("a", 8, 4.0), _row("b", 1, 0.5, models=[f"m{i}" for i in range(5)]),
            _row("b", 8, 1.1), _row("c", 1, tvm_pool=None, na={"tvm_pool": "import: no"}), _row("c", 8, 1.0)]
    s = layers_report.summary(rows)
    assert s["geomean_by_batch"]["1"] == pytest.approx(1.0)  # sqrt(2.0 * 0.5)
    assert s["geomean_by_batch"]["8"] == pytest.approx((4.0 * 1.1 * 1.0) ** (1 / 3))
    assert s["geomean"] == pytest.approx((2.0 * 4.0 * 0.5 * 1.1 * 1.0) ** (1 / 5))
    assert s["below"] == {"1.0": 1, "1.2": 3} and (s["n_cases"], s["n_speedup"]) == (6, 5)
    assert s["below_layers"] == {"1.0": 1, "1.2": 2} and s["n_layers"] == 3
    assert [w for w, _ in s["worst"]] == ["b_b1", "c_b8", "b_b8", "a_b1", "a_b8"]
    assert s["no_speedup"] == [["c_b1", "import: no"]]

    res = {"threads": 2, "repeat": 50, "rounds": 5, "machine": {}, "rows": rows, "summary": s, "layers": 3,
           "skipped": [], "traced": {"layers": 3, "models": 4, "no_pooling": ["vit"], "image_size": 224}}
    md = layers_report.to_markdown([res])
    table = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines() if line.startswith("| ")]
    header, *cells = table
    assert header == layers_report.COLUMNS
    assert [(c[1], c[2]) for c in cells] == [("b", "1"), ("c", "8"), ("b", "8"), ("a", "1"), ("a", "8"), ("c", "1")]
    assert cells[0][3] == "m0, m1, m2 +2" and cells[0][header.index("speedup")] == "0.50x"
    footnote = cells[-1][header.index("tvm_pool")]
    assert footnote.startswith("n/a [") and f"{footnote[4:]} import: no" in md
    assert "batch 1 **1.00x**" in md and "cases: **1** below 1.0x, **3** below 1.2x (of 5)" in md
    assert "layers with a case below: 1 below 1.0x, 2 below 1.2x (of 3)" in md
    assert "timed again" not in md


def test_report_names_a_case_timed_again():
    rows = [_row("a", 1, 2.0), dict(_row("b", 1, 3.0), rerun="the full run's turns stalled")]
    res = {"threads": 2, "repeat": 30, "rounds": 5, "machine": {}, "rows": rows, "summary": layers_report.summary(rows),
           "layers": 2, "skipped": [], "traced": {}}
    md = layers_report.to_markdown([res])
    assert "- timed again in a run of its own: b_b1: the full run's turns stalled" in md.splitlines()
    assert md.count("timed again") == 1


def test_main_with_layers_runs_the_children_and_writes_the_layers_report(monkeypatch, tmp_path):
    assert runner.parse_args(["--layers"]).layers and not runner.parse_args([]).layers
    assert runner.parse_args(["--retrace"]).retrace
    path, merged = _fake_list(tmp_path)
    monkeypatch.setattr(layers, "LAYERS_PATH", path)
    calls = []

    def fake_run(cmd, env, stdout, text, check):
        calls.append(cmd)
        rows = [_row(merged[0]["name"], 1, 1.5), _row(merged[0]["name"], 8, 0.9)]
        res = {"threads": 2, "quick": False, "repeat": 50, "rounds": 5, "machine": {}, "rows": rows, "skipped": [],
               "layers": 1, "traced": {}, "summary": layers_report.summary(rows)}
        return types.SimpleNamespace(returncode=0, stdout="progress\n" + json.dumps(res) + "\n")

    monkeypatch.setattr(runner, "subprocess", types.SimpleNamespace(run=fake_run, PIPE=subprocess.PIPE))
    out = tmp_path / "out"
    assert runner.main(["--layers", "--threads", "2", "--only", merged[0]["name"], "--output-dir", str(out)]) == 0
    assert calls[-1][1:] == ["-m", "tvm_pool.bench", "--child", "--threads", "2", "--repeat", "50", "--layers",
                             "--only", merged[0]["name"]]
    assert runner.main(["--only", "layers", "--threads", "2", "--output-dir", str(out)]) == 0  # the same as --layers
    assert "--layers" in calls[-1] and "--only" not in calls[-1]
    results = json.loads((out / "layers.json").read_text())
    assert (out / "layers.md").read_text() == layers_report.to_markdown(results)
    assert (out / "layers.png").stat().st_size > 1000 and not (out / "bench.json").exists()
    assert runner.main(["--layers", "--only", "resnet_gap"]) == 2  # a workload, not a layer


def test_run_threads_rows_carry_the_layer(monkeypatch, tmp_path, no_settle):
    path, merged = _fake_list(tmp_path)
    for peer in runner.PEERS:
        monkeypatch.setitem(peers.STARTERS, peer, lambda model, x, threads, w=None: ((lambda: None), None))
    res = runner.run_layer_threads(1, quick=False, repeat=5, only={merged[0]["name"]}, path=path)
    assert [(r["layer"], r["batch"]) for r in res["rows"]] == [(merged[0]["name"], 1), (merged[0]["name"], 8)]
    assert all(r["models"] == ["model_a"] and set(r["ms"]) == set(runner.PEERS) for r in res["rows"])
    assert res["summary"]["n_cases"] == 2 and res["traced"]["no_pooling"] == ["model_c"]


def test_the_command_line_reaches_the_layers_benchmark(capsys):
    """``tvm-pool bench --layers`` parses in the benchmark's parser: an unknown layer is refused
    before anything runs, pointing at the layer list."""
    from tvm_pool import cli

    assert cli.main(["bench", "--layers", "--threads", "2", "--only", "no_such_layer_b1"]) == 2
    assert "unknown workload(s) no_such_layer_b1 (see bench/layers.json)" in capsys.readouterr().err


def test_retrace_rewrites_the_layer_list_and_stops(monkeypatch, tmp_path):
    """``--retrace`` alone traces (here: a fake of two models) and writes the list, timing nothing."""
    path = tmp_path / "layers.json"
    monkeypatch.setattr(layers, "LAYERS_PATH", str(path))
    monkeypatch.setattr(layers, "classification_models", lambda: ["model_a", "model_b"])
    monkeypatch.setattr(layers, "trace_model", lambda name: _traced() if name == "model_a" else [])
    monkeypatch.setattr(runner, "subprocess", None)  # no child may start
    assert runner.main(["--retrace"]) == 0
    data = layers.load_layers()
    assert data["no_pooling"] == ["model_b"] and data["models"] == {"model_a": 5, "model_b": 0}
    assert [m["models"] for m in data["layers"]] == [["model_a"]] * 5
