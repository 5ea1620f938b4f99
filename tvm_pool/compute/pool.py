"""The pooling operators' computes (N-d, channel-first): max (with indices), average, Lp and
the global pools.

Layout: ``data`` is ``[*leading, *spatial]`` where the last ``len(kernel_shape)`` axes are
spatial (ONNX's N, C, D1..Dn). Geometry comes from :mod:`tvm_pool.spec`; these functions only
say what each output element is. The window max and sum they build on take the compute form
that :mod:`tvm_pool.compute.forms` chooses (:mod:`tvm_pool.compute.window_reduce`), reading a
padded copy (block kind ``pad``) that holds the reduction's identity in the padding and the
ceil-mode overhang. MaxPool's indices (:mod:`tvm_pool.compute.argmax`) reduce keys that pack
each element's value and position, with the least key in the padding, so an index in the padding
never wins a tie. Windows that touch padding, windows entirely inside padding and the ceil-mode
overhang all follow from these two rules.
"""

from __future__ import annotations

from typing import Sequence

from tvm import te, tirx

from .. import spec
from . import layout
from .argmax import argmax
from .common import accumulate_dtype, block_attrs, int_round_div, is_float
from .forms import FLAT_LANES, MAX_PASS_TAPS, doubling, flat_plane
from .window_reduce import window_max, window_sum
from .windows import may_see_no_data, out_shape, window_count, windows_for

# The operators, and the form thresholds and predicates that tests/test_pass_forms.py reads here.
__all__ = [
    "avg_pool", "average", "global_pool", "lp_pool", "max_pool", "max_pool_windows",
    "FLAT_LANES", "MAX_PASS_TAPS", "doubling", "flat_plane",
]
_may_see_no_data = may_see_no_data  # the name tests/test_robustness.py imports


