"""Which compute form a windowed max or sum takes: every form and its condition once, in
:data:`FORMS` (read top to bottom, the first row whose condition holds wins), with the
thresholds that decide them. :mod:`tvm_pool.compute.window_reduce` builds each form.

Every form computes the same value (a sum may add in another order: docs/conformance.md);
they differ in what a schedule can make of them:

- ``flat_plane``: a global window over a small plane, as one contiguous row (:func:`flat_plane`);
- ``doubling``: a long stride-1 max window, by doubling passes (:func:`doubling`);
- ``axis_passes``: one pass per windowed axis (:func:`separable`);
- ``block_sums``: a long strided window of whole strides, from stride-long block sums
  (:func:`block_windows`);
- ``all_taps``: a max as one expression of every tap (:func:`few_taps`);
- ``keyed_plane``: a global max over a larger plane, as one reduction of integer keys of the
  same order (:func:`keyed_plane`);
- ``direct``: one reduction per output over its window's taps (any geometry, symbolic too).
"""

from __future__ import annotations

import contextlib
import contextvars
from functools import reduce

from tvm import tirx

from .. import spec

FLAT_PLANE = "flat_plane"
DOUBLING = "doubling"
AXIS_PASSES = "axis_passes"
BLOCK_SUMS = "block_sums"
ALL_TAPS = "all_taps"
KEYED_PLANE = "keyed_plane"
DIRECT = "direct"

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
# Channel-last windows (all_taps_beat_passes), in vector operations per output: a tap of a sum is
# one (x86 folds the load into the add), a tap of a NaN-propagating max two (the max and the NaN
# test); an element one pass leaves for the next costs INTERMEDIATE_COST (its store, its load
# again and the pass's own loop: fitted to the measurements listed there; 3 to 5 fit them all).
# (The taps' NaN test is now one ordered compare per two taps, common.max_of_all's ordered_pairs,
# and their padding clamped indices, windows.clamped_access. The counts were not refitted:
# measured since, paired with the channel-first twin, the 3x3 s1 p1 max over 1x28x28x192 is
# 0.77x-0.78x as taps against 0.83x as the passes it takes, and the 5x5 s2 p2 max over
# 1x56x56x64 0.72x-0.76x as taps against 0.65x-0.66x as passes, at 1 and 2 threads.)
TAP_COST = {"max": 2, "sum": 1}
INTERMEDIATE_COST = 4
# Long strided windows made of whole strides (kernel = m x stride): each input lies in m windows.
# Summed once per stride-long block, then m neighbouring blocks per output, every input is
# read and added once instead of m times. 1-D avg k64 s32 over 128x16000: 32.7 -> 20.5
# instructions per output on NEON (emulated, bench/arm_instructions.py); on x86 (znver4,
# `tvm-pool bench --only longwin_avg1d`) 0.098 ms at 2 threads and 0.182 ms at 1, where the full
# benchmark before it had 0.120 and 0.237 ms.
# Blocks are long enough for the schedules' vector partial sums (more taps than a row unrolls).
MIN_BLOCK_TAPS = 17
# A global window over a small static plane (7x7, 13x13) reduces the plane as one contiguous
# row: FLAT_LANES lanes of partial results, halved until two are left (flat_plane).
FLAT_LANES = 16


def static_geometry(windows) -> bool:
    """Every window's kernel, input and output size and begin padding known at compile time."""
    return all(
        not isinstance(w.kernel, tirx.Expr) and spec.is_static(w.in_size, w.out_size, w.pad_begin) for w in windows
    )


def _innermost_window_only(windows) -> bool:
    """Static geometry, and a window longer than 1 on the innermost spatial axis only."""
    if not static_geometry(windows):
        return False
    return [i for i, w in enumerate(windows) if w.kernel > 1] == [len(windows) - 1]


