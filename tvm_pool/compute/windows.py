"""Where each tap of a pooling window reads, shared by every windowed compute.

Layout: ``data`` is ``[*leading, *spatial]`` where the last ``len(windows)`` axes are spatial
(ONNX's N, C, D1..Dn). Geometry comes from :mod:`tvm_pool.spec`. Value reductions (max, sums)
read a :func:`padded` copy holding the reduction's identity in the padding and the ceil-mode
overhang, so the window loop has no bounds check; the argmax reduction instead tests each tap's
position (:func:`window_access`: an index in the padding must never win a tie).
"""

from __future__ import annotations

from typing import Sequence

from tvm import te, tirx

from .. import spec
from . import layout
from .common import all_of, block_attrs


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


def taps_always_inside(w: spec.AxisWindow) -> bool:
    """True when no tap of any window can fall outside the data (so no predicate is needed)."""
    if isinstance(w.kernel, tirx.Expr):
        return True  # a global window over a symbolic axis: exactly the whole axis
    if not spec.is_static(w.in_size, w.out_size, w.pad_begin):
        return False
    last_tap = (w.out_size - 1) * w.stride - w.pad_begin + (w.kernel - 1) * w.dilation
    return w.pad_begin == 0 and last_tap < w.in_size


def taps_always_in_padded(w: spec.AxisWindow) -> bool:
    """True when every tap of every window lands in the data or its padding, never in the
    ceil-mode overhang: a divisor that counts the padding is then the kernel for every window."""
    if isinstance(w.kernel, tirx.Expr):
        return True
    if not spec.is_static(w.in_size, w.out_size, w.pad_begin, w.pad_end):
        return False
    last_tap = (w.out_size - 1) * w.stride - w.pad_begin + (w.kernel - 1) * w.dilation
    return last_tap < w.in_size + w.pad_end


def window_access(data, windows, out_idx, rvars):
    """The input index and in-bounds predicate of one tap."""
    lead = len(data.shape) - len(windows)
    idx = list(out_idx[:lead])
    inside = []
    for w, o, r in zip(windows, out_idx[lead:], rvars):
        pos = w.tap(o, r)
        idx.append(pos)
        if not taps_always_inside(w):
            inside.append(tirx.all(pos >= 0, pos < w.in_size))
    return idx, all_of(inside)


def clamps_exactly(windows) -> bool:
    """Can an idempotent reduction (a max) read each tap outside the data as the data element
    nearest to it, with no bounds check? Yes when every window of every axis holds data and its
    taps are contiguous (dilation 1), or when no tap ever falls outside: the nearest element is
    then a tap of the same window, which the max already counts (see :func:`clamped_access`)."""
    # (may_see_no_data is True for a window of symbolic geometry)
    return all(taps_always_inside(w) or (w.dilation == 1 and not may_see_no_data([w])) for w in windows)


def clamped_access(data, windows, out_idx, rvars):
    """The value of one tap for a max over windows that :func:`clamps_exactly`: a tap in the
    padding or the ceil-mode overhang reads the nearest data element along each axis, which is
    another tap of the same window (the window's taps are contiguous and some are data). So a
    padded max needs neither a padded copy nor a branch per tap: the clamped row of a tap is the
    same for every output of a row (hoisted out of its loop), and no column needs a loop of its
    own at the edges. Channel-last 3x3 s2 p1 max over 112x112x64, paired ratios to the
    channel-first twin, 1 thread: 1.10-1.14x -> 1.05x (with ``max_of_all``'s ordered pairs)."""
    lead = len(data.shape) - len(windows)
    idx = list(out_idx[:lead])
    for w, o, r in zip(windows, out_idx[lead:], rvars):
        pos = w.tap(o, r)
        idx.append(pos if taps_always_inside(w) else tirx.max(tirx.min(pos, w.in_size - 1), 0))
    return data(*idx)


def out_shape(data, windows):
    lead = len(data.shape) - len(windows)
    return list(data.shape[:lead]) + [w.out_size for w in windows]


def reduce_axes(windows):
    return [te.reduce_axis((0, w.kernel), f"r{i}") for i, w in enumerate(windows)]


def row_major(positions, sizes):
    """Row-major linear index of ``positions`` in a box of ``sizes`` (int64)."""
    flat = tirx.const(0, "int64")
    for p, n in zip(positions, sizes):
        flat = flat * tirx.Cast("int64", n) + tirx.Cast("int64", p)
    return flat


def padded(data: te.Tensor, windows, fill, dtype: str | None = None, element=None) -> tuple[te.Tensor, list]:
    """``data`` with every window's taps inside it: ``fill`` in the padding and the ceil-mode
    overhang. Returns the tensor and, per spatial axis, the offset of data position 0 in it.
    With ``dtype``, the copy is also converted to it (and made even where no axis is padded);
    with ``element``, each data element ``x`` at index ``idx`` is ``element(x, idx)`` instead,
    of type ``dtype`` (the argmax's keys).

    Windowed reductions read this stage unconditionally, so the bounds check happens once per
    padded element (which a schedule computes per plane or row) instead of once per tap. Axes
    whose taps never leave the data are not padded; with none, ``data`` is returned as is.
    """
    lead = len(data.shape) - len(windows)
    convert = element is not None or (dtype is not None and dtype != str(data.dtype))
    if all(taps_always_inside(w) for w in windows) and not convert:
        return data, [0] * len(windows)
    offsets, extents = [], []
    for w in windows:
        if taps_always_inside(w):
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
            if not taps_always_inside(w):
                inside.append(tirx.all(i >= off, i - off < w.in_size))
        cond = all_of(inside)
        x = data[tuple(src)]
        if element is not None:
            x = element(x, src)
        elif convert:
            x = x.astype(dtype)
        return x if cond is True else tirx.if_then_else(cond, x, fill_value)

    fill_value = fill if isinstance(fill, tirx.Expr) else tirx.const(fill, dtype or data.dtype)

    out = layout.compute(data, list(data.shape[:lead]) + extents, value, name="pad", attrs=block_attrs("pad", len(windows)))
    return out, offsets


def padded_access(padded_data, windows, offsets, out_idx, rvars):
    """The value of one tap, read from a :func:`padded` copy (no bounds check)."""
    lead = len(padded_data.shape) - len(windows)
    idx = list(out_idx[:lead])
    for w, off, o, r in zip(windows, offsets, out_idx[lead:], rvars):
        idx.append(w.tap(o, r) + off)
    return padded_data(*idx)


def window_count(windows, out_spatial, count_padding: bool):
    """How many taps of a window count in an average: those in the data, plus (with
    ``count_padding``) those in the explicit/SAME padding; never the ceil-mode overhang."""
    count = None
    for w, o in zip(windows, out_spatial):
        if count_padding and taps_always_in_padded(w):
            n = w.kernel  # a constant divisor: no per-output count arithmetic in the finalize
        elif count_padding:
            n = spec.window_tap_count(w, o, -spec.as_dim(w.pad_begin), w.in_size + spec.as_dim(w.pad_end))
        elif taps_always_inside(w):
            n = w.kernel
        else:
            n = spec.window_tap_count(w, o, 0, w.in_size)
        count = n if count is None else count * n
    return count if isinstance(count, tirx.Expr) else tirx.const(count, "int64")


def may_see_no_data(windows) -> bool:
    """Can some window lie entirely in padding/overhang? (Then its index must become -1.)"""
    for w in windows:
        if taps_always_inside(w):
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
