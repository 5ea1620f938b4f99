"""The CPU schedule of separable passes (``tvm_pool.pass_axis`` chains: overlapping and
single-axis windows reduced one axis at a time, doubling levels, one-pass non-overlapping
windows): planes in parallel, each pass at the loop of the axis it reduces, pass rows as TVM
vectors, the padding copied per plane, inlined with bounds checks, or inlined with the rows cut
at its edges. See :mod:`.cpu`."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.sym.pattern import detect_linear_equation

from . import analysis, cpu_channels, strided_loads
from .cpu_config import FULL, NO_VECTOR, CpuConfig, dtype_bits, inner_read_stride, register_tile, vector_row_lanes
from .cpu_short_rows import plane_tiling, schedule_planes


def schedule_pass_chain(sch: s_tir.Schedule, chain, config: CpuConfig, level: int = FULL) -> None:
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
    if level >= NO_VECTOR and len(chain.passes) == 1 and (tiling := plane_tiling(sch, chain.passes[0], config)):
        schedule_planes(sch, chain.passes[0], tiling, analysis.attachable_consumers(sch, chain.passes[0]), config)
        return
    if level == FULL:
        chain = _taps_in_one_pass(sch, chain, config)
    source_bytes = analysis.region_bytes(sch.get(chain.passes[0]).reads[0])
    channel_last = analysis.is_channel_last(sch.get(chain.passes[-1]))
    par, row = _place_passes(sch, chain, source_bytes, config)
    consumers = analysis.attachable_consumers(sch, chain.passes[-1])
    if channel_last:
        # consumers first: the padding's column cut may split the last pass too (one pass)
        consumers = cpu_channels.inline_consumers(sch, chain.passes[-1], consumers, config)
        for c in consumers:
            sch.reverse_compute_at(c, row)
        inlined_pad = cpu_channels.place_padding(sch, chain, par, config)
    else:
        inlined_pad = _place_padding(sch, chain, par, config, level)
        for c in consumers:
            sch.reverse_compute_at(c, row)
    if level == FULL and channel_last:
        cpu_channels.vectorize_chain(sch, chain, consumers, inlined_pad, config)
    elif level == FULL:
        _vectorize_passes(sch, chain, consumers, inlined_pad, source_bytes, config)


def _place_passes(sch, chain, source_bytes, config: CpuConfig):
    """Planes (and the outer output axis when planes are few) fused into one loop, parallel
    when the input is large enough, and every pass but the last computed at the loop of the
    axis it reduces; returns (that loop, the loop of one output row)."""
    rank = chain.spatial_rank
    if analysis.is_channel_last(sch.get(chain.passes[-1])):
        par, par_loops, out = _channel_last_parallel(sch, chain, source_bytes, config)
    else:
        par, par_loops, out = _planes_parallel(sch, chain, source_bytes, config)
    loop_of_axis = {i: (par if out[i] in par_loops else out[i]) for i in range(rank)}
    loop_of_axis[-1] = par
    row = loop_of_axis[rank - 2] if rank > 1 else par
    pass_row = row  # where earlier passes computed per output row go: a tile's loop once rows are tiled
    for j in reversed(range(len(chain.passes) - 1)):
        axis = chain.axes[j]
        if axis in chain.axes[j + 1 :]:
            # A pass whose axis a later pass reduces again (the doubling levels of a long
            # window, compute.window_reduce._doubling_passes) is still in input coordinates along it:
            # it is computed per row of that axis, at the loop above it, not per output of it.
            at = loop_of_axis[axis - 1]
        elif not _pass_windows_overlap(sch, chain.passes[j], axis, rank):
            # Windows that do not overlap share no rows of this pass between neighbouring
            # outputs: computed per output row, its rows stay in registers/L1 (3-D 2x2x2 s2
            # over 64x16x56x56, 1 thread: 0.19 ms, against 0.27 ms with the depth pass
            # computed per output plane).
            at = pass_row
        else:
            at = loop_of_axis[axis]
            if at is row and row is not par and _rows_ahead(sch, chain, at, config):
                at, row = sch.split(at, [None, config.pass_row_tile])
                loop_of_axis[axis] = pass_row = at
        sch.compute_at(chain.passes[j], at, preserve_unit_loops=True)
    return par, row


def _rows_ahead(sch, chain, loop, config: CpuConfig) -> bool:
    """Whether the output rows of ``loop`` are tiled by ``config.pass_row_tile``, the pass before
    the last computed per tile (:attr:`.cpu_config.CpuConfig.pass_row_tile`): a last pass that
    reads its rows at unit stride, and more rows than a tile."""
    return (config.pass_row_tile > 1 and inner_read_stride(sch, chain.passes[-1]) == 1
            and (analysis.loop_extent(sch, loop) or 0) > config.pass_row_tile)


def _planes_parallel(sch, chain, source_bytes, config: CpuConfig):
    """Channel-first: planes (and the outer output axis when planes are few) fused into one
    loop, parallel when the input is large enough. Returns (that loop, the loops fused into
    it, the output loops of the spatial axes). A symbolic batch (a dynamic batch of
    torch.export or ONNX) stays a serial loop around it: the static lead loops inside it are
    the planes (fusing a symbolic loop puts symbolic floordiv/floormod into every index)."""
    loops = sch.get_loops(chain.passes[-1])
    rank = chain.spatial_rank
    lead, out = list(loops[: len(loops) - rank]), list(loops[len(loops) - rank :])
    extents = [analysis.loop_extent(sch, l) for l in loops]
    if any(e is None for e in extents[len(lead) :]):
        raise ValueError("separable passes need static spatial shapes")
    symbolic = [i for i, e in enumerate(extents[: len(lead)]) if e is None]
    if symbolic:
        lead, extents = lead[symbolic[-1] + 1 :], extents[symbolic[-1] + 1 :]
    planes = analysis.product(extents[: len(lead)]) or 1
    par_loops = list(lead)
    if planes < 4 * config.num_threads and len(out) > 1:
        par_loops.append(out[0])
    if not par_loops:
        par_loops = [out[0]]
    par = sch.fuse(*par_loops) if len(par_loops) > 1 else par_loops[0]
    if source_bytes is None or source_bytes >= config.min_parallel_bytes:
        sch.parallel(par)
    return par, par_loops, out


def _channel_last_parallel(sch, chain, source_bytes, config: CpuConfig):
    """Channel-last: the batch and the outer output rows in parallel (tiles of C too when they
    are few, :func:`.cpu_channels.parallel_loops`). A 1-D chain of several passes keeps its one
    spatial axis out of the parallel loop: its passes are computed per row of that axis, and
    outputs in parallel would each recompute the window's passes."""
    rank = chain.spatial_rank
    out_in_par = 1 if rank > 1 or len(chain.passes) == 1 else 0
    loops = cpu_channels.parallel_loops(sch, chain.passes[-1], rank, out_in_par, source_bytes, config,
                                        row_tile=config.channel_last_row_tile)
    return loops.par, loops.par_loops, loops.out


