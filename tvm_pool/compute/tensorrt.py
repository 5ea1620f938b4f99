"""TensorRT IPoolingLayer compute: MAX, AVERAGE and MAX_AVERAGE_BLEND over 2-D or 3-D windows.

Geometry (padding modes, output sizes) is :func:`tvm_pool.spec.trt_windows`; the window max and
sum are :mod:`tvm_pool.compute.window_reduce`'s, the divisor counts
:func:`tvm_pool.compute.windows.window_count`'s.

Semantics (docs/tensorrt_and_openvino.md):

- MAX: the largest data value of the window; padding never takes part (NaN propagates). A window
  that sees no data gives -inf (the smallest integer for int8).
- AVERAGE: window sum / divisor. ``average_count_excludes_padding`` (TensorRT's default, true)
  divides by the taps that land in the data; otherwise by the taps in
  ``[-pad_begin, in + pad_end)`` (data and padding, not an EXPLICIT_ROUND_UP overhang past the
  post padding; for CAFFE modes this is exactly Caffe's ``pool_size``).
- MAX_AVERAGE_BLEND: ``(1 - blend_factor) * max + blend_factor * average``.
- float16 sums and blends in float32 and rounds once to float16. int8 sums in int32; AVERAGE
  rounds the exact quotient half away from zero; the blend is formed in float32 from the exact
  quotient, ``(1 - b) * max * count + b * sum`` then divided by count (exact for dyadic b), and
  rounded half away from zero; results saturate to [-128, 127]. An integer window
  with a zero divisor averages to 0 (a float one gives NaN, 0/0).

Block kinds: ``trt_max`` (window max), ``trt_avg_sum`` (window sum in the accumulation type),
``trt_finalize`` (divide / blend / round / saturate; elementwise).
"""

from __future__ import annotations

from typing import Sequence

from tvm import te, tirx

from .. import spec
from . import layout
from .common import accumulate_dtype, block_attrs, int_round_div, is_float
from .pool import average
from .window_reduce import window_max, window_sum
from .windows import out_shape, window_count

POOLING_TYPES = ("MAX", "AVERAGE", "MAX_AVERAGE_BLEND")
DTYPES = ("float32", "float16", "int8")


def tensorrt_windows(data: te.Tensor, window_size, stride, pre_padding, post_padding, padding_mode):
    rank = len(window_size)
    spatial = list(data.shape[len(data.shape) - rank :])
    return spec.trt_windows(spatial, window_size, stride, pre_padding, post_padding, padding_mode)


def check_arguments(
    ndim: int, dtype: str, pooling_type: str, window_size, stride, pre_padding, post_padding, padding_mode, blend_factor
):
    """Validate a TensorRT pooling layer's arguments; raise ValueError naming what is wrong."""
    rank = len(window_size)
    if pooling_type not in POOLING_TYPES:
        raise ValueError(f"pooling_type must be one of {', '.join(POOLING_TYPES)}, got {pooling_type!r}")
    if padding_mode not in spec.TRT_PADDING_MODES:
        raise ValueError(f"padding_mode must be one of {', '.join(spec.TRT_PADDING_MODES)}, got {padding_mode!r}")
    if rank not in (2, 3):
        raise ValueError(f"window_size must have 2 or 3 values (2-D or 3-D windows), got {list(window_size)}")
    if ndim < rank + 1:
        raise ValueError(f"input of rank {ndim} is too small for a {rank}-D window (needs rank >= {rank + 1})")
    for name, values, minimum in (
        ("window_size", window_size, 1),
        ("stride", stride, 1),
        ("pre_padding", pre_padding, 0),
        ("post_padding", post_padding, 0),
    ):
        if len(values) != rank:
            raise ValueError(f"{name} has {len(values)} values; window_size has {rank}")
        if any(int(v) < minimum for v in values):
            raise ValueError(f"{name} values must be >= {minimum}, got {list(values)}")
    if not 0.0 <= float(blend_factor) <= 1.0:
        raise ValueError(f"blend_factor must be in [0, 1], got {blend_factor}")
    if str(dtype) not in DTYPES:
        raise ValueError(f"input type {dtype} is not supported; TensorRT pooling allows {', '.join(DTYPES)}")


