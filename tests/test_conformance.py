"""One test per decision in docs/conformance.md, with hand-computed expectations."""

from __future__ import annotations

import numpy as np
import pytest

from oracles import pool_model, run_onnxruntime, run_tvm_pool

ONE_TO_SEVEN = np.arange(1, 8, dtype=np.float32).reshape(1, 1, 7)


def pool(op, x, opset=22, outputs=1, **attrs):
    model = pool_model(op, list(x.shape), str(x.dtype), opset, outputs, **attrs)
    return run_tvm_pool(model, {"X": x})


def test_same_lower_uses_ceil():
    # in 7, stride 2: ceil(7/2) = 4 outputs; pad 2 -> (1, 1): windows [-1..1], [1..3], [3..5], [5..7]
    (y,) = pool("MaxPool", ONE_TO_SEVEN, kernel_shape=[3], strides=[2], auto_pad="SAME_LOWER")
    np.testing.assert_array_equal(y.reshape(-1), [2, 4, 6, 7])


def test_same_padding_uses_the_dilated_kernel():
    # in 5, k 2, d 2 -> dilated 3: 5 outputs, pad (1, 1); window o reads o-1 and o+1
    x = ONE_TO_SEVEN[..., :5]
    (y,) = pool("MaxPool", x, kernel_shape=[2], dilations=[2], auto_pad="SAME_UPPER")
    np.testing.assert_array_equal(y.reshape(-1), [2, 3, 4, 5, 4])
    (y,) = pool("AveragePool", x, kernel_shape=[2], dilations=[2], auto_pad="SAME_UPPER")
    np.testing.assert_array_equal(y.reshape(-1), [2, 2, 3, 4, 4])


def test_valid_ignores_ceil_mode():
    (y,) = pool("MaxPool", ONE_TO_SEVEN, kernel_shape=[2], strides=[2], auto_pad="VALID", ceil_mode=1)
    np.testing.assert_array_equal(y.reshape(-1), [2, 4, 6])


def test_negative_same_pad_shifts_windows():
    # in 5, k 1, s 3: total = (2-1)*3 + 1 - 5 = -1; SAME_UPPER begin floor(-1/2) = -1: windows
    # start at 1 and 4 (docs/conformance.md row 4; tests/test_negative_same_pad.py for the rest)
    (y,) = pool("MaxPool", ONE_TO_SEVEN[..., :5], kernel_shape=[1], strides=[3], auto_pad="SAME_UPPER")
    np.testing.assert_array_equal(y.reshape(-1), [2, 5])
    (y,) = pool("MaxPool", ONE_TO_SEVEN[..., :5], kernel_shape=[1], strides=[3], auto_pad="SAME_LOWER")
    np.testing.assert_array_equal(y.reshape(-1), [1, 4])


def _oracle(run, op, x, opset=22, outputs=1, **attrs):
    from oracles import try_run  # pylint: disable=import-outside-toplevel

    out, err = try_run(run, pool_model(op, list(x.shape), str(x.dtype), opset, outputs, **attrs), {"X": x})
    return [np.asarray(o).reshape(-1).tolist() for o in out] if out is not None else err


