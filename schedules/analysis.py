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

import tvm_ffi
from tvm import runtime, s_tir, tirx
from tvm.sym.pattern import detect_linear_equation

# The annotations the computes write (one definition, in tvm_pool/compute/common.py).
from ..compute.common import KIND_ATTR, LAYOUT_ATTR, PASS_AXIS_ATTR, SCHEDULE_RULE_ATTR, SPATIAL_RANK_ATTR
from ..compute.layout import CHANNEL_LAST
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


def has_pool_blocks(node) -> bool:
    """Whether ``node`` (a PrimFunc or module, scheduled or not) has a pooling block anywhere."""
    found = []
    tvm_ffi.structural_walk(node, (s_tir.SBlock, lambda block: found.append(is_pool_block(block))))
    return any(found)


def pool_kind(block) -> str:
    ann = block_annotations(block)
    if KIND_ATTR in ann:
        return str(ann[KIND_ATTR])
    return str(ann.get(SCHEDULE_RULE_ATTR, "")).replace("meta_schedule.", "topi_")


def is_reduction(block) -> bool:
    return any(int(iv.iter_type) == _REDUCE for iv in block.iter_vars)


# --------------------------------------------------------------------------------------------
# Which loops are spatial: the layout of a pooling block
# --------------------------------------------------------------------------------------------
#
# A channel-first block (no layout annotation) has its data-parallel iterators as
# ``[lead..., spatial...]`` (N and C lead). A channel-last block (``tvm_pool.layout =
# "channel_last"``, compute/layout.py) has ``[lead..., spatial..., C]``: N leads, and C, the
# contiguous axis, is the innermost data-parallel iterator. Its buffers have their axes in the
# same order. A window reduction's reduction iterators follow, one per spatial axis either way.


def is_channel_last(block) -> bool:
    """Whether ``block`` is a stage of a channel-last pool (its annotation; compute/layout.py)."""
    return str(block_annotations(block).get(LAYOUT_ATTR, "")) == CHANNEL_LAST


@dataclass(frozen=True)
class AxisRoles:
    """Positions of a block's data-parallel iterators (and of its buffers' axes) by role."""

    lead: tuple  # before the spatial axes: N (and C, channel-first)
    spatial: tuple  # the spatial axes, outermost first
    channel: int | None  # channel-last: C, innermost; channel-first: None (C is a lead axis)


def axis_roles(block, rank: int) -> AxisRoles:
    """The roles of ``block``'s data-parallel iterators for a pool of spatial ``rank``."""
    n = sum(1 for iv in block.iter_vars if int(iv.iter_type) == _DATA_PAR)
    if is_channel_last(block):
        first = n - rank - 1
        if first < 0:
            raise ValueError(f"channel-last block {block.name_hint}: {n} iterators for {rank} spatial axes and C")
        return AxisRoles(tuple(range(first)), tuple(range(first, n - 1)), n - 1)
    return AxisRoles(tuple(range(n - rank)), tuple(range(n - rank, n)), None)


def spatial_dim(block, rank: int, axis: int) -> int:
    """The iterator (and buffer axis) of spatial ``axis`` in ``block``."""
    return axis_roles(block, rank).spatial[axis]


@dataclass
class MainBlock:
    """A window-reduction block: ``n_spatial`` data-parallel iterators then the reductions."""

    rv: s_tir.schedule.SBlockRV
    kind: str
    n_spatial: int
    spatial_extents: list  # ints, or None where symbolic
    reduce_extents: list
    out_dtypes: list  # dtypes of the buffers the block writes


def region_buffer(region):
    """The buffer a read/write region touches (BufferRegion's ``buffer``, 0.27's TensorRegion's
    ``source``, a Var with the buffer's shape)."""
    return region.buffer if hasattr(region, "buffer") else region.source


def region_dtype(region) -> str:
    """dtype of the buffer a read/write region touches (BufferRegion or 0.27's TensorRegion)."""
    return str(region_buffer(region).dtype)


