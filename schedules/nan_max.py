"""The NaN-propagating float max as two plain maxima and an OR (lowering for x86).

tvm_pool's computes write the NaN-propagating max target-neutrally: ``Select(isnan(a) or
isnan(b) ..., nan, max(max(a, b), ...))`` for the taps of a window or pass (or, for clamped
channel-last taps, ``Select(not (isnan(a) or isnan(b)) and ..., max(...), nan)``), and
``Select(a > b or isnan(a), a, b)`` for a reduction's combiner. x86 has no NaN-propagating max
before AVX10.2; LLVM builds the select from a compare per tap into a mask register, a mask OR
per tap and a blend. x86's MAXPS returns its second operand when either is NaN, so of
``max(a, b)`` and ``max(b, a)`` (TVM's float max is ``a > b ? a : b``, which is MAXPS) one is
the NaN whenever either operand is one, and where neither is they are equal:

    maximum(a, b) = bits(max(a, b)) | bits(max(b, a))

The OR of a NaN with any float is a NaN (the exponent stays all ones and the mantissa
nonzero); of two equal values it is that value, except that ``+0.0`` and ``-0.0`` give
``-0.0`` (docs/conformance.md: the float max gives either zero). A NaN result keeps a NaN's
payload ORed with the other operand's bits instead of the canonical quiet NaN (no spec fixes a
payload). Three vector operations per tap and no mask register: on AVX-512, whose 7 mask
registers the select's tests of a pass row of several registers spill, the 3x3 s2 max over
8x96x109x109 (a first pass over 109-lane rows) went from 3.11 to 2.26 ms at 1 thread; over
rows of one register the select is faster (``CpuConfig.nan_max_or_bits`` sets the vector size
from which the rewrite applies; schedules/x86.py has the measurements).

This pass rewrites exactly those Select shapes, operand by operand, after TVM's TIR pipeline
(the vector types are final there); each operand is bound once (``Let``), so a tap read
through ``if_then_else`` is not evaluated twice. Scalar Selects and anything else stay as they
are. The expression mutator is tvm_ffi's ``structural_map``.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import tirx

__all__ = ["rewrite_function", "or_max_pass", "match"]

_ISNAN = tvm.ir.Op.get("tirx.isnan")
_BITS = {"float16": "int16", "bfloat16": "int16", "float32": "int32", "float64": "int64"}


def _or_terms(cond) -> list:
    if isinstance(cond, tirx.Or):
        return _or_terms(cond.a) + _or_terms(cond.b)
    return [cond]


def _is_max_of(expr, leaves) -> bool:
    """Is ``expr`` a tree of maxima whose leaves, in order, are ``leaves`` (a leaf may itself
    be a max: a fused producer's ReLU)?"""
    if len(leaves) == 1:
        return tvm_ffi.structural_equal(expr, leaves[0])
    if not isinstance(expr, tirx.Max):
        return False
    # the right side first, the longest prefix first: a left-folded chain of taps is linear
    return any(_is_max_of(expr.b, leaves[i:]) and _is_max_of(expr.a, leaves[:i]) for i in range(len(leaves) - 1, 0, -1))


def _is_nan_const(expr) -> bool:
    if isinstance(expr, tirx.Broadcast):
        expr = expr.value
    return isinstance(expr, tirx.FloatImm) and math.isnan(expr.value)


def _tested(term):
    """The operand of ``isnan(x)`` (of ``x`` broadcast, for ``Broadcast(isnan(c))``), else None."""
    if isinstance(term, tirx.Broadcast):
        inner = _tested(term.value)
        return None if inner is None else tirx.Broadcast(inner, term.lanes)
    if isinstance(term, tvm.ir.expr.Call) and term.op.same_as(_ISNAN) and len(term.args) == 1:
        return term.args[0]
    return None


def _dtype(expr) -> str:
    return str(expr.ty)


def _and_terms(cond) -> list:
    if isinstance(cond, tirx.And):
        return _and_terms(cond.a) + _and_terms(cond.b)
    return [cond]


def _all_tested(terms) -> list | None:
    """The operands of ``isnan(a) or isnan(b) ...``, in order, or None."""
    tested = [_tested(t) for t in terms]
    return None if any(t is None for t in tested) else tested


def _same(a, b) -> bool:
    return len(a) == len(b) and all(tvm_ffi.structural_equal(x, y) for x, y in zip(a, b))


def _taps_max(tested, result):
    """``tested`` when ``result`` is the max of exactly those taps, else None."""
    return tested if tested is not None and len(tested) >= 2 and _is_max_of(result, tested) else None


def match(select):
    """The operands of a NaN-propagating max Select (in order), or None when it is not one."""
    if _is_nan_const(select.true_value):  # Select(isnan(a) or isnan(b) ..., nan, max(a, b, ...))
        return _taps_max(_all_tested(_or_terms(select.condition)), select.false_value)
    if _is_nan_const(select.false_value):  # Select(not (isnan(a) or isnan(b)) and ..., max(...), nan)
        pairs = _and_terms(select.condition)
        if not all(isinstance(p, tirx.Not) for p in pairs):
            return None
        tested = [_all_tested(_or_terms(p.a)) for p in pairs]
        if any(t is None for t in tested):
            return None
        return _taps_max(sum(tested, []), select.true_value)
    terms = _or_terms(select.condition)
    a, b = select.true_value, select.false_value  # Select(a > b or isnan(a), a, b)
    if len(terms) != 2 or not isinstance(terms[0], tirx.GT):
        return None
    nan_of = _tested(terms[1])
    if nan_of is None or not tvm_ffi.structural_equal(nan_of, a):
        return None
    return [a, b] if _same([terms[0].a, terms[0].b], [a, b]) else None


def _scalar(dtype: str) -> str:
    return dtype.split("x")[0]


def _or_max(a, b, dtype: str):
    lanes = dtype[len(_scalar(dtype)):]
    bits = _BITS[_scalar(dtype)] + lanes
    either = tirx.bitwise_or(tirx.reinterpret(bits, tirx.Max(a, b)), tirx.reinterpret(bits, tirx.Max(b, a)))
    return tirx.reinterpret(dtype, either)


def _bound(values, dtype: str, acc=None, index: int = 0):
    """``let v = values[0] in let r = or_max(acc, v) in ...``: each operand and partial max once."""
    if index == len(values):
        return acc
    value = values[index]
    if isinstance(value, (tirx.Var, tirx.FloatImm, tirx.Broadcast)):
        leaf = value
        wrap = None
    else:
        leaf = tirx.Var(f"nan_max_tap{index}", dtype)
        wrap = value
    if acc is None:
        body = _bound(values, dtype, leaf, index + 1)
    else:
        partial = tirx.Var(f"nan_max_{index}", dtype)
        rest = _bound(values, dtype, partial, index + 1)
        body = tirx.Let(partial, _or_max(acc, leaf, dtype), rest)
    return tirx.Let(leaf, wrap, body) if wrap is not None else body


def _vector_bits(dtype: str) -> int:
    """Bits of a vector dtype ("float32x109": 3488); 0 for a scalar."""
    if "x" not in dtype:
        return 0
    scalar, lanes = dtype.split("x")
    return int(lanes) * int(_BITS[scalar][3:])


def _rewrite(select, min_bits: int):
    dtype = _dtype(select)  # the dtype first: matching compares every tap
    if _scalar(dtype) not in _BITS or _vector_bits(dtype) < max(min_bits, 1):
        return select
    leaves = match(select)
    return select if leaves is None else _bound(leaves, dtype)


def rewrite_function(func, min_bits: int):
    """``func`` with its NaN-propagating max Selects over vectors of at least ``min_bits`` bits
    as plain maxima ORed."""
    return tvm_ffi.structural_map(func, (tirx.Select, lambda select: _rewrite(select, min_bits)))


def or_max_pass(min_bits: int):
    """The pass of :func:`rewrite_function` over every PrimFunc (after TVM's TIR pipeline)."""
    return tirx.transform.prim_func_pass(lambda func, _mod, _ctx: rewrite_function(func, min_bits),
                                         opt_level=0, name=f"tvm_pool.NanMaxAsOr{min_bits}")
