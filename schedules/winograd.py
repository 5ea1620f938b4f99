"""The CPU schedule of the Winograd transforms (``tvm_pool.winograd``): blocks annotated
``tvm_pool.winograd`` (not pooling blocks: no ``tvm_pool.kind``), "input" or "output" with its
first stage ("input_rows", "output_rows") before it, and the output's elementwise consumers
(bias, an activation, a residual add) fused after it. Their product, a batched matmul, is
MetaSchedule's. Both transforms read a 6x6 tile and write per channel, so one loop nest fits
both::

    parallel tiles (input: tile; output: batch x tile row)
      for channel blocks of `lanes`
        first stage: its 6 x 6 (input) or 4 x 6 (output) rows unrolled, channels vectorised,
                     in registers
        tile positions unrolled          # each Select over positions folds to one expression
          channels vectorised            # contiguous in NHWC and in (36, tiles, channels)

A function with anything else declines (None)."""

from __future__ import annotations

from dataclasses import dataclass

import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight import ScheduleRule
from tvm.target import Target

from ..winograd import ATTR, TILE_ATTR


@dataclass(frozen=True)
class Config:
    """Vector lanes of the channel loop (one AVX-512 register of float32)."""

    lanes: int = 16


def takes(node) -> bool:
    """Whether ``node`` (a PrimFunc or a tuning workload's module) holds a Winograd transform
    (this rule's, not MetaSchedule's search)."""
    found = []
    tvm_ffi.structural_walk(node, [(s_tir.SBlock, lambda block: found.append(ATTR in block.annotations))],
                            order="post")
    return any(found)


class Transforms(ScheduleRule):
    """dlight-style rule for the Winograd transforms on CPUs."""

    def apply(self, func: tirx.PrimFunc, target: Target, tunable: bool):  # noqa: D102
        if not isinstance(func, tirx.PrimFunc) or not takes(func):
            return None
        sch = s_tir.Schedule(func)
        blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
        kinds = [str(sch.get(b).annotations.get(ATTR, "")) for b in blocks]
        main = [i for i, k in enumerate(kinds) if k in ("input", "output")]
        if len(main) != 1 or f"{kinds[main[0]]}_rows" not in kinds:
            return None
        block, kind = blocks[main[0]], kinds[main[0]]
        rows = blocks[kinds.index(f"{kind}_rows")]
        try:
            for consumer in blocks[main[0] + 1:][::-1]:
                sch.reverse_compute_inline(consumer)  # the output's consumers are elementwise in it
            for producer in blocks[:main[0]][::-1]:
                if not producer.same_as(rows):
                    sch.compute_inline(producer)
            channel_block = (_schedule_input if kind == "input" else _schedule_output)(sch, block, Config())
            _rows_at(sch, rows, channel_block)
        except (s_tir.ScheduleError, ValueError, KeyError):
            return None
        return sch


def _rows_at(sch, rows, loop) -> None:
    """The first stage computed per channel block, in registers: its loops unrolled, its
    channels vectorised."""
    sch.compute_at(rows, loop)
    sch.set_scope(rows, 0, "local")
    *taps, channels = sch.get_loops(rows)[-3:]
    for tap in taps:
        sch.unroll(tap)
    sch.vectorize(channels)


def _schedule_input(sch, block, config: Config):
    position, tile, channel = sch.get_loops(block)
    outer, inner = sch.split(channel, [None, config.lanes])
    sch.reorder(tile, outer, position, inner)
    sch.parallel(tile)
    sch.unroll(position)
    sch.vectorize(inner)
    return outer


def _schedule_output(sch, block, config: Config):
    tile = int(sch.get(block).annotations[TILE_ATTR])
    batch, row, col, channel = sch.get_loops(block)
    row_tile, row_in = sch.split(row, [None, tile])
    col_tile, col_in = sch.split(col, [None, tile])
    outer, inner = sch.split(channel, [None, config.lanes])
    sch.reorder(batch, row_tile, col_tile, outer, row_in, col_in, inner)
    sch.parallel(sch.fuse(batch, row_tile))
    sch.unroll(row_in)
    sch.unroll(col_in)
    sch.vectorize(inner)
    return outer
