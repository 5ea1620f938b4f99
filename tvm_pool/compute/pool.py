"""Sliding-window pooling computes (N-d, channel-first): max (with indices), average, Lp.

Layout: ``data`` is ``[*leading, *spatial]`` where the last ``len(kernel_shape)`` axes are
spatial (ONNX's N, C, D1..Dn). Geometry comes from :mod:`tvm_pool.spec`; these functions only
say what each output element is. Value reductions (max, sums) read a padded copy (block kind
``pad``) holding the reduction's identity in the padding and the ceil-mode overhang, so the
window loop has no bounds check; schedules compute that copy per plane or row. The argmax
reduction instead tests each tap's position (an index in the padding must never win a tie).
Windows that touch padding, windows entirely inside padding and the ceil-mode overhang all
follow from these two rules.
"""

from __future__ import annotations

import dataclasses
import itertools
from functools import reduce
from typing import Sequence

from tvm import te, tirx

from .. import spec
from .common import (
    NO_INDEX,
    PASS_AXIS_ATTR,
    _SENTINEL_INDEX,
    accumulate_dtype,
    all_of,
    argmax_reducer,
    block_attrs,
    is_float,
    max_identity,
    max_of_all,
    nan_max_reducer,
)


def windows_for(
    data: te.Tensor,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
) -> list[spec.AxisWindow]:
    rank = len(kernel_shape)
    spatial = list(data.shape[len(data.shape) - rank :])
    return spec.resolve_windows(
        spatial,
        kernel_shape,
        strides or [1] * rank,
        dilations or [1] * rank,
        pads or [0] * (2 * rank),
        auto_pad,
        ceil_mode,
    )


def _taps_always_inside(w: spec.AxisWindow) -> bool:
    """True when no tap of any window can fall outside the data (so no predicate is needed)."""
    if isinstance(w.kernel, tirx.Expr):
        return True  # a global window over a symbolic axis: exactly the whole axis
    if not spec.is_static(w.in_size, w.out_size, w.pad_begin):
        return False
    last_tap = (w.out_size - 1) * w.stride - w.pad_begin + (w.kernel - 1) * w.dilation
    return w.pad_begin == 0 and last_tap < w.in_size


def _window_access(data, windows, out_idx, rvars):
    """The input index and in-bounds predicate of one tap."""
    lead = len(data.shape) - len(windows)
    idx = list(out_idx[:lead])
    inside = []
    for w, o, r in zip(windows, out_idx[lead:], rvars):
        pos = w.tap(o, r)
        idx.append(pos)
        if not _taps_always_inside(w):
            inside.append(tirx.all(pos >= 0, pos < w.in_size))
    return idx, all_of(inside)


def _out_shape(data, windows):
    lead = len(data.shape) - len(windows)
    return list(data.shape[:lead]) + [w.out_size for w in windows]


def _reduce_axes(windows):
    return [te.reduce_axis((0, w.kernel), f"r{i}") for i, w in enumerate(windows)]


def _row_major(positions, sizes):
    """Row-major linear index of ``positions`` in a box of ``sizes`` (int64)."""
    flat = tirx.const(0, "int64")
    for p, n in zip(positions, sizes):
        flat = flat * tirx.Cast("int64", n) + tirx.Cast("int64", p)
    return flat