def flat_plane(windows) -> bool:
    """A global window (every axis whole, no padding) over a static plane of at least two and
    at most :data:`MAX_PASS_TAPS` rows of :data:`FLAT_LANES` elements, reduced as one
    contiguous row: on a 7x7 plane 3 vector loads and a few shuffles, against 7 loads of
    7-lane rows and a 7-tap horizontal pass for the separable form (ResNet-50's head at batch
    32, 1 thread: 0.21 against 0.43 ms)."""
    if not global_window(windows):
        return False
    plane = reduce(lambda a, w: a * w.kernel, windows, 1)
    return 2 <= plane // FLAT_LANES <= MAX_PASS_TAPS


def global_window(windows) -> bool:
    """Every axis whole (one output per plane), unpadded, static."""
    return static_geometry(windows) and all(
        w.out_size == 1 and w.kernel == w.in_size and w.pad_begin == 0 for w in windows)


def keyed_plane(windows) -> bool:
    """A global window that no pass form takes (a plane larger than :func:`flat_plane`'s), whose
    max reduces integer keys of the values' order (``common.order_key``) in one reduction, and
    back to the value once per plane. A uint32 max is one that TVM's ``rfactor`` knows, so the
    schedules give it vector partial maxima, as a long sum has; the NaN-propagating select of a
    float max it does not know, and that reduction stays one scalar chain per plane (x86, 1
    thread, 8x64x112x112: 7.1 ms, against 0.5 ms for the average of the same bytes)."""
    return global_window(windows)


def doubling(windows) -> bool:
    """A max over one long stride-1 window (more than :data:`MAX_PASS_TAPS` taps) on the
    innermost spatial axis, reduced by doubling: about 2 log2(K) operations per output
    instead of K."""
    if not _innermost_window_only(windows):
        return False
    w = windows[-1]
    return w.kernel > MAX_PASS_TAPS and w.stride == 1


def separable(windows) -> bool:
    """Whether a window max or sum reduces axis by axis (one pass per windowed axis): static
    geometry, at most :data:`MAX_PASS_TAPS` taps per axis, and either

    - one windowed axis: a single pass, the taps as one expression, which LLVM vectorises
      better than a reduction loop (1-D k4 s4 over 128x16000: 0.099 vs 0.13 ms, 1 thread);
    - windows overlapping along the innermost windowed axis, so the passes share work; or
    - three or more windowed axes, overlapping or not (see below).

    Non-overlapping windows over two axes (2x2 stride 2) keep the direct reduction (max: one
    expression of every tap, :func:`few_taps`), which reads each input once already."""
    if not static_geometry(windows):
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


