"""The x86 fallback schedule of a model's untuned elementwise kernels: a PrimFunc whose blocks
are all spatial (no reduction axis) and none a pooling or Winograd block. TVM 0.27's CPU
pipeline has no default schedule, so such a kernel, with no tuning record, ran as one serial
loop nest: a batch norm over a concatenation of DenseNet's (the torch.export road keeps it apart
from the convolution) took 0.35 ms where a copy of its bytes takes 0.03. One loop nest fits
them all::

    producers inlined into the one output block
    parallel   the leading axes, fused
      for      the innermost axis, split by `lanes` and vectorised when it divides

A tuning record, which MetaScheduleApplyDatabase applies first, wins over this rule; tuning
never sees it (it schedules after fusion). Anything else declines (None)."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir, tirx
from tvm.s_tir.dlight import ScheduleRule
from tvm.target import Target

from ..targets import is_x86, x86_vector_bits
from . import analysis
from .winograd import takes as winograd_takes


@dataclass(frozen=True)
class Config:
    """``lanes``: float32 lanes of one vector register; ``min_parallel``: the fewest output
    elements worth a parallel loop (below it the threads' start costs more than the loop)."""

    lanes: int
    min_parallel: int = 4096


def config(target: Target) -> Config:
    return Config(lanes=x86_vector_bits(target) // 32)


class Elementwise(ScheduleRule):
    """dlight-style rule for untuned elementwise kernels on x86."""

    def apply(self, func: tirx.PrimFunc, target: Target, tunable: bool):  # noqa: D102
        if not isinstance(func, tirx.PrimFunc) or not is_x86(target):
            return None
        if analysis.has_pool_blocks(func) or winograd_takes(func):
            return None  # tvm_pool's own rules (a declined pool keeps TVM's default code)
        sch = s_tir.Schedule(func)
        try:
            blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
        except s_tir.ScheduleError:
            return None
        if not blocks or not all(_spatial(sch.get(b)) for b in blocks):
            return None
        try:
            for producer in blocks[:-1][::-1]:
                sch.compute_inline(producer)
        except s_tir.ScheduleError:
            return None  # a producer read by more than the output, or an output of its own
        _parallel_vectorised(sch, blocks[-1], config(target))
        return sch


def _spatial(block) -> bool:
    """A block with spatial axes only, each writing the one element its axes name (so its
    iterations are independent: no reduction, no opaque or data-dependent write)."""
    axes = [iv.var for iv in block.iter_vars]
    if not axes or any(iv.iter_type != tirx.IterVar.DataPar for iv in block.iter_vars) or len(block.writes) != 1:
        return False
    region = block.writes[0].region
    return (len(region) == len(axes) and all(r.min.same_as(v) for r, v in zip(region, axes))
            and all(isinstance(r.extent, tirx.IntImm) and int(r.extent) == 1 for r in region))


def _parallel_vectorised(sch, block, cfg: Config) -> None:
    loops = sch.get_loops(block)
    if not loops:
        return
    extents = [sch.get(loop).extent for loop in loops]
    if not all(isinstance(e, tirx.IntImm) for e in extents):
        sch.parallel(loops[0])  # symbolic extents: the first axis across threads
        return
    *outer, inner = loops
    inner_extent = int(extents[-1])
    if inner_extent % cfg.lanes == 0 and inner_extent >= cfg.lanes:
        rest, lanes = sch.split(inner, [None, cfg.lanes])
        sch.vectorize(lanes)
        outer = [*outer, rest]
    total = 1
    for e in extents:
        total *= int(e)
    if total < cfg.min_parallel:
        return
    if not outer:  # one axis that the lanes do not divide
        sch.parallel(inner)
    else:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
