"""The CPU benchmark's channel-last workloads (``tvm-pool bench --only nhwc``): their twins and
NumPy reference, the peers' models (LiteRT's TFLite model, onnxruntime's contrib ops), the check
every peer passes before it is timed, and the report.

One test runs every peer on every channel-last workload for a few calls: the correctness checks
of a real run, without its timings (which are never asserted).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
pytest.importorskip("torch")  # PyTorch is this file's oracle: skip the file without it
import torch  # noqa: E402
import torch.nn.functional as F

from tvm_pool.bench import channel_last, report, runner
from tvm_pool.bench import workloads as W
from tvm_pool.tflite.formulas import pool_geometry

CL = W.channel_last_workloads(quick=False)


def _cl(name):
    (w,) = [w for w in CL if w.name == name]
    return w


def test_workloads_twins_and_selection():
    main = {w.name for w in runner.workloads(quick=False) + runner.torch_workloads(quick=False)}
    names = [w.name for w in CL]
    assert len(set(names)) == len(names) == 6 and not set(names) & main
    for w in CL:
        twin = W.channel_first_twin(w)
        assert W.is_channel_last(w) and not W.is_channel_last(twin)
        assert twin.shape == [w.shape[0], w.shape[-1], *w.shape[1:-1]] and twin.layout[:2] == "NC"
        x = W.make_input(w)
        assert x.shape == tuple(w.shape) and W.to_channel_first(x).shape == tuple(twin.shape)
        assert W.window(w) == W.window(twin)
    int8 = _cl("nhwc_tflite_avgpool_int8")
    assert int8.attrs["pads"] == pool_geometry("SAME", [56, 56], [3, 3], [2, 2])[0] == [0, 0, 1, 1]
    assert [w.name for w in runner.select(runner.workloads(False) + CL, {"nhwc"})] == names
    assert [w.name for w in runner.select(CL, {"channel_last"})] == names
    assert [w.name for w in runner.select(runner.workloads(False) + CL, {"resnet_gap", "nhwc_gap_b8"})] == \
        ["resnet_gap", "nhwc_gap_b8"]
    assert {"nhwc", "channel_last", *names} <= runner.known_names()


def _small(w, shape):
    return dataclasses.replace(w, shape=shape)


@pytest.mark.parametrize("name,shape", [
    ("nhwc_resnet_maxpool", [2, 9, 8, 3]), ("nhwc_inception_avgpool", [1, 7, 6, 5]), ("nhwc_gap_b8", [3, 4, 5, 2]),
    ("nhwc_video3d_maxpool", [1, 3, 7, 6, 2]), ("nhwc_vgg_maxpool", [1, 6, 4, 3]),
])
def test_reference_is_pytorchs_pool(name, shape):
    """The NumPy reference against PyTorch's channel-first pools (float64: one rounding)."""
    w = _small(_cl(name), shape)
    x = np.random.default_rng(1).standard_normal(shape)
    t = torch.from_numpy(W.to_channel_first(x))
    kernel, strides, pads = W.window(w)
    rank = len(kernel)
    if w.op == "MaxPool":
        expected = getattr(F, f"max_pool{rank}d")(t, kernel, strides, pads[:rank])
    elif w.op == "AveragePool":
        expected = getattr(F, f"avg_pool{rank}d")(t, kernel, strides, pads[:rank], count_include_pad=False)
    else:
        expected = F.adaptive_avg_pool2d(t, 1)
    np.testing.assert_allclose(W.reference(w, x), W.to_channel_last(expected.numpy()), rtol=1e-12)