@layout.with_layout
def tensorrt_pool(
    data: te.Tensor,
    pooling_type: str,
    window_size: Sequence[int],
    stride: Sequence[int] | None = None,
    pre_padding: Sequence[int] | None = None,
    post_padding: Sequence[int] | None = None,
    padding_mode: str = "EXPLICIT_ROUND_DOWN",
    blend_factor: float = 0.0,
    average_count_excludes_padding: bool = True,
):
    """TensorRT IPoolingLayer over the last ``len(window_size)`` axes (2 or 3)."""
    rank = len(window_size)
    stride = list(stride) if stride is not None else [1] * rank
    pre_padding = list(pre_padding) if pre_padding is not None else [0] * rank
    post_padding = list(post_padding) if post_padding is not None else [0] * rank
    check_arguments(
        len(data.shape), data.dtype, pooling_type, window_size, stride, pre_padding, post_padding,
        padding_mode, blend_factor,
    )
    windows = tensorrt_windows(data, window_size, stride, pre_padding, post_padding, padding_mode)
    for axis, w in enumerate(windows):
        if spec.is_static(w.out_size) and spec.as_dim(w.out_size) < 1:
            raise ValueError(f"spatial axis {axis}: output size {w.out_size} < 1 (input {w.in_size}, {padding_mode})")
    dtype = str(data.dtype)
    shape = out_shape(data, windows)
    lead = len(data.shape) - rank

    maxed = window_max(data, windows, "trt_max", "trt_pool_max") if pooling_type != "AVERAGE" else None
    if pooling_type == "MAX":
        return maxed
    total = window_sum(data, windows, "trt_avg_sum", "trt_pool_sum")
    acc = accumulate_dtype(dtype)
    integer = not is_float(dtype)
    blend = float(blend_factor)

    divide = average(windows)  # NaN for a float window that sees nothing (no constant 0 divisor)

    def finalize(*out_idx):
        count = window_count(windows, out_idx[lead:], not average_count_excludes_padding).astype(acc)
        if pooling_type == "AVERAGE" and integer:
            count = tirx.max(count, tirx.const(1, acc))  # an empty window averages to 0
            return _saturate(int_round_div(total[out_idx], count.astype(acc), acc), dtype)
        if integer:  # MAX_AVERAGE_BLEND on int8
            count = tirx.max(count, tirx.const(1, acc)).astype("float32")  # empty: avg part 0
            # v = num / count with num = (1 - b) * max * count + b * sum: exact in float32 for
            # dyadic b, so the rounding below is exact there (docs/tensorrt_and_openvino.md).
            num = (
                tirx.const(1.0 - blend, "float32") * maxed[out_idx].astype("float32") * count
                + tirx.const(blend, "float32") * total[out_idx].astype("float32")
            )
            mag = tirx.floor((tirx.abs(num) + tirx.const(0.5, "float32") * count) / count)
            rounded = tirx.Select(num < tirx.const(0.0, "float32"), -mag, mag).astype("int32")
            return _saturate(rounded, dtype)
        avg = divide(total[out_idx], count.astype(acc))
        if pooling_type == "MAX_AVERAGE_BLEND":
            avg = tirx.const(1.0 - blend, acc) * maxed[out_idx].astype(acc) + tirx.const(blend, acc) * avg
        return avg.astype(dtype)

    return layout.compute(data, shape, finalize, name="trt_pool", attrs=block_attrs("trt_finalize", rank))


def _saturate(x, dtype):
    lo, hi = tirx.min_value(dtype).astype(str(x.ty)), tirx.max_value(dtype).astype(str(x.ty))
    return tirx.max(tirx.min(x, hi), lo).astype(dtype)