def _place_padding(sch, chain, par, config: CpuConfig, level: int):
    """The padded copy before the first pass: per plane (small planes, bfloat16, no masked
    loads), inlined with bounds checks (large planes), or inlined with the first pass's row cut
    at the padding's edges (no masked loads, full level). Returns (first pass, its interior)
    for the last, else None."""
    rank = chain.spatial_rank
    inlined_pad = None
    for p in sch.get_producers(chain.passes[0]):
        if analysis.pool_kind(sch.get(p)) != "pad":
            continue
        pad_block = sch.get(p)
        if any(analysis.region_dtype(r) == "bfloat16" for r in pad_block.reads):
            # TVM 0.27's bfloat16 legalization turns a vectorised bf16 -> f32 widening inside
            # if_then_else into a numeric uint16 cast: keep the widening copy per plane.
            sch.compute_at(p, par)
        elif _widens_to_64_bits(pad_block) or len(sch.get(chain.passes[0]).writes) > 1:
            # A copy that makes int64 from narrower data (the argmax's keys: about 20 vector
            # operations per element) is made once per plane, never once per tap. Its interior
            # as TVM vectors of int32 work (LLVM's vectoriser picked 4 lanes for the int64
            # store; MaxPool 3x3 s2 p1 with Indices over 1x64x112x112, 1 thread: 1.23 -> 0.88
            # ms; inlined into the taps with bounds checks: 14 ms). So are the padded data of
            # passes that also keep a tap (compute.window_reduce.window_max_position): inlined
            # with bounds checks, the first pass was scalarised (x86, 3x3 s2 p1 with Indices over
            # 1x64x112x112, 2 threads: 0.257 against 0.141 ms); inlined with the row cut at the
            # padding's edges (NEON) 6.29 against 5.84 M instructions; float data become int32
            # keys here, once per element.
            sch.compute_at(p, par)
            if level == FULL:
                _vectorize_pad_interior(sch, p, config)
        elif (interior := _inlinable_padding(sch, p, chain, config, level)) is not None:
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
        elif _plane_bytes(pad_block, rank) <= config.plane_copy_bytes or not config.masked_loads:
            # A small padded plane stays in L1: one copy per plane, then no bounds checks.
            sch.compute_at(p, par)
            if not config.masked_loads:
                _partition_pad_rows(sch, p)
        else:
            # A large one would not: the bounds checks go into the first pass's rows instead.
            sch.compute_inline(p)
    return inlined_pad