def block_windows(windows) -> bool:
    """One windowed axis, the innermost, static, undilated, with a kernel of m >= 2 whole strides
    of at least :data:`MIN_BLOCK_TAPS`."""
    if not _innermost_window_only(windows):
        return False
    w = windows[-1]
    return (w.dilation == 1 and w.stride >= MIN_BLOCK_TAPS and w.kernel % w.stride == 0
            and w.kernel // w.stride >= 2)


def few_taps(windows) -> bool:
    """Static windows of at most :data:`MAX_ALL_TAPS` taps in all, which a max reduces as one
    elementwise expression of every tap: the reduction loop's select-based NaN max blocked
    LLVM's vectoriser (3-D 2x2x2 s2 over 64x16x56x56, 1 thread: 1.4 ms against 0.31 ms for
    stock TVM's plain max; 3-D windows now take the passes)."""
    return static_geometry(windows) and reduce(lambda a, w: a * w.kernel, windows, 1) <= MAX_ALL_TAPS


def all_taps_beat_passes(windows, reduction: str = "max") -> bool:
    """Channel-last: does a max or sum over separable windows of two windowed axes cost less per
    output as one expression of every tap (at most :data:`MAX_ALL_TAPS`) than as
    :func:`separable` passes?
    Every tap is a vector of C in either form, so the passes read no row more contiguously; they
    save only what neighbouring outputs share, and pay for the elements each pass leaves for the
    next. Per output, in vector operations: the taps cost ``TAP_COST * prod(K) + 1`` (the
    store); pass ``i`` costs ``TAP_COST * K_i`` plus :data:`INTERMEDIATE_COST` (the last one:
    its store) for each of its outputs, of which there are ``prod(s_j)`` per pool output over
    the axes ``j`` reduced after it.

    Measured on x86 at 2 threads (ms, taps against passes), max: 3x3 s2 p1 over 1x112x112x64
    0.036 against 0.050 (unpadded 0.041 against 0.055-0.061); 1x3x3 s(1,2,2) over
    1x16x56x56x64 0.17 against 0.23; 2x2 s1 over 1x28x28x256 0.018 against 0.029-0.045; and the
    passes stay for 3x3 s1 over 1x28x28x192 (0.027 against 0.032-0.043 as taps) and 5x5 s2
    (0.020 against 0.027-0.030). Sum (average, count_include_pad 0): 3x3 s1 p1 over 1x28x28x192
    0.017-0.020 against 0.025, over 1x56x56x64 0.024-0.029 against 0.029-0.032; 3x3 s2 p1 over
    1x112x112x64 0.032 against 0.048-0.060; and the passes stay for 5x5 s1 (0.011-0.017 against
    0.021-0.022 as taps). aarch64 keeps the passes (:func:`channel_last_passes`, entered for
    its targets by ``lowering.legalize_map``): 3x3 s2 p1 max over 1x112x112x64, 0.86 M
    instructions as taps against 0.76 M as passes (bench/arm_instructions.py)."""
    if not (separable(windows) and few_taps(windows)):
        return False
    windowed = [w for w in windows if w.kernel > 1]
    if len(windowed) != 2:
        # one pass is one expression of every tap already; over three windowed axes the count
        # does not hold (3x3x3 s2 p1 max over 1x16x28x28x64: 0.052-0.065 ms as passes, 0.082
        # as taps), and the passes stay
        return False
    tap = TAP_COST[reduction]
    passes = 0
    for i, w in enumerate(windowed):
        leaves = 1 if i == len(windowed) - 1 else INTERMEDIATE_COST
        passes += (tap * w.kernel + leaves) * reduce(lambda a, v: a * v.stride, windowed[i + 1 :], 1)
    return tap * reduce(lambda a, w: a * w.kernel, windowed, 1) + 1 < passes


def _max_passes(windows) -> bool:
    """Whether a max runs as passes at all: over :func:`separable` or :func:`few_taps` windows
    only. Its flat-plane and doubling forms narrow that choice, so a long window they would
    take alone (a global 1-D window of 100 taps, a stride-1 window of more than
    :data:`MAX_SINGLE_PASS_TAPS` taps) keeps the direct reduction for a max."""
    return separable(windows) or few_taps(windows)


def _always(_windows) -> bool:
    return True


# The form of a windowed reduction: the first row whose condition for that reduction holds.
# None: the form does not serve that reduction.
#
#   form          max                                           sum
FORMS = (
    (FLAT_PLANE,  lambda w: _max_passes(w) and flat_plane(w),  flat_plane),
    (DOUBLING,    lambda w: _max_passes(w) and doubling(w),    None),
    (AXIS_PASSES, separable,                                   separable),
    (BLOCK_SUMS,  None,                                        block_windows),
    (ALL_TAPS,    few_taps,                                    None),
    (KEYED_PLANE, keyed_plane,                                 None),
    (DIRECT,      _always,                                     _always),
)


# Forms that need channel-first memory: a flat plane reads each (n, c) plane as one contiguous
# row, and so does a keyed plane's reduction. Channel-last planes are strided by C; their global
# windows take the other forms, whose every tap is a contiguous run of channels.
CHANNEL_FIRST_FORMS = (FLAT_PLANE, KEYED_PLANE)
# Channel-last rows tried before FORMS, for a max or a sum of the data themselves: not for an
# argmax's int64 keys (as one expression of every tap, 3x3 s2 p1 with indices over
# 1x112x112x64 took 0.226 ms against 0.19 ms as passes on x86 at 2 threads, and 1.3x the
# aarch64 instructions), nor for a sum of converted taps (Lp: every tap mapped prod(K) times per
# output instead of once per first-pass tap; int8 widened to int32: TFLite's 3x3 s2 SAME int8
# average over 1x56x56x64 took 0.025 ms as taps against 0.016-0.019 as passes).
CHANNEL_LAST_FORMS = (
    (ALL_TAPS,    all_taps_beat_passes,                        lambda w: all_taps_beat_passes(w, "sum")),
)


# Whether the CHANNEL_LAST_FORMS rows apply to the computes built now (see channel_last_passes).
_CHANNEL_LAST_TAPS = contextvars.ContextVar("tvm_pool_channel_last_taps", default=True)
# Whether channel-last maxima of every tap read clamped taps with an ordered-pairs NaN test (see
# clamped_taps).
_CLAMPED_TAPS = contextvars.ContextVar("tvm_pool_clamped_taps", default=False)


@contextlib.contextmanager
def _set(var: contextvars.ContextVar, value):
    """``var`` set to ``value`` within it, back to what it was after."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def channel_last_passes():
    """Within it, channel-last windows keep their passes (the CHANNEL_LAST_FORMS rows are
    skipped): for targets whose schedule makes more of the passes (aarch64, where an operation
    saved counts for more than a row stored and loaded again). Legalization enters it per
    target (``lowering.legalize_map``); computes built outside it (the TFLite road builds its
    at import, before a target is known) take the rows."""
    return _set(_CHANNEL_LAST_TAPS, False)


def clamped_taps():
    """Within it, a channel-last max of every tap (the ALL_TAPS form) reads taps in the padding
    at the nearest data position (``windows.clamped_access``, where ``windows.clamps_exactly``)
    and tests NaN as ordered pairs (``common.max_of_all(ordered_pairs=True)``): for targets
    where that measured faster (x86: AVX-512 chains the ordered compares through write masks).
    Legalization enters it per target (``lowering.legalize_map``); computes built outside it
    keep the padded taps and the "some tap is NaN" test. On NEON the ordered pairs tripled the
    instructions (3x3 s2 p1 max over 1x112x112x64: 2.60 M against 0.86 M; LLVM turned the
    fmax into compares and selects) and the clamps alone cost 3%; CUDA is not measured."""
    return _set(_CLAMPED_TAPS, True)


def clamped_taps_on() -> bool:
    """Is :func:`clamped_taps` entered?"""
    return _CLAMPED_TAPS.get()


def choose_form(windows, reduction: str, by_axis: bool = True, channel_last: bool = False) -> str:
    """The form (a name from :data:`FORMS`) of a windowed ``reduction``: "max", "sum",
    "argmax" (a max of the argmax's keys) or "converted_sum" (a sum of taps converted first:
    Lp's ``|x|^p``, narrow data widened to the accumulation type).
    ``by_axis=False`` keeps the direct reduction whatever the windows (see
    :func:`tvm_pool.compute.window_reduce.window_sum`); ``channel_last`` tries the
    :data:`CHANNEL_LAST_FORMS` first (outside :func:`channel_last_passes`) and skips the
    :data:`CHANNEL_FIRST_FORMS`."""
    if not by_axis:
        return DIRECT
    column = {"max": 1, "argmax": 1, "sum": 2, "converted_sum": 2}[reduction]
    return next(
        row[0] for row in (CHANNEL_LAST_FORMS if channel_last and reduction in ("max", "sum") and _CHANNEL_LAST_TAPS.get()
                           else ()) + FORMS
        if row[column] is not None and row[column](windows) and not (channel_last and row[0] in CHANNEL_FIRST_FORMS)
    )
