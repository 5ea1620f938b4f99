"""What a schedule rule needs to know about a PrimFunc: its pooling blocks and their loops.

Pooling blocks are found by annotation, never by name:

- tvm_pool computes: ``tvm_pool.kind`` (``max``, ``max_index``, ``avg_sum``, ``lp_sum``,
  ``adaptive_*``, ``trt_*``, ... and their elementwise ``*_finalize`` stages);
- TVM's TOPI pooling: ``schedule_rule`` = ``meta_schedule.pool_max`` / ``meta_schedule.pool_avg`` /
  ``meta_schedule.adaptive_pool_*``.

A *main* block is a pooling block with reduction iterators (the window reduction). Every other
block of the function (relu before, ``*_finalize`` / add after, TOPI's ``pad_temp``) is
elementwise and gets inlined or computed at the main block's tile loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import runtime, s_tir, tirx

# The annotations the computes write (one definition, in tvm_pool/compute/common.py).
from ..compute.common import KIND_ATTR, PASS_AXIS_ATTR, SCHEDULE_RULE_ATTR, SPATIAL_RANK_ATTR
TOPI_POOL_RULES = (
    "meta_schedule.pool_max",
    "meta_schedule.pool_avg",
    "meta_schedule.adaptive_pool_max",
    "meta_schedule.adaptive_pool_avg",
)

_DATA_PAR = 0
_REDUCE = 2


def block_annotations(block) -> dict:
    return {str(k): v for k, v in block.annotations.items()}


def is_pool_block(block) -> bool:
    ann = block_annotations(block)
    if KIND_ATTR in ann:
        return True
    return str(ann.get(SCHEDULE_RULE_ATTR, "")) in TOPI_POOL_RULES


def pool_kind(block) -> str:
    ann = block_annotations(block)
    if KIND_ATTR in ann:
        return str(ann[KIND_ATTR])
    return str(ann.get(SCHEDULE_RULE_ATTR, "")).replace("meta_schedule.", "topi_")


def is_reduction(block) -> bool:
    return any(int(iv.iter_type) == _REDUCE for iv in block.iter_vars)


@dataclass
class MainBlock:
    """A window-reduction block: ``n_spatial`` data-parallel iterators then the reductions."""

    rv: s_tir.schedule.SBlockRV
    kind: str
    n_spatial: int
    spatial_extents: list  # ints, or None where symbolic
    reduce_extents: list
    out_dtypes: list  # dtypes of the buffers the block writes


def region_dtype(region) -> str:
    """dtype of the buffer a read/write region touches (BufferRegion or 0.27's TensorRegion)."""
    if hasattr(region, "buffer"):
        return str(region.buffer.dtype)
    return str(region.source.ty.dtype)


def region_bytes(region):
    """Bytes of the whole buffer a read/write region touches (None when symbolic)."""
    buf = region.buffer if hasattr(region, "buffer") else region.source.ty
    total = max(runtime.DataType(str(buf.dtype)).bits // 8, 1)
    for dim in buf.shape:
        if not isinstance(dim, tirx.IntImm):
            return None
        total *= int(dim)
    return total


def _extent(dom):
    ext = dom.extent
    return int(ext) if isinstance(ext, tirx.IntImm) else None


def main_blocks(sch: s_tir.Schedule) -> list[MainBlock]:
    """The pooling reduction blocks of ``sch``'s function, in program order."""
    found = []
    for rv in _all_blocks(sch):
        block = sch.get(rv)
        if not is_pool_block(block) or not is_reduction(block):
            continue
        kinds = [int(iv.iter_type) for iv in block.iter_vars]
        n_spatial = sum(1 for k in kinds if k == _DATA_PAR)
        # TE reductions list data-parallel iterators first; anything else is not ours to tile.
        if any(k not in (_DATA_PAR, _REDUCE) for k in kinds) or kinds != sorted(kinds):
            continue
        found.append(
            MainBlock(
                rv=rv,
                kind=pool_kind(block),
                n_spatial=n_spatial,
                spatial_extents=[_extent(iv.dom) for iv in block.iter_vars[:n_spatial]],
                reduce_extents=[_extent(iv.dom) for iv in block.iter_vars[n_spatial:]],
                out_dtypes=[region_dtype(w) for w in block.writes],
            )
        )
    return found


def _all_blocks(sch: s_tir.Schedule):
    root = sch.get_sblock("root") if _has_root(sch) else None
    if root is None:
        return []
    return list(sch.get_child_blocks(root))


def _has_root(sch) -> bool:
    try:
        sch.get_sblock("root")
        return True
    except Exception:  # pylint: disable=broad-except
        return False


@dataclass
class PassChain:
    """A separable window reduction: one elementwise pass per windowed axis (annotated
    ``tvm_pool.pass_axis``), each reading the one before; the last pass is the pool's result."""

    passes: list  # SBlockRVs, first pass first
    axes: list  # the spatial axis each pass reduces
    spatial_rank: int


def pass_chains(sch: s_tir.Schedule) -> list[PassChain]:
    """The separable window reductions of ``sch``'s function, in program order."""
    blocks = [rv for rv in _all_blocks(sch) if PASS_AXIS_ATTR in block_annotations(sch.get(rv))]
    names = {sch.get(rv).name_hint for rv in blocks}
    chains = []
    for rv in blocks:
        # a chain ends at a pass that no other pass reads
        if any(sch.get(c).name_hint in names for c in sch.get_consumers(rv)):
            continue
        chain = [rv]
        while True:
            prev = [p for p in sch.get_producers(chain[0]) if sch.get(p).name_hint in names]
            if not prev:
                break
            chain.insert(0, prev[0])
        ann = [block_annotations(sch.get(b)) for b in chain]
        chains.append(PassChain(chain, [int(a[PASS_AXIS_ATTR]) for a in ann], int(ann[-1][SPATIAL_RANK_ATTR])))
    return chains


def other_blocks(sch: s_tir.Schedule, mains: list[MainBlock], chains: list[PassChain] = ()) -> list:
    """Every root-level block that is neither a main block nor a pass, in program order."""
    main_names = {sch.get(m.rv).name_hint for m in mains}
    main_names |= {sch.get(rv).name_hint for c in chains for rv in c.passes}
    return [rv for rv in _all_blocks(sch) if sch.get(rv).name_hint not in main_names]


def loops_match_block(sch: s_tir.Schedule, main: MainBlock) -> bool:
    """True when the block's loops are exactly its iterators, one loop per iterator, in order
    (the shape TE's create_prim_func gives; what the rules' tiling assumes)."""
    loops = sch.get_loops(main.rv)
    block = sch.get(main.rv)
    return len(loops) == len(block.iter_vars)