def region_bytes(region):
    """Bytes of the whole buffer a read/write region touches (None when symbolic)."""
    buf = region_buffer(region)
    total = max(runtime.DataType(str(buf.dtype)).bits // 8, 1)
    for dim in buf.shape:
        if not isinstance(dim, tirx.IntImm):
            return None
        total *= int(dim)
    return total


def _extent(dom):
    ext = dom.extent
    return int(ext) if isinstance(ext, tirx.IntImm) else None


def loop_extent_of(iter_var) -> int | None:
    """A block iterator's static extent (None when it is symbolic)."""
    return _extent(iter_var.dom)


def main_blocks(sch: s_tir.Schedule) -> list[MainBlock]:
    """The pooling reduction blocks of ``sch``'s function, in program order."""
    found = []
    for rv in root_blocks(sch):
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


def root_blocks(sch: s_tir.Schedule) -> list:
    """The blocks directly under the function's root block, in program order."""
    root = sch.get_sblock("root") if _has_root(sch) else None
    if root is None:
        return []
    return list(sch.get_child_blocks(root))


def _has_root(sch) -> bool:
    """Whether the function has a root block (TVMScript written without blocks has none)."""
    try:
        sch.get_sblock("root")
        return True
    except s_tir.ScheduleError:
        return False


@dataclass
class PassChain:
    """A separable window reduction: one elementwise pass per windowed axis (annotated
    ``tvm_pool.pass_axis``), each reading the one before; the last pass is the pool's result."""

    passes: list  # SBlockRVs, first pass first
    axes: list  # the spatial axis each pass reduces
    spatial_rank: int

    @property
    def repeats_an_axis(self) -> bool:
        """Do several passes reduce one axis (doubling levels, a flat plane's lanes)?"""
        return len(set(self.axes)) < len(self.axes)


def passes_overlap(sch: s_tir.Schedule, chain: PassChain) -> bool:
    """Do some pass's windows overlap: along its axis, more elements read (outputs times the
    window a read region spans) than its input holds? Static shapes only (else False)."""
    for rv in chain.passes:
        block = sch.get(rv)
        out = region_buffer(block.writes[0]).shape
        for region in block.reads:
            for dim, (r, size) in enumerate(zip(region.region, region_buffer(region).shape)):
                extents = (r.extent, size, out[dim] if dim < len(out) else None)
                if not all(isinstance(e, tirx.IntImm) for e in extents):
                    continue
                extent, size, count = (int(e) for e in extents)
                if extent > 1 and count * extent > size:
                    return True
    return False


def pass_chains(sch: s_tir.Schedule) -> list[PassChain]:
    """The separable window reductions of ``sch``'s function, in program order.

    A chain ends at a pool's result pass (its kind has no ``_pass`` suffix) and walks back
    over the intermediate ``*_pass`` blocks that feed it, never into another pool: in a pool of
    a pool, the first pool's result is an input of the second chain, not a pass of it."""
    chains = []
    for rv in root_blocks(sch):
        if not _is_pass(sch, rv) or _is_intermediate_pass(sch, rv):
            continue
        chain = [rv]
        while True:
            prev = [p for p in sch.get_producers(chain[0]) if _is_intermediate_pass(sch, p)]
            if not prev:
                break
            chain.insert(0, prev[0])
        ann = [block_annotations(sch.get(b)) for b in chain]
        chains.append(PassChain(chain, [int(a[PASS_AXIS_ATTR]) for a in ann], int(ann[-1][SPATIAL_RANK_ATTR])))
    return chains


def _is_pass(sch: s_tir.Schedule, rv) -> bool:
    return PASS_AXIS_ATTR in block_annotations(sch.get(rv))


def _is_unit(sch: s_tir.Schedule, rv) -> bool:
    """Is ``rv`` a pooling unit's block: a pass, or a pooling block with reduction iterators?"""
    block = sch.get(rv)
    return _is_pass(sch, rv) or (is_pool_block(block) and is_reduction(block))


def _is_intermediate_pass(sch: s_tir.Schedule, rv) -> bool:
    """A pass feeding a later pass of the same pool (kind ``<kind>_pass``; the result pass has
    the pool's own kind)."""
    return _is_pass(sch, rv) and pool_kind(sch.get(rv)).endswith("_pass")


def other_blocks(sch: s_tir.Schedule, mains: list[MainBlock], chains: list[PassChain] = ()) -> list:
    """Every root-level block that is neither a main block nor a pass, in program order."""
    main_names = {sch.get(m.rv).name_hint for m in mains}
    main_names |= {sch.get(rv).name_hint for c in chains for rv in c.passes}
    return [rv for rv in root_blocks(sch) if sch.get(rv).name_hint not in main_names]


# --------------------------------------------------------------------------------------------
# Which fused blocks may be attached to a pool's loops
# --------------------------------------------------------------------------------------------
#
# ``reverse_compute_at`` / ``reverse_compute_inline`` give a consumer only the iterations that
# read what the producer makes under the loop: a consumer whose domain is larger than the
# producer's output (a Concat of the pool with other branches, a pad, a second pool) loses the
# rest of its iterations, and TVM does not check. So a block is attached only when it is
# *pointwise* over exactly a buffer the pool chain owns: every iterator data-parallel, its
# domain the owned buffer's shape, every read of an owned buffer at exactly its own iterators,
# and every other read a function parameter (nothing computed later at the root). Everything
# else stays its own loop nest at the root, where program order keeps it correct.


def _same_extent(a, b) -> bool:
    if isinstance(a, tirx.IntImm) and isinstance(b, tirx.IntImm):
        return int(a) == int(b)
    return tvm_ffi.structural_equal(a, b)  # TVM 0.27 has no tvm.ir.structural_equal


def _reads_at_own_iterators(region, iter_vars) -> bool:
    ranges = list(region.region)
    shape = list(region_buffer(region).shape)
    if len(ranges) != len(iter_vars) or len(shape) != len(iter_vars):
        return False
    for rng, iv, dim in zip(ranges, iter_vars, shape):
        if not rng.min.same_as(iv.var):
            return False
        if not (isinstance(rng.extent, tirx.IntImm) and int(rng.extent) == 1):
            return False
        if not (isinstance(iv.dom.min, tirx.IntImm) and int(iv.dom.min) == 0):
            return False
        if not _same_extent(iv.dom.extent, dim):
            return False
    return True


def function_params(sch: s_tir.Schedule) -> list:
    return list(sch.mod["main"].params)


def is_pointwise_over(sch: s_tir.Schedule, rv, owned: list) -> bool:
    """True when block ``rv`` is pointwise over exactly one of the ``owned`` buffers (see
    above): safe to compute at any loop of the blocks that write them, or to inline into them."""
    block = sch.get(rv)
    if any(int(iv.iter_type) != _DATA_PAR for iv in block.iter_vars):
        return False
    params = function_params(sch)
    reads_owned = False
    for region in block.reads:
        buf = region_buffer(region)
        if any(buf.same_as(o) for o in owned):
            if not _reads_at_own_iterators(region, block.iter_vars):
                return False
            reads_owned = True
        elif not any(buf.same_as(p) for p in params):
            return False
    return reads_owned


def written_buffers(sch: s_tir.Schedule, rv) -> list:
    return [region_buffer(w) for w in sch.get(rv).writes]


def attachable_consumers(sch: s_tir.Schedule, blocks) -> list:
    """The root blocks that are pointwise over what ``blocks`` write, or over what such a block
    writes, transitively (see above), in program order. Program order is a topological order,
    so one pass finds them all; a block that is not pointwise is skipped, and so is everything
    that reads it (it and they stay at the root). Another pool's window reduction or pass is
    never one, pointwise or not (a 1x1 pool after a pool): it is a unit of its own, which its own
    schedule places."""
    blocks = list(blocks) if isinstance(blocks, (list, tuple)) else [blocks]
    owned = [b for rv in blocks for b in written_buffers(sch, rv)]
    names = {sch.get(rv).name_hint for rv in blocks}
    attached = []
    for rv in root_blocks(sch):
        if sch.get(rv).name_hint in names or _is_unit(sch, rv):
            continue
        if is_pointwise_over(sch, rv, owned):
            attached.append(rv)
            owned.extend(written_buffers(sch, rv))
    return attached


def producers_owned(sch: s_tir.Schedule, rv) -> list:
    """The non-parameter buffers block ``rv`` reads (what inlining it into its producers needs)."""
    params = function_params(sch)
    return [
        region_buffer(r) for r in sch.get(rv).reads if not any(region_buffer(r).same_as(p) for p in params)
    ]


def loops_match_block(sch: s_tir.Schedule, main: MainBlock) -> bool:
    """True when the block's loops are exactly its iterators, one loop per iterator, in order
    (the shape TE's create_prim_func gives; what the rules' tiling assumes)."""
    loops = sch.get_loops(main.rv)
    block = sch.get(main.rv)
    return len(loops) == len(block.iter_vars)


def moving_reads(reads, var, dims=None) -> list:
    """``(step, extent)`` for each region dimension of ``reads`` (a block's) whose index moves with
    ``var``: how far it moves per step of ``var``, and the region's extent there (None where
    either is not a static linear function of ``var``). ``dims``: only the region's dimensions
    whose index it names (e.g. ``[-1]``, the innermost). Reads that stay put as ``var`` moves
    are left out: a per-channel parameter of a fused producer or consumer, whatever its rank
    (inlined into a pass, a BatchNorm's ``param[c]`` is a 1-D read of a 5-D block)."""
    found = []
    for read in reads:
        regions = list(read.region)
        for rng in (regions if dims is None else [regions[d] for d in dims if -len(regions) <= d < len(regions)]):
            coeffs = detect_linear_equation(rng.min, [var])
            if len(coeffs) != 2 or not isinstance(coeffs[0], tirx.IntImm):
                found.append((None, None))
            elif int(coeffs[0]):
                found.append((int(coeffs[0]), int(rng.extent) if isinstance(rng.extent, tirx.IntImm) else None))
    return found


def pad_data_range(pad_block, dim: int = -1):
    """(begin, n): axis ``dim`` of the padded copy ``pad_block`` holds the data at [begin,
    begin + n); None when that is not a static shift of the data."""
    src = pad_block.reads[0]
    n = region_buffer(src).shape[dim]
    coeffs = detect_linear_equation(src.region[dim].min, [pad_block.iter_vars[dim].var])
    if len(coeffs) != 2 or not all(isinstance(c, tirx.IntImm) for c in coeffs) or int(coeffs[0]) != 1:
        return None
    if not isinstance(n, tirx.IntImm):
        return None
    return -int(coeffs[1]), int(n)


def holds_one_block(sch: s_tir.Schedule, loop) -> bool:
    """Is ``loop`` the innermost loop of exactly one block (its body that block, no other
    block or loop inside)? Only such a loop may be vectorised: a loop that also holds a padded
    copy, a pass or a consumer (a consumer placed at the parallel loop, with no loop of its own
    left) is not that block's row, and TVM vectorised such a loop into wrong values (aarch64,
    a 4x1 average over a 5x1 plane)."""
    return isinstance(sch.get(loop).body, s_tir.SBlockRealize)


def loop_extent(sch: s_tir.Schedule, loop) -> int | None:
    """A loop's static extent (None when it is symbolic)."""
    ext = sch.get(loop).extent
    return int(ext) if isinstance(ext, tirx.IntImm) else None


def product(values) -> int | None:
    """The product of ``values``; None when any is None (a symbolic extent)."""
    total = 1
    for v in values:
        if v is None:
            return None
        total *= v
    return total


# What a schedule step raises when it cannot do its job on a function: TVM's ScheduleError and
# the other checks of TVM's C++ side (RuntimeError subclasses), and ValueError, which TVM raises
# for invalid arguments and tvm_pool's steps for a shape they do not handle. Anything else (a
# TypeError, an AttributeError) is a bug in the schedule and is not caught.
SCHEDULE_ERRORS = (RuntimeError, ValueError)


def unit_anchors(sch: s_tir.Schedule) -> list[str]:
    """The names of the blocks a pooling schedule starts from, one per pooling unit: each
    window reduction, and each separable reduction's last pass."""
    return [sch.get(m.rv).name_hint for m in main_blocks(sch)] + [
        sch.get(c.passes[-1]).name_hint for c in pass_chains(sch)
    ]


def has_pool_units(func: tirx.PrimFunc) -> bool:
    """Whether a rule has anything to schedule in ``func`` (a window reduction or separable
    passes of tvm_pool's, or TOPI's pooling blocks)."""
    sch = s_tir.Schedule(func)
    return bool(main_blocks(sch) or pass_chains(sch))


def computes_nothing(func: tirx.PrimFunc) -> bool:
    """Whether every buffer ``func`` writes through its parameters has no element (a batch of
    0, a channel axis of 0): the function has nothing to do, whatever its loops say."""
    written = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, lambda block: written.extend(region_buffer(r) for r in block.writes))],
                            order="post")
    outputs = [buf for buf in func.params if any(buf.same_as(w) for w in written)]
    return bool(outputs) and all(
        any(isinstance(d, tirx.IntImm) and int(d) == 0 for d in buf.shape) for buf in outputs)
