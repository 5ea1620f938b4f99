"""Pieces every tvm_pool compute shares: block annotations, dtypes, reducers."""

from __future__ import annotations

from functools import reduce

from tvm import te, tirx

# Every tvm_pool compute block carries these annotations, so schedules find it fused or not.
#  - "tvm_pool.kind": what the block computes ("max", "max_index", "avg_sum", "avg_div", ...)
#  - "schedule_rule": MetaSchedule's custom-rule hook (s_tir.meta_schedule.<target>.<rule>)
KIND_ATTR = "tvm_pool.kind"
SCHEDULE_RULE_ATTR = "schedule_rule"
SPATIAL_RANK_ATTR = "tvm_pool.spatial_rank"
#  - "tvm_pool.pass_axis": on the passes of a separable window reduction, the spatial axis
#    the pass reduces (see compute.forms and compute.window_reduce)
PASS_AXIS_ATTR = "tvm_pool.pass_axis"
#  - "tvm_pool.layout": "channel_last" on the stages of a channel-last pool (absent: channel-first;
#    see compute.layout)
LAYOUT_ATTR = "tvm_pool.layout"

# Index value of a window that saw no data (a window entirely inside padding).
NO_INDEX = -1
# Internal "no candidate yet" index: larger than any real index, so ties prefer real elements.
_SENTINEL_INDEX = 2**62


def block_attrs(kind: str, spatial_rank: int, **extra) -> dict:
    attrs = {
        KIND_ATTR: kind,
        SCHEDULE_RULE_ATTR: f"tvm_pool.{kind}",
        SPATIAL_RANK_ATTR: spatial_rank,
    }
    attrs.update(extra)
    return attrs


def is_float(dtype: str) -> bool:
    return str(dtype).startswith(("float", "bfloat"))


def accumulate_dtype(dtype: str) -> str:
    """Sums of float16/bfloat16 accumulate in float32; float64 stays float64."""
    dtype = str(dtype)
    if dtype in ("float16", "bfloat16", "float32"):
        return "float32"
    if dtype == "float64":
        return "float64"
    if dtype.startswith(("int", "uint")):
        return "int32" if int(dtype.lstrip("uint") or 32) < 32 else "int64"
    raise ValueError(f"no accumulation type for {dtype}")


def max_identity(dtype: str):
    """The value of an empty max: -inf for floats, the smallest value for integers."""
    if str(dtype) == "bfloat16":
        # TVM has no bfloat16 infinity constant, and a cast of float32 -inf folds into a bfloat16
        # constant that TVM's CUDA code generator prints as `-inff` (not C++): the bit pattern
        # of bfloat16 -inf (0xFF80) instead, exact on every target.
        return tirx.reinterpret("bfloat16", tirx.const(0xFF80, "uint16"))
    if is_float(dtype):
        return -tirx.infinity(dtype)
    return tirx.min_value(dtype)


def is_nan(x):
    """NaN test for every float type. TVM's isnan has no bfloat16 lowering, so bfloat16 is
    widened first (exact); ``x != x`` would not do, TVM's simplifier folds it to false."""
    if str(x.ty) == "bfloat16":
        return tirx.isnan(x.astype("float32"))
    return tirx.isnan(x)


def max_of_all(values, dtype: str, ordered_pairs: bool = False):
    """The NaN-propagating max of ``values`` naming each value once in the max and once in a
    NaN test, so a chain of taps stays linear in size (a fold of :func:`nan_max_reducer`'s
    select names each partial result twice: 3^taps nodes, and minutes in TVM's passes at 7
    taps).

    ``ordered_pairs``: the test as "every pair of values is ordered", one ordered compare per
    two values ANDed along, instead of "some value is NaN" ORed along. The same result; on
    AVX-512 LLVM chains the ANDs through the compares' write masks (``vcmpordps ..{k}``) and
    picks with one ``vblendmps``, where the OR form pays a ``korw`` per pair. Channel-last 3x3
    s2 p1 max over 112x112x64, paired ratios to the channel-first twin, 2 threads: 1.10-1.15x
    -> 1.10-1.12x alone, 1.05-1.09x with :func:`.windows.clamped_access`."""
    result = values[0]
    for v in values[1:]:
        result = tirx.max(result, v)
    if not is_float(dtype):
        return result
    nan = tirx.const(float("nan"), dtype)
    if ordered_pairs:
        pairs = [values[i:i + 2] for i in range(0, len(values), 2)]
        ordered = [tirx.Not(reduce(tirx.Or, [is_nan(v) for v in pair])) for pair in pairs]
        return tirx.Select(reduce(tirx.And, ordered), result, nan)
    any_nan = is_nan(values[0])
    for v in values[1:]:
        any_nan = tirx.Or(any_nan, is_nan(v))
    return tirx.Select(any_nan, nan, result)


