"""The ARM table's operation floor (``bench/arm_floor.py``): its counts by hand for the forms the
benchmark's workloads take, and the floor column, the gap notes and ``--report-only`` of
``bench/arm_instructions.py``."""

from __future__ import annotations

import json

import pytest

from tvm_pool.bench import arm_floor, arm_instructions
from tvm_pool.bench.workloads import Workload, workloads


def _w(name):
    return next(w for w in workloads(False) if w.name == name)


def test_separable_stride_2_max_counted_by_hand():
    """3x3 s2 p1 max over 1x64x112x112: the column pass over 56 rows of the 113 columns the row
    pass reads (2 maxima per 4 lanes), stored and loaded; the row pass (2 maxima per output
    vector, its third tap one shifted vector); the data loaded and the output stored once, 32
    bytes an instruction; and the call."""
    f = arm_floor.floor(_w("resnet_maxpool"))
    column, out = 64 * 56 * 113, 64 * 56 * 56
    assert f.form == "passes"
    assert f.arithmetic == pytest.approx(2 * column / 4 + 2 * out / 4)
    assert f.loads == pytest.approx(64 * 112 * 112 * 4 / 32 + column * 4 / 32 + out / 4)
    assert f.stores == pytest.approx(out * 4 / 32 + column * 4 / 32)
    assert f.total == pytest.approx(f.loads + f.arithmetic + f.stores + arm_floor.CALL)


def test_channel_last_taps_need_no_shifted_vectors():
    first, last = arm_floor.floor(_w("resnet_maxpool")), arm_floor.floor(_w("resnet_maxpool"), "channel_last")
    assert first.loads - last.loads == pytest.approx(64 * 56 * 56 / 4)
    assert first.arithmetic == last.arithmetic


@pytest.mark.parametrize("name, form", [
    ("vgg_maxpool", "all taps"), ("maxpool3d_k2", "all taps"), ("audio1d_maxpool", "all taps"),
    ("resnet_gap", "global"), ("inception_v3_head", "global"), ("longwin_max1d", "doubling"),
    ("longwin_avg1d", "block sums"), ("inception_ceil", "passes"), ("video3d_maxpool", "passes"),
    ("maxpool_indices", "value and offset passes"),
])
def test_forms(name, form):
    assert arm_floor.floor(_w(name)).form == form


def test_global_average_and_lanes_by_dtype():
    """A 7x7 global average: one add per input vector, two pairwise adds per plane (4 lanes) and
    the division per output vector; int8 counts 16 lanes, float16 8 (int16 keys) and its keys."""
    f = arm_floor.floor(_w("resnet18_gap"))
    assert f.arithmetic == pytest.approx(512 * 49 / 4 + 512 * 2 + 512 / 4)
    i8 = Workload("i8", "", "MaxPool", [1, 16, 8, 8], dict(kernel_shape=[2, 2], strides=[2, 2]), dtype="int8")
    f16 = Workload("f16", "", "MaxPool", [1, 16, 8, 8], dict(kernel_shape=[2, 2], strides=[2, 2]), dtype="float16")
    assert arm_floor.floor(i8).arithmetic == pytest.approx(3 * 16 * 16 / 16)
    assert arm_floor.floor(f16).arithmetic == pytest.approx(3 * 16 * 16 / 8 + 3 * (16 * 64 / 8 + 16 * 16 / 8))


def test_ceil_mode_output_size():
    """ceil mode counts the last, partial window (112 -> 56 with 3x3 s2 and no padding)."""
    f = arm_floor.floor(_w("inception_ceil"))
    assert f.stores == pytest.approx(64 * 56 * 56 * 4 / 32 + 64 * 56 * 113 * 4 / 32)


def _rows():
    rows = []
    for name, count in (("resnet_maxpool", 0.77e6), ("maxpool_indices", 9.5e6), ("longwin_avg1d", 1.8e6)):
        rows.append({"workload": name, "base": name, "layout": "channel_first", "dtype": "float32", "tvm_pool": count,
                     "tvm": 1e7, "lower_bound": 2.5e5, "ratio": count / 1e7, "vs_lower_bound": count / 2.5e5,
                     "outputs": 200704, "tvm_pool_match": True})
    return rows


def test_floor_column_and_gap_notes(monkeypatch):
    monkeypatch.delitem(arm_floor.GAPS, "longwin_avg1d")  # a row above its floor with no note yet
    rows = _rows()
    arm_instructions.add_floors(rows)
    by = {r["workload"]: r for r in rows}
    assert by["resnet_maxpool"]["vs_floor"] < arm_floor.EXPLAIN_ABOVE and "floor_gap" not in by["resnet_maxpool"]
    assert by["maxpool_indices"]["floor_gap"] == arm_floor.GAPS["maxpool_indices"]
    assert by["longwin_avg1d"]["floor_gap"] == "not analysed yet: on the list"
    summary = {"geomean_ratio": 0.1, "n_ratio": 3, "below_stock": 3, "geomean_vs_bound": 4.0, "channel_last": {},
               "machine": "x86_64 host, 2 cores", "qemu": "qemu-aarch64 version 7.2"}
    md = arm_instructions.to_markdown(rows, summary)
    assert "| resnet_maxpool | float32 | 0.770 | 10.000 | 0.250 | 0.587 (passes) |" in md
    assert "Within 1.5x of the operation floor: 1 of 3 rows." in md
    assert f"- maxpool_indices ({by['maxpool_indices']['vs_floor']:.2f}x): {arm_floor.GAPS['maxpool_indices']}" in md


def test_report_only_adds_floors_to_a_results_file(tmp_path, capsys):
    path = tmp_path / "arm.json"
    summary = {"geomean_ratio": 0.1, "n_ratio": 3, "below_stock": 3, "geomean_vs_bound": 4.0, "channel_last": {},
               "machine": "x86_64 host, 2 cores", "qemu": "qemu-aarch64 version 7.2"}
    path.write_text(json.dumps({"summary": summary, "rows": _rows()}))
    assert arm_instructions.main(["--report-only", str(path)]) == 0
    assert all(r["floor"] > arm_floor.CALL for r in json.loads(path.read_text())["rows"])
    assert "operation floor M (form)" in (tmp_path / "arm.md").read_text()
    assert "Within 1.5x" in capsys.readouterr().out
