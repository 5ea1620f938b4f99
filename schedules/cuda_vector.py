"""16-byte loads of the CUDA schedule.

TVM writes a vectorized loop over a ramp index as one vector access (``*(float4*)(x + i)``,
ld.global.v4.f32) and checks no alignment: a misaligned one faults on the GPU. So a schedule
vectorizes only loads from a function parameter (TVM's packed API binds it at element offset 0
of an allocation aligned to ``data_alignment`` = 64 bytes) and
:func:`.cuda_verify.vector_accesses` proves every vector access of the result aligned to its
width, or the rule schedules again with scalar loads (:class:`MisalignedVector`).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import sym, tirx

from . import analysis
from .cuda_common import Binder
from .cuda_config import CudaConfig
from .cuda_verify import buf_type, elem_bytes


class MisalignedVector(ValueError):
    """A vector access of the schedule is not provably aligned to its width."""


def param_read(sch, block):
    """(read index, region) of the one function parameter ``block`` reads, or None."""
    params = analysis.function_params(sch)
    found = [(i, r) for i, r in enumerate(sch.get(block).reads)
             if any(analysis.region_buffer(r).same_as(p) for p in params)]
    return found[0] if len(found) == 1 else None


def vector_lanes(sch, block, config: CudaConfig) -> int:
    """Elements per vector load (``config.vector_bytes``) of the parameter ``block`` reads; 0
    when there is none, or it is not known to start aligned to a vector."""
    read = param_read(sch, block)
    if read is None:
        return 0
    ty = buf_type(analysis.region_buffer(read[1]))
    size = elem_bytes(ty)
    offset = ty.elem_offset
    if list(ty.strides or []) or not (isinstance(offset, tirx.IntImm) and int(offset) == 0):
        return 0
    if int(ty.data_alignment) % config.vector_bytes or size >= config.vector_bytes:
        return 0
    return config.vector_bytes // size


# TVM 0.27 names the op "prim.if_then_else"; taken from a call, not from its name.
_IF_THEN_ELSE = tirx.if_then_else(tirx.Var("c", "bool"), tirx.const(1), tirx.const(0)).op


def has_bounds_check(block) -> bool:
    """Whether the block's value reads through a condition (inlined padding, ceil overhang)."""
    found = []

    def visit(node):
        if isinstance(node.op, tvm.ir.Op) and node.op.same_as(_IF_THEN_ELSE):
            found.append(node)

    tvm_ffi.structural_walk(block.body, [(tvm.ir.Call, visit)], order="post")
    return bool(found)


def unchecked_vector_read(sch, block, config: CudaConfig):
    """``(lanes, (read index, region))`` when ``block`` reads one function parameter, aligned
    to a vector (:func:`vector_lanes`), with no bounds check on the way; else None."""
    lanes = vector_lanes(sch, block, config)
    read = param_read(sch, block)
    if not lanes or read is None or has_bounds_check(sch.get(block)):
        return None
    return lanes, read


def contiguous_windows(sch, block, config: CudaConfig) -> int | None:
    """Outputs per thread along the innermost axis for which a thread's taps are whole 16-byte
    pieces of each input row, or None. The windows must tile the row exactly (each spans
    ``s`` = its stride elements, from the first column, every tap inside: no bounds check), and
    ``lanes / s`` outputs (or one, when ``s`` is a multiple of ``lanes``) must divide the
    output row."""
    found = unchecked_vector_read(sch, block, config)
    if found is None:
        return None
    lanes, read = found
    info = sch.get(block)
    spatial = [iv for iv in info.iter_vars if int(iv.iter_type) == 0]
    taps = [iv for iv in info.iter_vars if int(iv.iter_type) != 0]
    last, rng = spatial[-1], read[1].region[-1]
    coeffs = sym.detect_linear_equation(rng.min, [last.var] + [iv.var for iv in taps])
    if len(coeffs) != len(taps) + 2 or not all(isinstance(c, tirx.IntImm) for c in coeffs):
        return None
    if not isinstance(rng.extent, tirx.IntImm) or not all(isinstance(iv.dom.extent, tirx.IntImm) for iv in taps):
        return None
    stride, start = int(coeffs[0]), int(coeffs[-1])
    # the columns one window reads: the region's own extent (taps unrolled into the block) plus
    # the reach of the reduction variables (taps as a loop)
    span = int(rng.extent) + sum(int(c) * (int(iv.dom.extent) - 1) for c, iv in zip(coeffs[1:-1], taps))
    if start != 0 or stride < 1 or span != stride or any(int(c) < 0 for c in coeffs[1:-1]):
        return None
    per = lanes // stride if lanes % stride == 0 else (1 if stride % lanes == 0 else 0)
    if not per or not isinstance(last.dom.extent, tirx.IntImm) or int(last.dom.extent) % per:
        return None
    return per


def _cache_pieces(sch, block, loop, lanes: int, scope: str):
    """Copy what ``block`` reads of its parameter under ``loop`` into a ``scope`` buffer (the
    reads then come from it), the copy's innermost axis split into ``lanes``-element pieces,
    vectorized. Returns the copy block."""
    index, _ = param_read(sch, block)
    cache = sch.cache_read(block, index, scope)
    sch.compute_at(cache, loop, preserve_unit_loops=True)
    inner = sch.get_loops(cache)[-1]
    extent = analysis.loop_extent(sch, inner)
    if extent is None or extent % lanes:
        raise MisalignedVector(f"rows of {extent} elements, {lanes}-element loads")
    if extent > lanes:
        _, inner = sch.split(inner, [None, lanes])
    sch.vectorize(inner)
    return cache


def load_pieces(sch, block, loop, lanes: int) -> None:
    """Each thread loads what ``block`` reads under ``loop`` into registers in pieces."""
    _cache_pieces(sch, block, loop, lanes, "local")


def split_row_pieces(sch, block, reduce_loops, config: CudaConfig):
    """A global reduction over whole rows: the innermost tap loop split into 16-byte pieces
    (when ``config.vector`` and its extent is whole pieces), so that a piece never crosses a row
    and its registers are indexed by the unrolled piece loop alone (splitting the fused plane
    instead indexes them through row modulos TVM does not simplify). Returns (the tap loops
    with the outer part last, the piece loop or None); the rule's alignment proof checks the
    pieces."""
    lanes = vector_lanes(sch, block, config) if config.vector else 0
    extent = analysis.loop_extent(sch, reduce_loops[-1])
    if not lanes or extent is None or extent % lanes or has_bounds_check(sch.get(block)):
        return list(reduce_loops), None
    rest, piece = sch.split(reduce_loops[-1], [None, lanes])
    return list(reduce_loops[:-1]) + [rest], piece


def stage_input(sch, first_pass, bx, threads: int, binder: Binder, config: CudaConfig) -> None:
    """The input rows the block's first pass reads (its tile plus halo, clipped to the input)
    copied into shared memory by the block's threads in pieces, before that pass reads them
    (overlapping windows read each input element several times: from shared memory now). A
    tile whose rows start or end off a 16-byte boundary (column tiles, odd widths) fails the
    alignment proof, and the rule goes back to scalar loads."""
    lanes = vector_lanes(sch, first_pass, config)
    if not lanes:
        return
    scope = "global" if binder.simulate else "shared"
    cache = _cache_pieces(sch, first_pass, bx, lanes, scope)
    copy = sch.get_loops(cache)[1:-1]  # under the block loop, the vector loop aside
    fused = sch.fuse(*copy) if len(copy) > 1 else copy[0]
    _, tx = sch.split(fused, [None, threads])
    binder.bind(tx, "threadIdx.x")
