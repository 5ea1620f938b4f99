"""The CPU schedule for pooling, shared by every CPU family (x86-64, aarch64).

What differs between CPUs is data: a :class:`.cpu_config.CpuConfig` per target, which each
family's rule makes (``schedules/x86.py``: AVX2 / AVX-512 from the target's mcpu/mattr;
``schedules/arm.py``: 128-bit NEON), with the thresholds the benchmarks measured. Every schedule
step takes it as an argument; a tuning knob is ``dataclasses.replace(config, ...)`` (each family
lists its own knobs). Everything below is written once for every family.

One rule, :class:`Pool`, for every tvm_pool pooling PrimFunc (max, max with indices, average,
Lp, global, adaptive, TensorRT) and TOPI's pooling blocks, fused or not. Two shapes of compute
reach it:

* **separable passes** (``tvm_pool.pass_axis`` blocks, see ``compute.forms.separable``): the
  overlapping and single-axis windows, reduced one axis at a time. :func:`schedule_pass_chain`
  runs planes in parallel, each pass at the loop of the axis it reduces, every pass row as one
  TVM vector, the padding as a per-plane copy (small planes) or inlined bounds checks (large;
  without masked loads, at the row's edges only).
  This is where the speed of the common pools (3x3 stride 1 and 2, global average, 3-D, 1-D)
  comes from.
  Small non-overlapping 2-D max windows (2x2 s2, 3x3 s3) come as a one-pass chain too: one
  expression of every tap (``compute.forms.few_taps``), whose output row LLVM vectorises.
  Passes over axes whose windows do not overlap are computed per output row; the doubling
  levels of a long 1-D max (``compute.window_reduce._doubling_passes``) per row of their axis.
* **window reductions** (:mod:`.cpu_reduction`; a block with reduction iterators: indices, non-overlapping sums,
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

Channel-first windows that tile their planes exactly (kernel = stride, no padding) over output
rows shorter than a register take neither: on x86 each plane is copied with the window's rows
set apart, and its outputs are one flat loop (:mod:`.cpu_short_rows`; LLVM gathered across such
short rows).

Channel-last pools (``[N, *spatial, C]``, blocks annotated ``tvm_pool.layout``; which loops are
spatial: ``analysis.axis_roles``) take the same two paths, with the steps that depend on where
the channels are in :mod:`.cpu_channels`: the batch and the outer output rows in parallel (tiles
of C when they are few), every pass, reduction and consumer vectorised over C (a tile of a few
registers), the padding inlined into the first pass with its columns cut at the padding's edges,
window taps unrolled into accumulators that stay in registers. The passes keep the geometry of
the channel-first schedule above (each at the loop of the axis it reduces).

The choices come from the x86 benchmark in ``bench/`` (see docs/bench_x86.md) and the aarch64
instruction counts in ``bench/arm_instructions.py``; :class:`.cpu_config.CpuConfig` says what
was measured. Every step is tried at the full level first; a PrimFunc a step cannot handle (TVM
refuses a primitive: :data:`.analysis.SCHEDULE_ERRORS`) falls back to a lower level (no
vectorisation, then parallel only), so a rule failure never fails a build; the reason is logged
at debug level. :meth:`Pool.schedule` is the one path: ``compile`` (dlight), tuning's
candidates and the MetaSchedule custom rule (:mod:`.meta_schedule`, target keys ``cpu`` and
``arm_cpu``) all call it, with the family's rewrites before (:meth:`Pool.prepare`) and after
(:meth:`Pool.finish`).
"""

from __future__ import annotations

import logging

import tvm
from tvm import s_tir, tirx
from tvm.s_tir.dlight import ScheduleRule
from tvm.target import Target

from ..errors import one_line
from . import analysis, decline
from .cpu_config import FULL, NO_VECTOR, PARALLEL_ONLY, CpuConfig, target_threads
from .cpu_passes import schedule_pass_chain
from .cpu_reduction import schedule_block
from .multi_output import merge_sibling_blocks, merged_schedule

__all__ = ["CpuConfig", "FULL", "NO_VECTOR", "PARALLEL_ONLY", "Pool", "schedule_block", "schedule_function",
           "schedule_pass_chain"]

logger = logging.getLogger(__name__)


def _enable_isnan_vectorization() -> None:
    """tvm_pool's float max reducer uses ``isnan`` (NaN propagates); TVM 0.27 does not mark the
    ``tirx.isnan`` op vectorizable, so VectorizeLoop scalarises every float max loop. isnan is
    a pure elementwise op and LLVM lowers vector isnan (fcmp uno) fine; mark it."""
    op = tvm.ir.Op.get("tirx.isnan")
    if not op.get_attr("TVectorizable"):
        op.set_attr("TVectorizable", True)