def test_reference_int8_average_rounds_half_away_from_zero():
    """TFLite's integer average: halves away from zero, the divisor counting data taps only
    (SAME's bottom/right padding is not counted)."""
    w = _small(_cl("nhwc_tflite_avgpool_int8"), [1, 3, 3, 1])
    w = dataclasses.replace(w, attrs=dict(w.attrs, kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]))
    x = np.array([[1, 2, 5], [2, 0, -7], [-3, -2, 6]], np.int8).reshape(1, 3, 3, 1)
    # windows: (1+2+2+0)/4 = 1.25 -> 1, (5-7)/2 = -1, (-3-2)/2 = -2.5 -> -3, 6/1 = 6
    assert W.reference(w, x).ravel().tolist() == [1, -1, -3, 6]
    truncating = dataclasses.replace(w, tflite_padding=None)
    assert W.reference(truncating, x).ravel().tolist() == [1, -1, -2, 6]


def test_check_refuses_a_wrong_result():
    w = _cl("nhwc_inception_avgpool")
    expected = np.linspace(-1, 1, 24, dtype=np.float32).reshape(1, 2, 3, 4)
    ulp = expected.copy()
    ulp.flat[5] = np.nextafter(ulp.flat[5], np.float32(2))
    channel_last.check(ulp, expected, w)  # float32 rounding passes an average
    with pytest.raises(channel_last.NotAvailable, match="1 of 24"):  # a max must be exact
        channel_last.check(ulp, expected, _cl("nhwc_vgg_maxpool"))
    wrong = expected.copy()
    wrong[0, 1, 2, 3] += 0.5
    with pytest.raises(channel_last.NotAvailable, match=r"wrong values \(1 of 24 differ from the reference, by up to 0.5\)"):
        channel_last.check(wrong, expected, w)
    with pytest.raises(channel_last.NotAvailable, match=r"wrong result float32\[1, 3, 2, 4\]"):
        channel_last.check(expected.reshape(1, 3, 2, 4), expected, w)


def test_litert_models_and_onnxruntime_ops():
    """TFLite's SAME/VALID where they say the pads, PADV2 (-inf) where they cannot (the
    ResNet stem's 1/1 pads, SAME's being 0/1), no 3-D builtin; onnxruntime's NHWC contrib ops."""
    assert channel_last.tflite_padding(_cl("nhwc_resnet_maxpool")) == ("VALID", True)
    assert channel_last.tflite_padding(_cl("nhwc_vgg_maxpool")) == ("VALID", False)
    assert channel_last.tflite_padding(_cl("nhwc_inception_avgpool")) == ("SAME", False)
    assert channel_last.tflite_padding(_cl("nhwc_gap_b8")) == ("VALID", False)
    assert channel_last.tflite_padding(_cl("nhwc_tflite_avgpool_int8")) == ("SAME", False)
    counting = _cl("nhwc_inception_avgpool")
    counting = dataclasses.replace(counting, attrs=dict(counting.attrs, count_include_pad=1))
    with pytest.raises(channel_last.NotAvailable, match="SAME or VALID only"):
        channel_last.tflite_padding(counting)
    with pytest.raises(channel_last.NotAvailable, match="no 3-D pooling builtin"):
        channel_last.tflite_model(_cl("nhwc_video3d_maxpool"))
    assert [n.op_type for n in channel_last.ort_model(_cl("nhwc_vgg_maxpool")).graph.node] == ["NhwcMaxPool"]
    (node,) = channel_last.ort_model(_cl("nhwc_tflite_avgpool_int8")).graph.node
    assert node.op_type == "QLinearAveragePool" and node.domain == "com.microsoft"
    with pytest.raises(channel_last.NotAvailable, match="no float NHWC average pool"):
        channel_last.ort_model(_cl("nhwc_gap_b8"))


# Who cannot run which workload, and why (the report's "n/a" cells). Stock TVM's TFLite
# importer truncates the int8 average (no rounding) and onnxruntime's QLinearAveragePool
# rounds some half-way averages the other way: both are checked, found wrong, not timed.
NOT_APPLICABLE = {
    "nhwc_resnet_maxpool": {"onnxruntime": "no float NHWC max pool"},
    "nhwc_vgg_maxpool": {"onnxruntime": "no float NHWC max pool"},
    "nhwc_inception_avgpool": {"onnxruntime": "no float NHWC average pool"},
    "nhwc_gap_b8": {"onnxruntime": "no float NHWC average pool"},
    "nhwc_video3d_maxpool": {"litert": "TFLite has no 3-D pooling builtin", "onnxruntime": "no float NHWC max pool"},
    "nhwc_tflite_avgpool_int8": {"tvm": "wrong values", "onnxruntime": "wrong values",
                                 "torch": "int8 pooling not supported"},
}