def nan_max_reducer(dtype: str):
    """max that propagates NaN (IEEE-754 ``maximum``), the choice in docs/conformance.md."""

    def combine(a, b):
        return tirx.Select(tirx.any(a > b, is_nan(a)), a, b)

    def identity(t):
        return max_identity(t)

    return te.comm_reducer(combine, identity, name="nan_max")


# 16-bit floats as int16 of the same order (:func:`half_order`): the bits of +inf; past them, on
# each sign, the NaNs.
HALF_INF_BITS = {"float16": 0x7C00, "bfloat16": 0x7F80}


def _flip_negatives(bits):
    """``bits`` with the magnitude bits of a negative int16 inverted (its own inverse)."""
    sign = tirx.shift_right(bits, tirx.const(15, "int16"))
    return tirx.bitwise_xor(bits, tirx.bitwise_and(sign, tirx.const(0x7FFF, "int16")))


def _nan_count(dtype: str) -> int:
    """How many NaN bit patterns one sign of ``dtype`` has."""
    return 0x7FFF - HALF_INF_BITS[dtype]


def half_order(x, dtype: str):
    """A float16/bfloat16 ``x`` as an int16 that orders as the value does, with every NaN above
    +inf, so a NaN-propagating max of the values is the int16 max of these: four vector
    operations per element and 16-bit integer lanes where CPUs lack half-precision arithmetic
    (x86 without AVX512-FP16).

    The bits with the magnitude inverted when negative order the numbers (-0.0 just below
    +0.0), the positive NaNs above +inf and the negative NaNs below -inf; moving every key down
    by the count of NaNs of one sign (wrapping: int16 arithmetic in TVM's LLVM code wraps) takes
    the negative NaNs round to the top, so no select is needed."""
    flipped = _flip_negatives(tirx.reinterpret("int16", x))
    return tirx.Sub(flipped, tirx.const(_nan_count(dtype), "int16"))


def half_from_order(key, dtype: str):
    """The float16/bfloat16 value of a :func:`half_order` key (a NaN keeps its bits)."""
    return tirx.reinterpret(dtype, _flip_negatives(tirx.Add(key, tirx.const(_nan_count(dtype), "int16"))))


def half_order_of_minus_inf(dtype: str) -> int:
    """:func:`half_order` of -inf (the padding of a max), as a Python int: the least int16."""
    return -(1 << 15)


# float32 as uint32 of the same order (:func:`single_order`): how many NaN bit patterns one sign has.
_SINGLE_NAN_COUNT = 0x7FFFFF
_INT32_SIGN = -(1 << 31)


def single_order(x):
    """A float32 ``x`` as a uint32 that orders as the value does, with every NaN above +inf and
    -inf at 0 (the uint32 max's identity), so a NaN-propagating max of the values is the uint32
    max of these: four vector operations per element, and a max that TVM's ``rfactor`` knows
    (its NaN-max select it does not).

    The bits with the magnitude inverted when negative and the sign bit inverted when not order
    the numbers as unsigned integers (the radix-sort key: -0.0 just below +0.0), the negative
    NaNs below -inf and the positive ones above +inf; moving every key down by the count of NaNs
    of one sign (uint32 arithmetic wraps; TVM's LLVM code marks int32 arithmetic no-wrap) takes
    the negative NaNs round to the top."""
    bits = tirx.reinterpret("int32", x)
    sign = tirx.shift_right(bits, tirx.const(31, "int32"))  # arithmetic: -1 negative, 0 not
    flipped = tirx.bitwise_xor(bits, tirx.bitwise_or(sign, tirx.const(_INT32_SIGN, "int32")))
    return tirx.Sub(tirx.reinterpret("uint32", flipped), tirx.const(_SINGLE_NAN_COUNT, "uint32"))


