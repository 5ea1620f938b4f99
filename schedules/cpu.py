"""The CPU schedule for pooling, shared by every CPU family (x86-64, aarch64).

What differs between CPUs is a few facts, which each family module supplies as a
:class:`CpuFamily` (``schedules/x86.py``: AVX2 / AVX-512 from the target's mcpu/mattr;
``schedules/arm.py``: 128-bit NEON): which targets it takes and how wide a vector register is
for each dtype. Everything below is written once for all of them.

One rule, :class:`Pool`, for every tvm_pool pooling PrimFunc (max, max with indices, average,
Lp, global, adaptive, TensorRT) and TOPI's pooling blocks, fused or not. Two shapes of compute
reach it:

* **separable passes** (``tvm_pool.pass_axis`` blocks, see ``compute.pool.separable``): the
  overlapping and single-axis windows, reduced one axis at a time. :func:`schedule_pass_chain`
  runs planes in parallel, each pass at the loop of the axis it reduces, every pass row as one
  TVM vector, the padding as a per-plane copy (small planes) or inlined bounds checks (large;
  without masked loads, at the row's edges only).
  This is where the speed of the common pools (3x3 stride 1 and 2, global average, 3-D, 1-D)
  comes from.
  Small non-overlapping 2-D max windows (2x2 s2, 3x3 s3) come as a one-pass chain too: one
  expression of every tap (``compute.pool.few_taps``), whose output row LLVM vectorises.
  Passes over axes whose windows do not overlap are computed per output row; the doubling
  levels of a long 1-D max (``compute.pool._doubling_passes``) per row of their axis.
* **window reductions** (a block with reduction iterators: indices, non-overlapping sums,
  adaptive, symbolic sizes, long strided windows) with loops ``[lead..., out..., r...]``:

  1. elementwise producers (relu before the pool, ...) are inlined into it; the padded copy
     (block kind ``pad``) is not: it is computed per plane (or row) at the parallel loop;
  2. padded value reductions (static shapes) take :func:`_schedule_vector_rows`: planes in
     parallel, a vector tile of outputs in registers (``cache_write`` to ``local``), window
     taps unrolled, TVM ``vectorize`` on the tile, except for strided 8-bit taps;
  3. everything else takes the row schedule: outer axes fused into one parallel loop, taps
     unrolled, the innermost output loop left to LLVM's vectoriser;
  4. consumers (``*_finalize``, add, relu after) are computed at the parallel loop, but only
     those pointwise over the pool's output (``analysis.is_pointwise_over``): a Concat of the
     pool with other branches, a second pool or an Add of two pools stays its own loop nest
     (attached, it would be computed for the pool's part of its domain only), parallelised
     on its own when large (``_parallelize_rest``);
  5. symbolic extents (runtime sizes) only parallelise the leading static loops: fusing
     symbolic loops sends TVM 0.27's simplifier into a loop that does not end on these
     reductions;
  6. no ``pragma_loop_partition_hint``: TVM 0.27's LoopPartition mixes int32 and int64 bounds
     on the int64 loops Relax produces (a build error for windows that touch padding).

The choices come from the x86 benchmark in ``bench/`` (see the README's table) and the aarch64
instruction counts in ``bench/arm_instructions.py``; the constants below say what was measured. Every step is tried at the full level first; a PrimFunc a step
cannot handle falls back to a lower level (no vectorisation, then parallel only), so a rule
failure never fails a build. The same functions schedule one block inside a MetaSchedule
schedule, which :mod:`.meta_schedule` registers as the custom rule (target keys ``cpu`` and
``arm_cpu``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import tvm
from tvm import s_tir, tirx
from tvm.s_tir.dlight import ScheduleRule
from tvm.sym.pattern import detect_linear_equation
from tvm.target import Target

from . import analysis, strided_loads

logger = logging.getLogger(__name__)

# Levels of a schedule, best first; a level that fails falls back to the next.
FULL, NO_VECTOR, PARALLEL_ONLY = 2, 1, 0


def _enable_isnan_vectorization() -> None:
    """tvm_pool's float max reducer uses ``isnan`` (NaN propagates); TVM 0.27 does not mark the
    ``tirx.isnan`` op vectorizable, so VectorizeLoop scalarises every float max loop. isnan is
    a pure elementwise op and LLVM lowers vector isnan (fcmp uno) fine; mark it."""
    op = tvm.ir.Op.get("tirx.isnan")
    if not op.get_attr("TVectorizable"):
        op.set_attr("TVectorizable", True)


_enable_isnan_vectorization()


# --------------------------------------------------------------------------------------------
# Target facts
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuFamily:
    """What a CPU family module tells the shared schedule."""

    name: str
    matches: Callable[[Target], bool]  # does this family take the target?
    vector_bits: Callable[[Target, str], int]  # register width for a dtype's arithmetic
    # Are TVM-vectorised strided loads (Ramp with stride > 1) worth it? x86 has gathers (AVX2,
    # AVX-512) that beat LLVM's shuffles while the data is in L1; NEON has none (each lane
    # becomes a scalar load + insert), while LLVM's loop vectoriser uses LD2/LD3/LD4.
    strided_vectors: bool = True
    # Can a vector load skip lanes cheaply (AVX masked loads)? Without (NEON), the padding's
    # bounds checks inlined into a vector row become one scalar load per lane, so every padded
    # plane is copied once instead, whatever its size.
    masked_loads: bool = True
    # Longest pass row TVM vectorises as one vector, in registers (None: _MAX_VECTOR_ROW lanes).
    # A whole 113-lane row is 29 NEON registers of 32, spilled to the stack around each isnan
    # check; NEON rows are cut into chunks of a few registers, or left to LLVM's vectoriser
    # (which adds a scalar tail) when no chunk divides the row.
    vector_row_registers: int | None = None
    # Are the output rows left to LLVM's vectoriser cut into tiles of one vector register's
    # lanes, a window reduction's consumers (the average's division, ...) computed per tile?
    # LLVM then vectorises each tile whole: no row ends in a scalar tail of its interleaved
    # loop, and the sum stays in a register (NEON, DenseNet's 2x2 s2 average: 3.3 -> 2.7
    # instructions per output). x86 keeps the row loops its benchmark was measured with.
    register_tiles: bool = False
    # Are the consumers computed per row after separable passes (the average's division by its
    # window count, an Add, ...) TVM-vectorised like a pass row? On NEON LLVM leaves the padded
    # average's per-output count arithmetic (int64) scalar: TVM-vectorised, 3x3 s1 p1 average
    # over 64x56x56 went from 5.19 to 4.44 instructions per output. On x86 LLVM's own
    # vectorisation of that row is better: TVM's took 1.6x the time (0.107 vs 0.066 ms).
    vector_consumers: bool = False
    # Are strided vector loads lowered as one contiguous load + shuffle (.strided_loads), which
    # LLVM turns into de-interleaving loads (NEON LD2/LD3/LD4)? Then a strided pass row is
    # TVM-vectorised like a contiguous one, and the padding of a pass chain is inlined into
    # its first pass with its rows split at the padding's edges (no per-plane copy).
    deinterleaving_loads: bool = False
    # Are a long sum's vector partial sums added up as halving vector adds ([0, 2) + [2, 4), then
    # the two lanes) instead of lane by lane? On NEON LLVM extracts and adds each lane in order
    # (6 instructions for 4 lanes); halving took ResNet's 7x7 global average from 33.6 to 31.6
    # instructions per output. The order of the last adds changes (within the tolerances of the
    # partial sums themselves). x86 keeps the order its benchmark was measured with.
    halving_lane_sums: bool = False


_FAMILIES: list[CpuFamily] = []


def register_family(family: CpuFamily) -> CpuFamily:
    if all(f.name != family.name for f in _FAMILIES):
        _FAMILIES.append(family)
    return family


def family_of(target: Target) -> CpuFamily | None:
    """The first registered CPU family that takes ``target`` (None: no CPU schedule)."""
    if target is None or target.kind.name != "llvm":
        return None
    return next((f for f in _FAMILIES if f.matches(target)), None)


def vector_bits(target: Target, dtype: str = "float32") -> int:
    family = family_of(target)
    return family.vector_bits(target, dtype) if family else 128


def vector_row_lanes(target: Target, dtype: str):
    """(most lanes of one TVM-vectorised pass row chunk, lanes of one register) for a family
    with ``vector_row_registers``."""
    family = family_of(target)
    lanes = min(max(vector_bits(target, dtype) // _dtype_bits(dtype), 1), _MAX_PARTIAL_SUM_LANES)
    return lanes * (family.vector_row_registers or 1), lanes


def _register_tile(sch, loop, target: Target, dtype: str):
    """The inner loop of ``loop`` cut into tiles of one register's lanes, for families with
    ``register_tiles`` and a row that the lanes divide but LLVM's loop (two registers an
    iteration) would end in a scalar tail; else None. Rows LLVM covers exactly stay as they
    are: tiled, 2x2 s2 max over 224x224 went from 2.3 to 3.3 instructions per output (NEON)."""
    family = family_of(target)
    if family is None or not family.register_tiles:
        return None
    extent = _loop_extent(sch, loop)
    lanes = choose_lanes(extent, _dtype_bits(dtype), vector_bits(target, dtype))
    if lanes < 2 or extent % (2 * lanes) == 0:
        return None
    return sch.split(loop, [None, lanes])[1]


def masked_loads(target: Target) -> bool:
    family = family_of(target)
    return family.masked_loads if family else False


def strided_vectors(target: Target) -> bool:
    family = family_of(target)
    return family.strided_vectors if family else False


def num_threads(target: Target) -> int:
    cores = target.attrs.get("num-cores", None)
    return int(cores) if cores else 1


def _dtype_bits(dtype: str) -> int:
    dt = tvm.runtime.DataType(dtype)
    return dt.bits


# --------------------------------------------------------------------------------------------
# The rule
# --------------------------------------------------------------------------------------------


class Pool(ScheduleRule):
    """dlight rule: schedule every pooling PrimFunc (see the module docstring). A family module
    subclasses it with its :class:`CpuFamily` as ``family``."""

    family: CpuFamily | None = None

    def _takes(self, target: Target) -> bool:
        return self.family.matches(target) if self.family else family_of(target) is not None

    def is_target_available(self, target: Target) -> bool:
        return self._takes(target)

    def prepare(self, func: tirx.PrimFunc) -> tirx.PrimFunc:
        """A family's rewrite of the function before it is scheduled (none by default)."""
        return func

    def finish(self, sch: s_tir.Schedule) -> s_tir.Schedule:
        """A family's rewrite of the scheduled function (none by default)."""
        return sch

    def apply(self, func: tirx.PrimFunc, target: Target, tunable: bool):  # noqa: D102
        if not isinstance(func, tirx.PrimFunc) or not self._takes(target):
            return None
        probe = s_tir.Schedule(func)
        if not analysis.main_blocks(probe) and not analysis.pass_chains(probe):
            return None
        func = self.prepare(func)
        for level in (FULL, NO_VECTOR, PARALLEL_ONLY):
            sch = s_tir.Schedule(func)
            try:
                schedule_function(sch, target, level)
                return self.finish(sch)
            except (Exception,) as err:
                logger.debug("%s pool schedule level %d failed: %s", self.family.name if self.family else "cpu", level, err)
        return None


