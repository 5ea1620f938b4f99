"""Channel-last pools in the CUDA schedule: what differs from channel-first.

A channel-last pool (``[N, *spatial, C]``, every stage annotated ``tvm_pool.layout =
"channel_last"``, see :mod:`tvm_pool.compute.layout`) goes through the same rule, attempt loop,
config and fusion steps as a channel-first one (:mod:`.cuda`); only these decisions differ,
because its contiguous axis is C, not the innermost spatial axis:

* **threads over C**: consecutive threads take consecutive channels of one output pixel, then
  the channels of the next pixel, so every warp's loads of a tap and its stores are contiguous.
* **tiles** of a separable chain or joining consumer (:func:`tile_sizes`): ``rows x cols x
  channels`` of its output per CUDA block: the channels whole up to ``max_tile_channels`` (more
  over 1x1 planes; a wider C in chunks that divide it, in whole 16-byte pieces where
  possible), then as many pixels of a row, then as many rows, as fill the block, in tiles that
  divide the axis where one is near (TVM compacts a staged buffer to the tile's halo only
  then); a tile that covers whole output planes takes several (images, or depth slices in
  3-D). Blocks run over N x row tiles x column tiles x channel chunks, so a symbolic batch is
  just a block loop. Earlier passes are staged in shared memory over the tile plus its spatial
  halo, and the input in 16-byte pieces of channels, by the channel-first code
  (:func:`.cuda_passes.stage`, :func:`.cuda_vector.stage_input`).
* **16-byte loads and stores** (:func:`channel_pieces`, :func:`store_pieces`): a thread takes
  one 16-byte piece of channels (4 floats, 8 halves, 16 int8) where C is whole pieces, loads
  it once per tap (window reductions: the tap loops around the piece's channels, the
  accumulators in registers; a single pass whose taps are one expression: all at once, up to
  ``max_thread_pieces`` taps) and stores its results once, in pieces. Not where a tap reads
  through a bounds check (padding, ceil overhang, adaptive bins;
  :func:`.cuda_vector.has_bounds_check`): TVM's cache copy of such a piece is guarded and
  indexed at run time, a local array on the stack (2992 bytes per thread for a 3x3 s2 p1 max
  between a ReLU and an Add); those threads load their channels one element at a time (still
  contiguous across the warp). The consumers of a thread's group of channels read their
  per-channel parameters (an Add's bias) in pieces too (:func:`store_pieces`).
* **global window reductions** (:func:`schedule_main`): a plane is strided by C, so a warp per
  plane (channel-first's) would read 32 scattered elements. Instead a CUDA block takes the
  channels of one 32-byte sector (``sector_bytes``) times a power of two of tap groups: thread
  (c, g) reduces every g-th tap of channel c (each warp reads whole sectors), and TVM's
  cross-thread reduction combines the groups (in shared memory). Where TVM cannot lower the
  reducer (the NaN-propagating float max), a thread per output, a warp per block (spread over
  the GPU), its taps serial.

Small C (3 channels of an RGB input) needs nothing special: the tile takes whole C and as many
pixels as fill the block, which are contiguous in memory along a row; C not a multiple of the
16-byte piece loads element by element.
"""

from __future__ import annotations

import dataclasses

from tvm import tirx

from . import analysis
from .cuda_common import Binder, Unit, bind_spatial, largest_divisor_at_most, name, written
from .cuda_config import CudaConfig
from .cuda_consumers import attach_consumers
from .cuda_reduction import NoWarpReduction, accumulate_in_registers, is_global, unroll_taps, warp_reducible
from .cuda_verify import buf_type, elem_bytes
from .cuda_vector import load_pieces, param_read, unchecked_vector_read, vector_lanes

# --------------------------------------------------------------------------------------------
# Tiles of a separable chain's last pass: rows x cols x channels
# --------------------------------------------------------------------------------------------


