"""TensorRT IPoolingLayer (tvm_pool::TensorRTPooling, relax_ops.tensorrt_pool).

Oracles: the two worked examples of the TensorRT operator documentation
(/work/shared/specs/tensorrt-IPoolingLayer.txt), and a loop-based NumPy transcription of the
TensorRT 8 NvInfer.h PaddingMode formulas written here independently of tvm_pool.spec (no
TensorRT runtime is available on this machine). Integer results are compared exactly; float
results to the output type's precision.
"""

from __future__ import annotations

import itertools
import math
import re
from fractions import Fraction

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper
from tvm import relax

import tvm_pool
from tvm_pool import relax_ops
from tvm_pool.block_builders import closed_on_error
from tvm_pool.errors import InvalidModelError
from helpers import compile_vm

MODES = ["EXPLICIT_ROUND_DOWN", "EXPLICIT_ROUND_UP", "SAME_UPPER", "SAME_LOWER", "CAFFE_ROUND_DOWN", "CAFFE_ROUND_UP"]
TYPES = ["MAX", "AVERAGE", "MAX_AVERAGE_BLEND"]


def _run_relax(x, **kwargs):
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(list(x.shape), str(x.dtype)))
    with closed_on_error(bb), bb.function("main", [xv]):  # the error tests raise in there
        with bb.dataflow():
            out = bb.emit_output(relax_ops.tensorrt_pool(bb, xv, **kwargs))
        bb.emit_func_output(out)
    return compile_vm(bb.get())["main"](tvm.runtime.tensor(x)).numpy()


# ---------------------------------------------------------------------------------------------
# NumPy transcription of the TensorRT formulas (independent of tvm_pool.spec).
# ---------------------------------------------------------------------------------------------


def _axis_geometry(I, F, S, B, A, mode):
    """(O, pad_before, pad_after) of one axis, straight from NvInfer.h's PaddingMode text."""
    if mode == "EXPLICIT_ROUND_DOWN":
        return math.floor((I + B + A - F) / S) + 1, B, A
    if mode == "EXPLICIT_ROUND_UP":
        return math.ceil((I + B + A - F) / S) + 1, B, A
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        O = math.ceil(I / S)
        P = max(math.floor((I - 1) / S) * S + F - I, 0)  # clamped at 0 (documented choice)
        small, large = P // 2, P - P // 2
        return (O, small, large) if mode == "SAME_UPPER" else (O, large, small)
    if mode in ("CAFFE_ROUND_DOWN", "CAFFE_ROUND_UP"):
        rnd = math.floor if mode == "CAFFE_ROUND_DOWN" else math.ceil
        E = rnd((I + 2 * B - F) / S) + 1
        O = E - (1 if (E - 1) * S >= I + B else 0)
        return O, B, B  # CAFFE: symmetric, uses the pre-padding value
    raise AssertionError(mode)


def _round_half_away(v: Fraction) -> int:
    mag = math.floor(abs(v) + Fraction(1, 2))
    return -mag if v < 0 else mag


def reference(x, pooling_type, window, stride, pre, post, mode, blend, excludes):
    rank = len(window)
    lead = x.shape[: x.ndim - rank]
    geo = [_axis_geometry(x.shape[x.ndim - rank + i], window[i], stride[i], pre[i], post[i], mode) for i in range(rank)]
    out_sp = [g[0] for g in geo]
    integer = x.dtype == np.int8
    out = np.zeros(tuple(lead) + tuple(out_sp), dtype=np.int64 if integer else np.float64)
    for li in itertools.product(*[range(n) for n in lead]):
        plane = x[li]
        for o in itertools.product(*[range(n) for n in out_sp]):
            vals, padded_count = [], 1
            ranges = []
            for ax in range(rank):
                I = plane.shape[ax]
                _, pb, pa = geo[ax]
                start = o[ax] * stride[ax] - pb
                taps = list(range(start, start + window[ax]))
                ranges.append([t for t in taps if 0 <= t < I])
                padded_count *= len([t for t in taps if -pb <= t < I + pa])
            for pos in itertools.product(*ranges):
                vals.append(plane[pos])
            count = len(vals) if excludes else padded_count
            if integer:
                vals = [int(v) for v in vals]
                mx = max(vals) if vals else -128
                avg = Fraction(sum(vals), count) if count else Fraction(0)
                if pooling_type == "MAX":
                    r = mx
                elif pooling_type == "AVERAGE":
                    r = _round_half_away(avg)
                else:
                    b = Fraction(blend)
                    r = _round_half_away((1 - b) * mx + b * avg)
                out[li + o] = min(max(r, -128), 127)
            else:
                vals = [float(v) for v in vals]
                mx = max(vals) if vals else -np.inf
                avg = sum(vals) / count if count else np.nan
                out[li + o] = {"MAX": mx, "AVERAGE": avg, "MAX_AVERAGE_BLEND": (1 - blend) * mx + blend * avg}[
                    pooling_type
                ]
    return out.astype(x.dtype)


