"""TFLite's pooling formulas: SAME/VALID geometry, fused-activation ranges, and the fixed-point
arithmetic of LiteRT's integer MEAN (``QuantizeMultiplier``, ``MultiplyByQuantizedMultiplier``
and its NEON twin, the MEAN kernels' constants).

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


# ---------------------------------------------------------------------------------------------
# MEAN over the spatial axes (kernels/reduce.cc): LiteRT's fixed-point arithmetic
# ---------------------------------------------------------------------------------------------

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def wrap_int32(x: int) -> int:
    """``x`` as a C++ int32 holds it (two's complement wrap-around)."""
    return (int(x) + 2**31) % 2**32 - 2**31


def quantize_multiplier(real: float) -> tuple[int, int]:
    """``QuantizeMultiplier`` (kernels/internal/quantization_util.cc), double precision:
    ``q, shift = frexp(real)``, ``q_fixed = std::round(q * 2^31)``; ``q_fixed == 2^31`` halves it
    and adds one to the shift; a shift below -31 flushes to (0, 0). ``real`` = ``q_fixed * 2^(shift
    - 31)`` up to the rounding. (LiteRT's TFLITE_SINGLE_ROUNDING build also caps the shift at 30;
    the double-rounding build, the one pip's LiteRT is, does not.)"""
    real = float(real)
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = round_half_away(q * 2.0**31)  # exact: a power-of-two product
    if q_fixed == 2**31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def saturating_rounding_doubling_high_mul(a: int, b: int) -> int:
    """gemmlowp's ``SaturatingRoundingDoublingHighMul`` (int32): ``(a * b + nudge) / 2^31`` in
    int64, the division truncating toward zero, ``nudge`` = 2^30 for a non-negative product and
    1 - 2^30 for a negative one (so the product rounds half away from zero); INT32_MIN squared
    saturates to INT32_MAX."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = int(a) * int(b)
    nudge = 2**30 if ab >= 0 else 1 - 2**30
    total = ab + nudge
    return total // 2**31 if total >= 0 else -((-total) // 2**31)


def rounding_divide_by_pot(x: int, exponent: int) -> int:
    """gemmlowp's ``RoundingDivideByPOT``: ``x / 2^exponent`` rounded half away from zero
    (an arithmetic shift plus one where the remainder is above the threshold)."""
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def multiply_by_quantized_multiplier(x: int, multiplier: int, shift: int) -> int:
    """``MultiplyByQuantizedMultiplier(int32_t x, ...)`` (kernels/internal/common.cc, the
    double-rounding build): ``RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x * 2^left,
    multiplier), right)`` with ``left = max(shift, 0)``, ``right = max(-shift, 0)``; ``x *
    2^left`` wraps in int32 as the C++ does."""
    left, right = max(shift, 0), max(-shift, 0)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(wrap_int32(x * (1 << left)), multiplier), right)


def mean_reference_multiplier(in_scale, out_scale, count: int) -> tuple[int, int]:
    """(multiplier, shift) of the reference integer MEAN (``PrepareMeanOrSum`` in
    kernels/reduce.cc, then ``reference_ops::QuantizedMeanOrSum`` in
    kernels/internal/reference/reduce.h): ``QuantizeMultiplier(double(in_scale) /
    double(out_scale))``, then the 1/count folded in: ``s = min(floor(log2(count)), 32, 31 +
    shift)``, ``multiplier = (int64(multiplier) << s) / count`` (truncating), ``shift -= s``.
    The output is ``MultiplyByQuantizedMultiplier(int32(sum - in_zero_point * count),
    multiplier, shift) + out_zero_point``, clamped to the type."""
    real = float(np.float32(in_scale)) / float(np.float32(out_scale))
    multiplier, shift = quantize_multiplier(real)
    fold = min(int(count).bit_length() - 1, 32, 31 + shift)
    return int((multiplier << fold) // int(count)), shift - fold


def mean_optimized_parameters(in_scale, in_zero_point: int, out_scale, out_zero_point: int,
                              count: int) -> tuple[int, int, int]:
    """(multiplier, shift, bias) of the optimized int8/uint8 MEAN over H and W of a 4-D tensor
    with keep_dims (``optimized_integer_ops::Mean`` in optimized/integer_ops/mean.h, its uint8
    twin ``optimized_ops::Mean`` in optimized/reduce.h), all in float32 as the C++ computes it:
    ``temp = in_zero_point * in_scale / out_scale``, rounded half away from zero by ``+-0.5f``
    and a truncating cast, ``bias = out_zero_point - temp``; ``QuantizeMultiplier(in_scale /
    (float(count) * out_scale))``. The output is ``MultiplyByQuantizedMultiplier(sum, multiplier,
    shift) + bias`` on the raw sum (no zero point taken off), clamped to the type."""
    f32 = np.float32
    temp = f32(f32(in_zero_point) * f32(in_scale)) / f32(out_scale)
    temp = f32(temp + f32(0.5)) if temp > 0 else f32(temp - f32(0.5))
    bias = int(out_zero_point) - int(temp)  # static_cast<int32_t>: truncates
    real = f32(in_scale) / f32(f32(count) * f32(out_scale))
    multiplier, shift = quantize_multiplier(float(real))
    return multiplier, shift, bias


def multiply_by_quantized_multiplier_4rows(x: int, multiplier: int, shift: int) -> int:
    """``MultiplyByQuantizedMultiplier4Rows`` (kernels/internal/common.h, double rounding, the
    ``USE_NEON`` path; on x86 LiteRT is built with NEON_2_SSE, which gives ARM's results):
    ``vrshlq_s32(vqrdmulhq_s32(x << left, multiplier), -right)``. ``vqrdmulh`` is ``(2 x m +
    2^31) >> 32`` and ``vrshl`` by ``-right`` is ``(y + 2^(right - 1)) >> right``: both round
    half **up** (toward +inf), where the scalar :func:`multiply_by_quantized_multiplier` rounds
    half away from zero; they differ on negative values at exact halves."""
    left, right = max(shift, 0), max(-shift, 0)
    x = wrap_int32(x * (1 << left))
    if x == multiplier == INT32_MIN:
        y = INT32_MAX
    else:
        y = (2 * x * int(multiplier) + 2**31) >> 32
    return (y + (1 << (right - 1))) >> right if right else y
