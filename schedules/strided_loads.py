"""Strided vector loads as one contiguous load and a shuffle (lowering for CPUs without gathers).

A TVM-vectorised tap of a strided window reads ``buf[Ramp(base, s, n)]``: every s-th element.
TVM's LLVM codegen scalarises such a load (n scalar loads and lane inserts). NEON has no gather,
but it has de-interleaving loads (LD2/LD3/LD4): LLVM's InterleavedAccess pass makes one from a
contiguous ``<s*n>`` load whose lanes are picked with stride s by a shufflevector. This pass
rewrites each such load into that form, after TVM's lowering pipeline (the loads are final
there):

    buf[Ramp(base, s, n)]  ->  Shuffle(buf[Ramp(base - r, 1, s * n)], [r, r + s, ..., r + s(n-1)])

The contiguous load reads up to s - 1 elements the strided one skips, so it is made only where
it provably stays inside the buffer (loop ranges and let bindings known to the arithmetic
analyser); anything else is left as it is. ``r`` is the base's residue modulo s where that is
known, so the taps of one window (base, base + 1, ...) share one load, which LLVM turns into one
LD2/LD3 whose registers are the taps. ResNet's 3x3 s2 p1 max over 64x112x112 (cortex-a72
target, one thread, emulated, ``bench/arm_instructions.py``): with the stride-2 pass row
TVM-vectorised through this rewrite instead of left to LLVM's loop vectoriser (unaligned loads,
UZP shuffles and a scalar tail), 4.88 -> 3.83 instructions per output.

On aarch64 targets a float32 max whose operands are both phases of such loads (a 2x2 s2 window)
is then FMAXP of the loads' halves (:func:`_pairwise_max`).

It runs after TVM's TIR pipeline (:func:`register_pipeline`), chosen per target by
``tvm_pool.schedules.tir_pipeline`` for CPU families with ``deinterleaving_loads`` (aarch64).
The expression mutator is tvm_ffi's ``structural_map``.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..targets import is_aarch64
from .pipelines import register_after_default

__all__ = ["LOAD", "rewrite_function", "strided_loads_pass", "register_pipeline", "MAX_STRIDE"]

# LLVM's AArch64 InterleavedAccess lowering handles factors 2-4 (LD2/LD3/LD4).
MAX_STRIDE = 4


def _flat_size(buffer):
    size = 1
    for dim in buffer.shape:
        if not isinstance(dim, tirx.IntImm):
            return None
        size *= int(dim)
    return size


def _is_int(expr) -> bool:
    ty = getattr(expr, "ty", None)  # a PrimType for scalar expressions, else a pointer/buffer type
    return isinstance(ty, tvm.ir.PrimType) and str(ty).startswith(("int", "uint"))


def _scope(func) -> tvm.sym.Analyzer:
    """An analyser that knows the loop ranges and integer let bindings of ``func``. A variable
    defined more than once with different ranges or values (one loop variable in two loops)
    is left unbound: its range is then unknown, so no proof leans on the wrong one (binding it
    twice is an error in TVM's analyser)."""
    found = {}  # variable -> [Var, Range or value, consistent]

    def define(var, value):
        entry = found.get(var)
        if entry is None:
            found[var] = [var, value, True]
        elif not tvm_ffi.structural_equal(entry[1], value):
            entry[2] = False

    def visit(node):
        if isinstance(node, tirx.For):
            define(node.loop_var, tvm.ir.Range.from_min_extent(node.min, node.extent))
        elif isinstance(node, (tirx.Bind, tirx.LetStmt)) and _is_int(node.value):
            define(node.var, node.value)

    tvm_ffi.structural_walk(func, visit, order="pre")
    analyzer = tvm.sym.Analyzer()
    for var, value, consistent in found.values():
        if consistent:
            analyzer.bind(var, value)
    return analyzer


def _strided(load):
    """(stride, lanes) of a strided vector load this pass lowers, else None."""
    if len(load.indices) != 1 or not isinstance(load.indices[0], tirx.Ramp):
        return None
    ramp = load.indices[0]
    stride, lanes = ramp.stride, int(ramp.lanes)
    if not isinstance(stride, tirx.IntImm) or not 2 <= int(stride) <= MAX_STRIDE or lanes < 2:
        return None
    if _flat_size(load.source) is None:
        return None
    return int(stride), lanes


def _fits(load, start, analyzer) -> bool:
    s, lanes = _strided(load)
    return analyzer.can_prove(start >= 0) and analyzer.can_prove(start + s * lanes <= _flat_size(load.source))


def _phases(load, analyzer):
    """The residues ``r`` to try for ``load`` (its wide load starts at ``base - r``), the base's
    residue modulo the stride first, so the taps of one window (base, base + 1, ...) share one
    load."""
    s, _ = _strided(load)
    mod = analyzer.modular_set(load.indices[0].base)
    first = int(mod.base) % s if int(mod.coeff) % s == 0 else 0
    return [first] + [r for r in range(s) if r != first]


def _start(load, r):
    base = load.indices[0].base
    return base - r if r else base


def _choose_phases(func, analyzer) -> dict:
    """The residue of each strided load (by identity): the first of :func:`_phases` that fits,
    except that a wide load whose last phase no tap picks is moved to end at its tap's last
    lane where that fits (r = stride - 1). LLVM drops a wide load's unread last element, and
    the narrowed load (31 int8 lanes for a 16-lane stride-2 tap) is legalised in pieces and
    the picked lanes moved one by one: the third tap of a 3x3 s2 int8 max took 20 lane moves;
    loaded from one element earlier, its lanes are the odd phase of an LD2."""
    loads = []
    tvm_ffi.structural_walk(func, (LOAD, lambda load: loads.append(load) if _strided(load) else None))
    chosen, picked = {}, {}  # picked: per load, the residues every load of its wide load picks
    wide_loads = []  # (buffer, start, stride and lanes, residues picked)
    for load in loads:
        r = next((r for r in _phases(load, analyzer) if _fits(load, _start(load, r), analyzer)), None)
        if r is None:
            continue
        shape, start = _strided(load), _start(load, r)
        wide = next((w for w in wide_loads if w[0].same_as(load.source) and w[2] == shape
                     and analyzer.can_prove_equal(w[1], start)), None)
        if wide is None:
            wide = (load.source, start, shape, set())
            wide_loads.append(wide)
        wide[3].add(r)
        chosen[load], picked[load] = r, wide[3]
    for load, r in chosen.items():
        last = _strided(load)[0] - 1
        if last not in picked[load] and _fits(load, _start(load, last), analyzer):
            chosen[load] = last
    return chosen


def _rewrite_load(load, chosen):
    r = chosen.get(load)
    if r is None:
        return load
    s, lanes = _strided(load)
    wide = tirx.BufferLoad(load.source, [tirx.Ramp(_start(load, r), 1, s * lanes)])
    return tirx.Shuffle([wide], [tirx.IntImm("int32", r + s * i) for i in range(lanes)])


def rewrite_function(func):
    """``func`` with its provably in-bounds strided vector loads as contiguous loads + shuffles,
    and, for an aarch64 target, float32 maxima over both phases of such loads as FMAXP
    (:func:`_pairwise_max`)."""
    analyzer = _scope(func)
    chosen = _choose_phases(func, analyzer)
    func = tvm_ffi.structural_map(func, (LOAD, lambda load: _rewrite_load(load, chosen)))
    if not _is_aarch64(func):
        return func
    return tvm_ffi.structural_mutate(func, (tvm.ir.expr.Call, _mutate_max_tree))


def _is_aarch64(func) -> bool:
    target = func.attrs.get("target", None) if func.attrs is not None else None
    return target is not None and is_aarch64(target)


def _mutate_max_tree(call, mutator):
    """A whole tree of maxima at once (its inner maxima are not trees of their own: rewritten
    alone, a 3x3 s2 window's first two taps became FMAXP and the third an extra shuffle)."""
    if not _is_maximum(call):
        return mutator.default_mutate(call)

    def rebuild(node):
        if not _is_maximum(node):
            return mutator.mutate(node)
        a, b = rebuild(node.args[1]), rebuild(node.args[2])
        if a.same_as(node.args[1]) and b.same_as(node.args[2]):
            return node
        return tirx.call_llvm_pure_intrin(str(node.ty), "llvm.maximum", a, b)

    return _pairwise_max(rebuild(call))


def _probe_load():
    buf = tirx.decl_buffer((1,), "float32", name="probe")
    return tirx.BufferLoad(buf, [tirx.IntImm("int32", 0)])


LOAD = type(_probe_load())  # TVM 0.27's buffer load node (what tirx.BufferLoad builds)


strided_loads_pass = tirx.transform.prim_func_pass(lambda func, _mod, _ctx: rewrite_function(func), opt_level=0,
                                                   name="tvm_pool.StridedLoadsAsShuffles")


PIPELINE = "tvm_pool.deinterleave"


def register_pipeline() -> str:
    """Register (once) TVM's default TIR pipeline followed by :func:`strided_loads_pass`, under
    the name returned; ``tvm.compile(..., tir_pipeline=NAME)`` uses it."""
    return register_after_default(PIPELINE, [strided_loads_pass])


# --------------------------------------------------------------------------------------------
# Max over both halves of de-interleaved loads as pairwise max (FMAXP)
# --------------------------------------------------------------------------------------------
#
# A stride-2 max window's taps are the even and odd lanes of one contiguous load (above).
# LLVM takes them apart with UZP1/UZP2 and maxes them; AArch64's FMAXP does it in one:
# FMAXP(a, b) = [max(a0, a1), max(a2, a3), max(b0, b1), max(b2, b3)], NaN-propagating like
# FMAX (``llvm.maximum``). A max whose operands include every phase of such loads is
# rewritten: the loads maxed element by element first (max is associative and commutative,
# NaN and signed zeros included), then FMAXP. Only where every operand is such a phase (2x2 s2,
# 2x2x2 s2): VGG's 2x2 s2 max over 64x224x224 went from 2.22 to 1.84 instructions per output,
# the 3-D 2x2x2 s2 max from 3.85 to 3.32 (emulated).

def _intrinsic_id(name: str) -> int:
    probe = tirx.Var("probe", "float32x4")
    return int(tirx.call_llvm_pure_intrin("float32x4", name, probe, probe).args[0].value)


_MAXIMUM = _intrinsic_id("llvm.maximum")
_PLAIN = tvm.sym.Analyzer()  # no loop ranges or lets: compares index expressions as written
_FMAXP = "llvm.aarch64.neon.fmaxp"


def _is_maximum(expr) -> bool:
    return (isinstance(expr, tvm.ir.expr.Call) and expr.op.name == "tirx.call_llvm_pure_intrin"
            and int(expr.args[0].value) == _MAXIMUM)


def _maximum_leaves(expr) -> list:
    if _is_maximum(expr):
        return _maximum_leaves(expr.args[1]) + _maximum_leaves(expr.args[2])
    return [expr]


def _phase(leaf):
    """(wide load, stride, first lane) when ``leaf`` picks every stride-th lane of one load."""
    if not isinstance(leaf, tirx.Shuffle) or len(leaf.vectors) != 1:
        return None
    picked = [int(i) for i in leaf.indices]
    if len(picked) < 2:
        return None
    stride = picked[1] - picked[0]
    if any(b - a != stride for a, b in zip(picked, picked[1:])):
        return None
    return leaf.vectors[0], stride, picked[0]


def _same_load(a, b) -> bool:
    """Do two contiguous loads read the same elements (``base + 1 - 1`` and ``base`` alike)?"""
    if not (isinstance(a, LOAD) and isinstance(b, LOAD) and a.source.same_as(b.source)):
        return False
    ra, rb = a.indices[0], b.indices[0]
    return (isinstance(ra, tirx.Ramp) and isinstance(rb, tirx.Ramp) and int(ra.lanes) == int(rb.lanes)
            and _PLAIN.can_prove_equal(ra.base, rb.base) and _PLAIN.can_prove_equal(ra.stride, rb.stride))


def _lanes(expr) -> int:
    return tvm.runtime.DataType(str(expr.ty)).lanes


def _halves(vec, lanes: int, chunk: int):
    """FMAXP over ``vec`` (``lanes`` float32 lanes): ``lanes / 2`` lanes of neighbouring maxima."""
    out = []
    for g in range(lanes // (2 * chunk)):
        lo = tirx.Shuffle([vec], [tirx.IntImm("int32", 2 * chunk * g + i) for i in range(chunk)])
        hi = tirx.Shuffle([vec], [tirx.IntImm("int32", 2 * chunk * g + chunk + i) for i in range(chunk)])
        out.append(tirx.call_llvm_pure_intrin(f"float32x{chunk}", _FMAXP, lo, hi))
    if len(out) == 1:
        return out[0]
    return tirx.Shuffle(out, [tirx.IntImm("int32", i) for i in range(lanes // 2)])


def _maximum_of(values, dtype: str):
    out = values[0]
    for v in values[1:]:
        out = tirx.call_llvm_pure_intrin(dtype, "llvm.maximum", out, v)
    return out


def _pairwise_max(call):
    """``call`` (a max) with the phases of de-interleaved loads it covers whole as FMAXP."""
    if not _is_maximum(call) or not str(call.ty).startswith("float32x"):
        return call
    out_lanes = _lanes(call)
    chunk = 4 if out_lanes % 4 == 0 else 2 if out_lanes % 2 == 0 else 0
    groups, rest = [], []  # groups: (stride, wide load, {first lane: leaf})
    for leaf in _maximum_leaves(call):
        phase = _phase(leaf)
        if phase is None or phase[1] != 2 or not chunk or _lanes(phase[0]) != 2 * out_lanes:
            rest.append(leaf)
            continue
        wide, stride, first = phase
        group = next((g for g in groups if g[0] == stride and _same_load(g[1], wide)), None)
        if group is None:
            group = (stride, wide, {})
            groups.append(group)
        group[2][first] = leaf
    wides = {}
    for stride, wide, phases in groups:
        if set(phases) == set(range(stride)):
            wides.setdefault(stride, []).append(wide)
        else:
            rest.extend(phases.values())
    if not wides or rest:
        # Taps outside whole phases (3x3 s2: the third tap) keep LD2: FMAXP then cost more
        # (ResNet's 3x3 s2 max: 3.83 -> 4.65 instructions per output)
        return call
    merged = []
    for stride, loads in wides.items():
        lanes = stride * out_lanes
        vec = _maximum_of(loads, f"float32x{lanes}")
        while lanes > out_lanes:
            vec, lanes = _halves(vec, lanes, chunk), lanes // 2
        merged.append(vec)
    return _maximum_of(merged + rest, str(call.ty))
