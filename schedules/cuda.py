"""NVIDIA GPU (CUDA) schedule for pooling. Verified without a GPU (see below).

One dlight rule, :class:`Pool`, for every tvm_pool pooling PrimFunc (max, max with indices,
average, Lp, global, adaptive, TensorRT) and TOPI's pooling blocks, fused or not. It is chosen
for targets of kind ``cuda`` (keys ``cuda``/``gpu``); a PrimFunc it does not understand is
declined (``None``) and TVM's own dlight GPU rules take it.

Per pooling unit (see :mod:`.analysis`):

* **separable passes** (``tvm_pool.pass_axis`` chains: overlapping windows, 1-D windows, global
  pools up to 16x16): one CUDA block per output tile, one thread per output, consecutive
  threads on consecutive outputs of the innermost axis (coalesced stores, stride-s loads).
  The tile is ``planes x rows x cols`` of the last pass's output: whole rows up to 64 outputs
  (32-wide column tiles beyond), as many rows as fill 256 threads, and for small planes several
  whole planes (7x7 ResNet tails, 1x1 global outputs). Every earlier pass is computed per block
  into **shared memory** over the tile plus its halo, cooperatively by the block's threads
  (each input row of the halo read once per block from DRAM), then the last pass reads its taps
  from shared memory. The padding is inlined into the first pass as a bounds check. A tile
  whose staging would not fit the target's shared memory is shrunk, and a chain that still does
  not fit reads its taps directly (every earlier pass inlined).
* **window reductions** (indices, non-overlapping 2x2, adaptive, long windows): one thread per
  output over the fused output loops (blocks of up to 256 threads, a multiple of 32), window taps
  unrolled up to 64. Symbolic extents (runtime adaptive sizes, dynamic batch) bind the static
  output loops and loop serially over the symbolic ones.
* **a consumer joining several reductions** (TensorRT's MAX_AVERAGE_BLEND reads a max and a
  sum): one kernel; the consumer is tiled like a last pass and each reduction's result is
  computed per thread right before it (earlier passes staged in shared memory as above).
* **global window reductions** (one output per plane and at least 32 taps): one warp per plane,
  8 planes per 256-thread block; each lane reduces every 32nd element (coalesced) and TVM's
  cross-thread allreduce (warp shuffles) combines the lanes.

**16-byte loads** (``ld.global.nc.v4``: 4 floats, 8 halves, 16 bytes), wherever a thread's input
is whole 16-byte pieces at addresses provably multiples of 16: non-overlapping windows that
tile the rows exactly (2x2 stride 2, 1-D k4 s4; max, average, Indices) give each thread
``16 bytes / stride`` consecutive outputs and load its taps into registers; staged passes copy
the block's input rows into shared memory before the first pass reads them; warp reductions
load every 32nd piece. The proof is :func:`vector_accesses` on the result (TVM's vectorizer
checks no alignment); where it fails (7x7 planes, odd widths, column tiles starting mid-row) or
a window reads through a bounds check (padding, ceil overhang), loads stay scalar.

Fusion: producers before the pool (relu, TOPI's ``pad_temp``, the padded copy) are inlined
(``compute_inline`` substitutes the producer's value into each read: exact whatever the
indexing). A consumer (``*_finalize``, add, relu, ...) is attached to the pool's thread loop only
when :func:`.analysis.is_pointwise_over` the pool's output: data-parallel, the same domain,
every read of the pool's buffers at its own iterators, every other read a function parameter.
Its intermediate then lives in a register (``local``). Anything else (a Concat, a second pool,
bfloat16's ``widen`` stage) stays its own kernel with a generic one-thread-per-element schedule.

**Verified without a GPU**: the schedule is written against a :class:`Binder`; the real one
binds loops to ``blockIdx``/``threadIdx`` and sets storage scopes, :class:`SerialBinder` does
neither, leaving the very same loop nest, splits, staging regions and index expressions as
serial loops over global buffers, which builds for the CPU (``Pool(simulate=True)``). That run
is exact for everything the rule decides; the tests also check that no scheduled block can
write outside its buffer (a widened block domain: see :func:`attach_consumers`). What it does
not run is TVM's own work on bound loops: the barriers between a shared stage's writes and the
last pass's reads (ThreadSync) and the warp allreduce (LowerThreadAllreduce); those are checked
on the CUDA build (``tests/test_schedules_cuda.py``: VerifyGPUCode, ptxas, launch shapes).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import s_tir, sym, tirx
from tvm.s_tir.dlight import ScheduleRule
from tvm.target import Target

from . import analysis
from .cpu import _loop_extent as _extent, _product  # pylint: disable=protected-access

logger = logging.getLogger(__name__)

# Threads per block: 256 (8 warps) keeps 8 blocks per SM resident on sm_75..sm_90.
THREADS = 256
WARP = 32
# Window taps up to this many are unrolled (straight-line code).
MAX_UNROLLED_TAPS = 64
# A window reduction with one output per plane and at least this many taps is a warp reduction.
GLOBAL_MIN_TAPS = 32
# Planes per block of the warp reduction (one warp each).
GLOBAL_PLANES_PER_BLOCK = THREADS // WARP
# Static shared memory per block without opting in to more (every CUDA arch).
DEFAULT_SHARED_BYTES = 48 * 1024
# From this many outputs on, each thread computes two (consecutive threads still take
# consecutive outputs: thread t of a block computes outputs t and t + blockDim).
MIN_OUTPUTS_TWO_PER_THREAD = 8192
# Widest row tile kept whole (wider rows take 32-wide column tiles).
MAX_WHOLE_ROW = 64
# A thread loads its contiguous input in 16-byte pieces (ld.global.v4.f32, v8 halves, v16
# bytes) where every piece's address is provably a multiple of 16: see :func:`vector_accesses`.
VECTOR_BYTES = 16


def is_cuda(target: Target) -> bool:
    return target.kind.name == "cuda" and "gpu" in list(target.keys)


def default_target() -> Target:
    return Target({"kind": "cuda", "arch": "sm_80"})


def max_threads(target: Target) -> int:
    limit = target.attrs.get("max_threads_per_block", None) or target.attrs.get("max_num_threads", None)
    return min(THREADS, int(limit)) if limit else THREADS


def shared_limit(target: Target) -> int:
    limit = target.attrs.get("max_shared_memory_per_block", None)
    return min(int(limit), DEFAULT_SHARED_BYTES) if limit else DEFAULT_SHARED_BYTES


# --------------------------------------------------------------------------------------------
# Binding hooks: the real schedule and its CPU simulation differ only here.
# --------------------------------------------------------------------------------------------


class Binder:
    """Binds loops to GPU threads and sets storage scopes (the real schedule)."""

    simulate = False

    def __init__(self, sch: s_tir.Schedule):
        self.sch = sch
        self._bound = []  # srefs of the loops bound (or, simulated, that would be)

    def bind(self, loop, tag: str) -> None:
        self._bound.append(self.sch.get_sref(loop))
        self.sch.bind(loop, tag)

    def is_bound(self, block) -> bool:
        """Whether ``block`` sits under a loop this binder bound (its kernel is placed)."""
        for loop in self.sch.get_loops(block):
            sref = self.sch.get_sref(loop)
            if any(sref.same_as(b) for b in self._bound):
                return True
        return False

    def scope(self, block, index: int, scope: str) -> None:
        self.sch.set_scope(block, index, scope)


class SerialBinder(Binder):
    """The CPU simulation: bound loops stay serial loops, staged buffers stay global (and are
    still compacted to the per-block region by TVM's CompactBufferAllocation)."""

    simulate = True

    def bind(self, loop, tag: str) -> None:
        self._bound.append(self.sch.get_sref(loop))

    def scope(self, block, index: int, scope: str) -> None:
        pass


# --------------------------------------------------------------------------------------------
# The rule
# --------------------------------------------------------------------------------------------


class Pool(ScheduleRule):
    """dlight rule: schedule every pooling PrimFunc for an NVIDIA GPU (see the module docstring).

    ``simulate=True`` builds the same schedule with every thread-bound loop left serial, for any
    target (the CPU simulation test); ``gpu_target`` gives the GPU limits it assumes then."""

    def __init__(self, simulate: bool = False, gpu_target: Target | None = None):
        self.simulate = simulate
        self.gpu_target = gpu_target

    def is_target_available(self, target: Target) -> bool:
        return self.simulate or is_cuda(target)

    def apply(self, func: tirx.PrimFunc, target: Target, tunable: bool):  # noqa: D102
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        gpu = target if is_cuda(target) else (self.gpu_target or default_target())
        probe = s_tir.Schedule(func)
        if not analysis.main_blocks(probe) and not analysis.pass_chains(probe):
            return None
        warp = vector = True
        attempts = [(1, True), (2, True), (4, True), (8, True), (1, False)]
        while attempts:
            tile_scale, staged = attempts[0]
            sch = s_tir.Schedule(func)
            binder = SerialBinder(sch) if self.simulate else Binder(sch)
            try:
                schedule_function(sch, gpu, binder, staged=staged, tile_scale=tile_scale, warp=warp, vector=vector)
                if vector and not all(aligned for _, _, aligned in vector_accesses(sch.mod["main"])):
                    raise MisalignedVector("a vector access is not provably aligned")
            except NoWarpReduction:
                warp = False  # the same attempt again, one thread per plane
                continue
            except (Exception,) as err:  # pylint: disable=broad-except
                if vector:  # the same attempt again with scalar loads
                    vector = False
                    logger.debug("cuda pool schedule with vector loads failed: %s", err)
                    continue
                attempts.pop(0)
                vector = True
                logger.debug("cuda pool schedule (staged=%s, scale %d) failed: %s", staged, tile_scale, err)
                continue
            attempts.pop(0)
            vector = True
            if staged and shared_bytes(sch.mod["main"]) > shared_limit(gpu):
                continue
            return sch
        return None


# --------------------------------------------------------------------------------------------
# Whole function
# --------------------------------------------------------------------------------------------


@dataclass
class _Unit:
    """One pooling reduction as scheduled: the block that writes its result, and the loops
    consumers attach to (the per-output thread loop) and kernels are launched on."""

    final: object  # SBlockRV
    thread_loop: object  # LoopRV: the per-output thread loop
    attached: frozenset = frozenset()  # names of the blocks attached to it (write-backs, consumers)


class NoWarpReduction(ValueError):
    """TVM's cross-thread reduction does not recognise the block's reducer (the NaN-propagating
    float max is a Select, which LowerCrossThreadReduction cannot match)."""


class MisalignedVector(ValueError):
    """A vector access of the schedule is not provably aligned to its width."""


def schedule_function(
    sch: s_tir.Schedule, target: Target, binder: Binder | None = None, *, staged: bool = True, tile_scale: int = 1,
    warp: bool = True, vector: bool = True,
) -> None:
    """Schedule every pooling reduction of ``sch``'s function and everything fused with it
    (``vector``: 16-byte loads where the forms of "16-byte loads" below apply)."""
    binder = binder or Binder(sch)
    mains, chains = analysis.main_blocks(sch), analysis.pass_chains(sch)
    _inline_producers(sch, mains, chains)
    units = []
    joined = joining_consumer(sch, mains, chains)
    if joined is not None:
        anchor, joined_mains, joined_chains = joined
        units.append(schedule_joined(sch, anchor, joined_mains, joined_chains, target, binder, staged=staged,
                                     tile_scale=tile_scale))
        mains = [m for m in mains if m not in joined_mains]
        chains = [c for c in chains if c not in joined_chains]
    for main in mains:
        units.append(schedule_main(sch, main, target, binder, warp=warp, vector=vector))
    for chain in chains:
        units.append(schedule_chain(sch, chain, target, binder, staged=staged, tile_scale=tile_scale, vector=vector))
    for unit in units:
        keep_in_registers(sch, unit, binder)
    schedule_leftovers(sch, target, binder)


def _name(sch, rv) -> str:
    return sch.get(rv).name_hint


def _upstream_names(sch, mains, chains) -> set:
    """Names of the blocks whose results flow into a pooling unit (its producers, transitively)."""
    todo = [m.rv for m in mains] + [rv for c in chains for rv in c.passes]
    seen = set()
    while todo:
        cur = todo.pop()
        for p in sch.get_producers(cur):
            name = _name(sch, p)
            if name not in seen:
                seen.add(name)
                todo.append(p)
    return seen


def _inline_producers(sch, mains, chains) -> None:
    """Inline every producer of a pooling unit TVM lets us inline (relu before the pool, the
    padded copy, TOPI's pad_temp); ``widen`` (bfloat16 ahead of an argmax) stays its own
    kernel: TVM 0.27's bfloat16 legalization breaks on the inlined form."""
    upstream = _upstream_names(sch, mains, chains)
    for rv in reversed(analysis.other_blocks(sch, mains, chains)):  # consumers before producers
        if _name(sch, rv) not in upstream or analysis.pool_kind(sch.get(rv)) == "widen":
            continue
        try:
            sch.compute_inline(rv)
        except (Exception,):  # pylint: disable=broad-except
            pass  # scheduled as its own kernel by schedule_leftovers


# --------------------------------------------------------------------------------------------
# Window reductions
# --------------------------------------------------------------------------------------------



def _round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


def _block_threads(target: Target, outputs: int | None, per_thread: int = 1) -> int:
    """Threads per block for ``outputs`` elements, ``per_thread`` each: up to 256, a multiple
    of 32."""
    limit = max_threads(target)
    if outputs is None:
        return limit
    return max(WARP, min(limit, _round_up(-(-outputs // per_thread), WARP)))


def outputs_per_thread(total: int | None) -> int:
    """Two outputs per thread on large outputs (so no more threads than outputs are launched
    even where a tile's tail leaves some idle); one on small ones (more blocks to spread)."""
    return 2 if total is not None and total >= MIN_OUTPUTS_TWO_PER_THREAD else 1


def is_global(main: analysis.MainBlock, sch) -> bool:
    """One output per plane over a long window: a warp reduction per plane."""
    rank = len(main.reduce_extents)
    out = main.spatial_extents[main.n_spatial - rank :] if rank else []
    taps = _product(main.reduce_extents)
    return (
        rank > 0
        and all(e == 1 for e in out)
        and taps is not None
        and taps >= GLOBAL_MIN_TAPS
        and None not in main.spatial_extents
        and len(sch.get(main.rv).writes) == 1
    )


def schedule_main(sch, main: analysis.MainBlock, target: Target, binder: Binder, warp: bool = True,
                  vector: bool = True) -> _Unit:
    """A window-reduction block: a warp per plane (global), else a thread per output, or per
    group of consecutive outputs whose windows are whole 16-byte pieces of the input rows
    (:func:`contiguous_windows`: 2x2 stride 2 averages, Indices), loaded at once. A thread per
    plane (global max) loads its plane in pieces (:func:`_split_row_pieces`)."""
    if not analysis.loops_match_block(sch, main):
        raise ValueError("pool block is not a plain loop nest")
    if warp and is_global(main, sch):
        if not warp_reducible(sch, main.rv):
            raise NoWarpReduction(sch.get(main.rv).name_hint)
        return _schedule_global(sch, main, target, binder, vector)
    loops = sch.get_loops(main.rv)
    spatial, reduce_loops = list(loops[: main.n_spatial]), loops[main.n_spatial :]
    static = None not in main.spatial_extents
    per = contiguous_windows(sch, main.rv) if vector and static else None
    output_loop = spatial[-1]
    if per and per > 1:  # the group's outputs stay a loop inside the thread
        spatial[-1], output_loop = sch.split(spatial[-1], [None, per])
    attached = set()
    if static:
        attached |= _accumulate_in_registers(sch, main.rv, output_loop)
        attached |= attach_consumers(sch, main.rv, output_loop)
    piece = None
    if not per and static and is_global(main, sch):  # a thread per plane (the NaN max)
        reduce_loops, piece = _split_row_pieces(sch, main.rv, reduce_loops, vector)
    tx = _bind_spatial(sch, main.rv, spatial, reduce_loops, target, binder)
    if per:
        _load_pieces(sch, main.rv, tx, vector_lanes(sch, main.rv))
    if piece is not None:
        _load_pieces(sch, main.rv, reduce_loops[-1], _extent(sch, piece))
        sch.unroll(piece)
    taps = _product(main.reduce_extents)
    if taps is not None and taps <= MAX_UNROLLED_TAPS:
        for r in reduce_loops:
            sch.unroll(r)
    return _Unit(main.rv, tx, frozenset(attached))


def _accumulate_in_registers(sch, block, output_loop) -> set:
    """A reduction writing the function's output accumulates in a register, then stores once
    (an intermediate is kept in a register by attach_consumers when its readers join it)."""
    params = analysis.function_params(sch)
    outputs = [i for i, buf in enumerate(_written(sch.get(block))) if any(buf.same_as(p) for p in params)]
    stores = [sch.cache_write(block, i, "local") for i in outputs]
    for store in stores:
        sch.reverse_compute_at(store, output_loop, preserve_unit_loops=True)
    return {_name(sch, st) for st in stores}


def _bind_spatial(sch, block, spatial, reduce_loops, target, binder):
    """Fuse the static spatial loops (symbolic ones move inside, serial), one thread each."""
    static = [l for l in spatial if _extent(sch, l) is not None]
    symbolic = [l for l in spatial if _extent(sch, l) is None]
    if not static:
        if symbolic:
            raise ValueError("no static output loop to bind")
        static = [sch.add_unit_loop(block)]
    if symbolic:
        sch.reorder(*static, *symbolic, *reduce_loops)
    fused = sch.fuse(*static) if len(static) > 1 else static[0]
    total = _extent(sch, fused)
    per_thread = outputs_per_thread(total) if not symbolic else 1
    threads = _block_threads(target, total, per_thread)
    if per_thread > 1:
        bx, _, tx = sch.split(fused, [None, per_thread, threads])
    else:
        bx, tx = sch.split(fused, [None, threads])
    binder.bind(bx, "blockIdx.x")
    binder.bind(tx, "threadIdx.x")
    return tx


def warp_reducible(sch, block) -> bool:
    """Whether TVM's cross-thread reduction can lower ``block``'s reducer (tried on a copy)."""
    trial = s_tir.Schedule(sch.mod)
    rv = trial.get_sblock(sch.get(block).name_hint)
    loops = trial.get_loops(rv)
    try:
        trial.bind(loops[-1], "threadIdx.x")
        s_tir.transform.LowerCrossThreadReduction()(trial.mod)
    except (Exception,):  # pylint: disable=broad-except
        return False
    return True


def _schedule_global(sch, main, target, binder, vector: bool = True) -> _Unit:
    """One warp per plane: lanes take every 32nd element, TVM's allreduce combines them.
    Where the plane's rows are whole 16-byte pieces (32x32 float32, not 7x7), a lane takes
    every 32nd piece instead, loaded at once into registers (:func:`_split_row_pieces`)."""
    loops = sch.get_loops(main.rv)
    spatial, reduce_loops = loops[: main.n_spatial], loops[main.n_spatial :]
    attached = attach_consumers(sch, main.rv, spatial[-1])
    reduce_loops, piece = _split_row_pieces(sch, main.rv, reduce_loops, vector)
    s = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    r = sch.fuse(*reduce_loops) if len(reduce_loops) > 1 else reduce_loops[0]
    planes = _extent(sch, s)
    per_block = max(1, min(max_threads(target) // WARP, planes))
    so, si = sch.split(s, [None, per_block])
    ro, ri = sch.split(r, [None, WARP])
    sch.reorder(ri, ro)
    binder.bind(so, "blockIdx.x")
    binder.bind(si, "threadIdx.y")
    binder.bind(ri, "threadIdx.x")
    if piece is not None:
        _load_pieces(sch, main.rv, ro, _extent(sch, piece))
        sch.unroll(piece)
    sch.annotate(ro, "pragma_auto_unroll_max_step", 16)
    sch.annotate(ro, "pragma_unroll_explicit", 1)
    return _Unit(main.rv, si, frozenset(attached))


# --------------------------------------------------------------------------------------------
# Separable pass chains
# --------------------------------------------------------------------------------------------


def _largest_divisor_at_most(n: int, cap: int) -> int:
    for d in range(max(1, min(n, cap)), 0, -1):
        if n % d == 0:
            return d
    return 1


def chain_tile(extents: list, threads: int, tile_scale: int = 1) -> tuple[int, int, int]:
    """(planes, rows, cols) of the last pass's output per block. ``extents`` are its loop
    extents (the last one or two are the tiled output axes)."""
    ow = extents[-1]
    oh = extents[-2] if len(extents) >= 2 else 1
    tw = ow if ow <= MAX_WHOLE_ROW else WARP
    th = min(oh, max(1, threads // tw))
    th = -(-oh // -(-oh // th))  # balanced: equal row tiles, the last one no shorter
    if tile_scale > 1:  # shrink for shared memory: rows first, then columns
        th = max(1, th // tile_scale)
        if th == 1 and tile_scale >= 8 and tw > WARP:
            tw = WARP
    pb = 1
    outer = extents[:-2] if len(extents) >= 2 else []
    if th == oh and tw == ow and outer:
        pb = _largest_divisor_at_most(outer[-1], max(1, threads // (th * tw)) // tile_scale or 1)
    return pb, th, tw


def schedule_chain(sch, chain: analysis.PassChain, target: Target, binder: Binder, *, staged: bool = True,
                   tile_scale: int = 1, vector: bool = True) -> _Unit:
    """A separable window reduction: the last pass one thread per output over a tile, the
    earlier passes into shared memory per tile (or inlined when not ``staged``). A single
    pass over non-overlapping windows (2x2 stride 2, 1-D k4 s4) reads each thread's input in
    16-byte pieces where :func:`contiguous_windows` allows."""
    final = chain.passes[-1]
    earlier = _earlier_passes(sch, chain, staged)
    attached = attach_consumers(sch, final, sch.get_loops(final)[-1])
    per = contiguous_windows(sch, final) if vector and not earlier else None
    bx, tx, threads = _tile_block(sch, final, target, binder, tile_scale, per or 1)
    _stage(sch, earlier, bx, threads, binder)
    if per:
        _load_pieces(sch, final, tx, vector_lanes(sch, final))
    if vector and earlier:
        _stage_input(sch, earlier[0], bx, threads, binder)
    return _Unit(final, tx, frozenset(attached))


def _earlier_passes(sch, chain, staged: bool) -> list:
    """The passes before the last one, to stage; none (all inlined) when not ``staged``."""
    earlier = list(chain.passes[:-1])
    if staged:
        return earlier
    for rv in reversed(earlier):
        sch.compute_inline(rv)
    return []


def _tile_block(sch, block, target: Target, binder: Binder, tile_scale: int, per: int = 1):
    """Tile ``block``'s output loops (:func:`chain_tile`): a CUDA block per tile, a thread per
    output (two on large outputs), or per ``per`` consecutive outputs of the innermost axis
    (which must divide it; the tiles are then of groups of ``per``). Returns (block loop,
    thread loop, threads per block)."""
    loops = list(sch.get_loops(block))
    if per > 1:
        group, _ = sch.split(loops[-1], [None, per])
        loops[-1] = group
    extents = [_extent(sch, l) for l in loops]
    if any(e is None for e in extents):
        raise ValueError("tiles need static shapes")
    pb, th, tw = chain_tile(extents, max_threads(target), tile_scale)
    two_d = len(loops) >= 2
    ow = loops[-1]
    oh = loops[-2] if two_d else None
    outer = loops[:-2] if two_d else loops[:-1]
    block_loops, thread_loops = [], []
    if outer:
        if pb > 1:
            ao, ai = sch.split(outer[-1], [None, pb])
            block_loops += list(outer[:-1]) + [ao]
            thread_loops.append(ai)
        else:
            block_loops += list(outer)
    for loop, extent, size in ((oh, extents[-2] if two_d else 1, th), (ow, extents[-1], tw)):
        if loop is None:
            continue
        if size < extent:  # tiles of `size` along the axis: the tile index goes to the block
            outer_part, inner_part = sch.split(loop, [None, size])
            block_loops.append(outer_part)
            thread_loops.append(inner_part)
        else:
            thread_loops.append(loop)
    sch.reorder(*block_loops, *thread_loops)
    if not block_loops:
        block_loops = [sch.add_unit_loop(thread_loops[0])]
    bx = sch.fuse(*block_loops) if len(block_loops) > 1 else block_loops[0]
    inner = sch.fuse(*thread_loops) if len(thread_loops) > 1 else thread_loops[0]
    threads = _block_threads(target, pb * th * tw, outputs_per_thread(_product(extents)))
    _, tx = sch.split(inner, [None, threads])
    binder.bind(bx, "blockIdx.x")
    binder.bind(tx, "threadIdx.x")
    return bx, tx, threads


def _stage(sch, earlier: list, bx, threads: int, binder: Binder) -> None:
    """Earlier passes into shared memory per CUDA block, computed by the block's threads."""
    for rv in reversed(earlier):  # the pass nearest the last one first
        sch.compute_at(rv, bx, preserve_unit_loops=True)
        binder.scope(rv, 0, "shared")
        stage = sch.get_loops(rv)[1:]
        fused = sch.fuse(*stage) if len(stage) > 1 else stage[0]
        _, stx = sch.split(fused, [None, threads])
        binder.bind(stx, "threadIdx.x")


# --------------------------------------------------------------------------------------------
# 16-byte loads
# --------------------------------------------------------------------------------------------
#
# TVM writes a vectorized loop over a ramp index as one vector access (``*(float4*)(x + i)``,
# ld.global.v4.f32) and checks no alignment: a misaligned one faults on the GPU. So a schedule
# vectorizes only loads from a function parameter (TVM's packed API binds it at element offset
# 0 of an allocation aligned to ``data_alignment`` = 64 bytes) and :func:`vector_accesses`
# proves every vector access of the result aligned to its width, or the rule schedules again
# with scalar loads.


def _param_read(sch, block):
    """(read index, region) of the one function parameter ``block`` reads, or None."""
    params = analysis.function_params(sch)
    found = [(i, r) for i, r in enumerate(sch.get(block).reads)
             if any(analysis.region_buffer(r).same_as(p) for p in params)]
    return found[0] if len(found) == 1 else None


def vector_lanes(sch, block) -> int:
    """Elements per 16-byte load of the parameter ``block`` reads; 0 when there is none, or it
    is not known to start 16-byte aligned."""
    read = _param_read(sch, block)
    if read is None:
        return 0
    buf = analysis.region_buffer(read[1])
    ty = _buf_type(buf)
    size = _elem_bytes(ty)
    offset = ty.elem_offset
    if list(ty.strides or []) or not (isinstance(offset, tirx.IntImm) and int(offset) == 0):
        return 0
    if int(ty.data_alignment) % VECTOR_BYTES or size >= VECTOR_BYTES:
        return 0
    return VECTOR_BYTES // size


def _has_bounds_check(block) -> bool:
    """Whether the block's value reads through a condition (inlined padding, ceil overhang)."""
    found = []

    def visit(node):
        if isinstance(node.op, tvm.ir.Op) and node.op.name == "tirx.if_then_else":
            found.append(node)

    tvm_ffi.structural_walk(block.body, [(tvm.ir.Call, visit)], order="post")
    return bool(found)


def contiguous_windows(sch, block) -> int | None:
    """Outputs per thread along the innermost axis for which a thread's taps are whole 16-byte
    pieces of each input row, or None. The windows must tile the row exactly (each spans
    ``s`` = its stride elements, from the first column, every tap inside: no bounds check), and
    ``lanes / s`` outputs (or one, when ``s`` is a multiple of ``lanes``) must divide the
    output row."""
    lanes = vector_lanes(sch, block)
    read = _param_read(sch, block)
    info = sch.get(block)
    if not lanes or read is None or _has_bounds_check(info):
        return None
    spatial = [iv for iv in info.iter_vars if int(iv.iter_type) == 0]
    taps = [iv for iv in info.iter_vars if int(iv.iter_type) != 0]
    last, rng = spatial[-1], read[1].region[-1]
    coeffs = sym.detect_linear_equation(rng.min, [last.var] + [iv.var for iv in taps])
    if len(coeffs) != len(taps) + 2 or not all(isinstance(c, tirx.IntImm) for c in coeffs):
        return None
    if not isinstance(rng.extent, tirx.IntImm) or not all(isinstance(iv.dom.extent, tirx.IntImm) for iv in taps):
        return None
    stride, start = int(coeffs[0]), int(coeffs[-1])
    # the columns one window reads: the region's own extent (taps unrolled into the block) plus
    # the reach of the reduction variables (taps as a loop)
    span = int(rng.extent) + sum(int(c) * (int(iv.dom.extent) - 1) for c, iv in zip(coeffs[1:-1], taps))
    if start != 0 or stride < 1 or span != stride or any(int(c) < 0 for c in coeffs[1:-1]):
        return None
    per = lanes // stride if lanes % stride == 0 else (1 if stride % lanes == 0 else 0)
    if not per or not isinstance(last.dom.extent, tirx.IntImm) or int(last.dom.extent) % per:
        return None
    return per


def _cache_pieces(sch, block, loop, lanes: int, scope: str):
    """Copy what ``block`` reads of its parameter under ``loop`` into a ``scope`` buffer (the
    reads then come from it), the copy's innermost axis split into ``lanes``-element pieces,
    vectorized. Returns the copy block."""
    index, _ = _param_read(sch, block)
    cache = sch.cache_read(block, index, scope)
    sch.compute_at(cache, loop, preserve_unit_loops=True)
    inner = sch.get_loops(cache)[-1]
    extent = _extent(sch, inner)
    if extent is None or extent % lanes:
        raise MisalignedVector(f"rows of {extent} elements, {lanes}-element loads")
    if extent > lanes:
        _, inner = sch.split(inner, [None, lanes])
    sch.vectorize(inner)
    return cache


def _load_pieces(sch, block, loop, lanes: int) -> None:
    """Each thread loads what ``block`` reads under ``loop`` into registers in pieces."""
    _cache_pieces(sch, block, loop, lanes, "local")


def _split_row_pieces(sch, block, reduce_loops, vector: bool):
    """A global reduction over whole rows: the innermost tap loop split into 16-byte pieces
    (when its extent is whole pieces), so that a piece never crosses a row and its registers
    are indexed by the unrolled piece loop alone (splitting the fused plane instead indexes
    them through row modulos TVM does not simplify). Returns (the tap loops with the outer part
    last, the piece loop or None); :func:`vector_accesses` proves the pieces."""
    lanes = vector_lanes(sch, block) if vector else 0
    extent = _extent(sch, reduce_loops[-1])
    if not lanes or extent is None or extent % lanes or _has_bounds_check(sch.get(block)):
        return list(reduce_loops), None
    rest, piece = sch.split(reduce_loops[-1], [None, lanes])
    return list(reduce_loops[:-1]) + [rest], piece


def _stage_input(sch, first_pass, bx, threads: int, binder: Binder) -> None:
    """The input rows the block's first pass reads (its tile plus halo, clipped to the input)
    copied into shared memory by the block's threads in pieces, before that pass reads them
    (overlapping windows read each input element several times: from shared memory now). A
    tile whose rows start or end off a 16-byte boundary (column tiles, odd widths) fails the
    alignment proof, and the rule goes back to scalar loads."""
    lanes = vector_lanes(sch, first_pass)
    if not lanes:
        return
    scope = "global" if binder.simulate else "shared"
    cache = _cache_pieces(sch, first_pass, bx, lanes, scope)
    copy = sch.get_loops(cache)[1:-1]  # under the block loop, the vector loop aside
    fused = sch.fuse(*copy) if len(copy) > 1 else copy[0]
    _, tx = sch.split(fused, [None, threads])
    binder.bind(tx, "threadIdx.x")


# --------------------------------------------------------------------------------------------
# A consumer joining several reductions (TensorRT's blend of a max and an average)
# --------------------------------------------------------------------------------------------


def joining_consumer(sch, mains, chains):
    """A root block pointwise over the results of two or more pooling reductions (all of its
    domain's shape): ``(block, mains, chains)`` of those it joins, or None."""
    finals = [(m.rv, m) for m in mains] + [(c.passes[-1], c) for c in chains]
    owned = [b for rv, _ in finals for b in _written(sch.get(rv))]
    for rv in analysis.other_blocks(sch, mains, chains):
        if not analysis.is_pointwise_over(sch, rv, owned):
            continue
        reads = [analysis.region_buffer(r) for r in sch.get(rv).reads]
        joined = [u for f, u in finals if any(b.same_as(r) for b in _written(sch.get(f)) for r in reads)]
        if len(joined) >= 2 and not any(isinstance(u, analysis.MainBlock) and is_global(u, sch) for u in joined):
            return rv, [u for u in joined if isinstance(u, analysis.MainBlock)], [
                u for u in joined if isinstance(u, analysis.PassChain)]
    return None


def schedule_joined(sch, anchor, mains, chains, target: Target, binder: Binder, *, staged: bool = True,
                    tile_scale: int = 1) -> _Unit:
    """One kernel for the joining consumer and every reduction it reads: the consumer tiled
    like a last pass, each reduction's result computed per thread (in a register) right before
    it, the earlier passes staged in shared memory per block."""
    earlier = [_earlier_passes(sch, c, staged) for c in chains]
    attached = attach_consumers(sch, anchor, sch.get_loops(anchor)[-1])
    bx, tx, threads = _tile_block(sch, anchor, target, binder, tile_scale)
    finals = [m.rv for m in mains] + [c.passes[-1] for c in chains]
    for rv in finals:
        sch.compute_at(rv, tx, preserve_unit_loops=True)
    for main in mains:
        taps = _product(main.reduce_extents)
        if taps is not None and taps <= MAX_UNROLLED_TAPS:
            for r in sch.get_loops(main.rv)[-len(main.reduce_extents):]:
                sch.unroll(r)
    for passes in earlier:
        _stage(sch, passes, bx, threads, binder)
    params = analysis.function_params(sch)
    for rv in finals:
        if _consumer_names(sch, rv) <= {_name(sch, anchor)}:
            for i, buf in enumerate(_written(sch.get(rv))):
                if not any(buf.same_as(p) for p in params):
                    binder.scope(rv, i, "local")
    return _Unit(anchor, tx, frozenset(attached))


# --------------------------------------------------------------------------------------------
# Consumers and leftovers
# --------------------------------------------------------------------------------------------


def _written(block) -> list:
    return [analysis.region_buffer(w) for w in block.writes]


def _buf_type(buf):
    return buf.ty if hasattr(buf, "ty") and hasattr(buf.ty, "shape") else buf


def _consumer_names(sch, rv) -> set:
    return {_name(sch, c) for c in sch.get_consumers(rv)}


def attach_consumers(sch, final, output_loop) -> set:
    """Attach the consumers pointwise over ``final``'s output (analysis.is_pointwise_over:
    transitively, in program order) to its innermost output loop, before that loop is split
    into blocks and threads: the splits then guard every attached block with the same
    predicate. (Attached after a split that does not divide, reverse_compute_at widens the
    consumer's domain to the whole split, unguarded: out-of-bounds writes; the CPU simulation
    of fused random graphs caught it.) Returns the names attached; anything else stays its
    own kernel."""
    attached = set()
    for rv in analysis.attachable_consumers(sch, [final]):
        try:
            sch.reverse_compute_at(rv, output_loop, preserve_unit_loops=True)
        except (Exception,):  # pylint: disable=broad-except
            continue
        attached.add(_name(sch, rv))
    return attached


def keep_in_registers(sch, unit: _Unit, binder: Binder) -> None:
    """Intermediates whose every reader runs in the same thread live in registers (``local``)."""
    final_readers = _consumer_names(sch, unit.final)
    if final_readers and final_readers <= unit.attached:
        params = analysis.function_params(sch)
        for i, buf in enumerate(_written(sch.get(unit.final))):
            if not any(buf.same_as(p) for p in params):
                binder.scope(unit.final, i, "local")
    _localize_attached(sch, set(unit.attached), binder)


def _localize_attached(sch, attached: set, binder: Binder) -> None:
    """An attached consumer whose every reader is attached too keeps its result in a register."""
    params = analysis.function_params(sch)
    for rv in _blocks_by_name(sch, attached):
        readers = _consumer_names(sch, rv)
        if readers and readers <= attached:
            for i, buf in enumerate(_written(sch.get(rv))):
                if not any(buf.same_as(p) for p in params):
                    binder.scope(rv, i, "local")


def _blocks_by_name(sch, names: set) -> list:
    out = []
    root = sch.get_sblock("root")

    def visit(rv):
        for c in sch.get_child_blocks(rv):
            if _name(sch, c) in names:
                out.append(c)
            visit(c)

    visit(root)
    return out


def schedule_leftovers(sch, target: Target, binder: Binder) -> None:
    """Every root-level block not placed in a kernel yet: its own kernel, one thread per output
    element, reductions (if any) serial in the thread."""
    for rv in analysis.root_blocks(sch):  # pylint: disable=protected-access
        if binder.is_bound(rv):
            continue
        block = sch.get(rv)
        kinds = [int(iv.iter_type) for iv in block.iter_vars]
        loops = sch.get_loops(rv)
        if len(loops) != len(kinds) or any(k not in (0, 2) for k in kinds):
            raise ValueError(f"block {block.name_hint}: not a plain loop nest")
        spatial = [l for l, k in zip(loops, kinds) if k == 0]
        reduce_loops = [l for l, k in zip(loops, kinds) if k == 2]
        if reduce_loops:
            sch.reorder(*spatial, *reduce_loops)
        _bind_spatial(sch, rv, spatial, reduce_loops, target, binder)
        if reduce_loops:
            sch.decompose_reduction(rv, reduce_loops[0])


# --------------------------------------------------------------------------------------------
# Facts about a scheduled function (tests and the benchmark report them)
# --------------------------------------------------------------------------------------------


def _compacted(func: tirx.PrimFunc, *then) -> tvm.IRModule:
    """``func`` through TVM's lowering up to buffer compaction (the per-block regions that
    allocations and indices then have), then the passes ``then``."""
    passes = [
        s_tir.transform.LowerCrossThreadReduction(),
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.CompactBufferAllocation(),
    ]
    return tvm.transform.Sequential(passes + list(then))(tvm.IRModule({"main": func}))


def _elem_bytes(ty) -> int:
    return max(tvm.runtime.DataType(str(ty.dtype)).bits // 8, 1)


def shared_bytes(func: tirx.PrimFunc) -> int:
    """Shared memory per block the scheduled ``func`` allocates (after TVM compacts buffers)."""
    mod = _compacted(func)
    total = 0

    def visit(node):
        nonlocal total
        if True:
            for buf in node.alloc_buffers:
                ty = _buf_type(buf)
                if _scope(buf).startswith("shared"):
                    n = _product([int(d) if isinstance(d, tirx.IntImm) else None for d in ty.shape])
                    total += (n or 1 << 30) * _elem_bytes(ty)

    tvm_ffi.structural_walk(mod["main"].body, [(s_tir.SBlock, visit)], order="post")
    return total


def vector_accesses(func: tirx.PrimFunc) -> list[tuple[str, int, bool]]:
    """Every vector load and store of the scheduled ``func`` once TVM has flattened its buffers
    and vectorized its loops: (buffer, lanes, whether the access is provably aligned to its
    width). Aligned: a unit-stride ramp whose first element index is a multiple of ``lanes``
    (TVM's modular-set analysis, over every value the thread and loop variables can take), in a
    buffer that starts aligned to the access (a parameter at offset 0 of a ``data_alignment``
    allocation, or a local/shared array, which TVM declares ``alignas(64)``)."""
    mod = _compacted(func, s_tir.transform.LowerOpaqueBlock(), tirx.transform.FlattenBuffer(),
                     tirx.transform.StmtSimplify(), tirx.transform.VectorizeLoop(True))
    ana = sym.Analyzer()
    found = []

    def check(buf, indices):
        if len(indices) != 1 or not isinstance(indices[0], tirx.Ramp):
            return
        ramp = indices[0]
        lanes = int(ramp.lanes)
        ty = _buf_type(buf)
        size = _elem_bytes(ty)
        base = ana.modular_set(ramp.base)
        aligned = (
            isinstance(ramp.stride, tirx.IntImm) and int(ramp.stride) == 1
            and base.coeff % lanes == 0 and base.base % lanes == 0
            and int(getattr(ty, "data_alignment", 0) or 0) % (lanes * size) == 0
            and isinstance(ty.elem_offset, tirx.IntImm) and int(ty.elem_offset) == 0
        )
        found.append((str(buf.name), lanes, bool(aligned)))

    tvm_ffi.structural_walk(
        mod["main"].body,
        [(tvm.ir.TensorLoad, lambda n: check(n.source, list(n.indices))),  # 0.27's BufferLoad
         (tirx.BufferStore, lambda n: check(n.buffer, list(n.indices)))],
        order="post",
    )
    return found


def _scope(buf) -> str:
    if hasattr(buf, "scope"):
        return str(buf.scope())
    return str(getattr(_buf_type(buf), "storage_scope", "global") or "global")