def schedule_function(sch: s_tir.Schedule, target: Target, level: int = FULL) -> None:
    """Schedule every pooling reduction of the function in ``sch`` (and its fused blocks)."""
    mains, chains = analysis.main_blocks(sch), analysis.pass_chains(sch)
    _inline_producers(sch, mains, chains)  # the main blocks' and passes' rvs stay valid
    for main in mains:
        schedule_block(sch, main.rv, target, level)
    for chain in chains:
        schedule_pass_chain(sch, chain, target, level)
    if level >= NO_VECTOR:
        _parallelize_rest(sch, target)


def _inline_producers(sch: s_tir.Schedule, mains, chains) -> None:
    """Inline elementwise producers (relu before the pool, TOPI's pad_temp) into their readers,
    and elementwise chains after a finalize stage into that stage (or into a separable
    reduction's last pass) where they are pointwise over it (analysis.is_pointwise_over)."""
    others = analysis.other_blocks(sch, mains, chains)
    for rv in others:
        kind = analysis.pool_kind(sch.get(rv))
        if kind == "pad":
            continue  # the padded copy is computed per plane/row, not inlined (see schedule_block)
        if kind == "widen":
            continue  # bfloat16 -> float32 ahead of an argmax: inlined, TVM's bf16 legalization breaks
        try:
            sch.compute_inline(rv)  # TVM checks that the block is injective: always exact
        except (Exception,):
            pass
    for rv in reversed(analysis.other_blocks(sch, mains, chains)):  # what is left after inlining
        if analysis.pool_kind(sch.get(rv)).endswith("_finalize"):
            # a finalize (divide by the window count, ...) stays its own stage: inlined into a
            # vectorised last pass, its per-output count arithmetic doubled the 3x3 s1 average's
            # time; computed per row (schedule_pass_chain), LLVM vectorises it well
            continue
        inputs = analysis.producers_owned(sch, rv)
        if len(inputs) != 1 or not analysis.is_pointwise_over(sch, rv, inputs):
            continue  # a Concat, a second pool, ...: inlined it would lose iterations
        try:
            sch.reverse_compute_inline(rv)
        except (Exception,):
            pass


