"""The (value, index) max of MaxPool with Indices, in three forms, and the stage that turns the
position found into the numbering requested.

- **Max and tap** (static sizes, :func:`uses_keys`, windows that take the separable passes or
  one expression of every tap: :func:`_argmax_pairs`): every pass keeps two 32-bit outputs, the
  max and the number of the first window tap that holds it
  (:func:`.window_reduce.window_max_position`); float data are compared as int32 keys of the
  same order (:func:`_order`, made once in the padded copy). The tap becomes the position at
  the end. -0.0 ties with +0.0 (the position of the first zero; the value +0.0), as the max
  without Indices gives either.
- **Keys** (static sizes, the other forms: a long stride-1 window's doubling, a global window
  over a flat plane): each data element becomes an int64 key, its
  value mapped to an int32 of the same order in the high half and its position in the plane in
  the low half, the earlier position the larger (see :data:`LOW_MAX`). The first maximum in
  scan order is then the largest key among the equal values, so the pool is
  :func:`.window_reduce.window_max` over the keys, in whatever form a max takes (separable
  passes, ...), and every schedule of a window max serves it; the result is unpacked into the
  value and the position. The padding holds the least key, so it never wins a tie.
- **Reduction** (symbolic sizes, 64-bit types, planes over :data:`MAX_PLANE`): one
  comm_reducer over each window's taps, (value, index) pairs with a let-bound combiner, which
  TVM 0.27 does not vectorise (tests/test_tvm_vectorize_let.py).

NaN: a NaN beats every number. Among NaNs the first wins (``nan_index="first"``, ONNX) or the
last (``"last"``, PyTorch's CPU kernels); among equal numbers, always the first. A window that
sees no data gives the max identity and index -1. The first two forms return a NaN window's
value as the canonical NaN (docs/conformance.md).
"""

from __future__ import annotations

from functools import reduce

from tvm import tirx

from . import forms, layout
from .common import (
    NO_INDEX, _SENTINEL_INDEX, argmax_reducer, block_attrs, is_float, is_nan, max_identity,
)
from . import window_reduce
from .window_reduce import window_max, window_max_position
from .windows import may_see_no_data, out_shape, reduce_axes, row_major, taps_always_inside, window_access

def argmax(data, windows, storage_order, index_scope, index_dtype, nan_index="first"):
    """``(values, indices)`` of max pooling ``data`` over ``windows`` (see
    :func:`tvm_pool.compute.pool.max_pool` for the numberings)."""
    rank = len(windows)
    lead = len(data.shape) - rank
    # With row-major numbering of the whole tensor the reduced index is the final one (the
    # plane offset is a constant per window); other numberings take a stage afterwards.
    fold_plane_offset = index_scope == "tensor" and storage_order == 0
    keyed = uses_keys(windows, str(data.dtype), data.shape)
    pairs = keyed and _argmax_pairs(data, windows, nan_index, fold_plane_offset)
    if pairs:
        values, raw_index = pairs
    elif keyed:
        values, raw_index = _argmax_keys(data, windows, nan_index, fold_plane_offset)
    else:
        values, raw_index = _argmax_reduction(data, windows, nan_index, fold_plane_offset)
    final_already = fold_plane_offset or (index_scope == "plane" and storage_order == 0)
    if final_already and not may_see_no_data(windows) and index_dtype == "int64":
        return values, raw_index

    spatial_sizes = [w.in_size for w in windows]

    def final_index(*out_idx):
        raw = raw_index[out_idx]
        if fold_plane_offset:
            index = raw
        else:
            index = _row_to_column_major(raw, spatial_sizes) if storage_order == 1 else raw
            if index_scope == "tensor":
                index = _plane_offset(data, out_idx[:lead], spatial_sizes) + index
        index = tirx.Select(raw == tirx.const(_SENTINEL_INDEX, "int64"), tirx.const(NO_INDEX, "int64"), index)
        return index.astype(index_dtype)

    indices = layout.compute(data, out_shape(data, windows), final_index, name="max_pool_index",
                             attrs=block_attrs("max_index_finalize", rank))
    return values, indices


