"""MaxPool with Indices as a max of packed int64 keys (``compute.argmax``, issue 23): the same
values and indices as the (value, index) reduction it replaced, bit for bit, for every type
that packs, both layouts, both NaN rules and both numberings; -0.0 survives; the CPU schedule
makes the keys once per plane in TVM vectors and has no reduction block left."""

import numpy as np
import pytest
import tvm
from tvm import te

from tvm_pool.compute import argmax, layout
from tvm_pool.compute.windows import windows_for

KEY_TYPES = ["float32", "float16", "int8", "uint8", "int16", "uint16", "int32"]


def _run(fn, x, windows, nan_index, fold, channel_last):
    shape = layout.to_channel_last(list(x.shape)) if channel_last else list(x.shape)
    data = te.placeholder(shape, str(x.dtype), name="x")
    values, index = layout.unwrap(fn(layout.ChannelLast(data) if channel_last else data, windows, nan_index, fold))
    lib = tvm.compile(te.create_prim_func([data, values, index]), target="llvm")
    out_shape = [int(d) for d in values.shape]
    feed = np.ascontiguousarray(np.moveaxis(x, 1, -1)) if channel_last else x
    args = [tvm.runtime.tensor(feed), tvm.runtime.tensor(np.zeros(out_shape, x.dtype)),
            tvm.runtime.tensor(np.zeros(out_shape, "int64"))]
    lib(*args)
    return args[1].numpy(), args[2].numpy()


def _tie_heavy(rng, shape, dtype):
    """Few distinct values (ties everywhere), the type's least value, and for floats NaN, -inf
    and zeros of both signs."""
    x = rng.integers(-2, 3, size=shape).astype(dtype)
    flat = x.reshape(-1)
    some = lambda frac: rng.integers(0, flat.size, size=max(1, int(flat.size * frac)))  # noqa: E731
    if np.issubdtype(x.dtype, np.floating):
        flat[some(0.2)] = -0.0
        flat[some(0.2)] = -np.inf
        if rng.integers(0, 2):
            flat[some(0.1)] = np.nan
    else:
        flat[some(0.3)] = np.iinfo(x.dtype).min
    return x


def _same_bits(a, b):
    if np.issubdtype(a.dtype, np.floating):
        # NaN payloads are not kept (every NaN comes back as the canonical one); -0.0 is
        return np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(
            np.where(np.isnan(a), 0, a).view(f"u{a.itemsize}"), np.where(np.isnan(b), 0, b).view(f"u{b.itemsize}"))
    return np.array_equal(a, b)


def random_cases(rng, count, accept=lambda windows: True):
    """``count`` random (data, windows, case, description) of MaxPool with Indices over the key
    types: ranks 1-3, kernels, strides, dilations, pads and ceil mode, tie-heavy data, both NaN
    rules, numberings and layouts; ``accept(windows)`` filters them."""
    done = 0
    while done < count:
        rank = int(rng.integers(1, 4))
        shape = [2, 3] + [int(rng.integers(1, 9)) for _ in range(rank)]
        kernel = [int(rng.integers(1, 5)) for _ in range(rank)]
        strides = [int(rng.integers(1, 4)) for _ in range(rank)]
        dilations = [int(rng.integers(1, 3)) for _ in range(rank)]
        pads = [int(rng.integers(0, 3)) for _ in range(2 * rank)]
        ceil_mode = bool(rng.integers(0, 2))
        dtype = KEY_TYPES[int(rng.integers(0, len(KEY_TYPES)))]
        try:
            windows = windows_for(te.placeholder(shape, dtype), kernel, strides, dilations, pads, "NOTSET", ceil_mode)
        except ValueError:
            continue
        if any(int(w.out_size) < 1 for w in windows) or not accept(windows):
            continue
        x = _tie_heavy(rng, shape, dtype)
        case = dict(nan_index=str(rng.choice(["first", "last"])), fold=bool(rng.integers(0, 2)),
                    channel_last=bool(rng.integers(0, 2)))
        yield x, windows, case, f"{dtype} {shape} k{kernel} s{strides} d{dilations} p{pads} ceil={ceil_mode} {case}"
        done += 1


def assert_like_reduction(fn, x, windows, case, where, same_values):
    """``fn``'s values (compared by ``same_values``) and indices equal the reduction's."""
    got = _run(fn, x, windows, **case)
    want = _run(argmax._argmax_reduction, x, windows, **case)
    assert same_values(got[0], want[0]), where
    np.testing.assert_array_equal(got[1], want[1], err_msg=where)


