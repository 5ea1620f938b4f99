"""Channel-first windows that tile a plane exactly, over output rows shorter than a register
(:attr:`.cpu_config.CpuConfig.plane_copy_short_rows`, x86): one flat loop per plane.

VGG's 2x2 s2 max over 28x28 planes has output rows of 14 floats, fewer than the 16 lanes of an
AVX-512 register. LLVM's vectoriser then vectorised the loop over the rows instead of the row,
with a gather per tap and a scatter per output (vgatherqps / vscatterqps): 8x512x28x28 took
5.3 ms at 2 threads, against 2.1 ms for the same bytes in 112x112 planes. Over 14x14 planes (rows
of 7) the same. From rows of 18 outputs on, LLVM vectorises the row again (no gather).

When the windows tile the plane exactly (kernel = stride along both axes, no padding, every row
and column in a window), the rule copies each plane into a buffer that puts the window's rows
apart, ``T[h % s_h][h // s_h][w]`` (contiguous row copies, :func:`transform_layout`). Tap
``(dh, dw)`` of the plane's output ``k`` (flat over the plane's rows) is then ``T[dh][s_w * k + dw]``:
the plane's outputs are one loop of contiguous, interleaved loads, which LLVM vectorises with
permutes. 2x2 s2 at 2 threads (this machine, noisy): max over 8x512x28x28 5.3 -> 0.4-0.8 ms,
over 8x512x14x14 0.43-0.9 -> 0.1 ms; DenseNet's average over 8x256x28x28 2.1 -> 0.21 ms. Over
56x56 planes (rows of 28) the copy lost (3.3 against 5.6 ms), so only rows shorter than a
register take it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir, tirx
from tvm.sym.pattern import detect_linear_equation

from . import analysis
from .cpu_config import CpuConfig, dtype_bits


@dataclass(frozen=True)
class PlaneTiling:
    """The read of the data (its index in the block's reads) and the windows' (s_h, s_w)."""

    read: int
    strides: tuple


def plane_tiling(sch: s_tir.Schedule, block, config: CpuConfig) -> PlaneTiling | None:
    """How ``block`` (a window max of every tap, or a window reduction) tiles its planes, when
    it takes the flat schedule (see the module docstring); else None."""
    info = sch.get(block)
    if not config.plane_copy_short_rows or analysis.is_channel_last(info) or len(info.writes) != 1:
        return None
    spatial = [iv for iv in info.iter_vars if int(iv.iter_type) == 0]
    rows, cols = (analysis.loop_extent_of(iv) for iv in spatial[-2:]) if len(spatial) >= 3 else (None, None)
    if rows is None or cols is None or any(analysis.loop_extent_of(iv) is None for iv in spatial):
        return None
    dtype = analysis.region_dtype(info.writes[0])
    lanes = config.vector_bits_for(dtype) // dtype_bits(dtype)
    if cols >= lanes or rows * cols < lanes:
        return None  # long rows vectorise as they are; a plane of few outputs (a global pool) has no flat loop
    taps = [iv for iv in info.iter_vars if int(iv.iter_type) != 0]
    found = [(i, strides) for i, read in enumerate(info.reads)
             if (strides := _tile_strides(read, spatial, taps, (rows, cols))) not in (None, (1, 1))]
    if len(found) != 1:
        return None
    index, strides = found[0]
    if strides[0] * strides[1] >= config.long_sum_taps:
        return None  # windows that are long sums take the reduction's own accumulators
    moving = [r for i, r in enumerate(info.reads)
              if i != index and any(analysis.moving_reads([r], iv.var) for iv in spatial[-2:])]
    if not all(_at_output(r, spatial) for r in moving):
        return None  # another read moves along the rows or columns otherwise than the output
    return PlaneTiling(index, strides)


def _at_output(read, spatial) -> bool:
    """Does ``read`` read one element at the output's own position (an Add's other operand)?
    Flattened with the output, it is one contiguous loop too."""
    region = read.region
    return len(region) == len(spatial) and all(
        rng.min.same_as(iv.var) and isinstance(rng.extent, tirx.IntImm) and int(rng.extent) == 1
        for rng, iv in zip(region, spatial))


def _tile_strides(read, spatial, taps, out_extents):
    """``(s_h, s_w)`` when ``read`` reads, at each output position, the ``s_h x s_w`` window
    starting at ``(s_h * i, s_w * j)`` of a buffer whose last two axes are exactly ``s * out``
    (the window as the read's own extent, or as reduction iterators ``taps``), and every other
    axis at the output's own position; else None."""
    region, shape = read.region, analysis.region_buffer(read).shape
    if len(region) != len(spatial) or any(not isinstance(d, tirx.IntImm) for d in shape):
        return None
    for rng, iv in zip(region[:-2], spatial[:-2]):
        if not (isinstance(rng.extent, tirx.IntImm) and int(rng.extent) == 1 and rng.min.same_as(iv.var)):
            return None
    tap_extents = [analysis.loop_extent_of(t) for t in taps]
    if any(e is None for e in tap_extents):
        return None
    strides = []
    for rng, iv, out, size in zip(region[-2:], spatial[-2:], out_extents, shape[-2:]):
        coeffs = detect_linear_equation(rng.min, [iv.var] + [t.var for t in taps])
        if len(coeffs) != len(taps) + 2 or not all(isinstance(c, tirx.IntImm) for c in coeffs):
            return None
        if not isinstance(rng.extent, tirx.IntImm):
            return None
        step, offset = int(coeffs[0]), int(coeffs[-1])
        reach = [int(c) for c in coeffs[1:-1]]
        span = int(rng.extent) + sum(c * (e - 1) for c, e in zip(reach, tap_extents))
        if offset != 0 or step < 1 or span != step or any(c < 0 for c in reach) or int(size) != step * out:
            return None
        strides.append(step)
    return tuple(strides)


def schedule_planes(sch: s_tir.Schedule, block, tiling: PlaneTiling, consumers, config: CpuConfig) -> None:
    """Planes in parallel; each plane copied into rows set apart by window row
    (``T[h % s_h][h // s_h][w]``), its outputs one flat loop (the taps unrolled into it), and
    the consumers one flat loop after it."""
    info = sch.get(block)
    n_spatial = sum(1 for iv in info.iter_vars if int(iv.iter_type) == 0)
    loops = sch.get_loops(block)
    lead, (rows, cols), taps = loops[: n_spatial - 2], loops[n_spatial - 2 : n_spatial], loops[n_spatial:]
    par = sch.fuse(*lead) if len(lead) > 1 else lead[0]
    source = analysis.region_bytes(info.reads[tiling.read])
    if source is None or source >= config.min_parallel_bytes:
        sch.parallel(par)
    copy = sch.cache_read(block, tiling.read, "global")
    sch.compute_at(copy, par)
    s_h = tiling.strides[0]
    sch.transform_layout(copy, ("write", 0), lambda *i: (*i[:-2], i[-2] % s_h, i[-2] // s_h, i[-1]))
    sch.fuse(rows, cols)
    if taps:
        sch.decompose_reduction(block, taps[0])
        for tap in taps:
            sch.unroll(tap)
    for consumer in consumers:
        sch.reverse_compute_at(consumer, par)
        inner = sch.get_loops(consumer)[1:]
        if len(inner) > 1:
            sch.fuse(*inner)
