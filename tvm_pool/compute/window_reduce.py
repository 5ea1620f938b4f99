"""Windowed max and sum, built in the form :func:`tvm_pool.compute.forms.choose_form` picks.

Every form but ``direct`` (one reduction per output) is a chain of short elementwise blocks
("passes") that schedules vectorise directly; each pass carries ``tvm_pool.pass_axis``, the
spatial axis it reduces, so a schedule can compute it per row or plane. The forms read the
:func:`~tvm_pool.compute.windows.padded` copy, except the flat plane, which reads whole
unpadded planes.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from functools import reduce

from tvm import te, tirx

from .. import spec
from . import forms, layout
from .common import (
    HALF_INF_BITS, ORDER_KEY_DTYPES, PASS_AXIS_ATTR, accumulate_dtype, block_attrs, from_order_key, half_from_order,
    half_order, half_order_of_minus_inf, is_float, is_nan, max_identity, max_of_all, nan_max_reducer, order_key,
)
from .forms import FLAT_LANES
from .windows import clamped_access, clamps_exactly, out_shape, padded, padded_access, reduce_axes


def window_max(data: te.Tensor, windows, kind: str = "max", name: str = "max_pool", keys=None) -> te.Tensor:
    """The max over each window's data taps (NaN propagates; no data gives the max identity).

    ``keys``: the argmax's int64 keys (:mod:`.argmax`) are reduced instead of the values:
    ``keys(x, index)`` is the key of the data element ``x`` at ``index``, made once per
    element in the padded copy (the least int64 in the padding)."""
    dtype = str(data.dtype)
    work, tap_value, finish = dtype, None, dtype
    channel_last = layout.is_channel_last(data)
    form = forms.choose_form(windows, "max" if keys is None else "argmax", channel_last=channel_last)
    if (keys is None and channel_last and form == forms.ALL_TAPS and forms.clamped_taps_on()
            and dtype not in HALF_INF_BITS and clamps_exactly(windows)):
        # every tap read from the data itself, its index clamped (no padded copy, no branches)
        return _all_taps_pass(data, None, windows, functools.partial(max_of_all, dtype=dtype, ordered_pairs=True),
                              kind, name, dtype, tap=functools.partial(clamped_access, data, windows))
    if form == forms.KEYED_PLANE:
        if keys is None and dtype in ORDER_KEY_DTYPES:
            return _keyed_plane_max(data, windows, kind, name)
        form = forms.DIRECT  # integers (their own keys), float64, the argmax's keys
    if keys is not None:
        source, offsets = padded(data, windows, max_identity("int64"), dtype="int64", element=keys)
        data, work, finish = source, "int64", "int64"
    elif form == forms.DIRECT:  # one reduction per output, in the data's type
        source, offsets = padded(data, windows, max_identity(dtype))
    elif dtype in HALF_INF_BITS:
        # float16/bfloat16 passes run on int16 keys of the same order (common.half_order), made
        # once in the padded copy: exact (a max returns one of its operands; every NaN is the
        # quiet NaN a float32 NaN narrows to), in 16-bit integer lanes where CPUs lack
        # half-precision arithmetic (x86 float16 3x3 s2 p1 over 1x64x112x112 in float32 passes,
        # 1 thread: 0.26 ms, against 0.10 ms for float32).
        work, tap_value = "int16", functools.partial(half_order, dtype=dtype)
        finish = functools.partial(half_from_order, dtype=dtype)
        if form != forms.FLAT_PLANE:
            source, offsets = padded(data, windows, half_order_of_minus_inf(dtype), dtype=work,
                                     element=lambda x, _: half_order(x, dtype))
    elif form != forms.FLAT_PLANE:
        source, offsets = padded(data, windows, max_identity(work), dtype=work)

    def max_all(taps):
        return max_of_all(taps, work)

    if form == forms.FLAT_PLANE:  # a global window reads whole unpadded planes
        return _flat_plane_passes(data, windows, max_all, tap_value or (lambda x: x.astype(work)), kind, name, finish)
    if form == forms.DIRECT:
        return _window_maxima(source, offsets, windows, kind, name)
    build = {forms.DOUBLING: _doubling_passes, forms.AXIS_PASSES: _axis_passes, forms.ALL_TAPS: _all_taps_pass}[form]
    return build(source, offsets, windows, max_all, kind, name, finish)


# MaxPool with Indices as a max and a tap (window_max_position): every pass keeps, next to the
# max, the least number among its window taps equal to it (NO_MATCH where none is). A tap's
# number holds its offset along each axis in a bit field of its own, the first axis highest
# (:func:`tap_fields`), so the least is the first in scan order whatever order the passes take
# the axes; a tap's number is a constant of the pass (positions built from the loop variables
# took TVM's int64 index arithmetic: AVX-512 vpminsq), and the offsets come back out by shifts
# and masks (a division by the kernel kept the finalize scalar: LLVM branches around it).
POSITION = "int32"
NO_MATCH = 2**31 - 1
# Under the PyTorch NaN rule (the last NaN wins) a NaN tap carries NAN_FLIP - its number, so the
# least is the last NaN; a window's matching taps are all NaN or all numbers (NaN propagates).
NAN_FLIP = 2**30


def tap_fields(windows) -> list[tuple[int, int]] | None:
    """``(shift, bits)`` of each axis's tap offset in a window tap's number: tap
    ``(r_0, ..., r_n)`` is number ``sum(r_i << shift_i)``; None when the fields need more than
    the 29 bits below NAN_FLIP's halving."""
    fields, shift = [], 0
    for w in reversed(windows):
        bits = (int(w.kernel) - 1).bit_length()
        fields.append((shift, bits))
        shift += bits
    return fields[::-1] if shift <= 29 else None


