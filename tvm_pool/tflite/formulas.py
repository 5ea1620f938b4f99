"""TFLite's pooling formulas: SAME/VALID geometry and fused-activation ranges.

TFLite-specific, so they live here rather than in :mod:`tvm_pool.spec` (which holds the ONNX,
OpenVINO and TensorRT formulas, and whose ``same_padding(..., clamp=True)`` is reused for
SAME). Each function transcribes the LiteRT source named in its docstring; plain Python, no
TVM and no ``tflite`` package, so tests and the benchmark can use it too. The choices where
LiteRT's kernels (builtin reference/optimized, XNNPACK), TVM and this module disagree are in
docs/conformance.md, section "TFLite".
"""

from __future__ import annotations

import math

import numpy as np

from .. import spec

# Fused activations of Pool2DOptions that tvm_pool converts (ActivationFunctionType names).
FUSED_ACTIVATIONS = ("NONE", "RELU", "RELU_N1_TO_1", "RELU6")
PADDINGS = ("SAME", "VALID")
# Integer types of TFLite's quantized MAX_POOL_2D / AVERAGE_POOL_2D kernels (pooling.cc).
QUANTIZED_TYPES = ("int8", "uint8", "int16")
_FLOAT_BOUNDS = {"NONE": None, "RELU": (0.0, None), "RELU_N1_TO_1": (-1.0, 1.0), "RELU6": (0.0, 6.0)}


def output_size(padding: str, in_size: int, kernel: int, stride: int) -> int:
    """``ComputeOutSize`` (kernels/padding.h): SAME ``ceil(in / stride)``, VALID
    ``(in - kernel + stride) / stride`` (= ``floor((in - kernel) / stride) + 1``)."""
    if padding == "SAME":
        return spec.same_output_size(in_size, stride)
    return (in_size - kernel + stride) // stride


def same_pads(in_size: int, kernel: int, stride: int) -> tuple[int, int]:
    """``ComputePaddingWithOffset`` (kernels/padding.h): total ``(out - 1) * stride + kernel -
    in`` clamped at 0, ``total / 2`` before and the odd one after (TensorFlow's SAME). A total
    below 0 (stride > kernel) is no padding: the last taps stay short of the end."""
    return spec.same_padding(in_size, kernel, stride, 1, "SAME_UPPER", clamp=True)


def pool_geometry(padding: str, in_hw, filter_hw, stride_hw) -> tuple[list[int], tuple[int, int]]:
    """(pads ``[top, left, bottom, right]`` as the computes take them, output ``(H, W)``)."""
    out = tuple(output_size(padding, n, k, s) for n, k, s in zip(in_hw, filter_hw, stride_hw))
    if padding == "VALID":
        return [0, 0, 0, 0], out
    (top, bottom), (left, right) = (same_pads(n, k, s) for n, k, s in zip(in_hw, filter_hw, stride_hw))
    return [top, left, bottom, right], out


def float_activation_bounds(activation: str):
    """(low, high) of ``CalculateActivationRange<float>`` for the clamping activations (None:
    no bound on that side), or None for NONE. TFLite's kernels also clamp NONE to the float
    range, turning +-inf into +-FLT_MAX; tvm_pool does not (docs/conformance.md, T5)."""
    return _FLOAT_BOUNDS[activation]


def round_half_away(x) -> int:
    """``TfLiteRound`` = ``std::round``: half away from zero (Python's ``round`` rounds half to
    even, which TVM's converter uses: a bug at exact halves)."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def quantize_bound(value: float, scale, zero_point: int) -> int:
    """``Quantize`` in kernels/kernel_util.cc: ``zero_point + (int)TfLiteRound(value / scale)``,
    the division in float32 (``scale`` is the tensor's float32 scale). Raises ValueError where
    TFLite's ``no_integer_overflow_from_quantization`` check fails."""
    quotient = np.float32(value) / np.float32(scale)
    if not np.isfinite(quotient) or not -(2.0**31) <= float(quotient) <= 2.0**31 - 1:
        raise ValueError(f"{value} / scale {float(np.float32(scale))!r} overflows int32")
    return int(zero_point) + round_half_away(float(quotient))


def quantized_activation_bounds(activation: str, scale, zero_point: int, dtype: str) -> tuple[int, int]:
    """``CalculateActivationRangeQuantized`` (kernels/kernel_util.cc): the fused activation's
    bounds in the output's quantized domain, clamped to the type's range."""
    info = np.iinfo(dtype)
    low, high = int(info.min), int(info.max)
    bounds = _FLOAT_BOUNDS[activation]
    if bounds is None:
        return low, high
    lo, hi = bounds
    low = max(low, quantize_bound(lo, scale, zero_point))
    if hi is not None:
        high = min(high, quantize_bound(hi, scale, zero_point))
    return low, high