@pytest.mark.parametrize("seed", range(4))
def test_keys_give_the_reductions_values_and_indices(seed):
    for x, windows, case, where in random_cases(np.random.default_rng(seed), 6):
        assert argmax.uses_keys(windows, str(x.dtype))
        assert_like_reduction(argmax._argmax_keys, x, windows, case, where, _same_bits)


@pytest.mark.parametrize("nan_index", ["first", "last"])
def test_first_maximum_nan_rules_and_negative_zero(nan_index):
    x = np.array([[[[-0.0, 0.0, 1.0, 1.0, np.nan, 2.0, np.nan, -np.inf, -np.inf]]]], "float32")
    windows = windows_for(te.placeholder(x.shape, "float32"), [1, 3], [1, 2], pads=[0, 1, 0, 1])
    values, index = _run(argmax._argmax_keys, x, windows, nan_index, True, False)
    # windows: [pad, -0, +0], [+0, 1, 1], [1, nan, 2], [2, nan, -inf], [-inf, -inf, pad]
    np.testing.assert_array_equal(index[0, 0, 0], [0, 2, 4, 6, 7])
    assert np.signbit(values[0, 0, 0, 0]) and values[0, 0, 0, 0] == 0
    assert np.isnan(values[0, 0, 0, 2]) and values[0, 0, 0, 4] == -np.inf
    two_nans = np.array([[[[np.nan, 1.0, np.nan]]]], "float32")
    windows = windows_for(te.placeholder(two_nans.shape, "float32"), [1, 3])
    _, index = _run(argmax._argmax_keys, two_nans, windows, nan_index, True, False)
    assert index[0, 0, 0, 0] == (0 if nan_index == "first" else 2)


def test_a_window_in_the_padding_only_has_no_index():
    x = np.full((1, 1, 2, 2), -np.inf, "float32")
    windows = windows_for(te.placeholder(x.shape, "float32"), [1, 1], [1, 3], pads=[0, 3, 0, 0])
    values, index = _run(argmax._argmax_keys, x, windows, "first", True, False)
    assert index[0, 0, 0, 0] == argmax._SENTINEL_INDEX and values[0, 0, 0, 0] == -np.inf
    assert index[0, 0, 0, 1] == 0 and values[0, 0, 0, 1] == -np.inf  # a -inf in the data is a maximum


def test_wide_types_and_symbolic_sizes_keep_the_reduction():
    windows = windows_for(te.placeholder((1, 1, 8, 8), "float32"), [3, 3], [2, 2], pads=[1, 1, 1, 1])
    assert argmax.uses_keys(windows, "float32")
    assert not argmax.uses_keys(windows, "float64") and not argmax.uses_keys(windows, "int64")
    n = tvm.tirx.Var("n", "int64")
    symbolic = windows_for(te.placeholder((1, 1, n, 8), "float32"), [3, 3], [2, 2], pads=[1, 1, 1, 1])
    assert not argmax.uses_keys(symbolic, "float32")


def test_x86_schedule_makes_keys_once_per_plane_in_vectors():
    """No reduction block is left (the let-bound pair TVM cannot vectorise), and the key copy
    is computed under the parallel plane loop with TVM vector pieces, not inlined per tap."""
    from tvm_pool import compute
    from tvm_pool.schedules import schedule_pass

    x = te.placeholder((1, 8, 112, 112), "float32", name="x")
    outs = compute.max_pool(x, [3, 3], [2, 2], pads=[1, 1, 1, 1], return_indices=True)
    mod = tvm.IRModule({"main": te.create_prim_func([x, *outs])})
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    with target:
        text = schedule_pass(target)(mod)["main"].script()
    assert "T.parallel" in text and "T.vectorized" in text
    assert 'T.sblock("pad' in text and "T.axis.reduce" not in text
    par = text.index("T.parallel")
    first_pass = text.index('T.sblock("max_pool_key')
    copy = text[par:first_pass]  # what the parallel plane loop does before the first pass
    assert 'T.sblock("pad' in copy and "T.vectorized" in copy


def test_a_symbolic_batch_keeps_the_scheduled_reduction():
    windows = windows_for(te.placeholder((1, 1, 8, 8), "float32"), [3, 3], [2, 2], pads=[1, 1, 1, 1])
    assert not argmax.uses_keys(windows, "float32", [tvm.tirx.Var("n", "int64"), 8, 8, 8])
    assert argmax.uses_keys(windows, "float32", [2, 8, 8, 8])
