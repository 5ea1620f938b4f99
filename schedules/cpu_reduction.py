"""The CPU schedule of a window reduction block (a block with reduction iterators: indices,
non-overlapping sums, adaptive, symbolic sizes, long strided windows), loops
``[lead..., out..., r...]``: planes in parallel, taps unrolled, rows for LLVM's vectoriser or
TVM vector tiles in registers, long contiguous sums as vector partial sums. See :mod:`.cpu`."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.sym.pattern import detect_linear_equation

from . import analysis, cpu_channels
from .cpu_config import FULL, NO_VECTOR, CpuConfig, choose_lanes, dtype_bits, inner_read_stride, register_tile
from .cpu_short_rows import plane_tiling, schedule_planes


def schedule_block(sch: s_tir.Schedule, block, config: CpuConfig, level: int = FULL) -> None:
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
    rank = len(reduce_loops)
    symbolic = [i for i, e in enumerate(extents) if e is None]
    # a symbolic batch (or channel count) alone: those leading loops stay serial around the
    # schedule of the rest (below), which neither fuses nor splits them
    n_lead = len(analysis.axis_roles(info, rank).lead) if rank else 0
    peel = symbolic[-1] + 1 if symbolic and symbolic[-1] < n_lead else 0
    if symbolic and not peel:
        _parallel_static_lead(sch, loops[:n_spatial], extents[:n_spatial])
        return
    if analysis.is_channel_last(info) and rank:
        cpu_channels.schedule_reduction(sch, block, rank, config, level)
        return
    lead, out = spatial[peel:n_lead], spatial[n_lead:]
    consumers = analysis.attachable_consumers(sch, block)
    if level >= NO_VECTOR and not peel and (tiling := plane_tiling(sch, block, config)) is not None:
        schedule_planes(sch, block, tiling, consumers, config)
        return
    pads = [p for p in sch.get_producers(block) if analysis.pool_kind(sch.get(p)) == "pad"]
    if level == FULL and len(info.writes) == 1 and lead and out and pads:
        # Padded windows: the padded copy per plane makes every tap unconditional (below).
        # Unpadded windows keep the row loops LLVM vectorises (measured faster there).
        _schedule_vector_rows(sch, block, config, lead, out, reduce_loops, extents[n_spatial:], pads, consumers)
        return

    # 1. parallel over batch x channels x every output axis but the innermost.
    par_loops = list(lead) + list(out[:-1])
    rest = list(out[-1:])
    if not par_loops and rest and (analysis.loop_extent(sch, rest[0]) or 2) > 1:
        par_loops, rest = rest, []
    par = sch.fuse(*par_loops) if len(par_loops) > 1 else (par_loops[0] if par_loops else None)
    if par is not None:
        sch.parallel(par)
    row = par  # consumers go per parallel chunk (one output row)

    partial = None  # vector partial sums: (their row loop, what is left to do), at FULL only
    if level >= NO_VECTOR:
        # 2. window taps unrolled when small.
        taps = analysis.product(extents[n_spatial:])
        partial = _vector_partial_sums(sch, block, config, reduce_loops, taps) if level == FULL and rest else None
        if partial is not None:
            row = partial[0]  # rfactor moved the partial sums, and the row, to loops of their own
        elif taps is not None and taps <= config.max_unrolled_row_taps:
            for r in reduce_loops:
                sch.unroll(r)
        elif rest and reduce_loops and (analysis.loop_extent(sch, rest[-1]) or 1) > 1 and inner_read_stride(sch, block) == 1:
            # large windows over contiguous taps: taps outside the output row, the row stays the
            # inner loop (strided taps keep the tap loop inside: as the inner loop, the row
            # would gather them)
            sch.reorder(*reduce_loops, rest[-1])
            sch.decompose_reduction(block, reduce_loops[0])

    # 3. consumers (finalize, add, relu) at the row, so the intermediate stays a row in cache;
    #    the padded copy (if any) is made per row too.
    tile = None
    if level >= NO_VECTOR and partial is None and rest:
        tile = register_tile(sch, rest[-1], config, analysis.region_dtype(sch.get(block).writes[0]))
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


def _parallel_static_lead(sch, spatial, extents) -> None:
    """Symbolic extents (runtime output sizes): fusing or splitting a symbolic loop puts symbolic
    floordiv/floormod into every index, and TVM 0.27's simplifier does not come back from that
    on these reductions. Parallelise the leading loops whose extents are known, fused, and
    leave the rest as they are."""
    static_lead = []
    for loop, extent in zip(spatial, extents):
        if extent is None:
            break
        static_lead.append(loop)
    if static_lead:
        sch.parallel(sch.fuse(*static_lead) if len(static_lead) > 1 else static_lead[0])
    elif len(spatial) > 1:
        sch.parallel(spatial[0])


# Maxima that rfactor takes (a plain max, TVM's own reducer) when their type is an integer: the
# integer data's own, and a float's order keys (a keyed plane's, an argmax's). A float max's
# NaN-propagating select is not one rfactor knows.
INTEGER_MAX_KINDS = ("max", "trt_max", "max_index")


def _vector_partial_sums(sch, block, config: CpuConfig, reduce_loops, taps):
    """A long sum (or integer max) over contiguous taps as vector partial sums (NEON: 1-D avg k64 s32 took 130
    instructions per output in order, as many as stock TVM; x86: see config.max_partial_sum_lanes)::

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
    if not reduce_loops or taps is None or taps <= config.max_unrolled_row_taps:
        return None
    dtype = analysis.region_dtype(sch.get(block).writes[0])
    kind = analysis.pool_kind(sch.get(block))
    if not (kind.endswith("_sum") or (kind in INTEGER_MAX_KINDS and not dtype.startswith(("float", "bfloat")))):
        return None
    register = max(config.vector_bits_for(dtype) // dtype_bits(dtype), 1)
    if taps >= config.very_long_sum_taps:
        lanes = register * config.very_long_sum_registers
    elif taps >= config.long_sum_taps:
        lanes = register * config.long_sum_registers
    else:
        lanes = min(register, config.max_partial_sum_lanes)
    if lanes < 2 or not _contiguous_taps(sch, block):
        return None
    tap = sch.fuse(*reduce_loops) if len(reduce_loops) > 1 else reduce_loops[0]
    _, lane = sch.split(tap, [None, lanes])
    n_spatial = sum(1 for iv in sch.get(block).iter_vars if int(iv.iter_type) == 0)
    partial = sch.rfactor(lane, factor_axis=n_spatial)
    levels = _halving_lane_sums(sch, block, lanes, n_spatial) if config.halving_lane_sums else []
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
        if taps // lanes <= config.max_unrolled_row_taps:
            sch.unroll(whole)

    return sch.get_loops(partial)[0], split_chunks


def _halving_lane_sums(sch, block, lanes: int, n_spatial: int) -> list:
    """The write-back of vector partial sums as halving vector adds (CpuConfig.halving_lane_sums):
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


def _schedule_vector_rows(sch, block, config: CpuConfig, lead, out, reduce_loops, reduce_extents, pads, consumers):
    """The value-only window reduction (max / sum), static shapes::

        parallel planes (batch x channels; rows too when planes are fewer than 4 per thread)
          padded copy of the plane (or row)    # one bounds check per element, not per tap
          for out[:-1]
            for out[-1] / lanes                # a vector of outputs lives in registers
              taps... (unrolled)               # contiguous or strided loads, no predicate
                vector lanes
            consumers (finalize, add, relu)
    """
    planes = analysis.product([analysis.loop_extent(sch, l) for l in lead]) or 1
    par_loops = list(lead)
    if planes < 4 * config.num_threads and len(out) > 1:
        par_loops += list(out[:-1])
    par = sch.fuse(*par_loops) if len(par_loops) > 1 else par_loops[0]
    sch.parallel(par)
    for p in pads:
        sch.compute_at(p, par)
    inner = out[-1]
    bits = dtype_bits(analysis.region_dtype(sch.get(block).writes[0]))
    dtype = analysis.region_dtype(sch.get(block).writes[0])
    lanes = choose_lanes(analysis.loop_extent(sch, inner), bits, config.vector_bits_for(dtype))
    taps = analysis.product(reduce_extents)
    if lanes > 1 and inner_read_stride(sch, block) != 1 and (bits < 16 or not config.strided_vectors):
        # Strided 8-bit taps: TVM's vectorize gathers its 32-64 lanes one by one; LLVM's loop
        # vectoriser does better with wide loads + shuffles, so the row stays a plain loop.
        # (For 16/32-bit lanes the gathered vector still wins: measured in bench/.)
        lanes = 1
    if lanes > 1:
        tile, lane = sch.split(inner, [None, lanes])
        sch.reorder(tile, *reduce_loops, lane)
        acc = sch.cache_write(block, 0, "local")
        sch.reverse_compute_at(acc, tile)
        if taps is not None and taps <= config.max_unrolled_taps:
            for r in reduce_loops:
                sch.unroll(r)
        sch.vectorize(lane)
        init = sch.decompose_reduction(block, reduce_loops[0])
        sch.vectorize(sch.get_loops(init)[-1])
        sch.vectorize(sch.get_loops(acc)[-1])
    elif taps is not None and taps <= config.max_unrolled_taps:
        for r in reduce_loops:
            sch.unroll(r)
    for c in consumers:
        sch.reverse_compute_at(c, par)