def _argmax_reduction(data, windows, nan_index, fold_plane_offset):
    """One (value, index) reduction per output, in int64 whatever the requested index type
    (the "no candidate" sentinel needs the range); the index is row-major over the tensor
    (``fold_plane_offset``) or over the plane."""
    rank = len(windows)
    lead = len(data.shape) - rank
    dtype = data.dtype
    reducer = argmax_reducer(dtype, "int64", nan_index)
    spatial_sizes = [w.in_size for w in windows]

    def value_and_index(*out_idx):
        rvars = reduce_axes(windows)
        idx, inside = window_access(data, windows, out_idx, rvars)
        x = data[tuple(idx)]
        flat = row_major(idx, data.shape) if fold_plane_offset else row_major(idx[lead:], spatial_sizes)
        if inside is not True:
            x = tirx.if_then_else(inside, x, max_identity(dtype))
            flat = tirx.if_then_else(inside, flat, tirx.const(_SENTINEL_INDEX, "int64"))
        return reducer((x, flat), axis=rvars)

    return layout.compute(data, out_shape(data, windows), value_and_index, name="max_pool",
                          attrs=block_attrs("max_index", rank))


# The key of a data element: its value mapped to an int32 in the same order (``_order``) in
# the high half, its position ``p`` in the plane in the low half, as ``(LOW_MAX - p) << 1``
# (the smaller position has the larger key: ties go to the first in scan order) with the
# sign of a zero in bit 0 (so -0.0 comes back as -0.0). Under a PyTorch NaN rule a NaN keeps
# ``p << 1`` instead (the last NaN wins). The padding's key is below every data key.
LOW_MAX = 2**29 - 1
# Planes of at most 2^28 elements: a position |p| <= 2^29 then (the padding's too, in the
# loop parts TVM folds to constants) keeps (LOW_MAX - p) << 1 inside int32.
MAX_PLANE = 2**28
PAD_KEY = -(2**63)
NAN_ORDER = 0x7FC00000  # every NaN's order: above +inf (0x7F800000), and the canonical NaN's bits
KEY_DTYPES = ("float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16", "int32")


def uses_keys(windows, dtype: str, shape=None) -> bool:
    """Whether a max with indices reduces keys: static sizes (every axis of ``shape``: the
    schedules' passes need them, and a symbolic batch keeps the reduction, which they
    parallelise over its static axes), planes of at most MAX_PLANE elements, and a type whose
    values order as an int32."""
    if str(dtype) not in KEY_DTYPES or not forms.static_geometry(windows):
        return False
    if shape is not None and not all(isinstance(d, (int, tirx.IntImm)) for d in shape):
        return False
    return reduce(lambda a, w: a * int(w.in_size), windows, 1) <= MAX_PLANE


def _order(x, work):
    """``x`` as an int32 that orders like the value: the bits of a number >= +0.0, minus the
    magnitude's bits of a negative one (-0.0 orders as +0.0: a tie), NAN_ORDER for every NaN.
    Written so that a vector of it is 6 int32 operations and no float compare (and, shift,
    xor, sub, compare, blend: MaxPool 3x3 s2 p1 with Indices over 1x64x112x112, 1 thread,
    0.705 -> 0.66 ms; with the sign as a blend, or NaN as an unordered compare, 0.70)."""
    if not is_float(work):
        return x.astype("int32")
    bits = tirx.reinterpret("int32", x)
    magnitude = tirx.bitwise_and(bits, tirx.const(0x7FFFFFFF, "int32"))
    sign = tirx.shift_right(bits, tirx.const(31, "int32"))  # 0, or -1 for a negative value
    number = tirx.bitwise_xor(magnitude, sign) - sign  # -magnitude where negative
    return tirx.Select(magnitude > tirx.const(0x7F800000, "int32"), tirx.const(NAN_ORDER, "int32"), number)


