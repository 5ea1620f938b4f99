"""aarch64 CPUs: the facts the shared CPU schedule (:mod:`.cpu`) needs.

A target is aarch64 when its mtriple says so (``aarch64-*``, ``arm64-*``) or it carries the
``arm_cpu`` key. Vectors are 128-bit NEON (SVE is not used: its vector length is unknown at
compile time and TVM 0.27's scalable vectorisation does not cover these reductions).

- float32: 4 lanes; AArch64's FMAX returns NaN when either input is NaN, the semantics tvm_pool's
  max has (``isnan`` select), and LLVM folds the select into it.
- float16: with ``+fullfp16`` (Armv8.2-A, e.g. ``mcpu`` cortex-a76 / neoverse-n1) NEON computes
  8 half lanes natively; without it LLVM widens each half to float32 (4 lanes a register), so the
  tile is sized for that. A half max is computed on int16 keys (``compute.common.half_order``).
- int8 / uint8: 16 lanes (SMAX / UMAX); int16 8 lanes.
- bfloat16 arithmetic goes through float32 (4 lanes).
- No gather, but de-interleaving loads (LD2/LD3/LD4): strided pass rows are TVM-vectorised and
  their strided loads lowered as one contiguous load + shuffle (:mod:`.strided_loads`, after
  TVM's TIR pipeline), which LLVM turns into LDn; a max over both phases of such loads (2x2 s2,
  2x2x2 s2) becomes pairwise FMAXP there; non-overlapping windows over several axes are one
  pass over every tap (``cpu_passes._taps_in_one_pass``).
- Float sums start at -0.0 (:func:`negative_zero_sums`, after scheduling), so LLVM drops each
  first add; vector partial sums are added up by halving vector adds
  (``CpuConfig.halving_lane_sums``) instead of lane by lane.
- No masked loads: the padding is inlined into the first pass, whose row is cut at the
  padding's edges into vector pieces without bounds checks (``cpu_passes._vectorize_padded_row``),
  instead of a copy of every padded plane.
- No gather: a long sum over contiguous taps (a 1-D window of more than 16 taps, a whole plane)
  is reassociated into vector partial sums (``cpu_reduction._vector_partial_sums``; a few ulp from the
  in-order sum, within the tests' tolerances; x86 does the same with 8 lanes), a global
  average rebuilt as one reduction for it (:func:`whole_plane_sums`); rows LLVM's vectoriser
  would end in a scalar tail are given to it in one-register tiles (``register_tiles``).

Emulated instruction counts (``bench/arm_instructions.py``) are not hardware time.
"""

from __future__ import annotations

import logging
import math
import re

import tvm
import tvm_ffi
from tvm import s_tir, te, tirx
from tvm.target import Target

from ..targets import has_fullfp16, is_aarch64
from . import analysis, cpu, strided_loads
from .cpu_config import HUGE, NO_VECTOR, CpuConfig, target_threads

