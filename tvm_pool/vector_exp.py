"""``exp`` and ``sigmoid`` of float32 on CPUs as arithmetic that vectorises (Cephes' ``expf``).

TVM lowers ``tirx.exp`` (and ``tirx.sigmoid``, ``1 / (1 + exp(-x))``) on LLVM CPU targets to
LLVM's ``exp`` intrinsic, which x86 and aarch64 have no instruction for: inside a vectorised loop
every lane becomes a call to libm's ``expf``. A SiLU (``x * sigmoid(x)``) over 1x96x112x112 took
8.7 ms at 2 threads on an Intel Emerald Rapids, and EfficientNet-B0, whose every convolution
but the last ends in one, ran at 3.6x onnxruntime's latency (issue 38).

Here each float32 ``exp(x)`` becomes Cephes' ``expf``: ``n = floor(x log2(e) + 1/2)``,
``r = x - n ln(2)`` (ln 2 in two parts, so ``n ln(2)`` is exact), a degree-7 polynomial in
``r``, and ``2^n`` as two exponent fields (each of ``n``'s halves a normal float, so a result
in the subnormal range is rounded once, and one past the largest float overflows to infinity).
Measured against float64 over every float32 of [-104, 89] (``tests/test_vector_exp.py``): at
most 2 units in the last place, infinity above ``ln(FLT_MAX)``, 0 below ``ln`` of half the
least subnormal, NaN for NaN (libm's ``expf``: within 1 unit).

The pass runs in ``compile``'s Relax pipeline after the tuning records and schedules are applied
(their workloads, and so the records' lookup, still hold the plain ``exp``), and before TIR's
vectoriser, so a rewritten ``exp`` is scalar arithmetic that TVM or LLVM vectorises. Other
dtypes and GPU targets keep TVM's lowering.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

_EXP = tvm.ir.Op.get("tirx.exp")
_SIGMOID = tvm.ir.Op.get("tirx.sigmoid")

LOG2E = 1.44269504088896341
LN2_HI = 0.693359375  # ln(2) = LN2_HI + LN2_LO, LN2_HI with 9 significant bits (n LN2_HI is exact)
LN2_LO = -2.12194440e-4
# Cephes expf: exp(r) = 1 + r + r^2 P(r) on [-ln(2)/2, ln(2)/2]
POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
# Past these exp(x) is infinity (ln(FLT_MAX) = 88.72) and 0 (ln(2^-150) = -103.97): x is clamped
# into them so that n and its halves stay in range.
HIGH = 88.8
LOW = -104.0


def _f32(value: float):
    return tirx.const(value, "float32")


def _power_of_two(k):
    """2^k for an int32 ``k`` in [-126, 127], as its float32 bits."""
    return tirx.reinterpret("float32", tirx.shift_left(k + tirx.const(127, "int32"), tirx.const(23, "int32")))


def exp_f32(x):
    """The float32 expression of ``exp(x)`` (``x`` a float32 expression, evaluated once)."""
    v = tirx.Var("exp_x", "float32")
    clamped = tirx.Max(tirx.Min(v, _f32(HIGH)), _f32(LOW))
    n = tirx.Var("exp_n", "float32")
    r = tirx.Var("exp_r", "float32")
    poly = _f32(POLY[0])
    for c in POLY[1:]:
        poly = poly * r + _f32(c)
    y = poly * r * r + r + _f32(1.0)
    k = tirx.Var("exp_k", "int32")
    half = tirx.shift_right(k, tirx.const(1, "int32"))  # floor(k / 2): both halves in [-75, 64]
    value = y * _power_of_two(half) * _power_of_two(k - half)
    body = tirx.Let(n, tirx.floor(clamped * _f32(LOG2E) + _f32(0.5)),
                    tirx.Let(r, clamped - n * _f32(LN2_HI) - n * _f32(LN2_LO),
                             tirx.Let(k, tirx.Cast("int32", n), value)))
    return tirx.Let(v, x, tirx.Select(tirx.isnan(v), v, body))


def _rewrite(call):
    if str(call.ty) != "float32" or len(call.args) != 1:
        return call
    if call.op.same_as(_EXP):
        return exp_f32(call.args[0])
    if call.op.same_as(_SIGMOID):
        return _f32(1.0) / (_f32(1.0) + exp_f32(-call.args[0]))
    return call


def rewrite_function(func):
    """``func`` with its float32 ``exp`` and ``sigmoid`` calls as :func:`exp_f32` arithmetic."""
    return tvm_ffi.structural_map(func, (tvm.ir.expr.Call, _rewrite))


def applies(target) -> bool:
    """CPU (LLVM) targets: the ones whose ``exp`` is a libm call per lane."""
    return target.kind.name == "llvm"


# :func:`rewrite_function` over every PrimFunc of a (Relax) module
vector_exp_pass = tirx.transform.prim_func_pass(lambda func, _mod, _ctx: rewrite_function(func),
                                                opt_level=0, name="tvm_pool.VectorExp")