def _vectorize_passes(sch, chain, consumers, inlined_pad, source_bytes, config: CpuConfig) -> None:
    """TVM vectors for the pass rows (and consumer rows where the family vectorises them)."""
    for c in consumers if config.vector_consumers else []:
        _vectorize_row(sch, sch.get_loops(c)[-1], config, analysis.region_dtype(sch.get(c).writes[0]))
    # Pass rows are TVM-vectorised whole. The last pass's strided taps then become gathers
    # from a row in L1: faster than LLVM's vectoriser (shuffles) while the data is in cache
    # (1 thread, 3x3 s2 on 112x112: 0.049 vs 0.076 ms; 3x3 s1 on 28x28: 0.035 vs 0.062 ms),
    # not once it streams from DRAM, where the microcoded gathers compete with the loads of the
    # next rows (batch 32, 2 threads, 4 interleaved runs each: median 4.1 vs 3.6 ms; DRAM
    # timings on this machine vary by 2x run to run). Out-of-cache inputs keep LLVM's last pass.
    # A single pass reads the data itself, not a row in L1: LLVM's vectoriser keeps it too.
    gather_last = (source_bytes is not None and source_bytes <= config.in_cache_bytes and len(chain.passes) > 1
                   and config.strided_vectors)
    last = chain.passes[-1]
    if chain.repeats_an_axis:
        # Passes along one axis: the doubling levels of a long window, two contiguous reads
        # per element over rows of arbitrary length, which LLVM's vectoriser handles with a
        # scalar tail (1-D max k32 s1 over 64x4096, 1 thread: 0.107 ms, against 0.122 ms
        # with TVM vectorising odd-sized row chunks); or the lanes of a flat global
        # reduction (compute.window_reduce._flat_plane_passes), a register or less: one TVM vector.
        for block in chain.passes[:-1]:
            if inlined_pad is not None and block.same_as(inlined_pad[0]):
                continue  # cut at the padding's edges above, LLVM's
            loop = sch.get_loops(block)[-1]
            if (analysis.loop_extent(sch, loop) or 0) <= config.max_short_row and analysis.holds_one_block(sch, loop):
                sch.vectorize(loop)
        return
    # Without gathers, a strided last pass is TVM-vectorised only where its strided loads become
    # de-interleaving loads (CpuConfig.deinterleaving_loads); else LLVM's vectoriser keeps it.
    last_stride = inner_read_stride(sch, last)
    contiguous_last = not config.strided_vectors and (
        last_stride == 1
        or (config.deinterleaving_loads and last_stride is not None
            and 2 <= last_stride <= strided_loads.MAX_STRIDE))
    for block in chain.passes if gather_last or contiguous_last else chain.passes[:-1]:
        loop = sch.get_loops(block)[-1]
        dtype = analysis.region_dtype(sch.get(block).writes[0])
        if inlined_pad is not None and block.same_as(inlined_pad[0]):
            _vectorize_padded_row(sch, loop, inlined_pad[1], config)
        else:
            _vectorize_row(sch, loop, config, dtype, long_chunks=len(chain.passes) == 1)
    if not (gather_last or contiguous_last):
        register_tile(sch, sch.get_loops(last)[-1], config, analysis.region_dtype(sch.get(last).writes[0]))