def window_max_position(data: te.Tensor, windows, nan_last: bool = False, name: str = "max_pool", order=None):
    """``(max, tap)``: the max over each window's taps (NaN propagates, as :func:`window_max`)
    and the least number (:func:`tap_fields`) of a tap equal to it, or of a NaN tap in a NaN
    window (``NAN_FLIP -`` the last one's with ``nan_last``), both outputs of every pass; None
    where the windows take neither the separable passes nor the all-taps form, or their taps
    do not number in 29 bits.

    Per tap a pass costs the max, an equality (and NaN) test, a select and a min, in 32-bit
    lanes (the int64 keys of :mod:`.argmax` cost about 20 operations to build per element and
    2 lanes a register on NEON). Without ``order`` the padding holds the max identity: it
    matches only a window whose data are all the identity too, which the caller maps to the
    window's first data tap;
    -0.0 matches +0.0, so the tap is the first zero's and the max either zero (as
    :func:`window_max`).

    ``order``: ``(key, least, nan)`` for float data: the padded copy holds ``key(x)``, an int32
    of the same order as the value, every NaN's ``nan`` above +inf (``least`` in the padding); the
    passes compare those: one integer max, compare and select per tap, where float taps also
    take a NaN test each (emulated NEON, 3x3 s2 p1 with Indices over 1x64x112x112: 5.42 M
    instructions with the keys, 5.84 M with float taps; channel-last 6.93 against 5.47 M). The
    max returned is then the key."""
    dtype = str(data.dtype)
    work = "float32" if dtype in HALF_INF_BITS else dtype
    form = forms.choose_form(windows, "argmax", channel_last=layout.is_channel_last(data))
    fields = tap_fields(windows)
    if form not in (forms.AXIS_PASSES, forms.ALL_TAPS) or fields is None:
        return None
    flip = nan_last and is_float(work)
    is_nan_tap = is_nan
    if order is not None and is_float(work):
        key, least, nan_key = order
        source, offsets = padded(data, windows, least, dtype="int32",
                                 element=lambda x, _, float_type=work: key(x.astype(float_type)))
        work = "int32"
        is_nan_tap = lambda k: k == nan_key  # noqa: E731
    else:
        source, offsets = padded(data, windows, max_identity(work), dtype=None if work == dtype else work)

    def number(n):
        return tirx.const(n, POSITION)

    def first_number(x, step):
        """The number a tap read from the data carries (flipped for a NaN under nan_last)."""
        return tirx.Select(is_nan_tap(x), number(NAN_FLIP - step), number(step)) if flip else number(step)

    def combine(taps):
        # The max appears again in each tap's test, not as a let: schedules duplicate a pass's
        # body (loop partitions), and a let variable may be defined only once; LLVM computes
        # the repeated max once.
        best = max_of_all([x for x, _ in taps], work)
        candidates = []
        for x, n in taps:
            match = x == best
            if is_float(work):
                match = tirx.Or(match, is_nan(x))
            candidates.append(tirx.Select(match, n, number(NO_MATCH)))
        return best, reduce(tirx.min, candidates)

    def read(prev, src, first, axis, r):
        step = r << fields[axis][0]
        if first:
            x = prev(*src)
            return x, first_number(x, step)
        x, n = prev[0](*src), prev[1](*src)
        if step == 0:
            return x, n
        # a NaN row's number is flipped already: the later tap numbers count down from it
        return x, (tirx.Select(is_nan_tap(x), n - number(step), n + number(step)) if flip else n + number(step))

    if form == forms.AXIS_PASSES:
        return _axis_passes(source, offsets, windows, combine, "max_index", name, read=read)

    def tap(idx, rs):
        x = padded_access(source, windows, offsets, idx, rs)
        return x, first_number(x, sum(r << shift for r, (shift, _) in zip(rs, fields)))

    return _all_taps_pass(source, offsets, windows, combine, "max_index", name, None, tap=tap)