_enable_isnan_vectorization()


class Pool(ScheduleRule):
    """dlight rule: schedule every pooling PrimFunc (see the module docstring). A family module
    subclasses it: :meth:`takes` (which targets), :meth:`config` (its facts and thresholds),
    :data:`KNOBS` (its design space for tuning), and optionally :meth:`prepare` / :meth:`finish`
    (rewrites of the function before and after scheduling)."""

    name = "cpu"
    # (label, CpuConfig overrides): the family's tuning design space, hand-written first.
    KNOBS: tuple = (("hand-written", {}),)
    # Do channel-last windows take one expression of every tap where the count of
    # compute.forms.all_taps_beat_passes says so (else they keep their passes)?
    CHANNEL_LAST_TAPS = True

    @property
    def family(self) -> str:
        """How a declined function names the rule (schedules/decline.py)."""
        return self.name

    def takes(self, target: Target) -> bool:  # pylint: disable=unused-argument
        return False

    def config(self, target: Target) -> CpuConfig:
        """The family's facts for ``target``, with the measured thresholds."""
        return CpuConfig(self.name, num_threads=target_threads(target))

    def knobs(self) -> tuple:
        return self.KNOBS

    def is_target_available(self, target: Target) -> bool:
        return self.takes(target)

    def prepare(self, func: tirx.PrimFunc) -> tirx.PrimFunc:
        """A family's rewrite of the function before it is scheduled: every family's merges the
        output blocks of a multi-output stage (:mod:`.multi_output`). It must be idempotent:
        ``compile`` applies it when fusing (so tuning workloads carry it), and the rule again."""
        return merge_sibling_blocks(func)

    def finish(self, func: tirx.PrimFunc) -> tirx.PrimFunc:
        """A family's rewrite of the scheduled function (none by default; idempotent)."""
        return func

    def apply(self, func: tirx.PrimFunc, target: Target, tunable: bool):  # noqa: D102
        if not isinstance(func, tirx.PrimFunc) or not self.takes(target) or not analysis.has_pool_units(func):
            return None
        return decline.guarded(self.family, func, lambda: self._apply(func, target))

    def _apply(self, func: tirx.PrimFunc, target: Target):
        """The function scheduled, finished (None: no level schedules it)."""
        sch = self.schedule(s_tir.Schedule(self.prepare(func)), self.config(target))
        if sch is None:
            return None
        scheduled = sch.mod["main"]
        finished = self.finish(scheduled)
        return sch if finished.same_as(scheduled) else s_tir.Schedule(finished)

    def schedule(self, base: s_tir.Schedule, config: CpuConfig):
        """``base`` (left as it is) scheduled with ``config``: a copy at ``config.level``, else at
        each lower level in turn; None when no level works. Works inside MetaSchedule too: the
        copies keep ``base``'s trace and random variables."""
        base = merged_schedule(base)
        for level in range(config.level, PARALLEL_ONLY - 1, -1):
            sch = base.copy()
            try:
                schedule_function(sch, config, level)
            except analysis.SCHEDULE_ERRORS as err:
                logger.debug("%s pool schedule level %d failed: %s", config.family, level, err)
                decline.note(f"level {level}: {type(err).__name__}: {one_line(err)}")
                continue
            return sch
        return None


def schedule_function(sch: s_tir.Schedule, config: CpuConfig, level: int = FULL) -> None:
    """Schedule every pooling reduction of the function in ``sch`` (and its fused blocks)."""
    mains, chains = analysis.main_blocks(sch), analysis.pass_chains(sch)
    _inline_producers(sch, mains, chains)  # the main blocks' and passes' rvs stay valid
    for main in mains:
        schedule_block(sch, main.rv, config, level)
    for chain in chains:
        schedule_pass_chain(sch, chain, config, level)
    if level >= NO_VECTOR:
        _parallelize_rest(sch, config)


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
        except analysis.SCHEDULE_ERRORS as err:
            logger.debug("producer %s stays its own stage: %s", sch.get(rv).name_hint, err)
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
        except analysis.SCHEDULE_ERRORS as err:
            logger.debug("consumer %s stays its own stage: %s", sch.get(rv).name_hint, err)


def _parallelize_rest(sch: s_tir.Schedule, config: CpuConfig) -> None:
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
        if out_bytes is None or out_bytes < config.min_parallel_bytes or config.num_threads < 2:
            continue
        try:
            sch.parallel(sch.fuse(*loops[:-1]))
        except analysis.SCHEDULE_ERRORS as err:
            logger.debug("%s stays serial: %s", block.name_hint, err)