def _taps_in_one_pass(sch, chain, config: CpuConfig):
    """On CPUs with de-interleaving loads, a chain of passes whose windows do not overlap (3-D
    2x2x2 s2, ...) as one pass over every tap: each input is read once either way, and the
    strided taps of the last axis become LD2/LD3/LD4 straight from the data, with no row of
    partial results stored and loaded per axis (NEON, 3-D 2x2x2 s2 average over 64x16x56x56:
    4.74 -> 3.67 instructions per output). Channel-last chains too, on every CPU: each tap is
    a contiguous vector of C (x86, 1 thread, 3-D 2x2x2 s2 average over 1x16x56x56x64: 0.87 ->
    0.63 ms). Padded chains keep their passes."""
    channel_last = analysis.is_channel_last(sch.get(chain.passes[-1]))
    if not (config.deinterleaving_loads or channel_last) or len(chain.passes) < 2:
        return chain
    if chain.repeats_an_axis:
        return chain
    if any(analysis.pool_kind(sch.get(p)) == "pad" for p in sch.get_producers(chain.passes[0])):
        return chain
    for block, axis in zip(chain.passes, chain.axes):
        if _pass_windows_overlap(sch, block, axis, chain.spatial_rank):
            return chain
    if (inner_read_stride(sch, chain.passes[-1]) or 0) > strided_loads.MAX_STRIDE:
        return chain
    for block in chain.passes[:-1]:
        sch.compute_inline(block)
    return analysis.PassChain([chain.passes[-1]], [chain.axes[-1]], chain.spatial_rank)


def _inlinable_padding(sch, pad, chain, config: CpuConfig, level: int):
    """The first pass's interior (:func:`_padded_interior`) when the padded copy ``pad`` is
    better inlined into it (CPUs without masked loads, full level, dtypes computed in their own
    registers; rows cut into few enough vector pieces, or the long row of a doubling level that
    LLVM vectorises); else None."""
    block = sch.get(pad)
    if config.masked_loads or level < FULL:
        return None
    if not all(_native_vectors(config, analysis.region_dtype(r)) for r in [*block.reads, *block.writes]):
        return None
    first = chain.passes[0]
    if not chain.repeats_an_axis:
        return _padded_interior(sch, pad, first, config, config.max_padded_row_pieces)
    if (analysis.loop_extent(sch, sch.get_loops(first)[-1]) or 0) <= config.max_short_row:
        return None
    return _padded_interior(sch, pad, first, config, max_pieces=None)


def _cut_at(sch, loop, lo: int, hi: int) -> None:
    """``loop`` split by loop_partition into [0, lo), [lo, hi) and the rest (empty parts left out)."""
    extent = analysis.loop_extent(sch, loop)
    factors = ([lo] if lo > 0 else []) + ([hi - lo] if hi < extent else [])
    if factors and hi > lo:
        sch.loop_partition(loop, factors + [None])


def _padded_interior(sch, pad, first, config: CpuConfig, max_pieces: int | None = None):
    """(lo, hi, pieces): the range of the first pass's innermost loop whose reads of the padded
    buffer (along the last axis) stay inside the data, and that range cut into vector pieces
    (:func:`_row_pieces`); None when it cannot be found or would take too many pieces."""
    pad_block, block = sch.get(pad), sch.get(first)
    data = analysis.pad_data_range(pad_block)
    if data is None:
        return None
    begin, n = data  # data starts at padded index ``begin``
    padded = analysis.region_buffer(pad_block.writes[0])
    reads = [r for r in block.reads if analysis.region_buffer(r).same_as(padded)]
    loops = sch.get_loops(first)
    extent = analysis.loop_extent(sch, loops[-1])
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
    longest, lanes = vector_row_lanes(config, analysis.region_dtype(pad_block.writes[0]))
    pieces = _row_pieces(hi - lo, longest, lanes)
    if max_pieces is not None and (pieces is None or len(pieces) > max_pieces):
        return None
    return lo, hi, pieces


