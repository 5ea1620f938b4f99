"""A loop-by-loop NumPy transcription of the ONNX pooling texts, with tvm_pool's documented
choices (docs/conformance.md) where the texts are silent or the runtimes disagree.

Written independently of tvm_pool/spec.py on purpose: it is the oracle for the cases where
onnxruntime and onnx.reference disagree with each other or with the spec.
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def _axis_geometry(n, k, s, d, pb, pe, auto_pad, ceil_mode):
    ek = (k - 1) * d + 1
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = math.ceil(n / s)
        total = (out - 1) * s + ek - n  # may be negative (kernel < stride): windows shift, row 4
        pb, pe = (total // 2, total - total // 2) if auto_pad == "SAME_UPPER" else (total - total // 2, total // 2)
        return out, pb, pe
    if auto_pad == "VALID":
        return (n - ek) // s + 1, 0, 0
    if ceil_mode:
        out = math.ceil((n + pb + pe - ek) / s) + 1
        if (out - 1) * s >= n + pb:  # a window starting in the end padding is dropped
            out -= 1
    else:
        out = (n + pb + pe - ek) // s + 1
    return out, pb, pe


def geometry(x_shape, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    rank = len(kernel)
    axes = []
    for i in range(rank):
        axes.append(
            (x_shape[2 + i],)
            + _axis_geometry(
                x_shape[2 + i], kernel[i], strides[i], dilations[i], pads[i], pads[i + rank], auto_pad, ceil_mode
            )
        )
    return axes  # (in, out, pad_begin, pad_end) per axis


def _windows(x_shape, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    """Yield (out_index, [(in_index or None, in_padding_bool), ...]) for every output element."""
    axes = geometry(x_shape, kernel, strides, dilations, pads, auto_pad, ceil_mode)
    out_spatial = [a[1] for a in axes]
    for o in itertools.product(*[range(n) for n in out_spatial]):
        taps = []
        for r in itertools.product(*[range(k) for k in kernel]):
            pos, inside, in_pad = [], True, True
            for i, (n, _out, pb, pe) in enumerate(axes):
                p = o[i] * strides[i] - pb + r[i] * dilations[i]
                pos.append(p)
                inside &= 0 <= p < n
                in_pad &= -pb <= p < n + pe
            taps.append((tuple(pos) if inside else None, in_pad))
        yield o, taps


def out_spatial_shape(x_shape, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    return [a[1] for a in geometry(x_shape, kernel, strides, dilations, pads, auto_pad, ceil_mode)]


def _defaults(x, kernel, strides, dilations, pads):
    rank = len(kernel)
    return strides or [1] * rank, dilations or [1] * rank, pads or [0] * (2 * rank)


def max_pool(x, kernel, strides=None, dilations=None, pads=None, auto_pad="NOTSET", ceil_mode=0, storage_order=0):
    """Values and flat indices. NaN wins (first NaN in scan order); ties: first in scan order;
    a window with no data gives the dtype's lowest value (-inf for floats) and index -1."""
    strides, dilations, pads = _defaults(x, kernel, strides, dilations, pads)
    n_batch, channels = x.shape[:2]
    spatial = x.shape[2:]
    out_sp = out_spatial_shape(x.shape, kernel, strides, dilations, pads, auto_pad, ceil_mode)
    lowest = -np.inf if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else np.iinfo(x.dtype).min
    y = np.empty((n_batch, channels, *out_sp), dtype=x.dtype)
    idx = np.empty((n_batch, channels, *out_sp), dtype=np.int64)
    plane = int(np.prod(spatial))
    windows = list(_windows(x.shape, kernel, strides, dilations, pads, auto_pad, ceil_mode))
    for nb in range(n_batch):
        for c in range(channels):
            for o, taps in windows:
                best, best_pos = None, None
                for pos, _ in taps:
                    if pos is None:
                        continue
                    v = x[(nb, c) + pos]
                    if best is None or (np.isnan(v) and not np.isnan(best)) or (not np.isnan(best) and v > best):
                        best, best_pos = v, pos
                if best is None:
                    y[(nb, c) + o], idx[(nb, c) + o] = lowest, -1
                    continue
                if storage_order == 1:  # column-major: the first spatial axis varies fastest
                    flat = _column_major(best_pos, spatial)
                else:
                    flat = int(np.ravel_multi_index(best_pos, spatial))
                y[(nb, c) + o] = best
                idx[(nb, c) + o] = (nb * channels + c) * plane + flat
    return y, idx


def _column_major(pos, sizes):
    flat, stride = 0, 1
    for p, size in zip(pos, sizes):
        flat += p * stride
        stride *= size
    return flat


def avg_pool(x, kernel, strides=None, dilations=None, pads=None, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0):
    """Sum of the data taps / number of data taps (+ padding taps with count_include_pad, never
    the ceil-mode overhang). 0/0 gives NaN."""
    strides, dilations, pads = _defaults(x, kernel, strides, dilations, pads)
    return _window_reduce(
        x, kernel, strides, dilations, pads, auto_pad, ceil_mode,
        lambda vals, n_data, n_pad: np.float64(np.sum(vals)) / (n_pad if count_include_pad else n_data)
        if (n_pad if count_include_pad else n_data) else np.nan,
    )


def lp_pool(x, kernel, strides=None, dilations=None, pads=None, auto_pad="NOTSET", ceil_mode=0, p=2.0):
    strides, dilations, pads = _defaults(x, kernel, strides, dilations, pads)
    return _window_reduce(
        x, kernel, strides, dilations, pads, auto_pad, ceil_mode,
        lambda vals, _n, _np: np.sum(np.abs(np.asarray(vals, np.float64)) ** p) ** (1.0 / p),
    )


def _window_reduce(x, kernel, strides, dilations, pads, auto_pad, ceil_mode, reduce_fn):
    n_batch, channels = x.shape[:2]
    out_sp = out_spatial_shape(x.shape, kernel, strides, dilations, pads, auto_pad, ceil_mode)
    y = np.empty((n_batch, channels, *out_sp), dtype=np.float64)
    windows = list(_windows(x.shape, kernel, strides, dilations, pads, auto_pad, ceil_mode))
    xf = x.astype(np.float64)
    for nb in range(n_batch):
        for c in range(channels):
            for o, taps in windows:
                vals = [xf[(nb, c) + pos] for pos, _ in taps if pos is not None]
                n_pad = sum(1 for _pos, in_pad in taps if in_pad)
                with np.errstate(all="ignore"):
                    y[(nb, c) + o] = reduce_fn(vals, len(vals), n_pad)
    return y.astype(x.dtype)


def global_pool(x, kind, p=2.0):
    axes = tuple(range(2, x.ndim))
    xf = x.astype(np.float64)
    if kind == "max":
        return np.max(x, axis=axes, keepdims=True)
    if kind == "avg":
        return np.mean(xf, axis=axes, keepdims=True).astype(x.dtype)
    return (np.sum(np.abs(xf) ** p, axis=axes, keepdims=True) ** (1.0 / p)).astype(x.dtype)