_X24 = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
_ORACLE_COLUMNS = [
    # (row, oracle, op, x, opset, outputs, attrs, expected outputs or a piece of the error)
    (1, "ort", "MaxPool", ONE_TO_SEVEN, 22, 1, dict(kernel_shape=[3], strides=[2], auto_pad="SAME_LOWER"), [[2, 4, 6, 7]]),
    (1, "ref", "MaxPool", ONE_TO_SEVEN, 22, 1, dict(kernel_shape=[3], strides=[2], auto_pad="SAME_LOWER"), [[3, 5, 7]]),
    (2, "ort", "MaxPool", ONE_TO_SEVEN[..., :5], 22, 1, dict(kernel_shape=[2], dilations=[2], auto_pad="SAME_UPPER"), [[3, 4, 5, 4]]),
    (2, "ref", "MaxPool", ONE_TO_SEVEN[..., :5], 22, 1, dict(kernel_shape=[2], dilations=[2], auto_pad="SAME_UPPER"), [[2, 3, 4, 5, 4]]),
    (2, "ref", "AveragePool", ONE_TO_SEVEN[..., :5], 22, 1, dict(kernel_shape=[2], dilations=[2], auto_pad="SAME_UPPER"), [[2, 3, 4, 4, 0]]),
    (3, "ort", "MaxPool", ONE_TO_SEVEN, 22, 1, dict(kernel_shape=[2], strides=[2], auto_pad="VALID", ceil_mode=1), [[2, 4, 6, 7]]),
    (3, "ref", "MaxPool", ONE_TO_SEVEN, 22, 1, dict(kernel_shape=[2], strides=[2], auto_pad="VALID", ceil_mode=1), [[2, 4, 6]]),
    (3, "ref", "AveragePool", ONE_TO_SEVEN, 22, 1, dict(kernel_shape=[2], strides=[2], auto_pad="VALID", ceil_mode=1), "ceil_mode is not supported with auto_pad"),
    (6, "ort", "MaxPool", ONE_TO_SEVEN[..., :3], 22, 1, dict(kernel_shape=[2], pads=[3, 3]), "pool_attributes.h"),
    (6, "ref", "AveragePool", ONE_TO_SEVEN[..., :3], 22, 1, dict(kernel_shape=[2], pads=[3, 3], count_include_pad=1), [[0, 0, 0.5, 1.5, 2.5, 1.5, 0, 0]]),
    (7, "ort", "MaxPool", np.array([1, np.nan, 3, 2, np.nan, 0, 5], dtype=np.float32).reshape(1, 1, 7), 22, 2, dict(kernel_shape=[3]), [[3, np.nan, 3, 2, np.nan], [2, 1, 2, 3, 4]]),
    (7, "ref", "MaxPool", np.array([1, np.nan, 3, 2, np.nan, 0, 5], dtype=np.float32).reshape(1, 1, 7), 22, 2, dict(kernel_shape=[3]), [[3, 3, 3, 2, 5], [2, 2, 2, 3, 6]]),
    (9, "ort", "MaxPool", _X24, 22, 2, dict(kernel_shape=[2, 2], storage_order=1), [list(range(5, 8)) + list(range(9, 12)) + list(range(17, 20)) + list(range(21, 24)), [4, 7, 10, 5, 8, 11, 16, 19, 22, 17, 20, 23]]),
    (10, "ref", "MaxPool", _X24, 22, 2, dict(kernel_shape=[2, 2]), [list(range(5, 8)) + list(range(9, 12)) + list(range(17, 20)) + list(range(21, 24)), [4, 5, 6, 8, 9, 10] * 2]),
    (11, "ort", "AveragePool", ONE_TO_SEVEN[..., :6], 22, 1, dict(kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1, count_include_pad=1), [[1, 3, 5, 3]]),
    (12, "ort", "AveragePool", ONE_TO_SEVEN[..., :3], 1, 1, dict(kernel_shape=[2], pads=[1, 1]), "NOT_IMPLEMENTED"),
    (12, "ref", "AveragePool", ONE_TO_SEVEN[..., :3], 1, 1, dict(kernel_shape=[2], pads=[1, 1]), [[0.5, 1.5, 2.5, 1.5]]),
    (15, "ort", "LpPool", ONE_TO_SEVEN[..., :5], 18, 1, dict(kernel_shape=[2], strides=[2], ceil_mode=1, p=1), [[3, 7, 5]]),
    (15, "ref", "LpPool", ONE_TO_SEVEN[..., :5], 18, 1, dict(kernel_shape=[2], strides=[2], ceil_mode=1, p=1), [[3, 7, 10]]),
]


@pytest.mark.parametrize("row,oracle,op,x,opset,outputs,attrs,expected", _ORACLE_COLUMNS,
                         ids=[f"row{c[0]}-{c[1]}-{c[2]}" for c in _ORACLE_COLUMNS])
