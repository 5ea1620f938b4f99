"""SAME padding that the formula makes negative (a kernel shorter than the stride):
docs/conformance.md row 4.

total = (ceil(in / s) - 1) * s + dilated_kernel - in goes negative, e.g. in 9, s 3, k 1: -2.
tvm_pool uses it as the ONNX text writes it: split equally, the odd one at the end for
SAME_UPPER and at the beginning for SAME_LOWER (begin = floor(total / 2) for SAME_UPPER,
total - floor(total / 2) for SAME_LOWER). A negative begin pad shifts every window into the data;
no tap outside the data is read.

The oracles, as installed (onnxruntime 1.31.1, onnx.reference 1.23.2):
- onnxruntime rounds the split toward zero (begin = trunc(total / 2) for SAME_UPPER,
  trunc((total + 1) / 2) for SAME_LOWER); it agrees with us wherever the two splits agree
  (SAME_UPPER with an even total, SAME_LOWER with an odd one), and refuses MaxPool without
  Indices and without dilations ("padding values must be non-negative");
- onnx.reference agrees for MaxPool SAME_UPPER (begin = floor(total / 2)) and refuses
  AveragePool and LpPool ("index can't contain negative values").
"""

from __future__ import annotations

import math

import numpy as np

import pytest
from onnx import TensorProto, helper

import spec_reference as ref_impl
from oracles import IR_VERSION, run_onnxruntime, run_reference, run_tvm_pool, try_run

# (in, stride, kernel) along the last axis, total = -2, -1, -3, -2
GEOMETRIES = [(9, 3, 1), (10, 4, 1), (12, 4, 1), (12, 4, 2)]
MODES = ("SAME_UPPER", "SAME_LOWER")
OPS = {
    "MaxPool": ("MaxPool", {}, 1),
    "MaxPool+Indices": ("MaxPool", {}, 2),
    "MaxPool dilated": ("MaxPool", {"dilate": True}, 1),
    "AveragePool": ("AveragePool", {}, 1),
    "AveragePool count_include_pad": ("AveragePool", {"count_include_pad": 1}, 1),
    "LpPool": ("LpPool", {"p": 2}, 1),
}


def _total(n, s, ek):
    return (math.ceil(n / s) - 1) * s + ek - n


def _cases(rank):
    """(name, x shape, attrs) per mode x geometry: the last axis has the negative total, the
    others an ordinary SAME pad (in 3, k 2, s 1: total 1)."""
    cases = []
    for mode in MODES:
        for n, s, k in GEOMETRIES:
            shape = [1, 2] + [3] * (rank - 1) + [n]
            attrs = {"kernel_shape": [2] * (rank - 1) + [k], "strides": [1] * (rank - 1) + [s], "auto_pad": mode}
            cases.append((f"{mode}_{n}_{s}_{k}", shape, attrs))
    return cases


def _attrs(base, extra):
    attrs = dict(base)
    rank = len(attrs["kernel_shape"])
    if extra.get("dilate"):
        # dilation 2 on a 1-tap axis: the window is unchanged, but onnxruntime takes its
        # dilated kernel path, which accepts negative pads
        attrs["dilations"] = [1] * (rank - 1) + [2]
        attrs["kernel_shape"] = attrs["kernel_shape"][:-1] + [1]
    attrs.update({k: v for k, v in extra.items() if k != "dilate"})
    return attrs