def single_from_order(key):
    """The float32 value of a :func:`single_order` key (a NaN keeps its bits)."""
    flipped = tirx.reinterpret("int32", tirx.Add(key, tirx.const(_SINGLE_NAN_COUNT, "uint32")))
    # the sign bit set: a number that was not negative (invert the sign only); clear: invert all
    sign = tirx.shift_right(flipped, tirx.const(31, "int32"))
    mask = tirx.bitwise_or(tirx.bitwise_not(sign), tirx.const(_INT32_SIGN, "int32"))
    return tirx.reinterpret("float32", tirx.bitwise_xor(flipped, mask))


# The float types with integer order keys (float64 has none: its max keeps its select).
ORDER_KEY_DTYPES = ("float16", "bfloat16", "float32")


def order_key(x, dtype: str):
    """``x`` as an integer key of the same order (NaN above +inf), ``dtype`` one of
    :data:`ORDER_KEY_DTYPES`."""
    return half_order(x, dtype) if dtype in HALF_INF_BITS else single_order(x)


def from_order_key(key, dtype: str):
    """The value of an :func:`order_key` key of a ``dtype`` value."""
    return half_from_order(key, dtype) if dtype in HALF_INF_BITS else single_from_order(key)


NAN_INDEX_RULES = ("first", "last")


def argmax_reducer(dtype: str, index_dtype: str, nan_index: str = "first"):
    """(value, index) max; NaN beats every number; ties go to the smaller index.

    The index reduced is a row-major position, so "smaller index" is "first in scan order":
    a window's taps scan in row-major order, and row-major positions increase along that scan.
    ``nan_index="last"``: among several NaNs the *last* one in scan order wins (PyTorch's CPU
    kernels test ``val > max || isnan(val)`` at every tap); number ties still go to the first.
    """
    if nan_index not in NAN_INDEX_RULES:
        raise ValueError(f"nan_index must be one of {NAN_INDEX_RULES}, got {nan_index!r}")
    float_type = is_float(dtype)

    def combine(a, b):
        if float_type:
            a_nan, b_nan = is_nan(a[0]), is_nan(b[0])
            if nan_index == "first":
                ties = tirx.all(tirx.any(a[0] == b[0], tirx.all(a_nan, b_nan)), a[1] < b[1])
            else:
                ties = tirx.any(tirx.all(a[0] == b[0], a[1] < b[1]), tirx.all(a_nan, b_nan, a[1] > b[1]))
            a_wins = tirx.any(tirx.all(a_nan, tirx.Not(b_nan)), a[0] > b[0], ties)
        else:
            a_wins = tirx.any(a[0] > b[0], tirx.all(a[0] == b[0], a[1] < b[1]))
        return tirx.Select(a_wins, a[0], b[0]), tirx.Select(a_wins, a[1], b[1])

    def identity(t_value, t_index):
        return max_identity(t_value), tirx.const(_SENTINEL_INDEX, t_index)

    return te.comm_reducer(combine, identity, name="argmax_first" if nan_index == "first" else "argmax_nan_last")


def int_round_div(total, count, acc: str):
    """total / count rounded half away from zero, for integer ``total`` and ``count > 0`` in
    ``acc`` (TFLite's and TensorRT's integer averages, OpenVINO's adaptive one).

    CPUs have no vector integer division, and a scalar one per output took 90% of an int8
    3x3 s2 average's time (issue 20). For ``acc`` int32 (inputs of 16 bits or fewer, so
    |total / count| <= 2^16) the quotient is taken in float64, where it is exact enough to
    round: a quotient that is not a half is at least 1/(2 count) >= 2^-32 from one, and float64
    errs by at most 2^16 * 2^-53 there; halves and the +-0.5 step are exact. Integer arithmetic
    on the count would not do: TVM's simplifier widens it, with the sum, to int64 (the count is
    an index expression), which AVX2 has no vector multiply or conversion for. int64 sums
    divide exactly in integers: floor((2|total| + count) / (2 count))."""
    zero = tirx.const(0, acc)
    if acc == "int32":
        q = total.astype("float64") / count.astype("float64")
        half = tirx.Select(q < tirx.const(0.0, "float64"), tirx.const(-0.5, "float64"), tirx.const(0.5, "float64"))
        return tirx.trunc(q + half).astype(acc)
    mag = tirx.floordiv(tirx.abs(total) * 2 + count, count * 2)
    return tirx.Select(total < zero, -mag, mag)


def all_of(conds):
    conds = [c for c in conds if not (isinstance(c, bool) and c)]
    if not conds:
        return True
    return tirx.all(*conds) if len(conds) > 1 else conds[0]