def _argmax_keys(data, windows, nan_index, fold_plane_offset):
    """The max of each window's keys (see :data:`LOW_MAX`), unpacked into the value and the
    row-major position of the first maximum; the max is :func:`.window_reduce.window_max`, in
    whatever form it takes for ``windows`` (separable passes, ...), so every schedule of a
    window max (every target, both layouts) serves the argmax too, as an int64 max."""
    rank = len(windows)
    lead = len(data.shape) - rank
    dtype = str(data.dtype)
    work = "float32" if dtype in ("float16", "bfloat16") else dtype
    sizes = [w.in_size for w in windows]
    nan_last = nan_index == "last" and is_float(work)

    def pack(x, p):
        """The key of value ``x`` (in ``work``) at plane position ``p`` (int32). Computed in
        int32 where it can be (8 lanes of AVX2 instead of 4), widened once at the end."""
        low = tirx.shift_left(tirx.const(LOW_MAX, "int32") - p, tirx.const(1, "int32"))
        if is_float(work):
            # (not `bits == INT32_MIN`: TVM 0.27's simplifier folds that comparison to false)
            negative_zero = tirx.all(x == tirx.const(0, work), tirx.reinterpret("int32", x) < tirx.const(0, "int32"))
            low = tirx.bitwise_or(low, negative_zero.astype("int32"))
            if nan_last:
                low = tirx.Select(is_nan(x), tirx.shift_left(p, tirx.const(1, "int32")), low)
        return tirx.bitwise_or(tirx.shift_left(_order(x, work).astype("int64"), tirx.const(32, "int64")),
                               low.astype("int64"))

    def element_key(x, idx):
        return pack(x.astype(work), row_major(idx[lead:], sizes).astype("int32"))

    best = window_max(data, windows, kind="max_index", name="max_pool_key", keys=element_key)

    def order_of(k):
        return tirx.shift_right(k, tirx.const(32, "int64")).astype("int32")

    def no_data(k):
        return k == tirx.const(PAD_KEY, "int64")

    def value(*idx):
        k = best(*idx)
        order = order_of(k)
        if is_float(work):
            negative_zero = tirx.bitwise_and(k, tirx.const(1, "int64")) != tirx.const(0, "int64")
            x = _from_order(order, negative_zero).astype(dtype)
        else:
            x = order.astype(dtype)
        return tirx.Select(no_data(k), max_identity(dtype), x)

    def position(*idx):
        k = best(*idx)
        q = tirx.shift_right(tirx.bitwise_and(k, tirx.const(0xFFFFFFFF, "int64")), tirx.const(1, "int64"))
        p = tirx.const(LOW_MAX, "int64") - q
        if nan_last:
            p = tirx.Select(order_of(k) == tirx.const(NAN_ORDER, "int32"), q, p)
        if fold_plane_offset:
            p = _plane_offset(data, idx[:lead], sizes) + p
        return tirx.Select(no_data(k), tirx.const(_SENTINEL_INDEX, "int64"), p)

    shape = out_shape(data, windows)
    attrs = block_attrs("max_index_finalize", rank)
    values = layout.compute(data, shape, value, name="max_pool", attrs=attrs)
    index = layout.compute(data, shape, position, name="max_pool_raw_index", attrs=attrs)
    return values, index