def _model(op, cases, num_outputs):
    nodes, inputs, outputs = [], [], []
    for name, shape, attrs in cases:
        inputs.append(helper.make_tensor_value_info(f"x_{name}", TensorProto.FLOAT, shape))
        outs = [f"y_{name}", f"i_{name}"][:num_outputs]
        outputs += [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, [TensorProto.FLOAT, TensorProto.INT64])]
        nodes.append(helper.make_node(op, [f"x_{name}"], outs, name=name, **attrs))
    graph = helper.make_graph(nodes, "negative_same_pad", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = IR_VERSION
    return model


def _expected(op, x, attrs, num_outputs, split="floor"):
    """spec_reference with the given split of the negative total: ``floor`` (the ONNX text,
    tvm_pool) or ``trunc`` (onnxruntime's rounding toward zero), as explicit pads."""
    rank = len(attrs["kernel_shape"])
    dil = attrs.get("dilations", [1] * rank)
    begin, end = [], []
    for n, k, s, d in zip(x.shape[2:], attrs["kernel_shape"], attrs["strides"], dil):
        total = _total(n, s, (k - 1) * d + 1)
        if split == "floor":
            b = total // 2 if attrs["auto_pad"] == "SAME_UPPER" else total - total // 2
        else:
            b = int(total / 2) if attrs["auto_pad"] == "SAME_UPPER" else int((total + 1) / 2)
        begin.append(b)
        end.append(total - b)
    common = dict(strides=attrs["strides"], dilations=dil, pads=begin + end)
    if op == "MaxPool":
        return list(ref_impl.max_pool(x, attrs["kernel_shape"], **common))[:num_outputs]
    if op == "AveragePool":
        return [ref_impl.avg_pool(x, attrs["kernel_shape"], count_include_pad=attrs.get("count_include_pad", 0), **common)]
    return [ref_impl.lp_pool(x, attrs["kernel_shape"], p=2.0, **common)]


def _same(got, want):
    return len(got) == len(want) and all(
        np.asarray(g).shape == np.asarray(w).shape and np.allclose(g, w, rtol=1e-6, atol=1e-6) for g, w in zip(got, want))


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("label", list(OPS))
def test_negative_same_pad(label, rank):
    op, extra, num_outputs = OPS[label]
    cases = [(name, shape, _attrs(attrs, extra)) for name, shape, attrs in _cases(rank)]
    model = _model(op, cases, num_outputs)
    rng = np.random.default_rng(rank)
    # distinct values (no ties), so shifted windows give different maxima and indices
    feeds = {f"x_{name}": rng.permutation(int(np.prod(shape))).astype(np.float32).reshape(shape) for name, shape, _ in cases}
    ours = run_tvm_pool(model, feeds)
    plain = run_tvm_pool(model, feeds, schedule=False) if rank == 2 else None  # (compile time)
    ort, ort_error = try_run(run_onnxruntime, model, feeds)
    ref, ref_error = try_run(run_reference, model, feeds)
    k = num_outputs
    for i, (name, shape, attrs) in enumerate(cases):
        x = feeds[f"x_{name}"]
        want = _expected(op, x, attrs, num_outputs)
        got = ours[k * i: k * i + k]
        assert _same(got, want), f"{label} {name}: tvm_pool {got} vs the ONNX formula {want}"
        assert plain is None or _same(plain[k * i: k * i + k], want), f"{label} {name} schedule=False"
        # onnxruntime: its own rounding, which is ours where the splits agree
        if ort is None:
            assert op == "MaxPool" and num_outputs == 1 and "dilations" not in attrs, ort_error
            assert "padding values must be non-negative" in ort_error
        else:
            trunc = _expected(op, x, attrs, num_outputs, split="trunc")
            assert _same(ort[k * i: k * i + k], trunc), f"{label} {name}: onnxruntime's split"
            if _same(trunc, want):
                assert _same(ort[k * i: k * i + k], got)
        # onnx.reference: MaxPool SAME_UPPER as written; AveragePool/LpPool refuse
        if op != "MaxPool":
            assert ref is None and "negative" in ref_error, ref_error
        elif attrs["auto_pad"] == "SAME_UPPER":
            assert ref is not None, ref_error
            assert _same(ref[k * i: k * i + k][:1], got[:1]), f"{label} {name}: onnx.reference"


def test_issue_example():
    """MaxPool k 1x1, s 3x3, d 3x3, SAME_UPPER on 1x1x7x9 holding 0..62: columns 1, 4, 7
    (the begin pad of the 9-wide axis is -1), rows 0, 3, 6; onnxruntime and onnx.reference agree."""
    x = np.arange(63, dtype=np.float32).reshape(1, 1, 7, 9)
    model = _model("MaxPool", [("m", [1, 1, 7, 9], dict(kernel_shape=[1, 1], strides=[3, 3], dilations=[3, 3],
                                                         auto_pad="SAME_UPPER"))], 1)
    feeds = {"x_m": x}
    (y,) = run_tvm_pool(model, feeds)
    want = np.array([[1, 4, 7], [28, 31, 34], [55, 58, 61]], dtype=np.float32)
    np.testing.assert_array_equal(y[0, 0], want)
    np.testing.assert_array_equal(run_onnxruntime(model, feeds)[0][0, 0], want)
    np.testing.assert_array_equal(run_reference(model, feeds)[0][0, 0], want)


def test_negative_pad_never_reads_outside_the_data():
    """AveragePool with count_include_pad over a shifted window counts only data taps (the
    window lies inside the data) and a symbolic size gives the same result."""
    x = np.arange(10, dtype=np.float32).reshape(1, 1, 10)
    model = _model("AveragePool", [("a", ["N", 1, 10], dict(kernel_shape=[2], strides=[4], auto_pad="SAME_LOWER",
                                                             count_include_pad=1))], 1)
    (y,) = run_tvm_pool(model, {"x_a": x})
    # total -1, SAME_LOWER: begin 0, end -1: windows [0, 1], [4, 5], [8, 9]
    np.testing.assert_array_equal(y.reshape(-1), [0.5, 4.5, 8.5])