def _finish(value, out):
    """``value`` of the last pass as the pool's result: cast to the dtype ``out``, or mapped by
    the function ``out`` (16-bit float keys back to values); as it is for None."""
    if out is None:
        return value
    return out(value) if callable(out) else value.astype(out)


def window_sum(data: te.Tensor, windows, kind: str, name: str, map_input=None, by_axis: bool = True) -> te.Tensor:
    """The sum over each window's data taps in the accumulation type (padding adds 0;
    ``map_input`` maps each tap first, e.g. |x|^p, and must map 0 to 0). ``by_axis=False``
    keeps one reduction over all taps even where the windows are separable: the same sum,
    which a schedule may reassociate as a whole (vector partial sums, schedules/arm.py)."""
    acc = accumulate_dtype(data.dtype)
    converted = map_input is not None or acc != str(data.dtype)
    form = forms.choose_form(windows, "converted_sum" if converted else "sum", by_axis,
                             channel_last=layout.is_channel_last(data))
    if form == forms.FLAT_PLANE:
        def tap_value(x):
            x = x.astype(acc)
            return map_input(x) if map_input is not None else x

        return _flat_plane_passes(data, windows, _add_all, tap_value, kind, name)
    if form == forms.AXIS_PASSES:
        # The padded copy converts to the accumulation type once; the passes add in it.
        source, offsets = padded(data, windows, 0, dtype=acc)
        return _axis_passes(source, offsets, windows, _add_all, kind, name, tap_value=map_input)
    if form == forms.ALL_TAPS:  # (channel-last) the same, every tap in one expression
        source, offsets = padded(data, windows, 0, dtype=acc)
        return _all_taps_pass(source, offsets, windows, _add_all, kind, name, None, by_axis=True)
    source, offsets = padded(data, windows, 0)
    build = {forms.BLOCK_SUMS: _block_sums, forms.DIRECT: _window_sums}[form]
    return build(source, offsets, windows, acc, map_input, kind, name)


def _add_all(taps):
    return reduce(lambda a, b: a + b, taps)


def _window_maxima(source, offsets, windows, kind, name):
    """One reduction per output: the max of its window's taps of the padded ``source``."""
    reducer = nan_max_reducer(source.dtype) if is_float(source.dtype) else te.max

    def value(*out_idx):
        rvars = reduce_axes(windows)
        return reducer(padded_access(source, windows, offsets, out_idx, rvars), axis=rvars)

    return layout.compute(source, out_shape(source, windows), value, name=name, attrs=block_attrs(kind, len(windows)))


def _keyed_plane_max(data, windows, kind, name):
    """A global max (:func:`tvm_pool.compute.forms.keyed_plane`) as the integer max of each
    element's order key (``common.order_key``), then each plane's key back to its value (a
    ``*_finalize`` stage, one element per plane)."""
    dtype = str(data.dtype)
    rank = len(windows)

    def key_max(*out_idx):
        rvars = reduce_axes(windows)
        return te.max(order_key(padded_access(data, windows, [0] * rank, out_idx, rvars), dtype), axis=rvars)

    shape = out_shape(data, windows)
    keys = layout.compute(data, shape, key_max, name=f"{name}_keys", attrs=block_attrs(kind, rank))
    return layout.compute(data, shape, lambda *idx: from_order_key(keys(*idx), dtype), name=name,
                          attrs=block_attrs(f"{kind}_finalize", rank))


def _window_sums(source, offsets, windows, acc, map_input, kind, name):
    """One reduction per output: the sum of its window's taps of the padded ``source``."""

    def value(*out_idx):
        rvars = reduce_axes(windows)
        x = padded_access(source, windows, offsets, out_idx, rvars).astype(acc)
        return te.sum(map_input(x) if map_input is not None else x, axis=rvars)

    return layout.compute(source, out_shape(source, windows), value, name=name, attrs=block_attrs(kind, len(windows)))


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
        return _add_all([blocks[tuple(head + [idx[-1] + i])] for i in range(m)])

    return layout.compute(source, out_shape(source, windows), window_sum_of_blocks, name=name)