# ---------------------------------------------------------------------------------------------
# The TensorRT documentation's worked examples.
# ---------------------------------------------------------------------------------------------

_X5 = np.arange(-10, 15, dtype=np.float32).reshape(1, 1, 5, 5)


def test_doc_example_max():
    got = _run_relax(_X5, pooling_type="MAX", window_size=[3, 3])
    expected = np.array([[[[2.0, 3.0, 4.0], [7.0, 8.0, 9.0], [12.0, 13.0, 14.0]]]], np.float32)
    np.testing.assert_array_equal(got, expected)


def test_doc_example_average_excluding_padding():
    got = _run_relax(
        _X5, pooling_type="AVERAGE", window_size=[3, 3], pre_padding=[1, 1], post_padding=[1, 1],
        average_count_excludes_padding=True,
    )
    expected = np.array(
        [[[[-7.0, -6.5, -5.5, -4.5, -4.0], [-4.5, -4.0, -3.0, -2.0, -1.5], [0.5, 1.0, 2.0, 3.0, 3.5],
           [5.5, 6.0, 7.0, 8.0, 8.5], [8.0, 8.5, 9.5, 10.5, 11.0]]]],
        np.float32,
    )
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "mode,pre,post,expected",
    [
        # NvInfer.h "Pooling Example 1": I=6, B=3, A=2, S=2, F=3
        ("EXPLICIT_ROUND_DOWN", 3, 2, 5),
        ("EXPLICIT_ROUND_UP", 3, 2, 5),
        ("SAME_UPPER", 3, 2, 3),
        ("SAME_LOWER", 3, 2, 3),
        # "Pooling Example 2": I=6, B=3, A=3, S=2, F=3
        ("CAFFE_ROUND_DOWN", 3, 3, 5),
        ("CAFFE_ROUND_UP", 3, 3, 5),
    ],
)
def test_nvinfer_output_size_examples(mode, pre, post, expected):
    assert tvm_pool.spec.trt_output_size(6, 3, 2, pre, post, mode) == expected
    assert tvm_pool.spec.trt_padding(6, 3, 2, pre, post, "SAME_UPPER") == (0, 1)
    assert tvm_pool.spec.trt_padding(6, 3, 2, pre, post, "SAME_LOWER") == (1, 0)


# ---------------------------------------------------------------------------------------------
# Randomized: every pooling type x padding mode x dtype against the NumPy transcription.
# ---------------------------------------------------------------------------------------------


def _random_case(rng, rank, mode):
    while True:
        window = [int(rng.integers(1, 5)) for _ in range(rank)]
        stride = [int(rng.integers(1, 4)) for _ in range(rank)]
        pre = [int(rng.integers(0, w + 1)) for w in window]
        post = [int(rng.integers(0, w + 1)) for w in window]
        spatial = [int(rng.integers(max(window[i], 2), 9 if rank == 2 else 6)) for i in range(rank)]
        outs = [_axis_geometry(spatial[i], window[i], stride[i], pre[i], post[i], mode)[0] for i in range(rank)]
        if min(outs) >= 1:
            return window, stride, pre, post, spatial


def _random_input(rng, shape, dtype):
    if dtype == "int8":
        return rng.integers(-128, 128, size=shape).astype(np.int8)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pooling_type", TYPES)
def test_random_against_formulas(pooling_type, mode, dtype):
    seed = (TYPES.index(pooling_type) * 100 + MODES.index(mode) * 10 + ["float32", "float16", "int8"].index(dtype))
    rng = np.random.default_rng(seed)
    rank = 2 if seed % 3 else 3
    window, stride, pre, post, spatial = _random_case(rng, rank, mode)
    x = _random_input(rng, [2, 3] + spatial if rank == 2 else [1, 2] + spatial, dtype)
    blend = float(rng.choice([0.0, 0.25, 0.5, 0.75, 1.0])) if dtype == "int8" else float(rng.uniform(0, 1))
    excludes = bool(rng.integers(0, 2))
    got = _run_relax(
        x, pooling_type=pooling_type, window_size=window, stride=stride, pre_padding=pre, post_padding=post,
        padding_mode=mode, blend_factor=blend, average_count_excludes_padding=excludes,
    )
    want = reference(x, pooling_type, window, stride, pre, post, mode, blend, excludes)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype == "int8":
        np.testing.assert_array_equal(got, want)
    elif dtype == "float16":
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_int8_average_rounds_half_away_from_zero():
    # windows of 2 whose sums are odd: exact .5 quotients in both signs
    x = np.array([[[[1, 2, -1, -2, 3, 4, -3, -4]]]], dtype=np.int8)
    got = _run_relax(x, pooling_type="AVERAGE", window_size=[1, 2], stride=[1, 2])
    np.testing.assert_array_equal(got, np.array([[[[2, -2, 4, -4]]]], np.int8))  # 1.5, -1.5, 3.5, -3.5