def test_every_channel_last_workload_every_peer(no_settle):
    """The real run, a few calls each: every peer that runs a workload passed the check
    against the reference (tvm_pool, its channel-first twin and LiteRT on all that LiteRT
    has), and the row's ratios follow from its times."""
    res = runner.run_threads(1, quick=False, repeat=5, only={"nhwc"})
    assert res["rows"] == [] and res["geomean_speedup"] is None
    cl = res["channel_last"]
    assert [r["workload"] for r in cl["rows"]] == [w.name for w in CL]
    for row in cl["rows"]:
        na = NOT_APPLICABLE[row["workload"]]
        assert set(row["na"]) == set(na), row["na"]
        for peer, reason in na.items():
            assert row["na"][peer].startswith(reason), row["na"]
        assert set(row["ms"]) == set(channel_last.PEERS) - set(na)
        assert row["vs_channel_first"] == pytest.approx(row["ms"]["tvm_pool"] / row["channel_first_ms"])
        assert set(row["first_call_ms"]) == set(row["ms"]) | {channel_last.CHANNEL_FIRST, "copy"}
        assert row["first_call_vs_channel_first"] == pytest.approx(
            row["first_call_ms"]["tvm_pool"] / row["first_call_ms"][channel_last.CHANNEL_FIRST])
        if "litert" in row["ms"]:
            assert row["speedup_litert"] == pytest.approx(row["ms"]["litert"] / row["ms"]["tvm_pool"])
    assert cl["geomean_vs_channel_first"] == pytest.approx(runner.geomean([r["vs_channel_first"] for r in cl["rows"]]))
    assert "| nhwc_gap_b8 | 8x7x7x2048 NHWC | float32 |" in report.channel_last_markdown([res])


def _cl_row(name, ms, channel_first_ms, na=None, first_calls=None):
    samples = {p: [t * 1e-3] * 3 for p, t in ms.items()}
    samples["copy"] = [0.05e-3] * 3
    samples[channel_last.CHANNEL_FIRST] = [channel_first_ms * 1e-3] * 3
    w = _cl(name)
    row = {"workload": name, "shape": w.shape, "layout": w.layout, "dtype": w.dtype, "ms": {}, "na": dict(na or {})}
    firsts = {p: [t * 1e-3 * f for f in (0.5, 1.0, 4.0)] for p, t in (first_calls or {}).items()}
    return runner.summarize_channel_last(row, samples, nbytes=1, compile_s=0.1, first_calls=firsts)


