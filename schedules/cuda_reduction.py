"""Window reductions of the CUDA schedule: one thread per output (or per group of consecutive
outputs loading 16 bytes at once), and global reductions: a warp per plane, combined by TVM's
cross-thread allreduce, or a thread per plane where TVM cannot lower the reducer."""

from __future__ import annotations

import logging

from tvm import s_tir

from . import analysis
from .cuda_common import Binder, Unit, bind_spatial, name, pooled_axes, written
from .cuda_config import CudaConfig
from .cuda_consumers import attach_consumers
from .cuda_vector import contiguous_windows, load_pieces, split_row_pieces, vector_lanes

logger = logging.getLogger(__name__)


class NoWarpReduction(ValueError):
    """TVM's cross-thread reduction does not recognise the block's reducer (the NaN-propagating
    float max is a Select, which LowerCrossThreadReduction cannot match)."""


def is_global(main: analysis.MainBlock, sch, config: CudaConfig) -> bool:
    """One output per plane over a long window: a cross-thread reduction per plane (a warp
    per plane channel-first, tap groups per channel channel-last: :mod:`.cuda_channel_last`)."""
    rank = len(main.reduce_extents)
    axes = pooled_axes(sch.get(main.rv), main.n_spatial, rank) if rank else []
    out = [main.spatial_extents[i] for i in axes]
    taps = analysis.product(main.reduce_extents)
    return (
        rank > 0
        and all(e == 1 for e in out)
        and taps is not None
        and taps >= config.global_min_taps
        and None not in main.spatial_extents
        and len(sch.get(main.rv).writes) == 1
    )


def unroll_taps(sch, main: analysis.MainBlock, reduce_loops, config: CudaConfig) -> None:
    """Unroll the window's tap loops when it has at most ``config.max_unrolled_taps`` taps."""
    taps = analysis.product(main.reduce_extents)
    if taps is not None and taps <= config.max_unrolled_taps:
        for r in reduce_loops:
            sch.unroll(r)


def schedule_main(sch, main: analysis.MainBlock, config: CudaConfig, binder: Binder) -> Unit:
    """A window-reduction block: a warp per plane (global, when ``config.warp``), else a thread
    per output, or per group of consecutive outputs whose windows are whole 16-byte pieces of
    the input rows (:func:`.cuda_vector.contiguous_windows`: 2x2 stride 2 averages, Indices),
    loaded at once. A thread per plane (a global NaN max: float64's, or a channel-last one; a
    channel-first float32 or half global max reduces order keys, a plain max a warp takes,
    ``compute.forms.keyed_plane``) loads its plane in pieces (:func:`.cuda_vector.split_row_pieces`)."""
    if not analysis.loops_match_block(sch, main):
        raise ValueError("pool block is not a plain loop nest")
    if config.warp and is_global(main, sch, config):
        if not warp_reducible(sch, main.rv):
            raise NoWarpReduction(sch.get(main.rv).name_hint)
        return _schedule_global(sch, main, config, binder)
    loops = sch.get_loops(main.rv)
    spatial, reduce_loops = list(loops[: main.n_spatial]), loops[main.n_spatial :]
    static = None not in main.spatial_extents
    per = contiguous_windows(sch, main.rv, config) if config.vector and static else None
    output_loop = spatial[-1]
    if per and per > 1:  # the group's outputs stay a loop inside the thread
        spatial[-1], output_loop = sch.split(spatial[-1], [None, per])
    attached = set()
    if static:
        attached |= accumulate_in_registers(sch, main.rv, output_loop)
        attached |= attach_consumers(sch, main.rv, output_loop)
    piece = None
    if not per and static and is_global(main, sch, config):  # a thread per plane (the NaN max)
        reduce_loops, piece = split_row_pieces(sch, main.rv, reduce_loops, config)
    tx = bind_spatial(sch, main.rv, spatial, reduce_loops, config, binder)
    if per:
        load_pieces(sch, main.rv, tx, vector_lanes(sch, main.rv, config))
    if piece is not None:
        load_pieces(sch, main.rv, reduce_loops[-1], analysis.loop_extent(sch, piece))
        sch.unroll(piece)
    unroll_taps(sch, main, reduce_loops, config)
    return Unit(main.rv, tx, frozenset(attached))


def accumulate_in_registers(sch, block, output_loop) -> set:
    """A reduction writing the function's output accumulates in a register, then stores once
    (an intermediate is kept in a register by attach_consumers when its readers join it)."""
    params = analysis.function_params(sch)
    outputs = [i for i, buf in enumerate(written(sch.get(block))) if any(buf.same_as(p) for p in params)]
    stores = [sch.cache_write(block, i, "local") for i in outputs]
    for store in stores:
        sch.reverse_compute_at(store, output_loop, preserve_unit_loops=True)
    return {name(sch, st) for st in stores}


def warp_reducible(sch, block) -> bool:
    """Whether TVM's cross-thread reduction can lower ``block``'s reducer (tried on a copy)."""
    trial = s_tir.Schedule(sch.mod)
    rv = trial.get_sblock(sch.get(block).name_hint)
    loops = trial.get_loops(rv)
    try:
        trial.bind(loops[-1], "threadIdx.x")
        s_tir.transform.LowerCrossThreadReduction()(trial.mod)
    except analysis.SCHEDULE_ERRORS as err:
        logger.debug("cuda pool: no warp reduction of %s: %s", name(sch, block), err)
        return False
    return True


def _schedule_global(sch, main, config: CudaConfig, binder: Binder) -> Unit:
    """One warp per plane: lanes take every 32nd element, TVM's allreduce combines them.
    Where the plane's rows are whole 16-byte pieces (32x32 float32, not 7x7), a lane takes
    every 32nd piece instead, loaded at once into registers
    (:func:`.cuda_vector.split_row_pieces`)."""
    loops = sch.get_loops(main.rv)
    spatial, reduce_loops = loops[: main.n_spatial], loops[main.n_spatial :]
    attached = attach_consumers(sch, main.rv, spatial[-1])
    reduce_loops, piece = split_row_pieces(sch, main.rv, reduce_loops, config)
    s = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    r = sch.fuse(*reduce_loops) if len(reduce_loops) > 1 else reduce_loops[0]
    planes = analysis.loop_extent(sch, s)
    per_block = max(1, min(config.global_planes_per_block, planes))
    so, si = sch.split(s, [None, per_block])
    ro, ri = sch.split(r, [None, config.warp_size])
    sch.reorder(ri, ro)
    binder.bind(so, "blockIdx.x")
    binder.bind(si, "threadIdx.y")
    binder.bind(ri, "threadIdx.x")
    if piece is not None:
        load_pieces(sch, main.rv, ro, analysis.loop_extent(sch, piece))
        sch.unroll(piece)
    sch.annotate(ro, "pragma_auto_unroll_max_step", 16)
    sch.annotate(ro, "pragma_unroll_explicit", 1)
    return Unit(main.rv, si, frozenset(attached))