def test_oracle_columns(row, oracle, op, x, opset, outputs, attrs, expected):
    """What docs/conformance.md says each oracle does, on the row's example (onnxruntime 1.31.1,
    onnx.reference 1.23.2 as pinned); a new oracle version that changes a column fails here."""
    from oracles import run_reference  # pylint: disable=import-outside-toplevel

    got = _oracle(run_onnxruntime if oracle == "ort" else run_reference, op, x, opset, outputs, **attrs)
    if isinstance(expected, str):
        assert isinstance(got, str) and expected in got, f"row {row}: {got}"
    else:
        assert not isinstance(got, str), f"row {row}: {got}"
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(np.asarray(g, dtype=np.float64), np.asarray(e, dtype=np.float64), err_msg=f"row {row}")


@pytest.mark.parametrize("op,opset", [("MaxPool", 10), ("MaxPool", 11), ("MaxPool", 12), ("MaxPool", 22),
                                      ("AveragePool", 10), ("AveragePool", 19), ("AveragePool", 22)])
def test_window_starting_in_end_padding_is_dropped(op, opset):
    # in 4, k 2, s 2, pads (1, 1), ceil: ceil(4/2)+1 = 3 windows, starts -1, 1, 3; a 4th at 5 would
    # start in the end padding. All opsets drop it (written into opset 22 only).
    x = ONE_TO_SEVEN[..., :4]
    (y,) = pool(op, x, opset, kernel_shape=[2], strides=[2], pads=[1, 1], ceil_mode=1)
    assert y.shape == (1, 1, 3)
    want = run_onnxruntime(pool_model(op, [1, 1, 4], opset=opset, kernel_shape=[2], strides=[2], pads=[1, 1], ceil_mode=1), {"X": x})
    np.testing.assert_array_equal(y, want[0])


def test_windows_inside_padding():
    x = ONE_TO_SEVEN[..., :3]
    y, idx = pool("MaxPool", x, outputs=2, kernel_shape=[2], pads=[3, 3])
    np.testing.assert_array_equal(y.reshape(-1), [-np.inf, -np.inf, 1, 2, 3, 3, -np.inf, -np.inf])
    np.testing.assert_array_equal(idx.reshape(-1), [-1, -1, 0, 1, 2, 2, -1, -1])
    y8, idx8 = pool("MaxPool", x.astype(np.int8), outputs=2, kernel_shape=[2], pads=[3, 3])
    assert y8[0, 0, 0] == -128 and idx8[0, 0, 0] == -1
    (avg,) = pool("AveragePool", x, kernel_shape=[2], pads=[3, 3])
    np.testing.assert_array_equal(avg.reshape(-1), [np.nan, np.nan, 1, 1.5, 2.5, 3, np.nan, np.nan])
    (avg1,) = pool("AveragePool", x, kernel_shape=[2], pads=[3, 3], count_include_pad=1)
    np.testing.assert_array_equal(avg1.reshape(-1), [0, 0, 0.5, 1.5, 2.5, 1.5, 0, 0])


def test_int8_real_minimum_beats_padding_in_indices():
    # -128 in the data ties with the padding's -128: the index must point at the data
    x = np.array([-128, -128, 5], dtype=np.int8).reshape(1, 1, 3)
    y, idx = pool("MaxPool", x, outputs=2, kernel_shape=[2], pads=[1, 0])
    np.testing.assert_array_equal(y.reshape(-1), [-128, -128, 5])
    np.testing.assert_array_equal(idx.reshape(-1), [0, 0, 2])


def test_nan_propagates():
    x = np.array([1, np.nan, 3, 2, np.nan, 0, 5], dtype=np.float32).reshape(1, 1, 7)
    y, idx = pool("MaxPool", x, outputs=2, kernel_shape=[3])
    assert np.isnan(y).all()
    np.testing.assert_array_equal(idx.reshape(-1), [1, 1, 4, 4, 4])
    two_nans = np.array([np.nan, 1, np.nan], dtype=np.float32).reshape(1, 1, 3)
    _, idx = pool("MaxPool", two_nans, outputs=2, kernel_shape=[3])
    assert idx.reshape(-1).tolist() == [0]  # the first NaN in scan order
    (g,) = pool("GlobalMaxPool", two_nans)
    assert np.isnan(g).all()