def max_pool(
    data: te.Tensor,
    kernel_shape: Sequence[int],
    strides=None,
    dilations=None,
    pads=None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
    *,
    return_indices: bool = False,
    storage_order: int = 0,
    index_scope: str = "tensor",
    index_dtype: str = "int64",
):
    """Max pooling; with ``return_indices`` also the position of each maximum.

    Indices: ``index_scope="tensor"`` flattens over the whole tensor (ONNX MaxPool: N*C*spatial),
    ``"plane"`` over the spatial dims of each (n, c) plane (PyTorch, OpenVINO). ``storage_order``
    1 numbers each plane column-major. Ties go to the first element in scan order; NaN wins over
    numbers; a window that sees no data gives -inf (the smallest integer) and index -1.
    """
    windows = windows_for(data, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return max_pool_windows(
        data, windows, return_indices=return_indices, storage_order=storage_order,
        index_scope=index_scope, index_dtype=index_dtype,
    )


def max_pool_windows(
    data: te.Tensor,
    windows: Sequence[spec.AxisWindow],
    *,
    return_indices: bool = False,
    storage_order: int = 0,
    index_scope: str = "tensor",
    index_dtype: str = "int64",
):
    """:func:`max_pool` over already resolved windows."""
    if return_indices and str(data.dtype) == "bfloat16":
        # TVM 0.27's bfloat16 legalization breaks on the let-bound (value, index) reducer:
        # widen to float32 first (exact), reduce there, narrow the values back (exact too).
        wide = te.compute(data.shape, lambda *i: data[i].astype("float32"), name="widen",
                          attrs=block_attrs("widen", len(windows)))
        values, indices = max_pool_windows(
            wide, windows, return_indices=True, storage_order=storage_order,
            index_scope=index_scope, index_dtype=index_dtype,
        )
        narrow = te.compute(values.shape, lambda *i: values[i].astype("bfloat16"), name="max_pool_value",
                            attrs=block_attrs("max_index_finalize", len(windows)))
        return narrow, indices
    if not return_indices:
        return window_max(data, windows)
    rank = len(windows)
    dtype = data.dtype
    out_shape = _out_shape(data, windows)
    lead = len(data.shape) - rank

    spatial_sizes = [w.in_size for w in windows]
    # Reduce in int64 whatever the requested index type: the "no candidate" sentinel needs
    # the range; a narrower index type is a cast in the finalize stage.
    requested_index_dtype, index_dtype = index_dtype, "int64"
    reducer = argmax_reducer(dtype, index_dtype)
    # With row-major numbering the reduced index can be the final one (the plane offset is a
    # constant per window); column-major needs a conversion stage afterwards.
    fold_plane_offset = index_scope == "tensor" and storage_order == 0

    def value_and_index(*out_idx):
        rvars = _reduce_axes(windows)
        idx, inside = _window_access(data, windows, out_idx, rvars)
        x = data[tuple(idx)]
        if fold_plane_offset:
            flat = _row_major(idx, data.shape)
        else:
            flat = _row_major(idx[lead:], spatial_sizes)
        flat = flat.astype(index_dtype)
        if inside is not True:
            x = tirx.if_then_else(inside, x, max_identity(dtype))
            flat = tirx.if_then_else(inside, flat, tirx.const(_SENTINEL_INDEX, index_dtype))
        return reducer((x, flat), axis=rvars)

    values, raw_index = te.compute(
        out_shape, value_and_index, name="max_pool", attrs=block_attrs("max_index", rank)
    )
    if fold_plane_offset and not _may_see_no_data(windows) and requested_index_dtype == "int64":
        return values, raw_index

    plane_size = reduce(lambda a, b: a * b, [tirx.Cast("int64", n) for n in spatial_sizes])

    def final_index(*out_idx):
        raw = raw_index[out_idx]
        if fold_plane_offset:
            index = raw
        else:
            within = raw
            if storage_order == 1:
                within = _row_to_column_major(raw, spatial_sizes, index_dtype)
            index = within
            if index_scope == "tensor":
                plane = _row_major(out_idx[:lead], data.shape[:lead]).astype(index_dtype)
                index = plane * plane_size.astype(index_dtype) + within
        index = tirx.Select(
            raw == tirx.const(_SENTINEL_INDEX, index_dtype), tirx.const(NO_INDEX, index_dtype), index
        )
        return index.astype(requested_index_dtype)

    indices = te.compute(
        out_shape, final_index, name="max_pool_index", attrs=block_attrs("max_index_finalize", rank)
    )
    return values, indices


def padded(data: te.Tensor, windows, fill, dtype: str | None = None) -> tuple[te.Tensor, list]:
    """``data`` with every window's taps inside it: ``fill`` in the padding and the ceil-mode
    overhang. Returns the tensor and, per spatial axis, the offset of data position 0 in it.
    With ``dtype``, the copy is also converted to it (and made even where no axis is padded).

    Windowed reductions read this stage unconditionally, so the bounds check happens once per
    padded element (which a schedule computes per plane or row) instead of once per tap. Axes
    whose taps never leave the data are not padded; with none, ``data`` is returned as is.
    """
    lead = len(data.shape) - len(windows)
    convert = dtype is not None and dtype != str(data.dtype)
    if all(_taps_always_inside(w) for w in windows) and not convert:
        return data, [0] * len(windows)
    offsets, extents = [], []
    for w in windows:
        if _taps_always_inside(w):
            offsets.append(0)
            extents.append(w.in_size)
        else:
            offsets.append(w.pad_begin)
            last_tap = (spec.as_dim(w.out_size) - 1) * w.stride + (w.kernel - 1) * w.dilation
            extents.append(spec.maximum(last_tap + 1, spec.as_dim(w.in_size) + spec.as_dim(w.pad_begin)))

    def value(*idx):
        src, inside = list(idx[:lead]), []
        for i, off, w in zip(idx[lead:], offsets, windows):
            src.append(i - off)
            if not _taps_always_inside(w):
                inside.append(tirx.all(i >= off, i - off < w.in_size))
        cond = all_of(inside)
        x = data[tuple(src)]
        if convert:
            x = x.astype(dtype)
        return x if cond is True else tirx.if_then_else(cond, x, fill_value)

    fill_value = fill if isinstance(fill, tirx.Expr) else tirx.const(fill, dtype or data.dtype)

    out = te.compute(list(data.shape[:lead]) + extents, value, name="pad", attrs=block_attrs("pad", len(windows)))
    return out, offsets


def _padded_access(padded_data, windows, offsets, out_idx, rvars):
    lead = len(padded_data.shape) - len(windows)
    idx = list(out_idx[:lead])
    for w, off, o, r in zip(windows, offsets, out_idx[lead:], rvars):
        idx.append(w.tap(o, r) + off)
    return padded_data(*idx)


def window_max(data: te.Tensor, windows, kind: str = "max", name: str = "max_pool") -> te.Tensor:
    """The max over each window's data taps (NaN propagates; no data gives the max identity)."""
    dtype = data.dtype
    if separable(windows) or few_taps(windows):
        # float16/bfloat16 passes run in float32, widened once in the padded copy: exact
        # (widening is lossless and a max returns one of its operands), and x86 has no
        # half-precision arithmetic to run them in anyway.
        work = "float32" if dtype in ("float16", "bfloat16") else dtype
        source, offsets = padded(data, windows, max_identity(work), dtype=work)
        max_all = lambda taps: max_of_all(taps, work)  # noqa: E731
        if flat_plane(windows):
            return _flat_plane_passes(data, windows, max_all, lambda x: x.astype(work), kind, name, dtype)
        if doubling(windows):
            return _doubling_passes(source, offsets, windows, max_all, kind, name, dtype)
        if separable(windows):
            return _axis_passes(source, offsets, windows, max_all, None, kind, name, dtype)
        return _all_taps_pass(source, offsets, windows, max_all, kind, name, dtype)
    source, offsets = padded(data, windows, max_identity(dtype))
    reducer = nan_max_reducer(dtype) if is_float(dtype) else te.max

    def value(*out_idx):
        rvars = _reduce_axes(windows)
        return reducer(_padded_access(source, windows, offsets, out_idx, rvars), axis=rvars)

    return te.compute(_out_shape(data, windows), value, name=name, attrs=block_attrs(kind, len(windows)))


def window_sum(data: te.Tensor, windows, kind: str, name: str, map_input=None, by_axis: bool = True) -> te.Tensor:
    """The sum over each window's data taps in the accumulation type (padding adds 0;
    ``map_input`` maps each tap first, e.g. |x|^p, and must map 0 to 0). ``by_axis=False``
    keeps one reduction over all taps even where the windows are :func:`separable`: the same
    sum, which a schedule may reassociate as a whole (vector partial sums, schedules/arm.py)."""
    acc = accumulate_dtype(data.dtype)
    add_all = lambda taps: reduce(lambda a, b: a + b, taps)  # noqa: E731
    if by_axis and flat_plane(windows):
        def tap_value(x):
            x = x.astype(acc)
            return map_input(x) if map_input is not None else x

        return _flat_plane_passes(data, windows, add_all, tap_value, kind, name)
    if by_axis and separable(windows):
        # The padded copy converts to the accumulation type once; the passes add in it.
        source, offsets = padded(data, windows, 0, dtype=acc)
        return _axis_passes(source, offsets, windows, add_all, map_input, kind, name)
    source, offsets = padded(data, windows, 0)
    if by_axis and block_windows(windows):
        return _block_sums(source, offsets, windows, acc, map_input, kind, name)
    return _window_sums(source, offsets, windows, acc, map_input, kind, name)


def _window_sums(source, offsets, windows, acc, map_input, kind, name):
    """One reduction per output: the sum of its window's taps of the padded ``source``."""

    def value(*out_idx):
        rvars = _reduce_axes(windows)
        x = _padded_access(source, windows, offsets, out_idx, rvars).astype(acc)
        return te.sum(map_input(x) if map_input is not None else x, axis=rvars)

    return te.compute(_out_shape(source, windows), value, name=name, attrs=block_attrs(kind, len(windows)))


# Separable windows: a box window's max (or sum) is the max over one axis of the max over the
# next, so the reduction can run as one pass per windowed axis, outermost first. For 3x3 stride 2
# that is a vertical pass over whole padded rows (contiguous loads, every column once) and a
# horizontal pass over one short row, instead of 9 strided taps per output; overlapping
# windows share the vertical pass. Passes are short expressions (no reduction loop), which
# schedules vectorise directly.
MAX_PASS_TAPS = 16
# A single windowed axis with stride 1 takes longer passes: the taps of neighbouring outputs are
# contiguous (1-D max k32 s1 over 64x4096, 1 thread: 0.26 ms, against 0.95 ms for the
# reduction loop). Strided long windows keep the reduction loop: as a pass, their taps become
# gathers (1-D avg k64 s32 over 128x16000: 2.5 ms as a pass, 1.3 ms as a loop).
MAX_SINGLE_PASS_TAPS = 64
# Non-overlapping windows up to this many taps are one expression of every tap (few_taps).
MAX_ALL_TAPS = 32


# Long strided windows made of whole strides (kernel = m x stride): each input lies in m windows.
# Summed once per stride-long block, then m neighbouring blocks per output, every input is
# read and added once instead of m times. 1-D avg k64 s32 over 128x16000: 32.7 -> 20.5
# instructions per output on NEON (emulated, bench/arm_instructions.py); on x86 (znver4,
# `tvm-pool bench --only longwin_avg1d`) 0.098 ms at 2 threads and 0.182 ms at 1, where the full
# benchmark before it had 0.120 and 0.237 ms.
# Blocks are long enough for the schedules' vector partial sums (more taps than a row unrolls).
MIN_BLOCK_TAPS = 17


def block_windows(windows) -> bool:
    """One windowed axis, the innermost, static, undilated, with a kernel of m >= 2 whole strides
    of at least :data:`MIN_BLOCK_TAPS`: summed by :func:`_block_sums`."""
    if not _innermost_window_only(windows):
        return False
    w = windows[-1]
    return (w.dilation == 1 and w.stride >= MIN_BLOCK_TAPS and w.kernel % w.stride == 0
            and w.kernel // w.stride >= 2)


def _innermost_window_only(windows) -> bool:
    """Static geometry, and a window longer than 1 on the innermost spatial axis only."""
    if not _static_geometry(windows):
        return False
    return [i for i, w in enumerate(windows) if w.kernel > 1] == [len(windows) - 1]


def _block_sums(source, offsets, windows, acc, map_input, kind, name):
    """Sums of stride-long blocks (a reduction, like any window sum), then each window's sum as
    the sum of its kernel / stride blocks (block o + i is taps [i * stride, (i + 1) * stride) of
    window o)."""
    w = windows[-1]
    m = w.kernel // w.stride
    block = dataclasses.replace(w, kernel=w.stride, out_size=int(spec.as_dim(w.out_size)) + m - 1)
    blocks = _window_sums(source, offsets, list(windows[:-1]) + [block], acc, map_input, kind, f"{name}_blocks")

    def window_sum_of_blocks(*idx):
        head = list(idx[:-1])
        return reduce(lambda a, b: a + b, [blocks[tuple(head + [idx[-1] + i])] for i in range(m)])

    return te.compute(_out_shape(source, windows), window_sum_of_blocks, name=name)


def few_taps(windows) -> bool:
    """Static windows of at most :data:`MAX_ALL_TAPS` taps in all, which a max reduces as one
    elementwise expression of every tap (:func:`_all_taps_pass`): the reduction loop's
    select-based NaN max blocked LLVM's vectoriser (3-D 2x2x2 s2 over 64x16x56x56, 1 thread:
    1.4 ms against 0.31 ms for stock TVM's plain max; 3-D windows now take the passes)."""
    return _static_geometry(windows) and reduce(lambda a, w: a * w.kernel, windows, 1) <= MAX_ALL_TAPS


# A global window over a small static plane (7x7, 13x13) reduces the plane as one contiguous
# row: FLAT_LANES lanes of partial results, halved until two are left (flat_plane).
FLAT_LANES = 16


def flat_plane(windows) -> bool:
    """A global window (every axis whole, no padding) over a static plane of at least two and
    at most :data:`MAX_PASS_TAPS` rows of :data:`FLAT_LANES` elements, which
    :func:`_flat_plane_passes` reduces as one contiguous row."""
    if not _static_geometry(windows):
        return False
    if not all(w.out_size == 1 and w.kernel == w.in_size and w.pad_begin == 0 for w in windows):
        return False
    plane = reduce(lambda a, w: a * w.kernel, windows, 1)
    return 2 <= plane // FLAT_LANES <= MAX_PASS_TAPS


def _flat_plane_passes(data, windows, combine, tap_value, kind, name, out_dtype=None):
    """A global reduction of each (contiguous, row-major) plane as one row of ``plane``
    elements: a pass combining its rows of :data:`FLAT_LANES` into that many lanes, passes
    halving the lanes down to two, and the result combining those two with the elements past
    the last whole row. On a 7x7 plane: 3 vector loads and a few shuffles, against 7 loads of
    7-lane rows and a 7-tap horizontal pass for the separable form (ResNet-50's head at batch
    32, 1 thread: 0.21 against 0.43 ms). ``tap_value`` maps each element (to the accumulation
    type, |x|^p, ...). The passes carry ``pass_axis`` on the last axis (the lanes), shape
    ``[*lead, 1, ..., 1, lanes]``, so schedules compute them per plane.

    Sums are added in another order than a sequential loop (lanes first, then a tree)."""
    rank = len(windows)
    lead_shape = list(data.shape[: len(data.shape) - rank])
    lead = len(lead_shape)
    sizes = [w.kernel for w in windows]
    plane = reduce(lambda a, b: a * b, sizes, 1)
    rows = plane // FLAT_LANES

    def element(lead_idx, t):
        coords = []
        for n in reversed(sizes):  # row-major position t in the plane (constants fold)
            coords.append(t % n if isinstance(t, int) else tirx.floormod(t, n))
            t = t // n if isinstance(t, int) else tirx.floordiv(t, n)
        return tap_value(data[tuple(lead_idx) + tuple(reversed(coords))])

    def pass_attrs(last):
        return block_attrs(kind if last else f"{kind}_pass", rank, **{PASS_AXIS_ATTR: rank - 1})

    unit = [1] * (rank - 1)
    current = te.compute(
        lead_shape + unit + [FLAT_LANES],
        lambda *i: combine([element(i[:lead], j * FLAT_LANES + i[-1]) for j in range(rows)]),
        name=f"{name}_lanes", attrs=pass_attrs(False),
    )
    def halve(prev, half):
        return lambda *i: combine([prev(*i), prev(*i[:-1], i[-1] + half)])

    width = FLAT_LANES
    while width > 2:
        width //= 2
        current = te.compute(lead_shape + unit + [width], halve(current, width), name=f"{name}_half{width}",
                             attrs=pass_attrs(False))
    pair = current

    def result(*idx):
        taps = [pair(*idx[:-1], 0), pair(*idx[:-1], 1)]
        taps += [element(idx[:lead], t) for t in range(rows * FLAT_LANES, plane)]
        value = combine(taps)
        return value.astype(out_dtype) if out_dtype is not None else value

    return te.compute(_out_shape(data, windows), result, name=name, attrs=pass_attrs(True))


def doubling(windows) -> bool:
    """A max over one long stride-1 window (more than :data:`MAX_PASS_TAPS` taps) on the
    innermost spatial axis, reduced by doubling (:func:`_doubling_passes`): about 2 log2(K)
    operations per output instead of K."""
    if not _innermost_window_only(windows):
        return False
    w = windows[-1]
    return w.kernel > MAX_PASS_TAPS and w.stride == 1


def _static_geometry(windows) -> bool:
    """Every window's kernel, input and output size and begin padding known at compile time."""
    return all(
        not isinstance(w.kernel, tirx.Expr) and spec.is_static(w.in_size, w.out_size, w.pad_begin) for w in windows
    )


def separable(windows) -> bool:
    """Whether :func:`window_max` / :func:`window_sum` reduce axis by axis (one pass per
    windowed axis): static geometry, at most :data:`MAX_PASS_TAPS` taps per axis, and either

    - one windowed axis: a single pass, the taps as one expression, which LLVM vectorises
      better than a reduction loop (1-D k4 s4 over 128x16000: 0.099 vs 0.13 ms, 1 thread);
    - windows overlapping along the innermost windowed axis, so the passes share work; or
    - three or more windowed axes, overlapping or not (see below).

    Non-overlapping windows over two axes (2x2 stride 2) keep the direct reduction (max: one
    expression of every tap, :func:`few_taps`), which reads each input once already."""
    if not _static_geometry(windows):
        return False
    windowed = [w for w in windows if w.kernel > 1]
    if len(windowed) == 1:
        w = windowed[0]
        return w.kernel <= MAX_PASS_TAPS or (w.kernel <= MAX_SINGLE_PASS_TAPS and w.stride == 1)
    if len(windowed) < 2 or any(w.kernel > MAX_PASS_TAPS for w in windowed):
        return False
    if len(windowed) >= 3:
        # Non-overlapping windows over three axes (2x2x2 s2 video pooling) gain from passes
        # too: two of three passes run over contiguous rows, and the schedule computes every
        # pass per output row (3-D 2x2x2 s2 over 64x16x56x56, 1 thread: 0.19 ms, against
        # 0.29 ms for one expression of all 8 taps; aarch64: 1.83 against 2.20 M instructions).
        # Over two axes the all-taps form stays: as passes, 3x3 s3 took 1.9x the aarch64
        # instructions and was no faster on x86.
        return True
    inner = windowed[-1]
    return spec.effective_kernel(inner.kernel, inner.dilation) > inner.stride


def _axis_passes(source, offsets, windows, combine, tap_value, kind, name, out_dtype=None):
    """One pass per windowed axis over ``source`` (the padded data); ``combine`` reduces the list
    of a window's taps along one axis to one value, ``tap_value`` (if any) maps the first
    pass's taps. Pass ``j`` reduces axis ``axes[j]``; its shape has output sizes on the axes
    reduced so far (and on 1-tap axes, which the first pass maps), padded sizes on the rest.
    The last pass is the pool's result (cast to ``out_dtype`` when given)."""
    rank = len(windows)
    lead = len(source.shape) - rank
    axes = [i for i, w in enumerate(windows) if w.kernel > 1]
    done = [w.kernel == 1 for w in windows]  # axes already in output coordinates

    def pass_value(prev, axis, first, last):
        def value(*idx):
            taps = []
            for r in range(windows[axis].kernel):
                src = list(idx[:lead])
                for i, (w, o) in enumerate(zip(windows, idx[lead:])):
                    if i == axis or (first and w.kernel == 1):
                        src.append(w.tap(o, r if i == axis else 0) + offsets[i])
                    else:
                        src.append(o)
                x = prev(*src)
                taps.append(tap_value(x) if first and tap_value is not None else x)
            result = combine(taps)
            return result.astype(out_dtype) if last and out_dtype is not None else result

        return value

    current = source
    for j, axis in enumerate(axes):
        last = j == len(axes) - 1
        shape = list(source.shape[:lead])
        for i, w in enumerate(windows):
            shape.append(spec.as_dim(w.out_size) if done[i] or i == axis else source.shape[lead + i])
        attrs = block_attrs(kind if last else f"{kind}_pass", rank, **{PASS_AXIS_ATTR: axis})
        current = te.compute(
            shape, pass_value(current, axis, j == 0, last), name=name if last else f"{name}_pass{j}", attrs=attrs
        )
        done[axis] = True
    return current


def _doubling_passes(source, offsets, windows, combine, kind, name, out_dtype):
    """The max over a long stride-1 window on the innermost axis as passes along that axis:
    level ``k`` holds the max over ``2**k`` consecutive taps (level ``k+1`` combines two
    neighbours of level ``k``), and the result combines two overlapping windows of the level
    ``q`` with ``K/2 <= q < K`` taps, which together cover the window (a max may see a tap
    twice). For K = 32 that is 5 two-operand passes instead of one 32-operand expression
    (1-D k32 s1 over 64x4096). Every pass is an elementwise expression of two reads along the
    row, which schedules vectorise like the separable passes; all passes have ``pass_axis``
    on this axis, so a schedule computes the intermediate levels per row.

    Level ``k`` position ``i`` is the window whose first tap is at position ``i`` of the first
    window's first tap: ``tap(0, 0) + offset + i`` in ``source``."""
    rank = len(windows)
    lead = len(source.shape) - rank
    w = windows[-1]
    kernel, dilation = w.kernel, w.dilation
    q = 1 << ((kernel - 1).bit_length() - 1)  # the largest power of two below the kernel
    levels = q.bit_length() - 1  # levels 1..levels hold 2, 4, ..., q taps
    extents = {levels: spec.as_dim(w.out_size) + (kernel - q) * dilation}
    for k in range(levels - 1, 0, -1):
        extents[k] = extents[k + 1] + (1 << k) * dilation
    outer = [spec.as_dim(x.out_size) for x in windows[:-1]]

    def first_level(*idx):
        src = list(idx[:lead]) + [x.tap(o, 0) + off for x, o, off in zip(windows[:-1], idx[lead:-1], offsets)]
        start = w.tap(0, 0) + offsets[-1] + idx[-1]
        return combine([source(*src, start), source(*src, start + dilation)])

    def next_level(prev, step):
        return lambda *idx: combine([prev(*idx), prev(*idx[:-1], idx[-1] + step)])

    current = None
    for k in range(1, levels + 1):
        value = first_level if k == 1 else next_level(current, (1 << (k - 1)) * dilation)
        attrs = block_attrs(f"{kind}_pass", rank, **{PASS_AXIS_ATTR: rank - 1})
        shape = list(source.shape[:lead]) + outer + [extents[k]]
        current = te.compute(shape, value, name=f"{name}_level{k}", attrs=attrs)
    last = current

    def result(*idx):
        return combine([last(*idx), last(*idx[:-1], idx[-1] + (kernel - q) * dilation)]).astype(out_dtype)

    attrs = block_attrs(kind, rank, **{PASS_AXIS_ATTR: rank - 1})
    return te.compute(_out_shape(source, windows), result, name=name, attrs=attrs)


def _all_taps_pass(source, offsets, windows, combine, kind, name, out_dtype):
    """One elementwise block combining every tap of each window (row-major scan order), marked
    as a one-pass chain on the innermost windowed axis so schedules treat it as the passes."""
    rank = len(windows)
    taps_per_axis = [range(w.kernel) for w in windows]

    def value(*idx):
        taps = [_padded_access(source, windows, offsets, idx, rs) for rs in itertools.product(*taps_per_axis)]
        return combine(taps).astype(out_dtype)

    axis = max([i for i, w in enumerate(windows) if w.kernel > 1] or [rank - 1])
    attrs = block_attrs(kind, rank, **{PASS_AXIS_ATTR: axis})
    return te.compute(_out_shape(source, windows), value, name=name, attrs=attrs)


def window_count(windows, out_spatial, count_padding: bool):
    """How many taps of a window count in an average: those in the data, plus (with
    ``count_padding``) those in the explicit/SAME padding; never the ceil-mode overhang."""
    count = None
    for w, o in zip(windows, out_spatial):
        if count_padding:
            n = spec.window_tap_count(w, o, -spec.as_dim(w.pad_begin), w.in_size + spec.as_dim(w.pad_end))
        elif _taps_always_inside(w):
            n = w.kernel
        else:
            n = spec.window_tap_count(w, o, 0, w.in_size)
        count = n if count is None else count * n
    return count if isinstance(count, tirx.Expr) else tirx.const(count, "int64")


def _may_see_no_data(windows) -> bool:
    """Can some window lie entirely in padding/overhang? (Then its index must become -1.)"""
    for w in windows:
        if _taps_always_inside(w):
            continue
        if not spec.is_static(w.in_size, w.out_size, w.pad_begin):
            return True
        ek = spec.effective_kernel(w.kernel, w.dilation)
        if w.pad_begin >= ek or (w.out_size - 1) * w.stride - w.pad_begin >= w.in_size:
            return True
        # A dilated window can also straddle the data without a tap landing in it, but only
        # when the data is shorter than the dilation: a window overlapping data of at least
        # `dilation` elements has a tap in it (its taps are `dilation` apart). A closed form
        # over the geometry, so compile time does not depend on the axis length.
        if w.dilation > 1 and w.in_size < w.dilation:
            return True
    return False


def _row_to_column_major(raw, sizes, index_dtype):
    """Renumber a row-major position within a box of ``sizes`` column-major."""
    coords = []
    rest = raw
    for n in reversed(sizes):
        n = tirx.Cast(index_dtype, n)
        coords.append(tirx.floormod(rest, n))
        rest = tirx.floordiv(rest, n)
    coords.reverse()  # coords[i] is the position along axis i
    flat = tirx.const(0, index_dtype)
    for p, n in zip(reversed(coords), reversed(sizes)):
        flat = flat * tirx.Cast(index_dtype, n) + p
    return flat


def avg_pool(
    data: te.Tensor,
    kernel_shape: Sequence[int],
    strides=None,
    dilations=None,
    pads=None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
    *,
    count_include_pad: bool = False,
    by_axis: bool = True,
):
    """Average pooling (``by_axis``: see :func:`window_sum`).

    The divisor counts the taps that land in the data, plus (with ``count_include_pad``) those
    in the explicit or SAME padding, never those in the ceil-mode overhang past the padding.
    float16/bfloat16 accumulate in float32. A window that sees no data and counts no padding
    divides 0 by 0 (NaN), which is what the specification's formula gives.
    """
    windows = windows_for(data, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return _windowed_sum_then(data, windows, "avg", average(windows), count_include_pad, by_axis=by_axis)


def average(windows):
    """sum / count; where a window can see nothing, 0/0 must give NaN at run time, and TVM's
    simplifier refuses a division by a constant 0, so the empty case is selected explicitly."""
    if not _may_see_no_data(windows):
        return lambda total, count: total / count

    def divide(total, count):
        nan = tirx.const(float("nan"), str(count.ty))  # count is already in the accumulation type
        one = tirx.const(1, str(count.ty))
        return tirx.Select(count > tirx.const(0, str(count.ty)), total / tirx.max(count, one), nan)

    return divide


def lp_pool(
    data: te.Tensor,
    kernel_shape: Sequence[int],
    strides=None,
    dilations=None,
    pads=None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
    *,
    p: float = 2.0,
):
    """Lp pooling: (sum over the window of |x|^p)^(1/p); padding contributes 0."""
    windows = windows_for(data, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return _lp(data, windows, p)


def _lp(data, windows, p, by_axis=True):
    p = float(p)
    if p <= 0:
        raise ValueError(f"Lp pooling needs p > 0, got {p}")
    acc = accumulate_dtype(data.dtype)

    def power(x):
        x = tirx.abs(x.astype(acc))
        if p == 1.0:
            return x
        if p == 2.0:
            return x * x
        return tirx.power(x, tirx.const(p, acc))

    def root(total, _count):
        if p == 1.0:
            return total
        if p == 2.0:
            return tirx.sqrt(total)
        return tirx.power(total, tirx.const(1.0 / p, acc))

    return _windowed_sum_then(data, windows, "lp", root, False, map_input=power, by_axis=by_axis)


def _windowed_sum_then(data, windows, kind, finish, count_include_pad, map_input=None, by_axis=True):
    """A windowed sum in the accumulation type, then ``finish(sum, count)`` per output."""
    rank = len(windows)
    acc = accumulate_dtype(data.dtype)
    out_shape = _out_shape(data, windows)
    lead = len(data.shape) - rank
    total = window_sum(data, windows, f"{kind}_sum", f"{kind}_pool_sum", map_input, by_axis)

    def finalize(*out_idx):
        count = window_count(windows, out_idx[lead:], count_include_pad).astype(acc)
        return finish(total[out_idx], count).astype(data.dtype)

    return te.compute(out_shape, finalize, name=f"{kind}_pool", attrs=block_attrs(f"{kind}_finalize", rank))


def global_pool(data: te.Tensor, kind: str, spatial_rank: int | None = None, p: float = 2.0, by_axis: bool = True):
    """GlobalMaxPool / GlobalAveragePool / GlobalLpPool: one window over all spatial axes
    (``by_axis``: see :func:`window_sum`)."""
    spatial_rank = spatial_rank or len(data.shape) - 2
    windows = spec.global_windows(data.shape[len(data.shape) - spatial_rank :])
    if kind == "max":
        return max_pool_windows(data, windows)
    if kind == "avg":
        return _windowed_sum_then(data, windows, "avg", average(windows), False, by_axis=by_axis)
    if kind == "lp":
        return _lp(data, windows, p, by_axis)
    raise ValueError(f"unknown global pool kind {kind!r}")