def _argmax_pairs(data, windows, nan_index, fold_plane_offset):
    """The max and the position of the first maximum from
    :func:`.window_reduce.window_max_position`'s passes (None where its forms do not apply):
    the window tap found becomes a position in the plane, in int32 (planes of at most
    MAX_PLANE elements). Float data are compared as int32 keys (:func:`_order`) with the
    padding below every key, so it never matches a window that holds data; integer data are
    compared as they are, and a window whose max is the least integer takes its first data tap
    (its padding matched too)."""
    rank = len(windows)
    lead = len(data.shape) - rank
    dtype = str(data.dtype)
    nan_last = nan_index == "last" and is_float(dtype)
    work = "float32" if dtype in ("float16", "bfloat16") else dtype
    keyed = is_float(work)
    # below every key (-inf's is -0x7F800000); not -2^31: TVM 0.27 folds `x == -2^31` to false
    pad_key = tirx.const(-(2**31) + 1, "int32")
    order = (lambda x: _order(x, work), pad_key, tirx.const(NAN_ORDER, "int32"))
    pair = window_max_position(data, windows, nan_last, name="max_pool_key" if keyed else "max_pool",
                               order=order if keyed else None)
    if pair is None:
        return None
    best, tap = pair
    sizes = [w.in_size for w in windows]
    fields = window_reduce.tap_fields(windows)
    no_data = may_see_no_data(windows)

    def plane_position(coords):
        p = tirx.const(0, "int32")
        for c, n in zip(coords, sizes):
            p = p * tirx.const(int(n), "int32") + c
        return p

    def position(*idx):
        v = best(*idx)
        number = tap(*idx)
        if nan_last:
            number = tirx.Select(v == tirx.const(NAN_ORDER, "int32"), tirx.const(window_reduce.NAN_FLIP, "int32") - number, number)
        found = []
        for (shift, bits), w, o in zip(fields, windows, idx[lead:]):
            r = tirx.bitwise_and(tirx.shift_right(number, tirx.const(shift, "int32")), tirx.const((1 << bits) - 1, "int32"))
            start = tirx.Cast("int32", o) * tirx.const(int(w.stride), "int32") - tirx.const(int(w.pad_begin), "int32")
            found.append(start + r * tirx.const(int(w.dilation), "int32"))
        p = plane_position(found)
        has_data = True
        if keyed:
            has_data = v != pad_key if no_data else True
        else:
            first, has_data = _first_data_tap(windows, idx[lead:])
            p = tirx.Select(v == max_identity(work), plane_position([tirx.Cast("int32", f) for f in first]), p)
        p = tirx.Cast("int64", p)
        if fold_plane_offset:
            p = _plane_offset(data, idx[:lead], sizes) + p
        return p if has_data is True else tirx.Select(has_data, p, tirx.const(_SENTINEL_INDEX, "int64"))

    shape = out_shape(data, windows)
    attrs = block_attrs("max_index_finalize", rank)
    index = layout.compute(data, shape, position, name="max_pool_raw_index", attrs=attrs)
    if not keyed:
        return best, index

    def value(*idx):  # the key back to its value (-0.0 as +0.0, every NaN as the canonical NaN)
        v = _from_order(best(*idx)).astype(dtype)
        return tirx.Select(best(*idx) == pad_key, max_identity(dtype), v) if no_data else v

    return layout.compute(data, shape, value, name="max_pool", attrs=attrs), index


def _from_order(order, negative_zero=None):
    """The float32 whose :func:`_order` is ``order``: +0.0 for 0, or -0.0 where
    ``negative_zero`` holds; NAN_ORDER is the canonical NaN's bits."""
    signed = tirx.bitwise_or(tirx.const(0, "int32") - order, tirx.const(-(2**31), "int32"))
    negative = order < tirx.const(0, "int32")
    if negative_zero is not None:
        negative = tirx.any(negative, negative_zero)
    return tirx.reinterpret("float32", tirx.Select(negative, signed, order))


def _plane_offset(data, lead_idx, sizes):
    """The row-major position (int64) of plane ``lead_idx``'s first element in ``data``."""
    plane = reduce(lambda a, b: a * b, [tirx.Cast("int64", n) for n in sizes])
    return row_major(lead_idx, data.shape[:len(lead_idx)]) * plane


def _first_data_tap(windows, out_idx):
    """The data position of window ``out_idx``'s first tap inside the data, per axis, and whether
    it has one (True where no window can lie in the padding)."""
    first, has_data = [], []
    for w, o in zip(windows, out_idx):
        start = w.start(o)
        if taps_always_inside(w):
            first.append(start)
            continue
        d = w.dilation
        skipped = tirx.Select(start < 0, tirx.floordiv(d - 1 - start, d), tirx.const(0, str(start.ty)))
        first.append(start + skipped * d)
        has_data.append(tirx.all(skipped < w.kernel, start + skipped * d < w.in_size))
    if not may_see_no_data(windows):
        return first, True
    return first, reduce(tirx.And, has_data) if has_data else True


def _row_to_column_major(raw, sizes):
    """Renumber a row-major position within a box of ``sizes`` column-major (int64)."""
    coords = []
    rest = raw
    for n in reversed(sizes):
        n = tirx.Cast("int64", n)
        coords.append(tirx.floormod(rest, n))
        rest = tirx.floordiv(rest, n)
    coords.reverse()  # coords[i] is the position along axis i
    flat = tirx.const(0, "int64")
    for p, n in zip(reversed(coords), reversed(sizes)):
        flat = flat * tirx.Cast("int64", n) + p
    return flat