def test_ties_take_the_first_in_scan_order():
    x = np.array([2, 2, 1, 2, 2, 2, 0], dtype=np.float32).reshape(1, 1, 7)
    _, idx = pool("MaxPool", x, outputs=2, kernel_shape=[3], strides=[2])
    np.testing.assert_array_equal(idx.reshape(-1), [0, 3, 4])
    plane = np.full((1, 1, 3, 3), 7, dtype=np.float32)
    _, idx = pool("MaxPool", plane, outputs=2, kernel_shape=[2, 2])
    np.testing.assert_array_equal(idx.reshape(-1), [0, 1, 3, 4])


def test_storage_order_column_major():
    x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    _, idx = pool("MaxPool", x, outputs=2, kernel_shape=[2, 2], storage_order=1)
    # channel 0 maxima at (1,1),(1,2),(1,3),(2,1),(2,2),(2,3); column-major h + 3*w
    np.testing.assert_array_equal(idx[0, 0].reshape(-1), [4, 7, 10, 5, 8, 11])
    np.testing.assert_array_equal(idx[0, 1].reshape(-1), np.array([4, 7, 10, 5, 8, 11]) + 12)
    want = run_onnxruntime(pool_model("MaxPool", [1, 2, 3, 4], num_outputs=2, kernel_shape=[2, 2], storage_order=1), {"X": x})
    np.testing.assert_array_equal(idx, want[1])


def test_average_divisor_in_the_overhang():
    # in 6, k 3, s 2, pads (1,1), ceil: windows [-1..1] [1..3] [3..5] [5..7]; the last has data 5,
    # padding 6 and overhang 7: divisor 2 with count_include_pad
    x = ONE_TO_SEVEN[..., :6]
    (y,) = pool("AveragePool", x, kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1, count_include_pad=1)
    np.testing.assert_array_equal(y.reshape(-1), [1, 3, 5, 3])
    (y,) = pool("AveragePool", x, kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1, count_include_pad=0)
    np.testing.assert_array_equal(y.reshape(-1), [1.5, 3, 5, 6])


def test_bfloat16_average_accumulates_in_float32():
    import ml_dtypes

    # 256 + 1 + ... sums lose the 1s in bfloat16 arithmetic; float32 accumulation keeps them
    x = np.array([256, 1, 1, 1], dtype=ml_dtypes.bfloat16).reshape(1, 1, 4)
    (y,) = pool("AveragePool", x, kernel_shape=[4])
    assert float(y.reshape(-1)[0]) == float(ml_dtypes.bfloat16(259 / 4))


def test_bfloat16_max_pool_with_indices():
    import ml_dtypes

    x = np.array([1.5, -2, 3.25, 0.5, 7], dtype=ml_dtypes.bfloat16).reshape(1, 1, 5, 1)
    y, idx = pool("MaxPool", x, outputs=2, kernel_shape=[4, 1], auto_pad="SAME_UPPER")
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.astype(np.float32).reshape(-1), [3.25, 3.25, 7, 7, 7])
    np.testing.assert_array_equal(idx.reshape(-1), [2, 2, 4, 4, 4])


def test_average_of_a_window_that_sees_no_data_is_nan():
    # in 3, k 2, s 3, pads (0, 1), ceil: the second window starts at 3 (padding) and only
    # reaches the padding; statically a 0 divisor, which must still give NaN, not a compile error
    x = np.array([1, 2, 3], dtype=np.float32).reshape(1, 1, 3, 1)
    (y,) = pool("AveragePool", x, 19, kernel_shape=[2, 1], strides=[3, 3], pads=[0, 1, 1, 0], ceil_mode=1)
    import spec_reference

    want = spec_reference.avg_pool(x, [2, 1], [3, 3], pads=[0, 1, 1, 0], ceil_mode=1)
    np.testing.assert_array_equal(y, want)