def test_channel_last_report_and_targets(tmp_path):
    rows = [
        _cl_row("nhwc_resnet_maxpool", {"tvm_pool": 0.1, "tvm": 0.3, "litert": 0.2, "torch": 0.4}, 0.095,
                {"onnxruntime": "no float NHWC max pool"},
                first_calls={"tvm_pool": 0.3, channel_last.CHANNEL_FIRST: 0.2, "tvm": 0.5, "no_such_peer": 1.0}),
        _cl_row("nhwc_video3d_maxpool", {"tvm_pool": 0.4, "tvm": 0.5, "torch": 0.6}, 0.25,
                {"litert": "TFLite has no 3-D pooling builtin", "onnxruntime": "no float NHWC max pool"},
                first_calls={"tvm_pool": 1.2, channel_last.CHANNEL_FIRST: 1.0}),
    ]
    # the first calls' medians (0.3 and 0.2 ms), for the runners that were timed
    assert rows[0]["first_call_ms"] == pytest.approx({"tvm_pool": 0.3, channel_last.CHANNEL_FIRST: 0.2, "tvm": 0.5})
    assert rows[0]["first_call_vs_channel_first"] == pytest.approx(1.5)
    cl = channel_last.summary(rows)
    assert cl["max_first_call_vs_channel_first"] == pytest.approx(1.5)
    assert cl["geomean_first_call_vs_channel_first"] == pytest.approx((1.5 * 1.2) ** 0.5)
    assert cl["max_vs_channel_first"] == pytest.approx(1.6) and cl["min_speedup_litert"] == pytest.approx(2.0)
    assert cl["targets_met"] == {"geomean_vs_channel_first": False, "max_vs_channel_first": False,
                                 "geomean_speedup_litert": True, "min_speedup_litert": True}
    res = {"threads": 2, "repeat": 10, "rounds": 5, "machine": {"cpu": "znver4"}, "rows": [], "geomean_speedup": None,
           "channel_last": cl}
    md = report.channel_last_markdown([res])
    table = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines() if line.startswith("| ")]
    assert table[0] == report.CL_COLUMNS
    first = dict(zip(table[0], table[1]))
    assert first["tvm_pool"] == "0.100" and first["onnxruntime"] == "n/a [1]" and first["best peer"] == "litert"
    assert first["vs LiteRT"] == "2.00x" and first["channel-last / channel-first"] == "1.05x"
    video = dict(zip(table[0], table[2]))
    assert video["litert"] == "n/a [2]" and video["onnxruntime"] == "n/a [1]" and video["vs LiteRT"] == "-"
    assert "[1] no float NHWC max pool" in md and "[2] TFLite has no 3-D pooling builtin" in md
    assert "worst workload: **1.60x** (nhwc_video3d_maxpool); target <= 1.30x: **not met**" in md
    assert "lowest workload: **2.00x** (nhwc_resnet_maxpool); target >= 1.00x: met" in md
    assert ("the first call of each turn (the cache as the runner before left it; not a target): "
            "channel-last / channel-first 1.34x geometric mean, worst 1.50x (nhwc_resnet_maxpool)") in md
    # only channel-last rows: channel_last.* written, the main bench.* left alone
    out = report.write([res], str(tmp_path))
    assert out == md and not (tmp_path / "bench.md").exists()
    assert json.loads((tmp_path / "channel_last.json").read_text())[0]["channel_last"]["rows"][0]["workload"] == \
        "nhwc_resnet_maxpool"
    assert (tmp_path / "channel_last.png").stat().st_size > 1000


def test_unknown_only_name_is_refused(capsys):
    assert runner.main(["--only", "nhwc,no_such_workload"]) == 2
    assert "unknown workload(s) no_such_workload" in capsys.readouterr().err


def test_a_peer_missing_or_failing_is_not_applicable(monkeypatch):
    w = _cl("nhwc_vgg_maxpool")
    x = np.zeros(w.shape, np.float32)
    monkeypatch.setitem(channel_last.OPTIONAL_MODULES, "litert", ("tvm_pool_bench_no_such_module",))
    with pytest.raises(channel_last.NotAvailable, match=r"^not installed \(No module named 'tvm_pool_bench_no_such"):
        channel_last.start("litert", w, x, x, threads=1)

    def refuses(w, x, threads):
        raise ValueError("Model provided has model identifier 'xxxx'\nshould be 'TFL3'")

    monkeypatch.setitem(channel_last.OPTIONAL_MODULES, "litert", ())
    monkeypatch.setitem(channel_last.STARTERS, "litert", refuses)
    with pytest.raises(channel_last.NotAvailable, match=r"^failed: should be 'TFL3'$"):
        channel_last.start("litert", w, x, x, threads=1)

    def buggy(w, x, threads):
        return {}["no such key"]

    monkeypatch.setitem(channel_last.STARTERS, "torch", buggy)
    with pytest.raises(KeyError):  # not a runtime's error: a bug, which stops the run
        channel_last.start("torch", w, x, x, threads=1)