def channel_tile(channels: int, config: CudaConfig, per: int = 1, plane: int = 1) -> int:
    """Channels per CUDA block (in groups of ``per``, each thread's) of a tile over output
    planes of ``plane`` pixels: all of them up to ``config.max_tile_channels``, or up to the
    block's threads per pixel of a small plane (a global pool's 1x1); else the widest chunk
    from a warp up to that which divides C, preferring chunks of whole 16-byte pieces (so
    staged pieces start aligned), else that width with a shorter last chunk."""
    most = max(1, config.max_tile_channels // per, config.max_threads // plane)
    if channels <= most:
        return channels
    least = max(1, config.warp_size // per)
    divisors = [d for d in range(most, least - 1, -1) if channels % d == 0]
    whole = [d for d in divisors if d * per % config.vector_bytes == 0]
    return (whole or divisors or [most])[0]


def _tile(extent: int, size: int) -> int:
    """Tiles of at most ``size`` along ``extent``: the largest that divides it, down to half of
    ``size`` (TVM compacts a staged buffer to a tile's halo only when the tiles divide the axis:
    whole rows otherwise); else all equal but the last, which is no shorter."""
    size = min(extent, size)
    divisor = largest_divisor_at_most(extent, size)
    return divisor if 2 * divisor >= size else -(-extent // -(-extent // size))


def _shrink(sizes: list, scale: int) -> list:
    """For shared memory: halve the first of (rows, cols, channels) still above 1, once per
    doubling of ``scale``."""
    sizes = list(sizes)
    while scale > 1:
        for i, size in enumerate(sizes):
            if size > 1:
                sizes[i] = -(-size // 2)
                break
        scale //= 2
    return sizes


def tile_sizes(extents: list, config: CudaConfig, per: int = 1) -> list:
    """The tile of a channel-last last pass (or joining consumer) per loop: ``extents`` are its
    output loops ``[N, *spatial, C]`` (C in groups of ``per``; N may be symbolic, None); the
    tile is 1 along N (and depth in 3-D) unless it covers whole planes, which it then packs
    several of (N only when static)."""
    if None in extents[1:]:
        raise ValueError("channel-last tiles need static spatial and channel extents")
    sizes = [1] * len(extents)
    cols = len(extents) - 2
    rows = cols - 1 if cols >= 2 else None  # extents[0] is N
    tc = channel_tile(extents[-1], config, per, analysis.product(extents[1:-1]))
    pixels = max(1, config.max_threads // tc)
    tw = _tile(extents[cols], pixels)
    th = _tile(extents[rows], max(1, pixels // tw)) if rows is not None else 1
    th, tw, tc = _shrink([th, tw, tc], config.tile_scale)
    sizes[-1], sizes[cols] = tc, tw
    if rows is not None:
        sizes[rows] = th
    outer = (rows if rows is not None else cols) - 1
    whole = all(s >= e for s, e in zip(sizes[outer + 1:], extents[outer + 1:]))
    if whole and extents[outer] is not None:
        room = max(1, config.max_threads // (th * tw * tc)) // config.tile_scale or 1
        sizes[outer] = largest_divisor_at_most(extents[outer], room)
    return sizes


def tile_loops(sch, block, loops: list, extents: list, sizes: list):
    """Split ``loops`` into tiles of ``sizes``: (block loops, thread loops). An axis the tile
    covers whole is a thread loop, one it takes one of at a time a block loop."""
    block_loops, thread_loops = [], []
    for loop, extent, size in zip(loops, extents, sizes):
        if extent is not None and size >= extent:
            thread_loops.append(loop)
        elif size == 1:
            block_loops.append(loop)
        else:
            outer, inner = sch.split(loop, [None, size])
            block_loops.append(outer)
            thread_loops.append(inner)
    if not thread_loops:
        thread_loops.append(sch.add_unit_loop(block))
    return block_loops, thread_loops


# --------------------------------------------------------------------------------------------
# 16-byte pieces of channels
# --------------------------------------------------------------------------------------------


def channel_pieces(sch, block, config: CudaConfig, max_pieces: int | None = None) -> int | None:
    """Channels per thread loaded as one 16-byte piece per tap, or None: ``block`` reads one
    function parameter, aligned (:func:`.cuda_vector.vector_lanes`), at its own channel
    iterator, C is static and whole pieces, and no tap reads through a bounds check. With
    ``max_pieces``, the taps the block reads at once (a pass's one expression) are at most
    that many."""
    found = unchecked_vector_read(sch, block, config)
    if found is None:
        return None
    lanes, read = found
    info = sch.get(block)
    channel = [iv for iv in info.iter_vars if int(iv.iter_type) == 0][-1]
    ranges = list(read[1].region)
    extent = analysis.product([_static(r.extent) for r in ranges[:-1]])
    if not (ranges[-1].min.same_as(channel.var) and _static(ranges[-1].extent) == 1):
        return None
    channels = _static(channel.dom.extent)
    if channels is None or channels % lanes or extent is None:
        return None
    if max_pieces is not None and extent > max_pieces:
        return None
    return lanes


def store_pieces(sch, loop, config: CudaConfig, pool=None) -> set:
    """Every block under ``loop`` (a thread's group of channels) that writes a function
    parameter writes a register copy instead, stored in 16-byte pieces after the group
    (consecutive threads then store consecutive pieces); every consumer there (not ``pool``,
    whose own loads the caller places) that reads a parameter along the group's channels (an
    Add's per-channel bias) loads the group's piece of it once, into registers. Returns the
    stores' names. Called before the thread loops are split, so that every split guards the
    stores too (see :func:`.cuda_consumers.attach_consumers`)."""
    params = analysis.function_params(sch)
    stores = set()
    for rv in sch.get_child_blocks(loop):
        if pool is not None and name(sch, rv) != name(sch, pool) and _reads_channel_param(sch, rv, loop, config):
            load_pieces(sch, rv, loop, vector_lanes(sch, rv, config))
        for i in range(len(sch.get(rv).writes)):
            if not any(analysis.region_buffer(sch.get(rv).writes[i]).same_as(p) for p in params):
                continue
            store = sch.cache_write(rv, i, "local")
            if not _under(sch, store, loop):  # (TVM puts it right after the block's own loops)
                sch.reverse_compute_at(store, loop, preserve_unit_loops=True)
            _vectorize_pieces(sch, store, config)
            stores.add(name(sch, store))
    return stores


def _reads_channel_param(sch, block, loop, config: CudaConfig) -> bool:
    """Does ``block`` read one function parameter in pieces of channels (:func:`channel_pieces`,
    one element per output: a per-channel bias), of which one iteration of ``loop`` (a thread's
    group) reads whole pieces: its loops inside ``loop`` cover a multiple of the lanes?"""
    lanes = channel_pieces(sch, block, config, max_pieces=1)
    if lanes is None:
        return False
    loops = sch.get_loops(block)
    target = sch.get_sref(loop)
    inside = next((loops[i + 1 :] for i, l in enumerate(loops) if sch.get_sref(l).same_as(target)), None)
    group = None if inside is None else analysis.product([analysis.loop_extent(sch, l) for l in inside])
    return group is not None and group % lanes == 0


def _under(sch, block, loop) -> bool:
    target = sch.get_sref(loop)
    return any(sch.get_sref(l).same_as(target) for l in sch.get_loops(block))


def _vectorize_pieces(sch, store, config: CudaConfig) -> None:
    """The store's innermost loop (the group's channels) in 16-byte pieces, vectorized."""
    inner = sch.get_loops(store)[-1]
    extent = analysis.loop_extent(sch, inner)
    lanes = min(extent or 1, max(1, config.vector_bytes // elem_bytes(buf_type(written(sch.get(store))[0]))))
    if extent is None or lanes < 2 or extent % lanes:
        return
    if extent > lanes:
        _, inner = sch.split(inner, [None, lanes])
    sch.vectorize(inner)


def _static(expr) -> int | None:
    return int(expr) if isinstance(expr, tirx.IntImm) else None


# --------------------------------------------------------------------------------------------
# Window reductions
# --------------------------------------------------------------------------------------------


def schedule_main(sch, main: analysis.MainBlock, config: CudaConfig, binder: Binder) -> Unit:
    """A channel-last window-reduction block: a thread per output, or per 16-byte piece of
    channels loaded once per tap (:func:`channel_pieces`); a global one over channel sectors and
    tap groups (a cross-thread reduction) when ``config.warp``, else a thread per output, a
    warp per block."""
    if not analysis.loops_match_block(sch, main):
        raise ValueError("pool block is not a plain loop nest")
    if is_global(main, sch, config):
        if not config.warp:
            return _schedule_outputs(sch, main, dataclasses.replace(config, threads=config.warp_size), binder)
        if _enough_outputs(main, config):  # a thread per channel reads whole rows of channels per tap
            return _schedule_outputs(sch, main, config, binder)
        if not warp_reducible(sch, main.rv):
            raise NoWarpReduction(sch.get(main.rv).name_hint)
        return _schedule_columns(sch, main, config, binder)
    static = None not in main.spatial_extents
    per = channel_pieces(sch, main.rv, config) if config.vector and static else None
    return _schedule_outputs(sch, main, config, binder, per)


def _schedule_outputs(sch, main, config: CudaConfig, binder: Binder, per: int | None = None) -> Unit:
    """A thread per output over the fused output loops (C innermost); with ``per``, per group of
    ``per`` channels, the tap loops around the group (one piece loaded per tap, unrolled
    accumulators)."""
    loops = sch.get_loops(main.rv)
    spatial, reduce_loops = list(loops[: main.n_spatial]), list(loops[main.n_spatial :])
    inner = None
    if per:
        spatial[-1], inner = sch.split(spatial[-1], [None, per])
        sch.reorder(*reduce_loops, inner)
    attached = set()
    if per:  # the group's results in registers, stored in pieces (after its consumers)
        attached |= attach_consumers(sch, main.rv, spatial[-1])
        attached |= store_pieces(sch, spatial[-1], config, main.rv)
    elif None not in main.spatial_extents:
        attached |= accumulate_in_registers(sch, main.rv, spatial[-1])
        attached |= attach_consumers(sch, main.rv, spatial[-1])
    tx = bind_spatial(sch, main.rv, spatial, reduce_loops, config, binder)
    if per:
        load_pieces(sch, main.rv, reduce_loops[-1], per)
        sch.unroll(inner)
    unroll_taps(sch, main, reduce_loops, config)
    return Unit(main.rv, tx, frozenset(attached))


def _enough_outputs(main: analysis.MainBlock, config: CudaConfig) -> bool:
    """Whether a global reduction has outputs enough (``config.global_min_outputs_per_thread``)
    for a thread per output to fill the GPU without splitting the taps across threads."""
    extents = main.spatial_extents
    return None not in extents and analysis.product(extents) >= config.global_min_outputs_per_thread


def _power_of_two_at_most(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _schedule_columns(sch, main, config: CudaConfig, binder: Binder) -> Unit:
    """A global reduction: blocks of (the channels of one sector, at most) x (tap groups), both
    powers of two; thread (c, g) reduces taps g, g + groups, ... of its channel, TVM's cross-thread
    reduction combines the groups."""
    loops = sch.get_loops(main.rv)
    spatial, reduce_loops = loops[: main.n_spatial], loops[main.n_spatial :]
    attached = attach_consumers(sch, main.rv, spatial[-1])
    s = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    r = sch.fuse(*reduce_loops) if len(reduce_loops) > 1 else reduce_loops[0]
    read = param_read(sch, main.rv)
    width = elem_bytes(buf_type(analysis.region_buffer(read[1]))) if read is not None else 4
    channels = _power_of_two_at_most(min(main.spatial_extents[-1], max(1, config.sector_bytes // width)))
    groups = _power_of_two_at_most(min(analysis.loop_extent(sch, r), config.max_threads // channels))
    so, si = sch.split(s, [None, channels])
    ro, ri = sch.split(r, [None, groups])
    sch.reorder(ri, ro)
    binder.bind(so, "blockIdx.x")
    binder.bind(si, "threadIdx.x")
    binder.bind(ri, "threadIdx.y")
    sch.annotate(ro, "pragma_auto_unroll_max_step", 16)
    sch.annotate(ro, "pragma_unroll_explicit", 1)
    return Unit(main.rv, si, frozenset(attached))
