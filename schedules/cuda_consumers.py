"""What the CUDA schedule does with the blocks around a pooling unit: producers inlined, consumers
attached to the unit's thread loop when pointwise over its output (their intermediates then in
registers), everything else its own kernel, one thread per element."""

from __future__ import annotations

import logging

from . import analysis
from .cuda_common import Binder, Unit, bind_spatial, consumer_names, localize, name
from .cuda_config import CudaConfig

logger = logging.getLogger(__name__)


def _upstream_names(sch, mains, chains) -> set:
    """Names of the blocks whose results flow into a pooling unit (its producers, transitively)."""
    todo = [m.rv for m in mains] + [rv for c in chains for rv in c.passes]
    seen = set()
    while todo:
        cur = todo.pop()
        for p in sch.get_producers(cur):
            producer = name(sch, p)
            if producer not in seen:
                seen.add(producer)
                todo.append(p)
    return seen


def inline_producers(sch, mains, chains) -> None:
    """Inline every producer of a pooling unit TVM lets us inline (relu before the pool, the
    padded copy, TOPI's pad_temp); ``widen`` (bfloat16 ahead of an argmax) stays its own
    kernel: TVM 0.27's bfloat16 legalization breaks on the inlined form."""
    upstream = _upstream_names(sch, mains, chains)
    for rv in reversed(analysis.other_blocks(sch, mains, chains)):  # consumers before producers
        if name(sch, rv) not in upstream or analysis.pool_kind(sch.get(rv)) == "widen":
            continue
        try:
            sch.compute_inline(rv)
        except analysis.SCHEDULE_ERRORS as err:
            # scheduled as its own kernel by schedule_leftovers
            logger.debug("cuda pool: producer %s stays its own kernel: %s", name(sch, rv), err)


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
        except analysis.SCHEDULE_ERRORS as err:
            logger.debug("cuda pool: consumer %s stays its own kernel: %s", name(sch, rv), err)
            continue
        attached.add(name(sch, rv))
    return attached


def keep_in_registers(sch, unit: Unit, binder: Binder) -> None:
    """Intermediates whose every reader runs in the same thread live in registers (``local``)."""
    final_readers = consumer_names(sch, unit.final)
    if final_readers and final_readers <= unit.attached:
        localize(sch, unit.final, binder)
    _localize_attached(sch, set(unit.attached), binder)


def _localize_attached(sch, attached: set, binder: Binder) -> None:
    """An attached consumer whose every reader is attached too keeps its result in a register;
    so does one that nobody reads (MaxPool's index when only the values are used: CUDA cannot
    allocate a global intermediate inside a kernel)."""
    for rv in _blocks_by_name(sch, attached):
        if consumer_names(sch, rv) <= attached:
            localize(sch, rv, binder)


def _blocks_by_name(sch, names: set) -> list:
    out = []
    root = sch.get_sblock("root")

    def visit(rv):
        for c in sch.get_child_blocks(rv):
            if name(sch, c) in names:
                out.append(c)
            visit(c)

    visit(root)
    return out


def schedule_leftovers(sch, config: CudaConfig, binder: Binder) -> None:
    """Every root-level block not placed in a kernel yet: its own kernel, one thread per output
    element, reductions (if any) serial in the thread."""
    for rv in analysis.root_blocks(sch):
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
        bind_spatial(sch, rv, spatial, reduce_loops, config, binder)
        if reduce_loops:
            sch.decompose_reduction(rv, reduce_loops[0])