__all__ = ["KNOBS", "Pool", "use_fmax", "whole_plane_sums", "negative_zero_sums"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# NaN-propagating max as FMAX
# --------------------------------------------------------------------------------------------
#
# tvm_pool's computes write the NaN-propagating max target-neutrally (they are built when the
# model is imported, before a target is known): ``Select(isnan(a) or isnan(b) ..., nan,
# max(max(a, b), ...))`` for the taps of a window or pass, ``Select(a > b or isnan(a), a, b)``
# for a reduction's combiner. x86 needs that (MAXPS does not propagate NaN). On AArch64 it is
# one FMAX (``llvm.maximum``), and LLVM does not see it through the selects (measured: 3-4
# vector instructions per tap instead of one). :func:`use_fmax` rewrites the PrimFunc's
# TVMScript: TVM 0.27 exposes no TIR expression mutator to Python, and the round trip through
# the printer and parser is exact. Only these two shapes are rewritten, each checked operand by
# operand; anything else stays as it is.

_SELECT = "T.Select("
_FLOAT_NAN = re.compile(r'^T\.(float16|float32|float64)\("nan"\)$')


def _split_args(text: str, start: int):
    """(args, end) of the call whose '(' is at ``start - 1``: top-level comma-separated args."""
    depth, args, cur, i, quote = 0, [], [], start, None
    while i < len(text):
        ch = text[i]
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
            cur.append(ch)
        elif ch in "([{":
            depth += 1
            cur.append(ch)
        elif ch in ")]}":
            if depth == 0:
                args.append("".join(cur).strip())
                return args, i + 1
            depth -= 1
            cur.append(ch)
        elif ch == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    raise ValueError("unbalanced call")


def _call_args(expr: str, name: str):
    """The args of ``expr`` when it is exactly one call ``name(...)``, else None."""
    if not expr.startswith(name + "("):
        return None
    args, end = _split_args(expr, len(name) + 1)
    return args if end == len(expr) else None


def _max_leaves(expr: str):
    args = _call_args(expr, "T.max")
    if args is None or len(args) != 2:
        return [expr]
    return _max_leaves(args[0]) + _max_leaves(args[1])


def _or_terms(expr: str):
    """``a or b or c`` at the top level (TVMScript prints tirx.Or flat)."""
    terms, depth, cur, i = [], 0, [], 0
    while i < len(expr):
        ch = expr[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if depth == 0 and expr.startswith(" or ", i):
            terms.append("".join(cur).strip())
            cur, i = [], i + 4
            continue
        cur.append(ch)
        i += 1
    terms.append("".join(cur).strip())
    return terms


def _maximum(dtype: str, leaves) -> str:
    out = leaves[0]
    for leaf in leaves[1:]:
        out = f'T.call_llvm_pure_intrin("{dtype}", "llvm.maximum", {out}, {leaf})'
    return out


def _rewrite_select(args, dtype_of):
    """The FMAX form of a NaN-propagating max Select, or None when ``args`` is not one."""
    if len(args) != 3:
        return None
    cond, then, other = args
    terms = _or_terms(cond)
    nan = _FLOAT_NAN.match(then)
    if nan:  # Select(isnan(a) or isnan(b) ..., nan, max(max(a, b), ...))
        tested = [_call_args(t, "T.isnan") for t in terms]
        if any(t is None or len(t) != 1 for t in tested):
            return None
        leaves = _max_leaves(other)
        if [t[0] for t in tested] != leaves or len(leaves) < 2:
            return None
        return _maximum(nan.group(1), leaves)
    # Select(a > b or isnan(a), a, b): a reduction's combiner
    if len(terms) == 2 and terms[0] == f"{then} > {other}" and terms[1] == f"T.isnan({then})":
        dtype = dtype_of(then)
        return _maximum(dtype, [then, other]) if dtype else None
    return None


def _rewrite_text(text: str, dtype_of) -> tuple[str, int]:
    out, i, count = [], 0, 0
    while True:
        j = text.find(_SELECT, i)
        if j < 0:
            out.append(text[i:])
            return "".join(out), count
        args, end = _split_args(text, j + len(_SELECT))
        new_args = []
        for a in args:  # inner Selects first
            rewritten, n = _rewrite_text(a, dtype_of)
            new_args.append(rewritten)
            count += n
        replacement = _rewrite_select(new_args, dtype_of)
        out.append(text[i:j])
        if replacement is None:
            out.append(_SELECT + ", ".join(new_args) + ")")
        else:
            out.append(replacement)
            count += 1
        i = end


def use_fmax(func):
    """``func`` with its NaN-propagating max Selects as ``llvm.maximum`` (AArch64 FMAX)."""
    text = func.script()
    if _SELECT not in text or "T.isnan" not in text:
        return func
    buffers = {}
    for m in re.finditer(r"(\w+)(?:: | = )T\.(Buffer|sblock_alloc_buffer|alloc_buffer)\(", text):
        args, _ = _split_args(text, m.end())
        dtype = next((a.strip('"') for a in args[1:] if a.startswith('"')), None)
        buffers[m.group(1)] = dtype or "float32"  # the printer leaves float32 out
    def dtype_of(expr: str):
        m = re.match(r"^(\w+)\[", expr)
        return buffers.get(m.group(1)) if m else None

    new_text, count = _rewrite_text(text, dtype_of)
    if not count:
        return func
    try:
        new = tvm.script.from_source(new_text)
    except (RuntimeError, ValueError, SyntaxError) as err:  # the parser's DiagnosticError is a RuntimeError
        logger.debug("FMAX rewrite not parsed back, max kept as selects: %s", err)
        return func
    return new.with_attrs(dict(func.attrs)) if func.attrs else new


# --------------------------------------------------------------------------------------------
# Whole-plane averages as one reduction
# --------------------------------------------------------------------------------------------
#
# A global average (GlobalAveragePool, or an AveragePool whose window is the whole plane) is
# built as one pass per axis (``compute.forms.separable``): rows summed per column, then the
# columns. A 7-wide column vector does not fill NEON registers, and the column sum is scalar
# (ResNet's 2048x7x7 head: 67 instructions per output, 0.8x stock TVM). :func:`whole_plane_sums`
# swaps such a function for the same compute built as one reduction over the plane
# (``by_axis=False``), which the CPU rule turns into vector partial sums (``cpu_reduction._vector_partial_sums``);
# a channel-last one into accumulators over a tile of C, one load and one add per tap
# (``cpu_channels.schedule_reduction``; ResNet's head as 1x7x7x2048: 0.075 M instructions as
# passes, 0.049 M as one reduction, channel-first 0.065 M).
# The function is recognised by rebuilding it: only an exact match is swapped, so a fused
# function (a consumer after the pool) or anything else stays as it is.


def whole_plane_sums(func):
    """``func`` as one reduction over the plane when it is exactly tvm_pool's global average."""
    from tvm_pool import compute  # pylint: disable=import-outside-toplevel

    sch = s_tir.Schedule(func)
    chains = analysis.pass_chains(sch)
    if len(chains) != 1 or len(func.params) != 2:
        return func
    first = sch.get(chains[0].passes[0])
    if analysis.pool_kind(first) != "avg_sum_pass" or not first.reads:
        return func
    data = analysis.region_buffer(first.reads[0])
    x = te.placeholder(data.shape, data.dtype, name=data.name)
    layout = analysis.CHANNEL_LAST if analysis.is_channel_last(first) else None

    index_dtype = str(data.shape[0].ty) if data.shape else "int64"  # Relax builds int64 indices

    def build(by_axis):
        pooled = compute.global_pool(x, "avg", by_axis=by_axis, layout=layout)
        made = te.create_prim_func([x, pooled], index_dtype_override=index_dtype)
        return tvm.tirx.PrimFunc(made.params, made.body, attrs=func.attrs)

    if not tvm_ffi.structural_equal(func, build(True)):
        return func
    return build(False)


# --------------------------------------------------------------------------------------------
# Float sums started at -0.0
# --------------------------------------------------------------------------------------------
#
# A float sum starts at 0.0 (TE's and rfactor's identity), and LLVM may not drop ``0.0 + x``: it
# is -0.0 + ... only when x is -0.0. ``-0.0 + x`` is x for every x, so LLVM drops it: each
# output's first add (and each vector partial sum's) goes (NEON, DenseNet's 2x2 s2 average:
# 2.68 -> 2.43 instructions per output; ResNet's 7x7 global average: 35.6 -> 33.6). The sums are
# unchanged but for one: a sum of only negative zeros is -0.0 (the IEEE sum) where 0.0 was.


def negative_zero_sums(func):
    """``func`` with the 0.0 stores into its float sum accumulators (buffers updated as
    ``buf[i] = buf[i] + ...``) made -0.0."""
    accumulators = []

    def find(store):
        value = store.value
        if isinstance(value, tirx.Add) and isinstance(value.a, strided_loads.LOAD) and value.a.source.same_as(store.buffer):
            accumulators.append(store.buffer)

    tvm_ffi.structural_walk(func, (tirx.BufferStore, find))
    if not accumulators:
        return func

    def zero_to_negative(store):
        value = store.value
        if (isinstance(value, tirx.FloatImm) and value.value == 0.0 and math.copysign(1.0, value.value) > 0
                and any(store.buffer.same_as(b) for b in accumulators)):
            return tirx.BufferStore(store.buffer, tirx.FloatImm(str(value.ty), -0.0), store.indices)
        return store

    return tvm_ffi.structural_map(func, (tirx.BufferStore, zero_to_negative))


# The design space tuning measures on aarch64 (every point, exhaustively): the hand-written
# schedule, then one knob moved at a time. NEON has no masked loads and no gathers, so x86's
# padding and gathered-last-pass knobs do not apply; its own choices (rows cut into chunks of a
# few registers, one-register tiles, halving lane sums) do.
KNOBS = (
    ("hand-written", {}),
    ("vector: TVM vectors off (LLVM's vectoriser only)", {"level": NO_VECTOR}),
    ("vector: pass rows in chunks of 2 registers", {"vector_row_registers": 2}),
    ("vector: pass rows in chunks of 8 registers", {"vector_row_registers": 8}),
    ("vector: no one-register tiles", {"register_tiles": False}),
    ("unroll: taps rolled", {"max_unrolled_taps": 0}),
    ("sums: lanes added in order", {"halving_lane_sums": False}),
    ("threads: one", {"min_parallel_bytes": HUGE}),
    ("threads: all", {"min_parallel_bytes": 0}),
    ("threads: planes and rows in parallel", {"num_threads": 1 << 20}),
    ("threads: planes in parallel only", {"num_threads": 0}),
)


class Pool(cpu.Pool):
    """The shared CPU rule on aarch64 targets, on the function with its max as FMAX and a
    whole-plane average as one reduction, its float sums started at -0.0 once scheduled."""

    name = "arm"
    KNOBS = KNOBS
    # Channel-last windows keep their passes: NEON counts more operations per tap than x86's
    # memory-operand forms, and the passes' column reuse (CpuConfig.channel_tap_reuse) saves
    # them (as taps, 3x3 s2 p1 max over 1x112x112x64: 0.86 against 0.76 M instructions; 3x3
    # s1 p1 average over 1x56x56x64: 0.99 against 0.63 M).
    CHANNEL_LAST_TAPS = False

    def takes(self, target: Target) -> bool:
        return is_aarch64(target)

    def config(self, target: Target) -> CpuConfig:
        # 128-bit NEON; float16 without +fullfp16 is computed as float32, 4 lanes (64 bits of halves).
        # Channel-last consumers stay per row and long windows keep register tiles: inlined and
        # rows-outer took 0.635 vs 0.627 M instructions (3x3 s1 p1 average, 1x56x56x64) and
        # 0.067 vs 0.049 M (ResNet's 7x7 global average).
        return CpuConfig(
            "arm", vector_bits=128, widened_dtypes=frozenset() if has_fullfp16(target) else frozenset({"float16"}),
            num_threads=target_threads(target), strided_vectors=False, masked_loads=False, vector_row_registers=4,
            register_tiles=True, vector_consumers=True, deinterleaving_loads=True, halving_lane_sums=True,
            channel_vector_registers=4, channel_tap_reuse=True, channel_inline_consumers=False, long_window_rows_outer=False,
            long_sum_registers=1,  # one register of partial sums, as its instruction counts were measured
            very_long_sum_registers=1,
            max_row_lanes=16,  # int8/uint8 rows in whole registers (SMAX/UMAX of 16 lanes)
        )

    def prepare(self, func):
        return use_fmax(whole_plane_sums(super().prepare(func)))

    def finish(self, func):
        return negative_zero_sums(func)