def test_int8_extremes_saturate():
    x = np.full((1, 1, 4, 4), -128, np.int8)
    x[0, 0, 0, 0] = 127
    for pooling_type in TYPES:
        got = _run_relax(x, pooling_type=pooling_type, window_size=[2, 2], stride=[2, 2], blend_factor=0.5)
        want = reference(x, pooling_type, [2, 2], [2, 2], [0, 0], [0, 0], "EXPLICIT_ROUND_DOWN", 0.5, True)
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------------
# ONNX custom domain.
# ---------------------------------------------------------------------------------------------


def _onnx_model(x_shape, elem=TensorProto.FLOAT, **attrs):
    node = helper.make_node("TensorRTPooling", ["X"], ["Y"], domain="tvm_pool", name="trt", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", elem, x_shape)], [helper.make_tensor_value_info("Y", elem, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("tvm_pool", 1)])
    model.ir_version = 10
    return model


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_onnx_tensorrt_pooling():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    attrs = dict(
        pooling_type="MAX_AVERAGE_BLEND", window_size=[3, 2], stride=[2, 2], pre_padding=[1, 0],
        post_padding=[2, 1], padding_mode="CAFFE_ROUND_UP", blend_factor=0.3, average_count_excludes_padding=0,
    )
    mod = tvm_pool.from_onnx(_onnx_model(list(x.shape), **attrs))
    got = compile_vm(mod)["main"](tvm.runtime.tensor(x)).numpy()
    want = reference(x, "MAX_AVERAGE_BLEND", [3, 2], [2, 2], [1, 0], [2, 1], "CAFFE_ROUND_UP", 0.3, False)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    "attrs,attribute,fragment",
    [
        (dict(pooling_type="MAX", window_size=[2, 2], padding_mode="VALID"), "padding_mode", "CAFFE_ROUND_UP"),
        (dict(pooling_type="MAX_AVERAGE_BLEND", window_size=[2, 2], blend_factor=1.5), "blend_factor", "[0, 1]"),
        (dict(pooling_type="MAX_AVERAGE_BLEND", window_size=[2, 2], blend_factor=-0.1), "blend_factor", "[0, 1]"),
        (dict(pooling_type="MAX", window_size=[2, 2], stride=[1, 1, 1]), "stride", "needs 2"),
        (dict(pooling_type="MAX", window_size=[2, 2], pre_padding=[1]), "pre_padding", "needs 2"),
        (dict(pooling_type="MAX", window_size=[2]), "window_size", "2 (2-D windows) or 3"),
        (dict(pooling_type="MIN", window_size=[2, 2]), "pooling_type", "MAX_AVERAGE_BLEND"),
        (dict(window_size=[2, 2]), "pooling_type", "required"),
        (dict(pooling_type="MAX", window_size=[2, 2], average_count_excludes_padding=2), "average_count_excludes_padding", "0, 1"),
        (dict(pooling_type="MAX", window_size=[9, 2]), "window_size", "output size"),
        (dict(pooling_type="MAX", window_size=[2, 2], dilation=[1, 1]), "dilation", "allowed"),
    ],
)
def test_onnx_attribute_errors(attrs, attribute, fragment):
    with pytest.raises(InvalidModelError) as info:
        tvm_pool.from_onnx(_onnx_model([1, 2, 5, 6], **attrs))
    err = info.value
    assert err.attribute == attribute
    message = str(err)
    assert "trt" in message and "tvm_pool::TensorRTPooling" in message and fragment in message, message


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_onnx_rejects_other_dtypes():
    with pytest.raises(InvalidModelError, match="int8"):
        tvm_pool.from_onnx(_onnx_model([1, 2, 5, 6], TensorProto.DOUBLE, pooling_type="MAX", window_size=[2, 2]))


def test_relax_api_errors():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="stride has 3 values"):
        _run_relax(x, pooling_type="MAX", window_size=[2, 2], stride=[1, 1, 1])
    with pytest.raises(ValueError, match="blend_factor"):
        _run_relax(x, pooling_type="MAX_AVERAGE_BLEND", window_size=[2, 2], blend_factor=2.0)
    with pytest.raises(ValueError, match="padding_mode"):
        _run_relax(x, pooling_type="MAX", window_size=[2, 2], padding_mode="same_upper")


def test_block_kinds():
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType([1, 2, 6, 6], "int8"))
    with bb.function("main", [xv]):
        with bb.dataflow():
            out = bb.emit_output(relax_ops.tensorrt_pool(bb, xv, "MAX_AVERAGE_BLEND", [3, 3], blend_factor=0.5))
        bb.emit_func_output(out)
    kinds = set()
    for _, func in bb.get().functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            kinds.update(re.findall(r'"tvm_pool\.kind": "(\w+)"', func.script()))
    # 3x3 stride 1 windows overlap: max and sum run as separable passes (compute.forms.separable);
    # the sum's passes read an int32 copy of the int8 data (block kind "pad")
    assert kinds == {"pad", "trt_max", "trt_max_pass", "trt_avg_sum", "trt_avg_sum_pass", "trt_finalize"}
