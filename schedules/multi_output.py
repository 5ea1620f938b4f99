"""One block per multi-output stage.

TE's ``create_prim_func`` gives a stage of several outputs (the passes of
``compute.window_reduce.window_max_position``: a max and the position of the first maximum) one
block per output, siblings in one loop nest (``name_v0``, ``name_v1``, ...). The rules place,
inline and vectorise a stage as one block, as they do a reduction of several outputs, so the
siblings are merged back into one block that writes every output.
"""

from __future__ import annotations

import re

import tvm_ffi
from tvm import s_tir, tirx

_OUTPUT = re.compile(r"^(.*)_v(\d+)$")


def merge_sibling_blocks(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with each run of sibling output blocks of one stage merged (idempotent)."""

    def merge_runs(seq):
        merged = []
        for stmt in seq.seq:
            if merged and _siblings(merged[-1], stmt):
                merged[-1] = _merge(merged[-1], stmt)
            else:
                merged.append(stmt)
        if len(merged) == len(seq.seq):
            return seq
        return merged[0] if len(merged) == 1 else tirx.SeqStmt(merged)

    return tvm_ffi.structural_map(func, (tirx.SeqStmt, merge_runs))


def _stage(block) -> tuple[str, int] | None:
    """(stage name, output number) of a block named like a multi-output stage's output."""
    match = _OUTPUT.match(block.name_hint)
    return (match.group(1), int(match.group(2))) if match else None


def _stage_name(block) -> str:
    """The stage a block belongs to: its name without the output number (a merged block has
    the stage's name already)."""
    stage = _stage(block)
    return stage[0] if stage else block.name_hint


def _siblings(a, b) -> bool:
    """Are realizes ``a`` (possibly merged already) and ``b`` outputs of one stage: named
    ``stage_v*`` alike (``a`` earlier), bound to the same loops, with the same domains,
    annotations and no init?"""
    if not (isinstance(a, s_tir.SBlockRealize) and isinstance(b, s_tir.SBlockRealize)):
        return False
    x, y = a.block, b.block
    stage_b = _stage(y)
    if stage_b is None or stage_b[0] != _stage_name(x) or stage_b[1] == 0 or x.init is not None or y.init is not None:
        return False
    if len(x.iter_vars) != len(y.iter_vars):
        return False
    for u, v in zip(x.iter_vars, y.iter_vars):
        if int(u.iter_type) != int(v.iter_type) or not tvm_ffi.structural_equal(u.dom, v.dom):
            return False
    return (tvm_ffi.structural_equal(list(a.iter_values), list(b.iter_values))
            and tvm_ffi.structural_equal(a.predicate, b.predicate)
            and tvm_ffi.structural_equal(dict(x.annotations), dict(y.annotations)))


def _merge(a, b):
    """One realize: ``a``'s block with ``b``'s stores after its own, ``b``'s variables renamed."""
    x, y = a.block, b.block
    ours = [iv.var for iv in x.iter_vars]
    theirs = [iv.var for iv in y.iter_vars]

    def rename(var):
        for old, new in zip(theirs, ours):
            if var.same_as(old):
                return new
        return var

    body, reads, writes = tvm_ffi.structural_map((y.body, list(y.reads), list(y.writes)), (tirx.Var, rename))
    reads = list(x.reads) + [r for r in reads if not any(tvm_ffi.structural_equal(r, q) for q in x.reads)]
    block = s_tir.SBlock(
        list(x.iter_vars), reads, list(x.writes) + list(writes), _stage_name(x), tirx.SeqStmt([x.body, body]),
        alloc_buffers=list(x.alloc_buffers) + list(y.alloc_buffers), annotations=dict(x.annotations),
    )
    return s_tir.SBlockRealize(list(a.iter_values), a.predicate, block)


def merged_schedule(sch: s_tir.Schedule) -> s_tir.Schedule:
    """``sch`` itself when its function has no sibling blocks to merge (the fusion passes merged
    them already: ``prepare``), else a schedule of the merged function (a function scheduled
    directly, outside ``compile``)."""
    func = sch.mod["main"]
    merged = merge_sibling_blocks(func)
    return sch if merged.same_as(func) else s_tir.Schedule(merged)