@layout.with_layout
def max_pool(
    data: te.Tensor,
    kernel_shape: Sequence[int],
    strides=None,
    dilations=None,
    pads=None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
    *,
    return_indices: bool = False,
    storage_order: int = 0,
    index_scope: str = "tensor",
    index_dtype: str = "int64",
    nan_index: str = "first",
):
    """Max pooling; with ``return_indices`` also the position of each maximum.

    Indices: ``index_scope="tensor"`` flattens over the whole tensor (ONNX MaxPool: N*C*spatial),
    ``"plane"`` over the spatial dims of each (n, c) plane (PyTorch, OpenVINO). ``storage_order``
    1 numbers each plane column-major. Ties go to the first element in scan order; NaN wins over
    numbers, and among NaNs the first (``nan_index="first"``, ONNX) or the last (``"last"``,
    PyTorch) wins; a window that sees no data gives -inf (the smallest integer) and index -1.
    """
    windows = windows_for(data, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return max_pool_windows(
        data, windows, return_indices=return_indices, storage_order=storage_order,
        index_scope=index_scope, index_dtype=index_dtype, nan_index=nan_index,
    )


@layout.with_layout
def max_pool_windows(
    data: te.Tensor,
    windows: Sequence[spec.AxisWindow],
    *,
    return_indices: bool = False,
    storage_order: int = 0,
    index_scope: str = "tensor",
    index_dtype: str = "int64",
    nan_index: str = "first",
):
    """:func:`max_pool` over already resolved windows."""
    if return_indices and str(data.dtype) == "bfloat16":
        # TVM 0.27's bfloat16 legalization breaks on the let-bound (value, index) reducer:
        # widen to float32 first (exact), reduce there, narrow the values back (exact too).
        wide = layout.compute(data, data.shape, lambda *i: data[i].astype("float32"), name="widen",
                          attrs=block_attrs("widen", len(windows)))
        values, indices = max_pool_windows(
            wide, windows, return_indices=True, storage_order=storage_order,
            index_scope=index_scope, index_dtype=index_dtype, nan_index=nan_index,
        )
        narrow = layout.compute(values, values.shape, lambda *i: values[i].astype("bfloat16"), name="max_pool_value",
                            attrs=block_attrs("max_index_finalize", len(windows)))
        return narrow, indices
    if not return_indices:
        return window_max(data, windows)
    return argmax(data, windows, storage_order, index_scope, index_dtype, nan_index)


@layout.with_layout
def avg_pool(
    data: te.Tensor,
    kernel_shape: Sequence[int],
    strides=None,
    dilations=None,
    pads=None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
    *,
    count_include_pad: bool = False,
    divisor_override: int | None = None,
    int_rounding: str = "toward_zero",
    by_axis: bool = True,
):
    """Average pooling (``by_axis``: see :func:`window_sum`).

    The divisor counts the taps that land in the data, plus (with ``count_include_pad``) those
    in the explicit or SAME padding, never those in the ceil-mode overhang past the padding.
    float16/bfloat16 accumulate in float32. A window that sees no data and counts no padding
    divides 0 by 0 (NaN), which is what the specification's formula gives. ``divisor_override``
    (PyTorch's avg_pool2d/3d): every window divides by that constant instead. Integer inputs
    divide truncating toward zero, as C++ (and so PyTorch's integer kernels) does, or with
    ``int_rounding="half_away_from_zero"`` round half away from zero (TFLite's quantized
    AVERAGE_POOL_2D; a window that sees no data then averages to 0).
    """
    if int_rounding not in INT_ROUNDINGS:
        raise ValueError(f"int_rounding must be one of {', '.join(INT_ROUNDINGS)}; got {int_rounding!r}")
    windows = windows_for(data, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    finish = average(windows)
    if int_rounding == "half_away_from_zero" and not is_float(data.dtype):
        finish = _round_half_away
    if divisor_override is not None:
        if int(divisor_override) == 0:
            raise ValueError("divisor_override must not be zero")
        finish = _divide_by(int(divisor_override))
    return _windowed_sum_then(data, windows, "avg", finish, count_include_pad, by_axis=by_axis)


INT_ROUNDINGS = ("toward_zero", "half_away_from_zero")


def _round_half_away(total, count):
    acc = str(count.ty)
    return int_round_div(total, tirx.max(count, tirx.const(1, acc)), acc)


def _divide_by(divisor: int):
    def divide(total, count):  # count: only its type (the accumulation type) is used
        return _div(total, tirx.const(divisor, str(count.ty)))

    return divide


def _div(total, count):
    """total / count (both in the accumulation type); integers truncate toward zero (C++, so
    PyTorch's integer avg_pool)."""
    if is_float(str(count.ty)):
        return total / count
    return tirx.truncdiv(total, count)


def average(windows):
    """sum / count; where a window can see nothing, 0/0 must give NaN at run time, and TVM's
    simplifier refuses a division by a constant 0, so the empty case is selected explicitly."""
    if not may_see_no_data(windows):
        return _div

    def divide(total, count):
        nan = tirx.const(float("nan"), str(count.ty))  # count is already in the accumulation type
        one = tirx.const(1, str(count.ty))
        return tirx.Select(count > tirx.const(0, str(count.ty)), total / tirx.max(count, one), nan)

    return divide


@layout.with_layout
def lp_pool(
    data: te.Tensor,
    kernel_shape: Sequence[int],
    strides=None,
    dilations=None,
    pads=None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
    *,
    p: float = 2.0,
):
    """Lp pooling: (sum over the window of |x|^p)^(1/p); padding contributes 0."""
    windows = windows_for(data, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return _lp(data, windows, p)


def _lp(data, windows, p, by_axis=True):
    p = float(p)
    if p <= 0:
        raise ValueError(f"Lp pooling needs p > 0, got {p}")
    acc = accumulate_dtype(data.dtype)

    def power(x):
        x = tirx.abs(x.astype(acc))
        if p == 1.0:
            return x
        if p == 2.0:
            return x * x
        return tirx.power(x, tirx.const(p, acc))

    def root(total, _count):
        if p == 1.0:
            return total
        if p == 2.0:
            return tirx.sqrt(total)
        return tirx.power(total, tirx.const(1.0 / p, acc))

    return _windowed_sum_then(data, windows, "lp", root, False, map_input=power, by_axis=by_axis)


def _windowed_sum_then(data, windows, kind, finish, count_include_pad, map_input=None, by_axis=True):
    """A windowed sum in the accumulation type, then ``finish(sum, count)`` per output."""
    rank = len(windows)
    acc = accumulate_dtype(data.dtype)
    shape = out_shape(data, windows)
    lead = len(data.shape) - rank
    total = window_sum(data, windows, f"{kind}_sum", f"{kind}_pool_sum", map_input, by_axis)

    def finalize(*out_idx):
        count = window_count(windows, out_idx[lead:], count_include_pad).astype(acc)
        return finish(total[out_idx], count).astype(data.dtype)

    return layout.compute(data, shape, finalize, name=f"{kind}_pool", attrs=block_attrs(f"{kind}_finalize", rank))


@layout.with_layout
def global_pool(data: te.Tensor, kind: str, spatial_rank: int | None = None, p: float = 2.0, by_axis: bool = True):
    """GlobalMaxPool / GlobalAveragePool / GlobalLpPool: one window over all spatial axes
    (``by_axis``: see :func:`window_sum`)."""
    spatial_rank = spatial_rank or len(data.shape) - 2
    windows = spec.global_windows(data.shape[len(data.shape) - spatial_rank :])
    if kind == "max":
        return max_pool_windows(data, windows)
    if kind == "avg":
        return _windowed_sum_then(data, windows, "avg", average(windows), False, by_axis=by_axis)
    if kind == "lp":
        return _lp(data, windows, p, by_axis)
    raise ValueError(f"unknown global pool kind {kind!r}")