def _parallelize_rest(sch: s_tir.Schedule, target: Target) -> None:
    """Root blocks no pool claimed (a Concat of the pool with other branches, an Add of two
    pools): data-parallel nests get their outer loops fused into one parallel loop, the
    innermost left to LLVM's vectoriser. Anything else keeps its serial nest."""
    for rv in analysis.root_blocks(sch):
        block = sch.get(rv)
        loops = sch.get_loops(rv)
        if (
            analysis.is_reduction(block)
            or len(loops) != len(block.iter_vars)
            or len(loops) < 2
            or len(sch.get_child_blocks(loops[0])) != 1
        ):
            continue
        out_bytes = analysis.region_bytes(block.writes[0]) if len(block.writes) == 1 else None
        if out_bytes is None or out_bytes < _MIN_PARALLEL_BYTES or num_threads(target) < 2:
            continue
        try:
            sch.parallel(sch.fuse(*loops[:-1]))
        except (Exception,):
            pass


def choose_lanes(extent, dtype_bits: int, vbits: int) -> int:
    """Lanes of the vector tile along an output axis of ``extent``: the widest divisor of the
    extent up to one vector register (so no tail predicate), at least 4; 1 means scalar."""
    if extent is None or extent < 4:
        return 1
    widest = max(vbits // max(dtype_bits, 8), 4)
    for lanes in range(min(widest, extent), 3, -1):
        if extent % lanes == 0:
            return lanes
    return 1


def schedule_block(sch: s_tir.Schedule, block, target: Target, level: int = FULL) -> None:
    """Parallelise one window-reduction block and shape its loops for LLVM's vectoriser.

    Loops ``[lead..., out..., r...]`` become::

        parallel fused(lead)                      # batch x channels (x outer spatial if few)
          for out[:-1]
            consumers computed per row            # finalize / add / relu, vectorised by LLVM
            for out[-1]                           # LLVM vectorises this loop
              r... unrolled                       # window taps, straight-line code

    TVM's own ``vectorize`` goes through Ramp loads, which LLVM scalarises for strided taps;
    LLVM's loop vectoriser turns the same stride-s taps into interleaved loads + shuffles, so
    the innermost output loop is left to it (measured: 3-10x faster than TVM Ramp vectors).
    """
    info = sch.get(block)
    n_spatial = sum(1 for iv in info.iter_vars if int(iv.iter_type) == 0)
    loops = sch.get_loops(block)
    if len(loops) != len(info.iter_vars):
        raise ValueError("pool block is not a plain loop nest")
    spatial, reduce_loops = list(loops[:n_spatial]), list(loops[n_spatial:])
    extents = [analysis._extent(iv.dom) for iv in info.iter_vars]  # pylint: disable=protected-access
    if any(e is None for e in extents):
        # Symbolic extents (runtime output sizes, dynamic batch): fusing or splitting a symbolic
        # loop puts symbolic floordiv/floormod into every index, and TVM 0.27's simplifier
        # does not come back from that on these reductions. Parallelise the leading loops whose
        # extents are known, fused, and leave the rest as they are.
        static_lead = []
        for loop, extent in zip(loops[:n_spatial], extents[:n_spatial]):
            if extent is None:
                break
            static_lead.append(loop)
        if static_lead:
            sch.parallel(sch.fuse(*static_lead) if len(static_lead) > 1 else static_lead[0])
        elif n_spatial > 1:
            sch.parallel(loops[0])
        return
    rank = len(reduce_loops)
    n_lead = max(n_spatial - rank, 0)
    lead, out = spatial[:n_lead], spatial[n_lead:]
    consumers = analysis.attachable_consumers(sch, block)
    pads = [p for p in sch.get_producers(block) if analysis.pool_kind(sch.get(p)) == "pad"]
    if level == FULL and len(info.writes) == 1 and lead and out and pads:
        # Padded windows: the padded copy per plane makes every tap unconditional (below).
        # Unpadded windows keep the row loops LLVM vectorises (measured faster there).
        _schedule_vector_rows(sch, block, target, lead, out, reduce_loops, extents[n_spatial:], pads, consumers)
        return

    # 1. parallel over batch x channels x every output axis but the innermost.
    par_loops = list(lead) + list(out[:-1])
    rest = list(out[-1:])
    if not par_loops and rest and (_loop_extent(sch, rest[0]) or 2) > 1:
        par_loops, rest = rest, []
    par = sch.fuse(*par_loops) if len(par_loops) > 1 else (par_loops[0] if par_loops else None)
    if par is not None:
        sch.parallel(par)
    row = par  # consumers go per parallel chunk (one output row)

    if level >= NO_VECTOR:
        # 2. window taps unrolled when small.
        taps = _product(extents[n_spatial:])
        partial = _vector_partial_sums(sch, block, target, reduce_loops, taps) if level == FULL and rest else None
        if partial is not None:
            row = partial[0]  # rfactor moved the partial sums, and the row, to loops of their own
        elif taps is not None and taps <= _MAX_UNROLLED_ROW_TAPS:
            for r in reduce_loops:
                sch.unroll(r)
        elif rest and reduce_loops and (_loop_extent(sch, rest[-1]) or 1) > 1 and _inner_read_stride(sch, block) == 1:
            # large windows over contiguous taps: taps outside the output row, the row stays the
            # inner loop (strided taps keep the tap loop inside: as the inner loop, the row
            # would gather them)
            sch.reorder(*reduce_loops, rest[-1])
            sch.decompose_reduction(block, reduce_loops[0])

    # 3. consumers (finalize, add, relu) at the row, so the intermediate stays a row in cache;
    #    the padded copy (if any) is made per row too.
    tile = None
    if level >= NO_VECTOR and partial is None and rest:
        tile = _register_tile(sch, rest[-1], target, analysis.region_dtype(sch.get(block).writes[0]))
    for c in consumers:
        if tile is not None:
            sch.reverse_compute_at(c, tile)
        elif row is not None:
            sch.reverse_compute_at(c, row)
    for p in pads:
        if row is not None:
            sch.compute_at(p, row)
        else:
            sch.compute_inline(p)
    if partial is not None:
        partial[1]()


# Partial sums per output: one register's lanes, at most 8. Fewer partial sums leave less to
# add up per output (AVX-512, 1-D avg k64 s32 over 128x16000, 1 thread: 0.27 ms with 8 lanes,
# 0.38 ms with 16). The sums round differently from the compute's in-order loop: a few ulp of
# the sum, within the tolerances the average tests hold against onnxruntime.
_MAX_PARTIAL_SUM_LANES = 8


def _vector_partial_sums(sch, block, target, reduce_loops, taps) -> bool:
    """A long sum over contiguous taps as vector partial sums (NEON: 1-D avg k64 s32 took 130
    instructions per output in order, as many as stock TVM; x86: see _MAX_PARTIAL_SUM_LANES)::

        for out[-1]
          partial[lanes] = 0
          for taps // lanes
            partial[lanes] += data[.. lanes contiguous taps ..]   # one vector load + add
          partial[:taps % lanes] += data[.. the last taps ..]     # scalar, only when taps % lanes
          out = 0 + partial[0] + ... + partial[lanes - 1]

    The taps of all reduction loops count when they are contiguous in memory together (a whole
    plane); anything else keeps the in-order schedule (None). Returns the row loop (rfactor gives
    the partial sums a copy of the block's loops; the write-back joins them there) and what is
    left to do once the consumers are attached (loop_partition's blocks would keep them out)."""
    if family_of(target) is None or not reduce_loops:
        return None
    if not analysis.pool_kind(sch.get(block)).endswith("_sum") or taps is None or taps <= _MAX_UNROLLED_ROW_TAPS:
        return None
    dtype = analysis.region_dtype(sch.get(block).writes[0])
    lanes = min(max(vector_bits(target, dtype) // _dtype_bits(dtype), 1), _MAX_PARTIAL_SUM_LANES)
    if lanes < 2 or not _contiguous_taps(sch, block):
        return None
    tap = sch.fuse(*reduce_loops) if len(reduce_loops) > 1 else reduce_loops[0]
    _, lane = sch.split(tap, [None, lanes])
    n_spatial = sum(1 for iv in sch.get(block).iter_vars if int(iv.iter_type) == 0)
    partial = sch.rfactor(lane, factor_axis=n_spatial)
    family = family_of(target)
    levels = _halving_lane_sums(sch, block, lanes, n_spatial) if family.halving_lane_sums else []
    # the write-back under the output loop of the partial sums (not the other way round:
    # compute_at drops the predicate of a partial last chunk)
    for level in levels:
        sch.reverse_compute_at(level, sch.get_loops(partial)[-3])
    sch.reverse_compute_at(block, sch.get_loops(partial)[-3])
    # (the partial sums keep the global scope: TVM puts a small global buffer on the stack,
    # which LLVM keeps in registers, and a "local" one in a workspace allocated per row)
    chunk, lane = sch.get_loops(partial)[-2:]
    sch.vectorize(lane)  # before decompose_reduction: vectorize refuses an update without init
    init = sch.decompose_reduction(partial, chunk)
    sch.vectorize(sch.get_loops(init)[-1])
    for level in levels:
        lane, half = sch.get_loops(level)[-2:]  # rfactor puts the kept lanes outside
        sch.reorder(half, lane)
        sch.vectorize(lane)  # before decompose_reduction (see above)
        init = sch.decompose_reduction(level, half)
        sch.vectorize(sch.get_loops(init)[-1])
        sch.unroll(half)
    sch.unroll(sch.get_loops(block)[-1])

    def split_chunks():
        whole = chunk
        if taps % lanes:
            # the last chunk is partial (predicated): a loop of its own, so that the whole ones
            # are plain vectors
            whole = sch.loop_partition(chunk, [taps // lanes, None])[0]
        if taps // lanes <= _MAX_UNROLLED_ROW_TAPS:
            sch.unroll(whole)

    return sch.get_loops(partial)[0], split_chunks


def _halving_lane_sums(sch, block, lanes: int, n_spatial: int) -> list:
    """The write-back of vector partial sums as halving vector adds (CpuFamily.halving_lane_sums):
    lanes [0, h) + [h, 2h) until two are left, which the write-back adds. One rfactor per level;
    returns their blocks, at the root still."""
    levels = []
    while lanes > 2:
        half = lanes // 2
        _, inner = sch.split(sch.get_loops(block)[-1], [2, half])
        levels.append(sch.rfactor(inner, factor_axis=n_spatial))
        lanes = half
    return levels


def _contiguous_taps(sch, block) -> bool:
    """Do the taps of the first read, over all reduction iterators in order, lie contiguous in
    memory (the innermost moves by one element, each outer one by the extent of those inside)?"""
    info = sch.get(block)
    region = info.reads[0].region
    shape = analysis.region_buffer(info.reads[0]).shape
    if any(not isinstance(d, tirx.IntImm) for d in shape):
        return False
    flat, stride = 0, 1
    for r, d in zip(reversed(region), reversed(shape)):
        flat = flat + r.min * stride
        stride *= int(d)
    reduce_vars = [iv for iv in info.iter_vars if int(iv.iter_type) != 0]
    coeffs = detect_linear_equation(flat, [iv.var for iv in reduce_vars])
    if len(coeffs) != len(reduce_vars) + 1:
        return False
    want = 1
    for c, iv in zip(reversed(list(coeffs)[:-1]), reversed(reduce_vars)):
        if not isinstance(c, tirx.IntImm) or int(c) != want:
            return False
        want *= analysis._extent(iv.dom)  # pylint: disable=protected-access
    return True


def _pass_windows_overlap(sch, block, axis: int, rank: int) -> bool:
    """Do neighbouring outputs of a pass read overlapping input along ``axis`` (its taps span
    more than its stride)? Unknown counts as overlapping."""
    info = sch.get(block)
    dim = len(info.iter_vars) - rank + axis
    var = info.iter_vars[dim].var
    for read in info.reads:
        rng = read.region[dim]
        coeffs = detect_linear_equation(rng.min, [var])
        if not (len(coeffs) and isinstance(coeffs[0], tirx.IntImm) and isinstance(rng.extent, tirx.IntImm)):
            return True
        if int(rng.extent) > int(coeffs[0]):
            return True
    return False


def _inner_read_stride(sch, block):
    """How far the first read moves per step of the innermost output axis (None: unknown)."""
    info = sch.get(block)
    n_spatial = sum(1 for iv in info.iter_vars if int(iv.iter_type) == 0)
    var = info.iter_vars[n_spatial - 1].var
    index = info.reads[0].region[-1].min
    coeffs = detect_linear_equation(index, [var])
    return int(coeffs[0]) if len(coeffs) and isinstance(coeffs[0], tirx.IntImm) else None


def _schedule_vector_rows(sch, block, target, lead, out, reduce_loops, reduce_extents, pads, consumers):
    """The value-only window reduction (max / sum), static shapes::

        parallel planes (batch x channels; rows too when planes are fewer than 4 per thread)
          padded copy of the plane (or row)    # one bounds check per element, not per tap
          for out[:-1]
            for out[-1] / lanes                # a vector of outputs lives in registers
              taps... (unrolled)               # contiguous or strided loads, no predicate
                vector lanes
            consumers (finalize, add, relu)
    """
    planes = _product([_loop_extent(sch, l) for l in lead]) or 1
    par_loops = list(lead)
    if planes < 4 * num_threads(target) and len(out) > 1:
        par_loops += list(out[:-1])
    par = sch.fuse(*par_loops) if len(par_loops) > 1 else par_loops[0]
    sch.parallel(par)
    for p in pads:
        sch.compute_at(p, par)
    inner = out[-1]
    dtype_bits = _dtype_bits(analysis.region_dtype(sch.get(block).writes[0]))
    dtype = analysis.region_dtype(sch.get(block).writes[0])
    lanes = choose_lanes(_loop_extent(sch, inner), dtype_bits, vector_bits(target, dtype))
    taps = _product(reduce_extents)
    if lanes > 1 and _inner_read_stride(sch, block) != 1 and (dtype_bits < 16 or not strided_vectors(target)):
        # Strided 8-bit taps: TVM's vectorize gathers its 32-64 lanes one by one; LLVM's loop
        # vectoriser does better with wide loads + shuffles, so the row stays a plain loop.
        # (For 16/32-bit lanes the gathered vector still wins: measured in bench/.)
        lanes = 1
    if lanes > 1:
        tile, lane = sch.split(inner, [None, lanes])
        sch.reorder(tile, *reduce_loops, lane)
        acc = sch.cache_write(block, 0, "local")
        sch.reverse_compute_at(acc, tile)
        if taps is not None and taps <= _MAX_UNROLLED_TAPS:
            for r in reduce_loops:
                sch.unroll(r)
        sch.vectorize(lane)
        init = sch.decompose_reduction(block, reduce_loops[0])
        sch.vectorize(sch.get_loops(init)[-1])
        sch.vectorize(sch.get_loops(acc)[-1])
    elif taps is not None and taps <= _MAX_UNROLLED_TAPS:
        for r in reduce_loops:
            sch.unroll(r)
    for c in consumers:
        sch.reverse_compute_at(c, par)


_MAX_UNROLLED_TAPS = 64
# The row schedule leaves the output row to LLVM's vectoriser; with more taps unrolled than this
# it gathers them (1-D avg k64 s32, 1 thread: 2.9 ms unrolled, 1.3 ms as a loop).
_MAX_UNROLLED_ROW_TAPS = 16
# Longest innermost pass row vectorised whole; longer rows are split into equal vector chunks.
_MAX_VECTOR_ROW = 1024
# Longest row of passes along one axis that TVM vectorises (longer ones are LLVM's).
_MAX_SHORT_ROW = 64


def schedule_pass_chain(sch: s_tir.Schedule, chain, target: Target, level: int = FULL) -> None:
    """A separable window reduction (one elementwise pass per windowed axis)::

        parallel planes (batch x channels; the outer output axis too when planes are few)
          padded copy of the plane (small planes; large ones inline the bounds checks instead)
          for out[axes[0]]
            pass 0 over the padded rows it needs      # one vector row (TVM vectorize)
            for out[axes[1]] ...                      # each pass at the loop of its axis
              last pass, one vector row               # strided taps gather from a row in L1
            consumers (finalize, add, relu) per row   # LLVM vectorises them

    Measured on ResNet's 3x3 stride-2 stem (1 thread): 0.049 ms, against 0.27 ms for the
    direct 9-tap reduction this replaces and 0.13 ms for onnxruntime."""
    if level == FULL:
        chain = _taps_in_one_pass(sch, chain, target)
    final = chain.passes[-1]
    loops = sch.get_loops(final)
    rank = chain.spatial_rank
    source_bytes = analysis.region_bytes(sch.get(chain.passes[0]).reads[0])
    lead, out = list(loops[: len(loops) - rank]), list(loops[len(loops) - rank :])
    extents = [_loop_extent(sch, l) for l in loops]
    if any(e is None for e in extents):
        raise ValueError("separable passes need static shapes")
    planes = _product(extents[: len(lead)]) or 1
    par_loops = list(lead)
    if planes < 4 * num_threads(target) and len(out) > 1:
        par_loops.append(out[0])
    if not par_loops:
        par_loops = [out[0]]
    par = sch.fuse(*par_loops) if len(par_loops) > 1 else par_loops[0]
    if source_bytes is None or source_bytes >= _MIN_PARALLEL_BYTES:
        sch.parallel(par)
    loop_of_axis = {i: (par if out[i] in par_loops else out[i]) for i in range(rank)}
    loop_of_axis[-1] = par
    row = loop_of_axis[rank - 2] if rank > 1 else par
    for j in reversed(range(len(chain.passes) - 1)):
        axis = chain.axes[j]
        if axis in chain.axes[j + 1 :]:
            # A pass whose axis a later pass reduces again (the doubling levels of a long
            # window, compute.pool._doubling_passes) is still in input coordinates along it:
            # it is computed per row of that axis, at the loop above it, not per output of it.
            at = loop_of_axis[axis - 1]
        elif not _pass_windows_overlap(sch, chain.passes[j], axis, rank):
            # Windows that do not overlap share no rows of this pass between neighbouring
            # outputs: computed per output row, its rows stay in registers/L1 (3-D 2x2x2 s2
            # over 64x16x56x56, 1 thread: 0.19 ms, against 0.27 ms with the depth pass
            # computed per output plane).
            at = row
        else:
            at = loop_of_axis[axis]
        sch.compute_at(chain.passes[j], at, preserve_unit_loops=True)
    inlined_pad = None
    for p in sch.get_producers(chain.passes[0]):
        if analysis.pool_kind(sch.get(p)) != "pad":
            continue
        pad_block = sch.get(p)
        if any(analysis.region_dtype(r) == "bfloat16" for r in pad_block.reads):
            # TVM 0.27's bfloat16 legalization turns a vectorised bf16 -> f32 widening inside
            # if_then_else into a numeric uint16 cast: keep the widening copy per plane.
            sch.compute_at(p, par)
        elif (interior := _inlinable_padding(sch, p, chain, target, level)) is not None:
            # No masked loads: the padding is inlined into the first pass, whose row is cut at
            # the padding's edges, so the vectors in between have no bounds checks and no plane
            # is copied (NEON, 3x3 s2 p1 max over 64x112x112: 7.9 -> 4.9 instructions per
            # output; the copy alone was 2.7). Passes along distinct axes cut the middle into
            # TVM vector pieces (_vectorize_padded_row, below); the first doubling level of a
            # long window leaves its middle to LLVM whole (NEON, 1-D max k32 s1 p16 over
            # 64x4096: 6.6 -> 5.7 instructions per output).
            sch.compute_inline(p)
            inlined_pad = (chain.passes[0], interior)
            if chain.repeats_an_axis:
                _cut_at(sch, sch.get_loops(chain.passes[0])[-1], interior[0], interior[1])
        elif _plane_bytes(pad_block, rank) <= _PLANE_COPY_BYTES or not masked_loads(target):
            # A small padded plane stays in L1: one copy per plane, then no bounds checks.
            sch.compute_at(p, par)
            if not masked_loads(target):
                _partition_pad_rows(sch, p)
        else:
            # A large one would not: the bounds checks go into the first pass's rows instead.
            sch.compute_inline(p)
    consumers = analysis.attachable_consumers(sch, final)
    for c in consumers:
        sch.reverse_compute_at(c, row)
    if level < FULL:
        return
    family = family_of(target)
    for c in consumers if family is not None and family.vector_consumers else []:
        _vectorize_row(sch, sch.get_loops(c)[-1], target, analysis.region_dtype(sch.get(c).writes[0]))
    # Pass rows are TVM-vectorised whole. The last pass's strided taps then become gathers
    # from a row in L1: faster than LLVM's vectoriser (shuffles) while the data is in cache
    # (1 thread, 3x3 s2 on 112x112: 0.049 vs 0.076 ms; 3x3 s1 on 28x28: 0.035 vs 0.062 ms),
    # not once it streams from DRAM, where the microcoded gathers compete with the loads of the
    # next rows (batch 32, 2 threads, 4 interleaved runs each: median 4.1 vs 3.6 ms; DRAM
    # timings on this machine vary by 2x run to run). Out-of-cache inputs keep LLVM's last pass.
    # A single pass reads the data itself, not a row in L1: LLVM's vectoriser keeps it too.
    gather_last = (source_bytes is not None and source_bytes <= _IN_CACHE_BYTES and len(chain.passes) > 1
                   and strided_vectors(target))
    last = chain.passes[-1]
    if chain.repeats_an_axis:
        # Passes along one axis: the doubling levels of a long window, two contiguous reads
        # per element over rows of arbitrary length, which LLVM's vectoriser handles with a
        # scalar tail (1-D max k32 s1 over 64x4096, 1 thread: 0.107 ms, against 0.122 ms
        # with TVM vectorising odd-sized row chunks); or the lanes of a flat global
        # reduction (compute.pool._flat_plane_passes), a register or less: one TVM vector.
        for block in chain.passes[:-1]:
            if inlined_pad is not None and block.same_as(inlined_pad[0]):
                continue  # cut at the padding's edges above, LLVM's
            loop = sch.get_loops(block)[-1]
            if (_loop_extent(sch, loop) or 0) <= _MAX_SHORT_ROW:
                sch.vectorize(loop)
        return
    # Without gathers, a strided last pass is TVM-vectorised only where its strided loads become
    # de-interleaving loads (CpuFamily.deinterleaving_loads); else LLVM's vectoriser keeps it.
    last_stride = _inner_read_stride(sch, last)
    contiguous_last = not strided_vectors(target) and (
        last_stride == 1
        or (family is not None and family.deinterleaving_loads and last_stride is not None
            and 2 <= last_stride <= strided_loads.MAX_STRIDE))
    for block in chain.passes if gather_last or contiguous_last else chain.passes[:-1]:
        loop = sch.get_loops(block)[-1]
        dtype = analysis.region_dtype(sch.get(block).writes[0])
        if inlined_pad is not None and block.same_as(inlined_pad[0]):
            _vectorize_padded_row(sch, loop, inlined_pad[1])
        else:
            _vectorize_row(sch, loop, target, dtype, long_chunks=len(chain.passes) == 1)
    if not (gather_last or contiguous_last):
        _register_tile(sch, sch.get_loops(last)[-1], target, analysis.region_dtype(sch.get(last).writes[0]))


# Smaller inputs run on one thread: waking and joining the workers (about 1 us here) costs more
# than the second thread saves. Measured with TVM's workers unpinned (tvm_pool.thread_pool),
# 2 threads, znver4, one thread against two: 50 KB inputs 0.0017 vs 0.0023 ms (7x7 global
# average), 0.0028 vs 0.0030 (3x3 s2 max); 100 KB 0.0083 vs 0.0068 (3x3 s1 max), 0.0144 vs
# 0.0087 (2x2 max); 200 KB global average a tie, 401 KB 0.0059 vs 0.0044. (With the workers
# pinned, before tvm_pool unpinned them, 401 KB was faster on one thread: 0.0071 vs 0.0104 ms.)
_MIN_PARALLEL_BYTES = 96 * 1024

# Inputs up to this size are treated as cache-resident (the last-level cache is 16-32 MB on
# current x86 servers; a pooling benchmark or a network layer re-reads warm data).
_IN_CACHE_BYTES = 16 * 1024 * 1024

# Padded planes up to this size are copied per plane (L1 is 32-48 KB on current x86 cores).
# Measured (1 thread): 28x28 3x3 s1 0.059 ms with the copy vs 0.24 ms with the checks inlined,
# 56x56 3x3 s1 avg 0.039 vs 0.058; 112x112 3x3 s2 (51 KB) 0.118 vs 0.079.
_PLANE_COPY_BYTES = 32 * 1024


def _taps_in_one_pass(sch, chain, target: Target):
    """On CPUs with de-interleaving loads, a chain of passes whose windows do not overlap (3-D
    2x2x2 s2, ...) as one pass over every tap: each input is read once either way, and the
    strided taps of the last axis become LD2/LD3/LD4 straight from the data, with no row of
    partial results stored and loaded per axis (NEON, 3-D 2x2x2 s2 average over 64x16x56x56:
    4.74 -> 3.67 instructions per output). Padded chains keep their passes."""
    family = family_of(target)
    if family is None or not family.deinterleaving_loads or len(chain.passes) < 2:
        return chain
    if chain.repeats_an_axis:
        return chain
    if any(analysis.pool_kind(sch.get(p)) == "pad" for p in sch.get_producers(chain.passes[0])):
        return chain
    for block, axis in zip(chain.passes, chain.axes):
        if _pass_windows_overlap(sch, block, axis, chain.spatial_rank):
            return chain
    if (_inner_read_stride(sch, chain.passes[-1]) or 0) > strided_loads.MAX_STRIDE:
        return chain
    for block in chain.passes[:-1]:
        sch.compute_inline(block)
    return analysis.PassChain([chain.passes[-1]], [chain.axes[-1]], chain.spatial_rank)


def _inlinable_padding(sch, pad, chain, target: Target, level: int):
    """The first pass's interior (:func:`_padded_interior`) when the padded copy ``pad`` is
    better inlined into it (CPUs without masked loads, full level, dtypes computed in their own
    registers; rows cut into few enough vector pieces, or the long row of a doubling level that
    LLVM vectorises); else None."""
    block = sch.get(pad)
    if masked_loads(target) or level < FULL:
        return None
    if not all(_native_vectors(target, analysis.region_dtype(r)) for r in [*block.reads, *block.writes]):
        return None
    first = chain.passes[0]
    if not chain.repeats_an_axis:
        return _padded_interior(sch, pad, first, target, _MAX_PADDED_ROW_PIECES)
    if (_loop_extent(sch, sch.get_loops(first)[-1]) or 0) <= _MAX_SHORT_ROW:
        return None
    return _padded_interior(sch, pad, first, target, max_pieces=None)


def _cut_at(sch, loop, lo: int, hi: int) -> None:
    """``loop`` split by loop_partition into [0, lo), [lo, hi) and the rest (empty parts left out)."""
    extent = _loop_extent(sch, loop)
    factors = ([lo] if lo > 0 else []) + ([hi - lo] if hi < extent else [])
    if factors and hi > lo:
        sch.loop_partition(loop, factors + [None])


def _padded_interior(sch, pad, first, target: Target, max_pieces: int | None = None):
    """(lo, hi, pieces): the range of the first pass's innermost loop whose reads of the padded
    buffer (along the last axis) stay inside the data, and that range cut into vector pieces
    (:func:`_row_pieces`); None when it cannot be found or would take too many pieces."""
    pad_block, block = sch.get(pad), sch.get(first)
    data = _pad_data_range(pad_block)
    if data is None:
        return None
    begin, n = data  # data starts at padded index ``begin``
    padded = analysis.region_buffer(pad_block.writes[0])
    reads = [r for r in block.reads if analysis.region_buffer(r).same_as(padded)]
    loops = sch.get_loops(first)
    extent = _loop_extent(sch, loops[-1])
    iv = block.iter_vars[-1]
    if len(reads) != 1 or extent is None or analysis._extent(iv.dom) != extent:  # pylint: disable=protected-access
        return None
    region = reads[0].region[-1]
    coeffs = detect_linear_equation(region.min, [iv.var])
    if len(coeffs) != 2 or not all(isinstance(c, tirx.IntImm) for c in coeffs) or not isinstance(region.extent, tirx.IntImm):
        return None
    step, offset, span = int(coeffs[0]), int(coeffs[1]), int(region.extent)
    if step < 1:
        return None
    lo = max(0, -((offset - begin) // step))  # first v with step * v + offset >= begin
    hi = min(extent, (begin + n - span - offset) // step + 1)  # past the last inside the data
    if hi - lo < 1:
        return None
    longest, lanes = vector_row_lanes(target, analysis.region_dtype(pad_block.writes[0]))
    pieces = _row_pieces(hi - lo, longest, lanes)
    if max_pieces is not None and (pieces is None or len(pieces) > max_pieces):
        return None
    return lo, hi, pieces


def _native_vectors(target: Target, dtype: str) -> bool:
    """Is ``dtype`` computed in full-width vector registers (not widened, as float16 is on NEON
    without +fullfp16)? Widened, the padding's selects inlined into a vector made LLVM promote
    each half alone (NEON 3x3 s2 p1 fp16: 14.4 instructions per output, 7.2 with the copy)."""
    return vector_bits(target, dtype) >= 128


# The rest of a row after its whole registers is vectorised too from this many lanes on (a half
# NEON register: 3x3 s3 max over 96x54x54, rows of 16 + 2 outputs: 5.10 -> 4.43 instructions per
# output; scalar, the 2 took as many instructions as the 16).
_MIN_REST_LANES = 2

# Pieces of a padded row's middle (each its own loop after loop_partition). A 3x3 s2 row of 112
# is 7; longer rows keep the per-plane copy.
_MAX_PADDED_ROW_PIECES = 16


def _row_pieces(n: int, longest: int, lanes: int, long_chunks: bool = False):
    """``n`` cut into vector pieces: equal chunks of a few registers (at most ``longest`` lanes,
    the longest that divides the row's whole registers), then what is left, each piece a
    power-of-two number of registers or, last, of lanes (LLVM legalises a 3-register vector
    lane by lane: a 28-wide 3x3 s1 max row cut 16 + 12 took 4.2 instructions per output,
    7 x 4 2.6). ``long_chunks``: a chunk of one register only when nothing longer fits (28 is
    16 + 8 + 4, not 7 x 4), for rows whose every tap is a load from the data: the 3-D 2x2x2 s2
    max on NEON went from 4.6 to 3.9 instructions per output, a loop iteration's address
    arithmetic being most of the difference; rows of passes ran better in single registers
    (28-wide 3x3 s1: 2.6 as 7 x 4, 3.0 as 16 + 8 + 4). None: a short row no chunk divides."""
    whole = n - n % lanes if n >= longest else n
    chunks = [c for c in _powers_of_two_down(longest) if c >= lanes and c % lanes == 0]
    for chunk in chunks:
        if not whole or whole % chunk:
            continue
        if long_chunks and chunk == lanes and whole > longest:
            chunk = chunks[0]
        equal = whole - whole % chunk
        return [chunk] * (equal // chunk) + _powers_of_two_split(n - equal)
    return None


def _powers_of_two_down(n: int) -> list:
    out, p = [], 1 << (max(n, 1).bit_length() - 1)
    while p >= 1:
        out.append(p)
        p >>= 1
    return out


def _powers_of_two_split(n: int) -> list:
    """``n`` as distinct powers of two, largest first (12 -> [8, 4], 3 -> [2, 1])."""
    return [p for p in _powers_of_two_down(n) if n & p] if n > 0 else []


def _vectorize_padded_row(sch, loop, interior) -> None:
    """The first pass's row with the padding inlined: the edges (bounds checks) scalar, the
    middle cut into pieces that TVM vectorises without checks. loop_partition gives each piece
    a loop of its own: TVM's split needs a loop that starts at 0, which the middle does not."""
    lo, hi, pieces = interior
    extent = _loop_extent(sch, loop)
    factors = ([lo] if lo else []) + pieces + ([extent - hi] if hi < extent else [])
    parts = sch.loop_partition(loop, factors[:-1] + [None]) if len(factors) > 1 else [loop]
    for part, length in zip(parts[1 if lo else 0 :], pieces):
        if length >= _MIN_REST_LANES or len(pieces) == 1:
            sch.vectorize(part)


def _partition_pad_rows(sch, pad) -> None:
    """The padded copy's innermost loop split into its edges and a middle with no bounds checks,
    which LLVM vectorises (without masked loads the checks are per lane). loop_partition at the
    data's edges where they are known; else TVM's LoopPartition pass is asked to (a hint it did
    not act on for a 1-D row of 4128: a compare and branch per element, 4.5 instructions per
    output of a 1-D k32 max on NEON)."""
    inner = sch.get_loops(pad)[-1]
    data = _pad_data_range(sch.get(pad))
    extent = _loop_extent(sch, inner)
    if data is None or extent is None or analysis._extent(sch.get(pad).iter_vars[-1].dom) != extent:  # pylint: disable=protected-access
        sch.annotate(inner, "pragma_loop_partition_hint", 1)
        return
    _cut_at(sch, inner, data[0], min(data[0] + data[1], extent))


def _pad_data_range(pad_block, dim: int = -1):
    """(begin, n): the padded copy's last axis holds the data at [begin, begin + n); None when
    that is not a static shift of the data."""
    src = pad_block.reads[0]
    n = analysis.region_buffer(src).shape[dim]
    coeffs = detect_linear_equation(src.region[dim].min, [pad_block.iter_vars[dim].var])
    if len(coeffs) != 2 or not all(isinstance(c, tirx.IntImm) for c in coeffs) or int(coeffs[0]) != 1:
        return None
    if not isinstance(n, tirx.IntImm):
        return None
    return -int(coeffs[1]), int(n)


def _plane_bytes(block, rank: int) -> int:
    extents = [analysis._extent(iv.dom) for iv in block.iter_vars[-rank:]]  # pylint: disable=protected-access
    bits = _dtype_bits(analysis.region_dtype(block.writes[0]))
    return (_product(extents) or 1 << 40) * bits // 8


def _vectorize_row(sch, loop, target: Target, dtype: str, long_chunks: bool = False) -> None:
    """TVM-vectorise a contiguous pass row: whole when it is short, else in equal chunks."""
    extent = _loop_extent(sch, loop)
    if extent is None or extent < 2:
        return
    family = family_of(target)
    if family is None or family.vector_row_registers is None:
        if extent <= _MAX_VECTOR_ROW:
            sch.vectorize(loop)
            return
        for chunk in range(512, 63, -1):
            if extent % chunk == 0:
                sch.vectorize(sch.split(loop, [None, chunk])[1])
                return
        return
    # A few whole registers per chunk (_row_pieces), the rest vectorised as one piece. A short
    # row no chunk divides stays LLVM's (a 7-wide global max row: 26 instructions per output as
    # LLVM's, 53 cut).
    longest, lanes = vector_row_lanes(target, dtype)
    pieces = _row_pieces(extent, longest, lanes, long_chunks)
    if pieces is None:
        return
    chunk = pieces[0]
    equal = chunk * next((i for i, p in enumerate(pieces) if p != chunk), len(pieces))
    later = pieces[equal // chunk :]
    parts = sch.loop_partition(loop, [equal] + later[:-1] + [None]) if later else [loop]
    if chunk == equal:
        sch.vectorize(parts[0])
    else:
        sch.vectorize(sch.split(parts[0], [None, chunk])[1])
    for part, length in zip(parts[1:], later):
        if length >= _MIN_REST_LANES:
            sch.vectorize(part)


def _product(values):
    total = 1
    for v in values:
        if v is None:
            return None
        total *= v
    return total


def _loop_extent(sch, loop):
    ext = sch.get(loop).extent
    return int(ext) if isinstance(ext, tirx.IntImm) else None