def _native_vectors(config: CpuConfig, dtype: str) -> bool:
    """Is ``dtype`` computed in full-width vector registers (not widened, as float16 is on NEON
    without +fullfp16)? Widened, the padding's selects inlined into a vector made LLVM promote
    each half alone (NEON 3x3 s2 p1 fp16: 14.4 instructions per output, 7.2 with the copy)."""
    return config.vector_bits_for(dtype) >= 128


def _row_pieces(n: int, longest: int, lanes: int, long_chunks: bool = False):
    """``n`` cut into vector pieces: equal chunks of a few registers (at most ``longest`` lanes,
    the longest that divides the row's whole registers), then what is left, each piece a
    power-of-two number of registers or, last, of lanes (LLVM legalises a 3-register vector
    lane by lane: a 28-wide 3x3 s1 max row cut 16 + 12 took 4.2 instructions per output,
    7 x 4 2.6). A row shorter than the longest chunk but longer than a register is cut the same
    way where what is left takes pieces of 4 lanes or more (int8 rows of 56: 3 x 16 + 8, whose
    padding was copied when no chunk divided them whole; of 28: 16 + 12, where LLVM's
    vectoriser left a scalar tail; :func:`_rest_pieces`). ``long_chunks``: a chunk of one
    register only when nothing longer fits (28 is 16 + 8 + 4, not 7 x 4), for rows whose every
    tap is a load from the data: the 3-D 2x2x2 s2 max on NEON went from 4.6 to 3.9 instructions
    per output, a loop iteration's address arithmetic being most of the difference; rows of
    passes ran better in single registers (28-wide 3x3 s1: 2.6 as 7 x 4, 3.0 as 16 + 8 + 4).
    None: a short row no chunk divides."""
    whole = n - n % lanes if n >= longest or (n > lanes and n % lanes % 4 == 0) else n
    chunks = [c for c in _powers_of_two_down(longest) if c >= lanes and c % lanes == 0]
    for chunk in chunks:
        if not whole or whole % chunk:
            continue
        if long_chunks and chunk == lanes and whole > longest:
            chunk = chunks[0]
        equal = whole - whole % chunk
        return [chunk] * (equal // chunk) + _rest_pieces(n - equal, lanes)
    return None


def _rest_pieces(rest: int, lanes: int) -> list:
    """What is left of a row after its whole chunks: powers of two, largest first, except a rest
    of whole 32-bit words within one register of byte lanes (int8 / uint8: 16 a register), which
    stays one piece: LLVM computes it in the whole register (NEON, a 28-wide int8 row as 16 + 12:
    47 instructions; as 16 + 8 + 4, 53, its 4 lanes promoted to 16-bit lanes and back)."""
    if 0 < rest < lanes and lanes >= 16 and rest % 4 == 0:
        return [rest]
    return _powers_of_two_split(rest)


def _powers_of_two_down(n: int) -> list:
    out, p = [], 1 << (max(n, 1).bit_length() - 1)
    while p >= 1:
        out.append(p)
        p >>= 1
    return out


def _powers_of_two_split(n: int) -> list:
    """``n`` as distinct powers of two, largest first (12 -> [8, 4], 3 -> [2, 1])."""
    return [p for p in _powers_of_two_down(n) if n & p] if n > 0 else []


def _vectorize_padded_row(sch, loop, interior, config: CpuConfig) -> None:
    """The first pass's row with the padding inlined: the edges (bounds checks) scalar, the
    middle cut into pieces that TVM vectorises without checks. loop_partition gives each piece
    a loop of its own: TVM's split needs a loop that starts at 0, which the middle does not."""
    lo, hi, pieces = interior
    extent = analysis.loop_extent(sch, loop)
    factors = ([lo] if lo else []) + pieces + ([extent - hi] if hi < extent else [])
    parts = sch.loop_partition(loop, factors[:-1] + [None]) if len(factors) > 1 else [loop]
    for part, length in zip(parts[1 if lo else 0 :], pieces):
        if length >= config.min_rest_lanes or len(pieces) == 1:
            sch.vectorize(part)


def _widens_to_64_bits(pad_block) -> bool:
    """Does the padded copy convert narrower data to 64-bit integers (the argmax's keys)?"""
    write = analysis.region_dtype(pad_block.writes[0])
    return write in ("int64", "uint64") and all(dtype_bits(analysis.region_dtype(r)) < 64 for r in pad_block.reads)


def _vectorize_pad_interior(sch, pad, config: CpuConfig) -> None:
    """The padded copy's innermost loop cut at the data's edges, the interior in TVM vector
    pieces (:func:`_vectorize_padded_row`, lanes of the data's type); left as it is when the
    edges cannot be found or the interior would take too many pieces."""
    inner = sch.get_loops(pad)[-1]
    block = sch.get(pad)
    data = analysis.pad_data_range(block)
    extent = analysis.loop_extent(sch, inner)
    if data is None or extent is None or analysis._extent(block.iter_vars[-1].dom) != extent:  # pylint: disable=protected-access
        return
    lo, hi = data[0], min(data[0] + data[1], extent)
    longest, lanes = vector_row_lanes(config, analysis.region_dtype(block.reads[0]))
    pieces = _row_pieces(hi - lo, longest, lanes)
    if pieces and len(pieces) <= config.max_padded_row_pieces:  # a long row stays LLVM's (one loop)
        _vectorize_padded_row(sch, inner, (lo, hi, pieces), config)


def _partition_pad_rows(sch, pad) -> None:
    """The padded copy's innermost loop split into its edges and a middle with no bounds checks,
    which LLVM vectorises (without masked loads the checks are per lane). loop_partition at the
    data's edges where they are known; else TVM's LoopPartition pass is asked to (a hint it did
    not act on for a 1-D row of 4128: a compare and branch per element, 4.5 instructions per
    output of a 1-D k32 max on NEON)."""
    inner = sch.get_loops(pad)[-1]
    data = analysis.pad_data_range(sch.get(pad))
    extent = analysis.loop_extent(sch, inner)
    if data is None or extent is None or analysis._extent(sch.get(pad).iter_vars[-1].dom) != extent:  # pylint: disable=protected-access
        sch.annotate(inner, "pragma_loop_partition_hint", 1)
        return
    _cut_at(sch, inner, data[0], min(data[0] + data[1], extent))


def _plane_bytes(block, rank: int) -> int:
    extents = [analysis._extent(iv.dom) for iv in block.iter_vars[-rank:]]  # pylint: disable=protected-access
    bits = dtype_bits(analysis.region_dtype(block.writes[0]))
    return (analysis.product(extents) or 1 << 40) * bits // 8


def _vectorize_row(sch, loop, config: CpuConfig, dtype: str, long_chunks: bool = False) -> None:
    """TVM-vectorise a contiguous pass row: whole when it is short, else in equal chunks (not
    a loop that holds more than the row's block: :func:`.analysis.holds_one_block`)."""
    extent = analysis.loop_extent(sch, loop)
    if extent is None or extent < 2 or not analysis.holds_one_block(sch, loop):
        return
    if config.vector_row_registers is None:
        if extent <= config.max_vector_row:
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
    longest, lanes = vector_row_lanes(config, dtype)
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
        if length >= config.min_rest_lanes:
            sch.vectorize(part)


def _pass_windows_overlap(sch, block, axis: int, rank: int) -> bool:
    """Do neighbouring outputs of a pass read overlapping input along ``axis`` (its taps span
    more than its stride)? Reads that do not move along ``axis`` (fused per-channel
    parameters, :func:`.analysis.moving_reads`) share nothing between outputs. Unknown counts
    as overlapping."""
    info = sch.get(block)
    var = info.iter_vars[analysis.spatial_dim(info, rank, axis)].var
    return any(step is None or extent is None or extent > abs(step)
               for step, extent in analysis.moving_reads(info.reads, var))
