"""Separable pass chains of the CUDA schedule: the last pass one thread per output over a tile,
the earlier passes staged in shared memory per CUDA block; and a consumer joining several
reductions (TensorRT's blend of a max and an average), tiled like a last pass."""

from __future__ import annotations

from . import analysis
from . import cuda_channel_last as channel_last
from .cuda_common import (
    Binder, Unit, block_threads, consumer_names, largest_divisor_at_most, localize, name,
    outputs_per_thread, written,
)
from .cuda_config import CudaConfig
from .cuda_consumers import attach_consumers
from .cuda_reduction import is_global, unroll_taps
from .cuda_vector import contiguous_windows, load_pieces, stage_input, vector_lanes

# --------------------------------------------------------------------------------------------
# Tiles
# --------------------------------------------------------------------------------------------


def chain_tile(extents: list, config: CudaConfig) -> tuple[int, int, int]:
    """(planes, rows, cols) of the last pass's output per block, for ``config.max_threads``
    threads at ``config.tile_scale``. ``extents`` are its loop extents (the last one or two are
    the tiled output axes)."""
    threads, tile_scale, warp = config.max_threads, config.tile_scale, config.warp_size
    ow = extents[-1]
    oh = extents[-2] if len(extents) >= 2 else 1
    tw = ow if ow <= config.max_whole_row else warp
    th = min(oh, max(1, threads // tw))
    th = -(-oh // -(-oh // th))  # balanced: equal row tiles, the last one no shorter
    if tile_scale > 1:  # shrink for shared memory: rows first, then columns
        th = max(1, th // tile_scale)
        if th == 1 and tile_scale >= config.max_tile_scale and tw > warp:
            tw = warp
    pb = 1
    outer = extents[:-2] if len(extents) >= 2 else []
    if th == oh and tw == ow and outer and outer[-1] is not None:
        pb = largest_divisor_at_most(outer[-1], max(1, threads // (th * tw)) // tile_scale or 1)
    return pb, th, tw


def _tile_loops(sch, loops, extents, tile):
    """Split ``loops`` (of ``extents``) into tiles ``(planes, rows, cols)``: (block loops,
    thread loops), the tile indices going to the block."""
    pb, th, tw = tile
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
    return block_loops, thread_loops


def tile_block(sch, block, config: CudaConfig, binder: Binder, per: int = 1, one_per_thread: bool = False):
    """Tile ``block``'s output loops (:func:`chain_tile`): a CUDA block per tile, a thread per
    output (two on large outputs unless ``one_per_thread``), or per ``per`` consecutive outputs of the innermost axis
    (which must divide it; the tiles are then of groups of ``per``). Returns (block loop,
    thread loop, threads per block)."""
    loops = list(sch.get_loops(block))
    if per > 1:
        group, _ = sch.split(loops[-1], [None, per])
        loops[-1] = group
        if analysis.is_channel_last(sch.get(block)):  # the group's channels stored in 16-byte pieces
            channel_last.store_pieces(sch, group, config, block)
    extents = [analysis.loop_extent(sch, l) for l in loops]
    if analysis.is_channel_last(sch.get(block)):  # (a symbolic batch: one block row per image)
        sizes = channel_last.tile_sizes(extents, config, per)
        block_loops, thread_loops = channel_last.tile_loops(sch, block, loops, extents, sizes)
        tile = analysis.product([s if e is None else min(s, e) for s, e in zip(sizes, extents)])
    elif any(e is None for e in extents[-2:]):
        raise ValueError("tiles need static output rows and columns")
    else:  # a symbolic batch or channel count: a block loop (planes per block from static ones)
        pb, th, tw = chain_tile(extents, config)
        block_loops, thread_loops = _tile_loops(sch, loops, extents, (pb, th, tw))
        tile = pb * th * tw
    sch.reorder(*block_loops, *thread_loops)
    if not block_loops:
        block_loops = [sch.add_unit_loop(thread_loops[0])]
    bx = sch.fuse(*block_loops) if len(block_loops) > 1 else block_loops[0]
    inner = sch.fuse(*thread_loops) if len(thread_loops) > 1 else thread_loops[0]
    per_thread = 1 if one_per_thread else outputs_per_thread(config, analysis.product(extents))
    threads = block_threads(config, tile, per_thread)
    _, tx = sch.split(inner, [None, threads])
    binder.bind(bx, "blockIdx.x")
    binder.bind(tx, "threadIdx.x")
    return bx, tx, threads


# --------------------------------------------------------------------------------------------
# Separable pass chains
# --------------------------------------------------------------------------------------------


def _one_output_per_thread(sch, chain: analysis.PassChain, config: CudaConfig) -> bool:
    """Whether a chain's threads take one output each at any size: channel-first chains of the
    ranks in ``config.one_output_per_thread_ranks``."""
    channel_last = analysis.is_channel_last(sch.get(chain.passes[-1]))
    return chain.spatial_rank in config.one_output_per_thread_ranks and not channel_last


def schedule_chain(sch, chain: analysis.PassChain, config: CudaConfig, binder: Binder) -> Unit:
    """A separable window reduction: the last pass one thread per output over a tile, the
    earlier passes into shared memory per tile (or inlined when not ``config.staged``). A
    single pass over non-overlapping windows (2x2 stride 2, 1-D k4 s4) reads each thread's
    input in 16-byte pieces where :func:`.cuda_vector.contiguous_windows` allows."""
    final = chain.passes[-1]
    attached = attach_consumers(sch, final, sch.get_loops(final)[-1])
    if in_registers(sch, chain, config):  # the same tiles, one output per thread, no shared memory
        _, tx, _ = tile_block(sch, final, config, binder, 1, one_per_thread=True)
        per_thread(sch, list(chain.passes[:-1]), tx, binder, config)
        return Unit(final, tx, frozenset(attached))
    earlier = earlier_passes(sch, chain, config.staged)
    per = _vector_outputs(sch, final, config) if config.vector and not earlier else None
    bx, tx, threads = tile_block(sch, final, config, binder, per or 1, _one_output_per_thread(sch, chain, config))
    stage(sch, earlier, bx, threads, binder)
    if per:
        load_pieces(sch, final, tx, vector_lanes(sch, final, config))
    if config.vector and earlier:
        stage_input(sch, earlier[0], bx, threads, binder, config)
    return Unit(final, tx, frozenset(attached))


def _vector_outputs(sch, final, config: CudaConfig) -> int | None:
    """Outputs per thread of a single pass loading 16-byte pieces: consecutive windows along a
    row (channel-first), or consecutive channels (channel-last), or None."""
    if analysis.is_channel_last(sch.get(final)):
        return channel_last.channel_pieces(sch, final, config, config.max_thread_pieces)
    return contiguous_windows(sch, final, config)


def earlier_passes(sch, chain, staged: bool) -> list:
    """The passes before the last one, to stage; none (all inlined) when not ``staged``."""
    earlier = list(chain.passes[:-1])
    if staged:
        return earlier
    if chain.repeats_an_axis and len(earlier) > 1:
        # each level of a doubling or flat-plane chain names its operands twice (the NaN test),
        # so inlining n levels repeats the first one 2^n times (a 1-D k32 s1 max: minutes to build)
        raise ValueError("inlining a chain that reduces one axis in several levels multiplies its expression")
    for rv in reversed(earlier):
        sch.compute_inline(rv)
    return []


def in_registers(sch, chain: analysis.PassChain, config: CudaConfig) -> bool:
    """Whether a chain's earlier passes are computed per thread into registers
    (``config.registers``): channel-first chains of overlapping windows, one pass per axis. A
    global chain (whole planes) and non-overlapping windows (2x2x2 s2) keep their staging or
    inlining: no tap is read twice there. A channel-first chain of several levels on one axis
    (doubling, flat plane) that is not staged takes registers too, since inlining its levels
    would repeat the first one 2^levels times."""
    final = chain.passes[-1]
    if len(chain.passes) < 2 or any(analysis.loop_extent(sch, loop) is None for loop in sch.get_loops(final)):
        return False  # a symbolic batch keeps its tiles (registers sized per output need static loops)
    if chain.repeats_an_axis:  # unstaged, never inlined (see earlier_passes)
        return not config.staged and not analysis.is_channel_last(sch.get(final))
    if not config.registers or analysis.is_channel_last(sch.get(final)):
        return False
    return analysis.passes_overlap(sch, chain)


def per_thread(sch, earlier: list, tx, binder: Binder, config: CudaConfig) -> None:
    """Earlier passes computed by each thread for its own outputs, into registers: each thread
    reads its window's taps from global memory (through L1, as one thread per output over every
    tap would) and keeps the intermediate values it needs, so that a NaN-propagating max, which
    names each operand twice, reads every tap once instead of once per reference (inlining
    the passes substitutes the whole earlier pass at each reference)."""
    for rv in reversed(earlier):  # the pass nearest the last one first
        sch.compute_at(rv, tx, preserve_unit_loops=True)
        localize(sch, rv, binder)
        tx_sref = sch.get_sref(tx)
        loops = list(sch.get_loops(rv))
        depth = next(i for i, l in enumerate(loops) if sch.get_sref(l).same_as(tx_sref)) + 1
        for loop in loops[depth:]:
            extent = analysis.loop_extent(sch, loop)
            if extent is not None and extent <= config.max_unrolled_taps:
                sch.unroll(loop)


def stage(sch, earlier: list, bx, threads: int, binder: Binder) -> None:
    """Earlier passes into shared memory per CUDA block, computed by the block's threads."""
    for rv in reversed(earlier):  # the pass nearest the last one first
        sch.compute_at(rv, bx, preserve_unit_loops=True)
        binder.scope(rv, 0, "shared")
        loops = sch.get_loops(rv)[1:]
        fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        _, stx = sch.split(fused, [None, threads])
        binder.bind(stx, "threadIdx.x")


# --------------------------------------------------------------------------------------------
# A consumer joining several reductions (TensorRT's blend of a max and an average)
# --------------------------------------------------------------------------------------------


def joining_consumer(sch, mains, chains, config: CudaConfig):
    """A root block pointwise over the results of two or more pooling reductions (all of its
    domain's shape): ``(block, mains, chains)`` of those it joins, or None."""
    finals = [(m.rv, m) for m in mains] + [(c.passes[-1], c) for c in chains]
    owned = [b for rv, _ in finals for b in written(sch.get(rv))]
    for rv in analysis.other_blocks(sch, mains, chains):
        if not analysis.is_pointwise_over(sch, rv, owned):
            continue
        reads = [analysis.region_buffer(r) for r in sch.get(rv).reads]
        joined = [u for f, u in finals if any(b.same_as(r) for b in written(sch.get(f)) for r in reads)]
        if len(joined) >= 2 and not any(
            isinstance(u, analysis.MainBlock) and is_global(u, sch, config) for u in joined
        ):
            return rv, [u for u in joined if isinstance(u, analysis.MainBlock)], [
                u for u in joined if isinstance(u, analysis.PassChain)]
    return None


def schedule_joined(sch, anchor, mains, chains, config: CudaConfig, binder: Binder) -> Unit:
    """One kernel for the joining consumer and every reduction it reads: the consumer tiled
    like a last pass, each reduction's result computed per thread (in a register) right before
    it, the earlier passes staged in shared memory per block (when ``config.staged``)."""
    earlier = [earlier_passes(sch, c, config.staged) for c in chains]
    attached = attach_consumers(sch, anchor, sch.get_loops(anchor)[-1])
    bx, tx, threads = tile_block(sch, anchor, config, binder)
    finals = [m.rv for m in mains] + [c.passes[-1] for c in chains]
    for rv in finals:
        sch.compute_at(rv, tx, preserve_unit_loops=True)
    for main in mains:
        unroll_taps(sch, main, sch.get_loops(main.rv)[-len(main.reduce_extents):], config)
    for passes in earlier:
        stage(sch, passes, bx, threads, binder)
    for rv in finals:
        if consumer_names(sch, rv) <= {name(sch, anchor)}:
            localize(sch, rv, binder)
    return Unit(anchor, tx, frozenset(attached))
