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
  whole planes (7x7 ResNet tails, 1x1 global outputs). Where the windows overlap (3x3 s2, 1x3x3,
  ceil mode, channel-first), each thread computes the earlier passes' values its output needs
  into **registers**, reading the taps through L1 (``CudaConfig.registers``). Otherwise every
  earlier pass is computed per block
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

**Channel-last pools** (``[N, *spatial, C]``, blocks annotated ``tvm_pool.layout``) take the
same path, with the decisions that follow from C being the contiguous axis
(:mod:`.cuda_channel_last`): threads over C (then pixels), so each warp's loads of a tap and its
stores are contiguous; chain tiles of rows x cols x channels (C whole up to 64, else chunks of
it; a symbolic batch is one block row per image) with the same staging in shared memory;
16-byte pieces of channels per thread (loaded once per tap, stored once per group) where C is
whole pieces and no tap reads through a bounds check; and global reductions over blocks of
(one 32-byte sector of channels) x (tap groups), combined by TVM's cross-thread reduction, or a
thread per output where TVM cannot lower the reducer or where there are 65536 outputs or more
(``CudaConfig.global_min_outputs_per_thread``).

**16-byte loads** (``ld.global.nc.v4``: 4 floats, 8 halves, 16 bytes), wherever a thread's input
is whole 16-byte pieces at addresses provably multiples of 16: non-overlapping windows that
tile the rows exactly (2x2 stride 2, 1-D k4 s4; max, average, Indices) give each thread
``16 bytes / stride`` consecutive outputs and load its taps into registers; staged passes copy
the block's input rows into shared memory before the first pass reads them; warp reductions
load every 32nd piece. The proof is :func:`.cuda_verify.vector_accesses` on the result (TVM's
vectorizer checks no alignment); where it fails (7x7 planes, odd widths, column tiles starting
mid-row) or a window reads through a bounds check (padding, ceil overhang), loads stay scalar.

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
write outside its buffer (a widened block domain: see :func:`.cuda_consumers.attach_consumers`).
What it does not run is TVM's own work on bound loops: the barriers between a shared stage's
writes and the last pass's reads (ThreadSync) and the warp allreduce (LowerThreadAllreduce);
those are checked on the CUDA build (``tests/test_schedules_cuda.py``: VerifyGPUCode, ptxas,
launch shapes). In simulation no buffer is shared, so the shared-memory limit never applies.