def _flat_plane_passes(data, windows, combine, tap_value, kind, name, out_dtype=None):
    """A global reduction of each (contiguous, row-major) plane as one row of ``plane``
    elements: a pass combining its rows of :data:`FLAT_LANES` into that many lanes, passes
    halving the lanes down to two, and the result combining those two with the elements past
    the last whole row (see :func:`tvm_pool.compute.forms.flat_plane`). ``tap_value`` maps
    each element (to the accumulation type, |x|^p, ...). The passes carry ``pass_axis`` on the
    last axis (the lanes), shape ``[*lead, 1, ..., 1, lanes]``, so schedules compute them per
    plane.

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
    current = layout.compute(data, 
        lead_shape + unit + [FLAT_LANES],
        lambda *i: combine([element(i[:lead], j * FLAT_LANES + i[-1]) for j in range(rows)]),
        name=f"{name}_lanes", attrs=pass_attrs(False),
    )

    def halve(prev, half):
        return lambda *i: combine([prev(*i), prev(*i[:-1], i[-1] + half)])

    width = FLAT_LANES
    while width > 2:
        width //= 2
        current = layout.compute(data, lead_shape + unit + [width], halve(current, width), name=f"{name}_half{width}",
                             attrs=pass_attrs(False))
    pair = current

    def result(*idx):
        taps = [pair(*idx[:-1], 0), pair(*idx[:-1], 1)]
        taps += [element(idx[:lead], t) for t in range(rows * FLAT_LANES, plane)]
        value = combine(taps)
        return _finish(value, out_dtype)

    return layout.compute(data, out_shape(data, windows), result, name=name, attrs=pass_attrs(True))


def _axis_passes(source, offsets, windows, combine, kind, name, out_dtype=None, tap_value=None, read=None):
    """One pass per windowed axis over ``source`` (the padded data); ``combine`` reduces the list
    of a window's taps along one axis to one value, ``tap_value`` (if any) maps the first
    pass's taps. Pass ``j`` reduces axis ``axes[j]``; its shape has output sizes on the axes
    reduced so far (and on 1-tap axes, which the first pass maps), padded sizes on the rest.
    The last pass is the pool's result (cast to ``out_dtype`` when given).

    ``read(prev, src, first, axis, r)``: tap ``r`` of pass ``prev`` (``source`` for the first
    pass) at ``src``, instead of ``prev(*src)``: for passes of several outputs (``combine`` returning a
    tuple, each pass a list of tensors; :func:`window_max_position`)."""
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
                if read is not None:
                    taps.append(read(prev, src, first, axis, r))
                    continue
                x = prev(*src)
                taps.append(tap_value(x) if first and tap_value is not None else x)
            result = combine(taps)
            return _finish(result, out_dtype) if last else result

        return value

    current = source
    for j, axis in enumerate(axes):
        last = j == len(axes) - 1
        shape = list(source.shape[:lead])
        for i, w in enumerate(windows):
            shape.append(spec.as_dim(w.out_size) if done[i] or i == axis else source.shape[lead + i])
        attrs = block_attrs(kind if last else f"{kind}_pass", rank, **{PASS_AXIS_ATTR: axis})
        current = layout.compute(source, 
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
        current = layout.compute(source, shape, value, name=f"{name}_level{k}", attrs=attrs)
    last = current

    def result(*idx):
        return _finish(combine([last(*idx), last(*idx[:-1], idx[-1] + (kernel - q) * dilation)]), out_dtype)

    attrs = block_attrs(kind, rank, **{PASS_AXIS_ATTR: rank - 1})
    return layout.compute(source, out_shape(source, windows), result, name=name, attrs=attrs)


def _all_taps_pass(source, offsets, windows, combine, kind, name, out_dtype, by_axis: bool = False, tap=None):
    """One elementwise block combining every tap of each window (row-major scan order), marked
    as a one-pass chain on the innermost windowed axis so schedules treat it as the passes.
    ``by_axis``: ``combine`` the taps along the outermost axis first, then those results along
    the next, as :func:`_axis_passes` does (a sum then adds in the passes' order, and the
    outermost axis's sums of one column are the same expression for every output that reads
    that column, for LLVM to compute once where a schedule unrolls neighbouring outputs).
    ``tap(idx, rs)``: the value of tap ``rs`` of output ``idx`` (else read from the padded
    ``source`` at ``offsets``)."""
    rank = len(windows)
    taps_per_axis = [range(w.kernel) for w in windows]
    tap = tap or functools.partial(padded_access, source, windows, offsets)

    def value(*idx):
        taps = [tap(idx, rs) for rs in itertools.product(*taps_per_axis)]
        if by_axis:
            for axis in range(rank):  # taps in row-major order: axis 0 varies slowest
                inner = len(taps) // windows[axis].kernel
                taps = [combine(taps[j::inner]) for j in range(inner)]
            return _finish(taps[0], out_dtype)
        return _finish(combine(taps), out_dtype)

    axis = max([i for i, w in enumerate(windows) if w.kernel > 1] or [rank - 1])
    attrs = block_attrs(kind, rank, **{PASS_AXIS_ATTR: axis})
    return layout.compute(source, out_shape(source, windows), value, name=name, attrs=attrs)
