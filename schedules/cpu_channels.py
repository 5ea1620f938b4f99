"""Channel-last pools on the CPU: the steps of the one CPU schedule (:mod:`.cpu_passes`,
:mod:`.cpu_reduction`) that depend on where the channels are.

A channel-last stage has loops ``[N, *spatial, C]`` (``analysis.axis_roles``): C, the contiguous
axis, is innermost, and every window tap of one output is a run of C contiguous elements. So
the vector is C (a tile of C), not a row of outputs as channel-first: no strided loads, no
gathers, and the padding's bounds checks are the same for every lane (one branch per tap, not a
mask). What is parallel is the batch and the outer output rows, and tiles of C when those are
few (a global pool at batch 1, a 1-D long window). The geometry along the spatial axes (which
pass is computed at which loop, the padded copy's rows) is the channel-first schedule's.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir, tirx
from tvm.sym.pattern import detect_linear_equation

from . import analysis
from .cpu_config import FULL, NO_VECTOR, CpuConfig, dtype_bits


@dataclass
class ChannelLoops:
    """The loops of a channel-last block once its parallel loop is made."""

    par: object  # the parallel (or outermost fused) loop
    par_loops: list  # the loops fused into it (the spatial ones among them by identity)
    out: list  # every spatial output loop, outermost first (those in ``par`` included)
    channel: object  # the innermost C loop (a tile of C when C was split for tasks)


def register_lanes(config: CpuConfig, dtype: str) -> int:
    """Lanes of one vector register for ``dtype``'s arithmetic."""
    return max(config.vector_bits_for(dtype) // dtype_bits(dtype), 1)


def channel_tiles(channels, tasks: int, lanes: int, config: CpuConfig, per_thread: int = 4) -> int:
    """Into how many tiles C is split to give the parallel loop at least ``per_thread`` tasks
    per thread (1: not split). Each tile is a whole number of registers' lanes, and at least
    ``config.min_channel_tile_registers`` registers."""
    want = per_thread * max(config.num_threads, 1)
    if channels is None or tasks >= want:
        return 1
    smallest = lanes * config.min_channel_tile_registers
    best = 1
    for tiles in range(2, channels // max(smallest, 1) + 1):
        if channels % tiles or (channels // tiles) % lanes:
            continue
        best = tiles
        if tasks * tiles >= want:
            break
    return best


def parallel_loops(sch, block, rank: int, out_in_par: int, source_bytes, config: CpuConfig,
                   row_tile: int | None = None) -> ChannelLoops:
    """The batch, the first ``out_in_par`` output axes and, when those give too few tasks, tiles
    of C fused into one loop, parallel when the input is large enough. Loops ``[N, *out, C,
    r...]`` become ``[par, *out[out_in_par:], C tile, r...]``. Without an output axis in the
    parallel loop (a 1-D chain of passes), C is split into one tile per thread only: each tile
    runs the passes over the whole row, and narrower tiles made that slower than the threads
    made it faster (1-D max k32 s1 p16 over 1x4096x64, 1 thread: 0.14 ms in one tile of 64
    lanes, 0.17 ms in 4 of 16, 0.19 ms in 8 of 8)."""
    info = sch.get(block)
    roles = analysis.axis_roles(info, rank)
    loops = sch.get_loops(block)
    if len(loops) != len(info.iter_vars):
        raise ValueError("channel-last block is not a plain loop nest")
    out = [loops[i] for i in roles.spatial]
    channel = loops[roles.channel]
    extents = [analysis.loop_extent(sch, l) for l in loops[: roles.channel + 1]]
    if any(extents[i] is None for i in [*roles.spatial, roles.channel]):
        raise ValueError("channel-last schedules need static spatial sizes and channels")
    # a symbolic batch stays a serial loop around the parallel one (see cpu_passes._planes_parallel)
    symbolic = [k for k, i in enumerate(roles.lead) if extents[i] is None]
    lead = [loops[i] for i in roles.lead[symbolic[-1] + 1 if symbolic else 0 :]]
    if row_tile and not out_in_par and (extents[roles.spatial[0]] or 0) > row_tile:
        # the first output axis in tiles of about ``row_tile`` outputs, the tiles in parallel
        outer, out[0] = sch.split(out[0], [-(-extents[roles.spatial[0]] // row_tile), None])
        lead = lead + [outer]
    par_loops = lead + out[:out_in_par]
    tasks = analysis.product([analysis.loop_extent(sch, l) for l in par_loops]) or 1
    lanes = register_lanes(config, analysis.region_dtype(info.writes[0]))
    tiles = channel_tiles(extents[roles.channel], tasks, lanes, config, per_thread=4 if out_in_par else 1)
    if tiles > 1:
        tile, channel = sch.split(channel, [tiles, None])
        sch.reorder(tile, *out)
        par_loops = lead + [tile] + out[:out_in_par]
    if not par_loops:
        par_loops = [out[0]]
    par = sch.fuse(*par_loops) if len(par_loops) > 1 else par_loops[0]
    if (source_bytes is None or source_bytes >= config.min_parallel_bytes) and config.num_threads >= 2:
        sch.parallel(par)
    return ChannelLoops(par, par_loops, out, channel)


def vectorize_channels(sch, block, config: CpuConfig, fuse_row: bool = False):
    """TVM-vectorise the innermost C loop of ``block`` (a pass, a padded copy, a consumer): in
    chunks of ``config.channel_vector_registers`` registers when longer. With ``fuse_row``
    (the block reads its innermost spatial axis at unit stride and C is shorter than a register)
    the spatial loop above is fused into it first, so the vector covers whole registers.
    Returns the loop over the chunks (None: C is one vector, or not vectorised)."""
    loops = sch.get_loops(block)
    loop = loops[-1]
    extent = analysis.loop_extent(sch, loop)
    dtype = analysis.region_dtype(sch.get(block).writes[0])
    lanes = register_lanes(config, dtype)
    if extent is None or extent < 2 or not analysis.holds_one_block(sch, loop):
        return None
    if (fuse_row and extent < lanes and len(loops) > 1 and analysis.loop_extent(sch, loops[-2]) is not None
            and len(sch.get_child_blocks(loops[-2])) == 1):
        loop = sch.fuse(loops[-2], loop)
        extent = analysis.loop_extent(sch, loop)
    chunk = lanes * config.channel_vector_registers
    if extent <= chunk:
        sch.vectorize(loop)
        return None
    # chunks that divide C: whole registers where they can, else the widest divisor (C = 66:
    # 11 lanes, which LLVM splits into a register and a rest)
    fits = [c for c in range(chunk, 1, -1) if extent % c == 0]
    whole = [c for c in fits if c % lanes == 0]
    if not fits:
        return None  # a prime C longer than a chunk: LLVM's vectoriser
    chunks, vector = sch.split(loop, [None, (whole or fits)[0]])
    sch.vectorize(vector)
    return chunks


def unit_stride_row(sch, block, rank: int) -> bool:
    """Does ``block`` read its innermost spatial axis at its own position (a pass along another
    axis, or a stride-1 pass), so that its spatial row and C are one contiguous run?"""
    info = sch.get(block)
    dim = analysis.spatial_dim(info, rank, rank - 1)
    var = info.iter_vars[dim].var
    for read in info.reads:
        if len(read.region) != len(info.iter_vars):
            return False  # a broadcast read (a bias of C)
        coeffs = detect_linear_equation(read.region[dim].min, [var])
        if not (len(coeffs) and isinstance(coeffs[0], tirx.IntImm) and int(coeffs[0]) == 1):
            return False
    return True


# --------------------------------------------------------------------------------------------
# Separable passes (cpu_passes.schedule_pass_chain)
# --------------------------------------------------------------------------------------------


def place_padding(sch, chain, par, config: CpuConfig) -> list:
    """The padded copy before a channel-last chain's first pass: inlined into the pass (its
    bounds checks depend on the spatial position only, one branch per tap for a whole vector of
    C; the columns cut at the padding's edges, so most have none), or copied per parallel chunk
    of rows (``config.channel_last_pad_copy``, and dtypes not computed in their own registers,
    :func:`_native`). Returns the blocks of the first pass that read the padding inlined."""
    inlined = []
    for p in sch.get_producers(chain.passes[0]):
        block = sch.get(p)
        if analysis.pool_kind(block) != "pad":
            continue
        if config.channel_last_pad_copy or not all(_native(config, analysis.region_dtype(r)) for r in block.reads):
            sch.compute_at(p, par)
            continue
        interior = _interior_columns(sch, block, chain.passes[0], chain.spatial_rank, par)
        sch.compute_inline(p)
        inlined += _cut_columns(sch, chain.passes[0], interior)
    return inlined


def _native(config: CpuConfig, dtype: str) -> bool:
    """Is ``dtype`` computed in its own registers? bfloat16 (whose widening TVM 0.27 cannot
    vectorise inside a select) and the family's widened dtypes (float16 on NEON without
    +fullfp16: 3x3 s2 p1 max over 1x112x112x64, 5.40 M instructions with the padding inlined,
    1.60 M with the copy; channel-first 1.44 M) keep the padded copy, converted once."""
    return dtype != "bfloat16" and dtype not in config.widened_dtypes


def _interior_columns(sch, pad_block, first, rank: int, par):
    """(lo, hi): the columns (innermost spatial axis) of the first pass ``first`` whose reads of
    the padded copy stay inside the data; None when not static or empty, or when the columns are
    not a loop of their own below the parallel loop ``par`` (a 1-D pass, its outputs in it)."""
    dim = analysis.spatial_dim(pad_block, rank, rank - 1)
    data = analysis.pad_data_range(pad_block, dim)
    block = sch.get(first)
    padded = analysis.region_buffer(pad_block.writes[0])
    reads = [r for r in block.reads if analysis.region_buffer(r).same_as(padded)]
    loops = sch.get_loops(first)
    loop = loops[-2]
    extent, iv = analysis.loop_extent(sch, loop), block.iter_vars[dim]
    if data is None or len(reads) != 1 or extent is None or analysis.loop_extent_of(iv) != extent:
        return None
    if any(sch.get(l).same_as(sch.get(par)) for l in loops[-2:]):
        return None
    region = reads[0].region[dim]
    coeffs = detect_linear_equation(region.min, [iv.var])
    if len(coeffs) != 2 or not all(isinstance(c, tirx.IntImm) for c in coeffs) or not isinstance(region.extent, tirx.IntImm):
        return None
    (begin, n), step, offset = data, int(coeffs[0]), int(coeffs[1])
    if step < 1:
        return None
    lo = max(0, -((offset - begin) // step))  # first column whose window starts inside the data
    hi = min(extent, (begin + n - int(region.extent) - offset) // step + 1)  # past the last inside
    return (lo, hi) if hi > lo else None


def _cut_columns(sch, first, interior) -> list:
    """The first pass's column loop cut at the padding's edges (``interior``): TVM's simplifier
    drops the column bounds checks from the middle part, which is most of the row. Returns the
    first pass's blocks (one per part)."""
    if interior is None:
        return [first]
    loop = sch.get_loops(first)[-2]
    extent = analysis.loop_extent(sch, loop)
    lo, hi = interior
    factors = ([lo] if lo > 0 else []) + [hi - lo] + ([extent - hi] if hi < extent else [])
    if len(factors) == 1:
        return [first]
    parts = sch.loop_partition(loop, factors[:-1] + [None])
    return [b for part in parts for b in sch.get_child_blocks(part)]


def inline_consumers(sch, last, consumers, config: CpuConfig) -> list:
    """The consumers of a channel-last chain's last pass (the average's division, a ReLU, ...)
    computed inside it, in order: the output is written once, from the vector the last pass
    has just summed, with no row of sums stored and loaded again. A consumer TVM refuses to
    inline (its input has another reader) stays, and so do those after it. Returns the
    consumers left, which the caller places per row. x86, 3x3 s1 p1 average over 1x28x28x192,
    2 threads: 0.032 -> 0.025 ms."""
    if not config.channel_inline_consumers:
        return consumers
    left = list(consumers)
    # (TVM 0.27 does not refuse a consumer whose input has another reader, such as the argmax's
    # value and index, which both unpack the keys: it leaves the other reader on a removed buffer)
    while left and _reads(sch, left[0], last) and len(sch.get_consumers(last)) == 1:
        try:
            sch.reverse_compute_inline(left[0])
        except s_tir.ScheduleError:
            break
        left.pop(0)
    return left


def _reads(sch, consumer, producer) -> bool:
    """Does ``consumer`` read what ``producer`` writes (and so can be computed inside it)?"""
    written = analysis.written_buffers(sch, producer)
    return any(analysis.region_buffer(r).same_as(b) for r in sch.get(consumer).reads for b in written)


def vectorize_chain(sch, chain, consumers, inlined_pad, config: CpuConfig) -> None:
    """Every pass (and padded copy, and consumer) of a channel-last chain vectorised over C."""
    rank = chain.spatial_rank
    for p in [] if inlined_pad else sch.get_producers(chain.passes[0]):
        if analysis.pool_kind(sch.get(p)) == "pad":
            vectorize_channels(sch, p, config)
    for block in inlined_pad:  # the first pass, cut at the padding's edges (place_padding)
        vectorize_channels(sch, block, config)
    last = chain.passes[-1]
    for block in chain.passes[1:] if inlined_pad else chain.passes:
        reuse = config.channel_tap_reuse and block.same_as(last) and _overlapping_columns(sch, chain)
        chunks = vectorize_channels(sch, block, config, fuse_row=not reuse and unit_stride_row(sch, block, rank))
        if reuse:
            _reuse_column_taps(sch, block, chunks, config)
    for c in consumers if config.vector_consumers else []:
        vectorize_channels(sch, c, config, fuse_row=True)


def _overlapping_columns(sch, chain) -> bool:
    """Is the chain's last pass a stride-1 pass along the columns (the innermost spatial axis)
    after another pass, so that neighbouring outputs share all but one column?"""
    rank = chain.spatial_rank
    return chain.axes[-1] == rank - 1 and len(chain.passes) > 1 and unit_stride_row(sch, chain.passes[-1], rank)


def _reuse_column_taps(sch, block, chunks, config: CpuConfig) -> None:
    """The columns of a stride-1 column pass (3x3 s1: each column a tap of 3 outputs) inside
    the loop over C chunks, unrolled: LLVM loads each column's vector once for all the outputs
    that read it, not once per output (NEON, 3x3 s1 p1 max over 1x28x28x192: 0.49 -> 0.43 M
    instructions; average 0.56 -> 0.48)."""
    column = sch.get_loops(block)[-3 if chunks is not None else -2]
    extent = analysis.loop_extent(sch, column)
    if extent is None or extent > config.max_unrolled_taps:
        return
    if chunks is not None:
        sch.reorder(chunks, column)
    sch.unroll(column)


# --------------------------------------------------------------------------------------------
# Window reductions (cpu_reduction.schedule_block)
# --------------------------------------------------------------------------------------------


def schedule_reduction(sch, block, rank: int, config: CpuConfig, level: int) -> None:
    """A channel-last window reduction, loops ``[N, *out, C, r...]``::

        parallel N x out[0] (x tiles of C when few)
          padded copy of the rows it reads          # vectorised over C
          for out[1:]
            for C / tile                            # a tile of a few registers of C
              acc[tile] = identity                  # in registers (cache_write to local)
              taps... (unrolled)                    # each one contiguous vector load
                acc[lanes] = combine(acc, data[..., lanes])
              out[..., tile] = acc
              consumers (finalize, add, relu)       # on the tile, in registers
    """
    info = sch.get(block)
    consumers = analysis.attachable_consumers(sch, block)
    pads = [p for p in sch.get_producers(block) if analysis.pool_kind(sch.get(p)) == "pad"]
    source_bytes = analysis.region_bytes(info.reads[0])
    loops = parallel_loops(sch, block, rank, 1, source_bytes, config)
    for p in pads:
        sch.compute_at(p, loops.par)
        if level >= FULL:
            vectorize_channels(sch, p, config)
    reduce_loops = list(sch.get_loops(block)[-rank:])
    taps = analysis.product([analysis.loop_extent(sch, r) for r in reduce_loops])
    at = _accumulator_tile(sch, block, loops.channel, reduce_loops, taps, config, level)
    for c in consumers:
        sch.reverse_compute_at(c, at if at is not None else loops.par)
        if level >= FULL and config.vector_consumers:
            vectorize_channels(sch, c, config)


def _streams_rows(taps, reduce_loops, info, config: CpuConfig, level: int) -> bool:
    """Is a long window's single sum reduced row by row over all of C (_rows_outer)?"""
    return (config.long_window_rows_outer and level == FULL and len(reduce_loops) >= 2 and len(info.writes) == 1
            and (taps is None or taps > config.max_unrolled_row_taps))


def _rows_outer(sch, block, channel, reduce_loops, extent, lanes, config: CpuConfig):
    """A long window (a global average) read as the memory lies: for each row of the window,
    for each tile of C, the row's taps (unrolled) added into the sums of the tile, which stay in
    L1 across rows. Every row is one contiguous run of memory read in order, which the hardware
    prefetcher follows; tiles of registers over every tap of the window instead jump a row's
    length between taps. Returns None: the consumers go after the whole window."""
    tile, lane = sch.split(channel, [None, _tile_width(extent, lanes, lanes * config.long_window_row_registers)])
    sch.reorder(*reduce_loops[:-1], tile, reduce_loops[-1], lane)
    last = analysis.loop_extent(sch, reduce_loops[-1])
    if last is not None and last <= config.max_unrolled_row_taps:
        sch.unroll(reduce_loops[-1])
    sch.vectorize(lane)
    init = sch.decompose_reduction(block, reduce_loops[0])
    sch.vectorize(sch.get_loops(init)[-1])
    return None


def _tile_width(extent: int, lanes: int, width: int) -> int:
    """The lanes of a tile of C: all of C when it fits ``width``, else the widest divisor of C
    up to ``width`` that is whole registers (or, when none is, the widest divisor)."""
    if extent <= width:
        return extent
    fits = [w for w in range(width, 0, -1) if extent % w == 0]
    whole = [w for w in fits if w % lanes == 0]
    return whole[0] if whole else fits[0]


def _accumulator_tile(sch, block, channel, reduce_loops, taps, config: CpuConfig, level: int):
    """The C loop cut into tiles of ``config.channel_tile_registers`` registers, the taps
    between the tile and its lanes (unrolled when few), the accumulators in registers; returns
    the tile loop, where the consumers go (None below the NO_VECTOR level)."""
    if level < NO_VECTOR:
        return None
    info = sch.get(block)
    extent = analysis.loop_extent(sch, channel)
    lanes = register_lanes(config, analysis.region_dtype(info.writes[0]))
    if _streams_rows(taps, reduce_loops, info, config, level):
        return _rows_outer(sch, block, channel, reduce_loops, extent, lanes, config)
    registers = config.channel_tile_registers
    if taps is None or taps > config.max_unrolled_row_taps:
        registers = config.long_window_tile_registers
    tile, lane = sch.split(channel, [None, _tile_width(extent, lanes, lanes * registers)])
    sch.reorder(tile, *reduce_loops, lane)
    accumulators = []
    if level == FULL:
        accumulators = [sch.cache_write(block, i, "local") for i in range(len(info.writes))]
        for acc in accumulators:
            sch.reverse_compute_at(acc, tile)
    if taps is not None and taps <= config.max_unrolled_taps:
        for r in reduce_loops:
            sch.unroll(r)
    if level == FULL:
        sch.vectorize(lane)
    init = sch.decompose_reduction(block, reduce_loops[0])
    if level == FULL:
        sch.vectorize(sch.get_loops(init)[-1])
        for acc in accumulators:
            sch.vectorize(sch.get_loops(acc)[-1])
    return tile
