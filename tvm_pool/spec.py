"""Spec formulas: output sizes, padding and window geometry for every pooling operator.

This is the one place where pooling geometry is written down. Every compute (ONNX, OpenVINO,
TensorRT), every frontend converter and every target uses it. Each function works on plain
Python ints and on symbolic TIR expressions (``tvm.tirx.Var`` sizes) alike: integer arithmetic
goes through the small helpers below, which fold to ints when every operand is an int.

Where the specification texts and the runtimes disagree, the choice made here is recorded in
``docs/conformance.md`` next to the test that pins it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

from tvm import tirx

Dim = Union[int, tirx.Expr]

AUTO_PAD_MODES = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


# --------------------------------------------------------------------------------------------
# Integer arithmetic that works on ints and on symbolic dims.
# --------------------------------------------------------------------------------------------


def as_dim(x) -> Dim:
    """Turn IntImm and numpy integers into int; leave symbolic expressions as they are."""
    if isinstance(x, tirx.IntImm):
        return int(x.value)
    if isinstance(x, tirx.Expr):
        return x
    return int(x)


def is_static(*xs) -> bool:
    return all(isinstance(as_dim(x), int) for x in xs)


def _i64(x):
    """A symbolic operand as int64 so mixed int32/int64 arithmetic never mismatches."""
    if isinstance(x, int):
        return tirx.const(x, "int64")
    return x if str(x.ty) == "int64" else x.astype("int64")


def floordiv(a: Dim, b: Dim) -> Dim:
    a, b = as_dim(a), as_dim(b)
    if is_static(a, b):
        return a // b
    return tirx.floordiv(_i64(a), _i64(b))


def ceildiv(a: Dim, b: Dim) -> Dim:
    """ceil(a / b) for b > 0."""
    a, b = as_dim(a), as_dim(b)
    if is_static(a, b):
        return -(-a // b)
    return tirx.floordiv(_i64(a) + _i64(b) - 1, _i64(b))


def maximum(a: Dim, b: Dim) -> Dim:
    a, b = as_dim(a), as_dim(b)
    if is_static(a, b):
        return max(a, b)
    return tirx.max(_i64(a), _i64(b))


def minimum(a: Dim, b: Dim) -> Dim:
    a, b = as_dim(a), as_dim(b)
    if is_static(a, b):
        return min(a, b)
    return tirx.min(_i64(a), _i64(b))


def effective_kernel(kernel: int, dilation: int) -> int:
    """Extent of a dilated window: (kernel - 1) * dilation + 1."""
    return (kernel - 1) * dilation + 1


# --------------------------------------------------------------------------------------------
# Sliding windows (ONNX MaxPool / AveragePool / LpPool, TensorRT pooling).
# --------------------------------------------------------------------------------------------


# Positions that may come within this of 2^31 are computed in int64 (AxisWindow._wide).
_INT32_HEADROOM = 2**31 - 2**16


@dataclass(frozen=True)
class AxisWindow:
    """The resolved window geometry of one spatial axis.

    Output position ``o`` reads input positions ``o * stride - pad_begin + r * dilation`` for
    ``r`` in ``[0, kernel)``; positions outside ``[0, in_size)`` are padding.
    ``pad_end`` is the explicit (or SAME) padding after the data; windows may also overhang past
    it in ceil mode, and that overhang is neither data nor padding.
    """

    in_size: Dim
    kernel: int
    stride: int
    dilation: int
    pad_begin: Dim
    pad_end: Dim
    out_size: Dim

    def start(self, o):
        """First input position of window ``o`` (may be negative: inside the begin padding)."""
        return self._wide(o) * self.stride - self.pad_begin

    def tap(self, o, r):
        """Input position of tap ``r`` of window ``o``."""
        return self.start(o) + self._wide(r) * self.dilation

    def _wide(self, var):
        """``var`` in int64 where positions of this axis may leave int32.

        TE gives loops over an extent below 2^31 int32 variables, and TVM's simplifier rewrites
        a bound test such as ``pos - 1 < 2^31 - 1`` into ``pos < 2^31`` in the variable's type:
        in int32 that wraps, the test becomes false and a MaxPool over an axis of 2^31 - 1
        never read its input. Positions are computed in int64 whenever this axis's positions,
        padding included, come within reach of 2^31 (a static check on the geometry)."""
        if isinstance(var, int) or not isinstance(var, tirx.Expr) or str(var.ty) == "int64":
            return var
        if not is_static(self.in_size, self.pad_begin, self.pad_end, self.out_size):
            return var.astype("int64")
        reach = (
            abs(as_dim(self.in_size)) + abs(as_dim(self.pad_begin)) + abs(as_dim(self.pad_end))
            + (as_dim(self.out_size) + 1) * self.stride + (self.kernel + 1) * self.dilation
        )
        return var.astype("int64") if reach >= _INT32_HEADROOM else var


def explicit_output_size(
    in_size: Dim, kernel: int, stride: int, dilation: int, pad_begin: Dim, pad_end: Dim,
    ceil_mode: bool,
) -> Dim:
    """Output size with explicit padding (ONNX ``auto_pad=NOTSET``, TensorRT EXPLICIT_*).

    floor((in + pads - dilated_kernel) / stride) + 1, or ceil(...) + 1 in ceil mode. In ceil
    mode a last window that would start inside the end padding is dropped: ONNX opset 22 writes
    this rule down, and every runtime (onnxruntime, PyTorch, onnx.reference) applies it at every
    opset, so we do too (docs/conformance.md, "windows starting in the end padding").
    """
    span = as_dim(in_size) + as_dim(pad_begin) + as_dim(pad_end) - effective_kernel(kernel, dilation)
    if not ceil_mode:
        return floordiv(span, stride) + 1
    out = ceildiv(span, stride) + 1
    if is_static(out, in_size, pad_begin):
        return out - 1 if (out - 1) * stride >= in_size + pad_begin else out
    starts_in_padding = (_i64(as_dim(out)) - 1) * stride >= _i64(as_dim(in_size)) + _i64(as_dim(pad_begin))
    return _i64(out) - tirx.Select(starts_in_padding, tirx.const(1, "int64"), tirx.const(0, "int64"))


def same_output_size(in_size: Dim, stride: int) -> Dim:
    """SAME_UPPER / SAME_LOWER: ceil(in / stride), whatever ceil_mode says (every opset's text)."""
    return ceildiv(in_size, stride)


def same_padding(
    in_size: Dim, kernel: int, stride: int, dilation: int, mode: str, clamp: bool = False
) -> tuple[Dim, Dim]:
    """(pad_begin, pad_end) for SAME_UPPER / SAME_LOWER.

    total = (out - 1) * stride + dilated_kernel - in, with the *dilated* kernel as the spec
    writes it (onnxruntime uses the undilated one). The total is split as the ONNX text says:
    equally, the odd one going to the end for SAME_UPPER and to the beginning for SAME_LOWER,
    i.e. ``floor(total / 2)`` on the other side.

    The total goes negative when the dilated kernel is shorter than the stride (in 9, stride 3,
    kernel 1: -2). ONNX then uses it as written (docs/conformance.md row 4): a negative begin pad
    shifts every window into the data (pads (-1, -1): windows start at 1, 4, 7), which is what
    onnxruntime and onnx.reference compute; a negative end pad only says the last taps stay
    short of the end. ``clamp=True`` clamps the total at 0 instead (TensorRT's SAME modes,
    docs/tensorrt_and_openvino.md, like TensorFlow).
    """
    out = same_output_size(in_size, stride)
    total = (out - 1) * stride + effective_kernel(kernel, dilation) - as_dim(in_size)
    if clamp:
        total = maximum(total, 0)
    small = floordiv(total, 2)
    large = total - small
    if mode == "SAME_UPPER":
        return small, large
    if mode == "SAME_LOWER":
        return large, small
    raise ValueError(f"not a SAME mode: {mode}")


def valid_output_size(in_size: Dim, kernel: int, stride: int, dilation: int) -> Dim:
    """VALID: floor((in - dilated_kernel) / stride) + 1, with no padding.

    The opset 10-22 texts write the ceil_mode variant as ceil((in - dilated_kernel + 1) / stride),
    which is the same integer, so ceil_mode never changes a VALID output size. (AveragePool-11's
    floor variant ``floor((in - k + 1) / s)`` is a typo in that text: it undercounts windows when
    stride divides ``in - k + 1``; we follow the later, corrected text.)
    """
    return floordiv(as_dim(in_size) - effective_kernel(kernel, dilation), stride) + 1


def resolve_windows(
    spatial_shape: Sequence[Dim],
    kernel_shape: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[Dim],
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
) -> list[AxisWindow]:
    """Resolve every spatial axis of an N-d pooling window.

    ``pads`` uses the ONNX layout [x1_begin, x2_begin, ..., x1_end, x2_end, ...].
    """
    rank = len(kernel_shape)
    windows = []
    for i in range(rank):
        in_size = as_dim(spatial_shape[i])
        k, s, d = int(kernel_shape[i]), int(strides[i]), int(dilations[i])
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            pb, pe = same_padding(in_size, k, s, d, auto_pad)
            out = same_output_size(in_size, s)
        elif auto_pad == "VALID":
            pb, pe = 0, 0
            out = valid_output_size(in_size, k, s, d)
        elif auto_pad == "NOTSET":
            pb, pe = as_dim(pads[i]), as_dim(pads[i + rank])
            out = explicit_output_size(in_size, k, s, d, pb, pe, ceil_mode)
        else:
            raise ValueError(f"auto_pad must be one of {AUTO_PAD_MODES}, got {auto_pad!r}")
        windows.append(AxisWindow(in_size, k, s, d, pb, pe, out))
    return windows


def global_windows(spatial_shape: Sequence[Dim]) -> list[AxisWindow]:
    """Global pooling: one window covering each whole axis.

    The kernel of a symbolic axis is symbolic; ``kernel`` then holds the expression.
    """
    return [AxisWindow(as_dim(n), as_dim(n), 1, 1, 0, 0, 1) for n in spatial_shape]


def window_tap_count(w: AxisWindow, o, lo: Dim, hi: Dim):
    """How many taps of window ``o`` land in ``[lo, hi)`` (a closed form, no loop).

    Used for average-pool divisors: ``[0, in)`` counts data only, ``[-pad_begin, in + pad_end)``
    counts data and padding but not the ceil-mode overhang.
    """
    start = w.start(o)
    first = maximum(ceildiv(as_dim(lo) - start, w.dilation), 0)
    last = minimum(floordiv(as_dim(hi) - 1 - start, w.dilation), w.kernel - 1)
    return maximum(last - first + 1, 0)


# --------------------------------------------------------------------------------------------
# Adaptive pooling bins (OpenVINO AdaptiveMaxPool-8 / AdaptiveAvgPool-8, PyTorch adaptive pools).
# --------------------------------------------------------------------------------------------


def adaptive_bin(i, in_size: Dim, out_size: Dim):
    """Bin ``i`` of ``out_size`` bins over ``in_size``: [floor(i*In/Out), ceil((i+1)*In/Out))."""
    start = floordiv(i * in_size, out_size)
    end = ceildiv((i + 1) * in_size, out_size)
    return start, end


def adaptive_max_bin_size(in_size: int, out_size: int) -> int:
    """The widest bin over all ``i`` (a static bound for reduction loops)."""
    return max(
        ceildiv((i + 1) * in_size, out_size) - floordiv(i * in_size, out_size) for i in range(out_size)
    )


def adaptive_bin_bound(in_size: Dim, out_size: Dim) -> Dim:
    """An upper bound on every bin width that holds for runtime sizes: ceil(In/Out) + 1."""
    return ceildiv(in_size, out_size) + 1


# --------------------------------------------------------------------------------------------
# TensorRT IPoolingLayer: padding modes and output sizes (docs/tensorrt_and_openvino.md).
# --------------------------------------------------------------------------------------------

TRT_PADDING_MODES = (
    "EXPLICIT_ROUND_DOWN",
    "EXPLICIT_ROUND_UP",
    "SAME_UPPER",
    "SAME_LOWER",
    "CAFFE_ROUND_DOWN",
    "CAFFE_ROUND_UP",
)


def trt_output_size(in_size: Dim, window: int, stride: int, pre: Dim, post: Dim, mode: str) -> Dim:
    """Output size of one axis of a TensorRT pooling layer (I = in, F = window, S = stride,
    B = pre, A = post; M = I + B + A), from the PaddingMode text of TensorRT 8's NvInfer.h:

    - EXPLICIT_ROUND_DOWN: O = floor((M - F) / S) + 1
    - EXPLICIT_ROUND_UP:   O = ceil((M - F) / S) + 1   (no "last window starts inside" clip)
    - SAME_UPPER / SAME_LOWER: O = ceil(I / S)
    - CAFFE_ROUND_DOWN / CAFFE_ROUND_UP: padding is symmetric, B on both sides (post_padding is
      ignored: "uses prePadding value"); E = floor / ceil((I + 2B - F) / S) + 1, then
      O = E - ((E - 1) * S >= I + B): Caffe's pooling_layer.cpp rule that the last window starts
      inside the image. Caffe applies it only when pad != 0; TensorRT writes it unconditionally,
      and so do we (the two differ only for B = 0 with S > F).
    """
    in_size, pre, post = as_dim(in_size), as_dim(pre), as_dim(post)
    if mode == "EXPLICIT_ROUND_DOWN":
        return floordiv(in_size + pre + post - window, stride) + 1
    if mode == "EXPLICIT_ROUND_UP":
        return ceildiv(in_size + pre + post - window, stride) + 1
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        return same_output_size(in_size, stride)
    if mode in ("CAFFE_ROUND_DOWN", "CAFFE_ROUND_UP"):
        span = in_size + 2 * pre - window
        est = (floordiv if mode == "CAFFE_ROUND_DOWN" else ceildiv)(span, stride) + 1
        if is_static(est, in_size, pre):
            return est - 1 if (est - 1) * stride >= in_size + pre else est
        starts_outside = (_i64(as_dim(est)) - 1) * stride >= _i64(in_size) + _i64(pre)
        return _i64(as_dim(est)) - tirx.Select(starts_outside, tirx.const(1, "int64"), tirx.const(0, "int64"))
    raise ValueError(f"padding_mode must be one of {TRT_PADDING_MODES}, got {mode!r}")


def trt_padding(in_size: Dim, window: int, stride: int, pre: Dim, post: Dim, mode: str) -> tuple[Dim, Dim]:
    """(pad_begin, pad_end) a TensorRT padding mode resolves to.

    SAME_*: P = floor((I - 1) / S) * S + F - I, which is :func:`same_padding`'s total
    ((ceil(I / S) - 1) * S + F - I); like TensorFlow we clamp P at 0 where the formula goes
    negative (F < S): TensorRT's text does not say what negative padding would do (ONNX's SAME,
    which does not clamp, is docs/conformance.md row 4).
    SAME_UPPER puts floor(P / 2) before, SAME_LOWER after. CAFFE_*: (pre, pre).
    """
    if mode in ("EXPLICIT_ROUND_DOWN", "EXPLICIT_ROUND_UP"):
        return as_dim(pre), as_dim(post)
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        return same_padding(in_size, window, stride, 1, mode, clamp=True)
    if mode in ("CAFFE_ROUND_DOWN", "CAFFE_ROUND_UP"):
        return as_dim(pre), as_dim(pre)
    raise ValueError(f"padding_mode must be one of {TRT_PADDING_MODES}, got {mode!r}")


def trt_windows(
    spatial_shape: Sequence[Dim],
    window_size: Sequence[int],
    stride: Sequence[int],
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    padding_mode: str,
) -> list[AxisWindow]:
    """Resolve every spatial axis of a TensorRT pooling layer into :class:`AxisWindow` s.

    Window ``o`` reads ``[o * S - pad_begin, o * S - pad_begin + F)``; taps outside ``[0, I)``
    are padding (or, in EXPLICIT_ROUND_UP, overhang past the post padding).
    """
    windows = []
    for i, n in enumerate(spatial_shape):
        n = as_dim(n)
        f, s = int(window_size[i]), int(stride[i])
        pb, pe = trt_padding(n, f, s, pre_padding[i], post_padding[i], padding_mode)
        out = trt_output_size(n, f, s, pre_padding[i], post_padding[i], padding_mode)
        windows.append(AxisWindow(n, f, s, 1, pb, pe, out))
    return windows