**Settings as data**: every threshold and target fact (threads per block, shared memory, taps
unrolled, ...) is a field of :class:`.cuda_config.CudaConfig`, made per target by
:meth:`Pool.config` and passed to every step; a tuning knob is ``dataclasses.replace(config,
...)`` (:meth:`Pool.knobs`). **One path**: :meth:`Pool.schedule` is the attempt loop that
``compile`` (dlight's :meth:`Pool.apply`), tuning's candidates and the MetaSchedule custom rule
all run: a copy of the given schedule per attempt (its trace and random variables stay valid),
staged tiles shrinking (``tile_scale`` doubling) until the staging fits shared memory, then the
earlier passes inlined; within each, a thread per plane where TVM cannot lower a warp reduction
(:class:`.cuda_reduction.NoWarpReduction`), and scalar loads where a step refuses or the
alignment proof fails (:class:`.cuda_vector.MisalignedVector`). A step TVM refuses raises one of
:data:`.analysis.SCHEDULE_ERRORS` (TVM's ScheduleError and its other C++ errors are
RuntimeErrors; ValueError); the reason is logged at debug level.

Modules: :mod:`.cuda` (the rule and its attempt loop), :mod:`.cuda_config`, :mod:`.cuda_common`
(binding hooks, one thread per output), :mod:`.cuda_reduction` (window and global reductions),
:mod:`.cuda_passes` (separable chains, staging, the joining consumer), :mod:`.cuda_consumers`
(producers, consumers, leftovers), :mod:`.cuda_vector` (16-byte loads), :mod:`.cuda_verify`
(shared memory and the alignment proof), :mod:`.cuda_channel_last` (what channel-last pools
decide otherwise).
"""

from __future__ import annotations

import dataclasses
import logging

from tvm import s_tir, tirx
from tvm.s_tir.dlight import ScheduleRule
from tvm.target import Target

from ..errors import one_line
from ..targets import cuda_target, is_cuda
from . import analysis, decline
from . import cuda_channel_last as channel_last
from .analysis import is_channel_last
from .cuda_common import Binder, SerialBinder
from .cuda_config import CudaConfig
from .cuda_consumers import inline_producers, keep_in_registers, schedule_leftovers
from .cuda_passes import joining_consumer, schedule_chain, schedule_joined
from .cuda_reduction import NoWarpReduction, schedule_main
from .cuda_vector import MisalignedVector
from .cuda_verify import all_aligned, shared_bytes, vector_accesses
from .multi_output import merge_sibling_blocks, merged_schedule

__all__ = ["KNOBS", "Binder", "CudaConfig", "MisalignedVector", "NoWarpReduction", "Pool", "SerialBinder",
           "schedule_function", "shared_bytes", "vector_accesses"]

logger = logging.getLogger(__name__)

# The design space tuning measures (``tvm_pool.tune``: every point, exhaustively): the
# hand-written schedule, then one knob moved at a time, each an override of CudaConfig (the
# attempt knobs set where the rule's fallbacks start).
KNOBS = (
    ("hand-written", {}),
    ("staging: earlier passes inlined (no shared memory, no registers)", {"staged": False, "registers": False}),
    ("threads: 128 per block", {"threads": 128}),
    ("threads: 512 per block", {"threads": 512}),
    ("tile: pass tiles of half the rows (tile scale 2)", {"tile_scale": 2}),
    ("loads: scalar (16-byte loads off)", {"vector": False}),
    ("global: a thread per plane (warp reductions off)", {"warp": False}),
    ("chains: one output per thread at any size, 1-D and channel-last too", {"one_output_per_thread_ranks": (1, 2, 3),
                                                                          "min_outputs_two_per_thread": 1 << 62}),
    ("chains: two outputs per thread on large 2-D/3-D tiles too", {"one_output_per_thread_ranks": ()}),
    ("chains: overlapping windows' earlier passes staged in shared memory, not in registers", {"registers": False}),
)


class Pool(ScheduleRule):
    """dlight rule: schedule every pooling PrimFunc for an NVIDIA GPU (see the module docstring).

    ``simulate=True`` builds the same schedule with every thread-bound loop left serial, for any
    target (the CPU simulation test); ``gpu_target`` gives the GPU limits it assumes then (by
    default :func:`tvm_pool.targets.cuda_target`'s, the ``cuda`` alias)."""

    KNOBS = KNOBS
    family = "cuda"  # how a declined function names the rule (schedules/decline.py)

    def __init__(self, simulate: bool = False, gpu_target: Target | None = None):
        self.simulate = simulate
        self.gpu_target = gpu_target

    def is_target_available(self, target: Target) -> bool:
        return self.simulate or is_cuda(target)

    def config(self, target: Target) -> CudaConfig:
        """The GPU facts for ``target``; for a target that is not CUDA (simulation), those of
        ``gpu_target``, else of the ``cuda`` alias."""
        gpu = target if is_cuda(target) else (self.gpu_target or cuda_target())
        return CudaConfig.for_target(gpu)

    def knobs(self) -> tuple:
        """``(label, CudaConfig overrides)`` per point of the design space, hand-written first."""
        return self.KNOBS

    def apply(self, func: tirx.PrimFunc, target: Target, tunable: bool):  # noqa: D102
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target) or not analysis.has_pool_units(func):
            return None
        return decline.guarded(self.family, func, lambda: self.schedule(s_tir.Schedule(func), self.config(target)))

    def prepare(self, func: tirx.PrimFunc) -> tirx.PrimFunc:
        """The output blocks of a multi-output stage merged (:mod:`.multi_output`), as on CPUs."""
        return merge_sibling_blocks(func)

    def schedule(self, base: s_tir.Schedule, config: CudaConfig) -> s_tir.Schedule | None:
        """``base`` (left as it is) scheduled with ``config``: the first attempt that schedules,
        passes the alignment proof and, staged, fits ``config.shared_limit``; None when none
        does. Staged attempts go through ``config.tile_scales``, then one unstaged; a warp
        reduction TVM cannot lower turns warp reductions off for every later attempt."""
        base = merged_schedule(base)
        warp = config.warp
        for tiling in _tilings(config):
            attempt = dataclasses.replace(config, warp=warp, **tiling)
            sch, warp = self._schedule_once(base, attempt)
            if sch is None:
                continue
            if attempt.staged:
                used = shared_bytes(sch.mod["main"])
                if used > config.shared_limit:
                    logger.debug("cuda pool schedule (scale %d): %d bytes of shared memory, over %d",
                                 attempt.tile_scale, used, config.shared_limit)
                    decline.note(f"tile scale {attempt.tile_scale}: {used} bytes of shared memory, over {config.shared_limit}")
                    continue
            return sch
        return None

    def _schedule_once(self, base: s_tir.Schedule, config: CudaConfig):
        """A copy of ``base`` scheduled with ``config``, again with one thread per plane where a
        warp reduction cannot be lowered, again with scalar loads where the vector-load schedule
        fails or is not provably aligned: (the schedule or None, whether warp reductions stay
        on for the next attempts)."""
        while True:
            sch = base.copy()
            binder = SerialBinder(sch) if self.simulate else Binder(sch)
            try:
                schedule_function(sch, config, binder)
                if config.vector and not all_aligned(sch.mod["main"]):
                    raise MisalignedVector("a vector access is not provably aligned")
                return sch, config.warp
            except NoWarpReduction as err:  # the same attempt again, one thread per plane
                logger.debug("cuda pool: no warp reduction (%s), a thread per plane", err)
                config = dataclasses.replace(config, warp=False)
            except analysis.SCHEDULE_ERRORS as err:
                logger.debug("cuda pool schedule (staged=%s, scale %d, vector=%s) failed: %s",
                             config.staged, config.tile_scale, config.vector, err)
                decline.note(f"staged={config.staged}, tile scale {config.tile_scale}, vector={config.vector}: "
                             f"{type(err).__name__}: {one_line(err)}")
                if not config.vector:
                    return None, config.warp
                config = dataclasses.replace(config, vector=False)  # the same attempt, scalar loads


def _tilings(config: CudaConfig) -> list[dict]:
    """The attempts' tiling overrides, in order: staged at each of ``config.tile_scales`` (when
    ``config.staged``), then unstaged at ``config.tile_scale``."""
    staged = [{"staged": True, "tile_scale": scale} for scale in config.tile_scales] if config.staged else []
    return staged + [{"staged": False, "tile_scale": config.tile_scale}]


def schedule_function(sch: s_tir.Schedule, config: CudaConfig, binder: Binder | None = None) -> None:
    """Schedule every pooling reduction of ``sch``'s function and everything fused with it, with
    ``config`` as it is (no fallback: a step that cannot be done raises)."""
    binder = binder or Binder(sch)
    mains, chains = analysis.main_blocks(sch), analysis.pass_chains(sch)
    inline_producers(sch, mains, chains)
    units = []
    joined = joining_consumer(sch, mains, chains, config)
    if joined is not None:
        anchor, joined_mains, joined_chains = joined
        units.append(schedule_joined(sch, anchor, joined_mains, joined_chains, config, binder))
        mains = [m for m in mains if m not in joined_mains]
        chains = [c for c in chains if c not in joined_chains]
    units += [_main_rule(sch, main)(sch, main, config, binder) for main in mains]
    units += [schedule_chain(sch, chain, config, binder) for chain in chains]
    for unit in units:
        keep_in_registers(sch, unit, binder)
    schedule_leftovers(sch, config, binder)


def _main_rule(sch: s_tir.Schedule, main: analysis.MainBlock):
    """How a window-reduction block is scheduled: by its layout (:mod:`.cuda_channel_last`)."""
    return channel_last.schedule_main if is_channel_last(sch.get(main.rv)) else schedule_main
