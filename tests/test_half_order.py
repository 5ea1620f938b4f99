"""float16/bfloat16 max as an int16 max of keys of the same order (``compute.common.half_order``):
the key of every one of the 65536 bit patterns orders as the value does (-0.0 just below +0.0,
every NaN, of either sign, above +inf), maps back to the same bits, and a max pool of half
floats in every form (passes, doubling, all taps, flat plane, keyed plane) and both layouts gives
the window maximum bit for bit (a NaN of the window where it holds one, +0.0 where it holds both
zeros)."""

import ml_dtypes
import numpy as np
import pytest
import tvm
from tvm import te

from tvm_pool import compute
from tvm_pool.compute import common, layout

HALF = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _all_patterns(dtype):
    return np.arange(1 << 16, dtype=np.uint16).view(HALF[dtype])


def _keys_and_back(dtype):
    x = te.placeholder((1 << 16,), dtype, name="x")
    key = te.compute(x.shape, lambda i: common.half_order(x[i], dtype), name="key")
    back = te.compute(x.shape, lambda i: common.half_from_order(key[i], dtype), name="back")
    lib = tvm.compile(te.create_prim_func([x, key, back]), target="llvm")
    args = [tvm.runtime.tensor(_all_patterns(dtype)), tvm.runtime.tensor(np.zeros(1 << 16, "int16")),
            tvm.runtime.tensor(np.zeros(1 << 16, HALF[dtype]))]
    lib(*args)
    return args[1].numpy(), args[2].numpy()


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_keys_order_as_the_values_and_map_back(dtype):
    values = _all_patterns(dtype)
    keys, back = _keys_and_back(dtype)
    as_float = values.astype(np.float32)
    nan = np.isnan(as_float)
    assert np.array_equal(back.view(np.uint16), values.view(np.uint16))  # NaNs keep their bits
    # sorted by key, the numbers come out sorted, -0.0 right before +0.0, all below the NaN key
    order = np.argsort(keys[~nan], kind="stable")
    numbers, signs = as_float[~nan][order], np.signbit(as_float[~nan][order])
    assert np.all(np.diff(numbers) >= 0)
    assert len(set(keys[~nan].tolist())) == int((~nan).sum())  # one key per number
    zeros = np.flatnonzero(numbers == 0)
    assert signs[zeros].tolist() == [True, False]
    assert keys[~nan].max() < keys[nan].min()  # both signs of NaN above +inf
    assert keys[values.view(np.uint16) == (0x8000 | common.HALF_INF_BITS[dtype])][0] == \
        common.half_order_of_minus_inf(dtype)


def _special(rng, shape, dtype):
    """Ties, both zeros, both infinities and (in some windows) NaNs of both signs."""
    x = (rng.integers(-3, 4, size=shape) / 2).astype(np.float32)
    flat = x.reshape(-1)
    for value, frac in ((-0.0, 0.2), (0.0, 0.1), (-np.inf, 0.1), (np.inf, 0.02), (np.nan, 0.02), (-np.nan, 0.02)):
        flat[rng.integers(0, flat.size, size=max(1, int(flat.size * frac)))] = value
    return x.astype(HALF[dtype])


def _reference(x, kernel, stride, pads):
    """The window max in float64 (NaN if any tap is NaN; -inf padding; -0.0 below +0.0: it
    stands in as -1e-300 between the data's values, which are multiples of 1/2)."""
    rank = len(kernel)
    wide = x.astype(np.float64)
    wide[(wide == 0) & np.signbit(wide)] = -1e-300
    data = np.pad(wide, [(0, 0), (0, 0)] + [(pads[i], pads[i + rank]) for i in range(rank)],
                  constant_values=-np.inf)
    out_sizes = [(data.shape[2 + i] - kernel[i]) // stride[i] + 1 for i in range(rank)]
    out = np.empty(list(x.shape[:2]) + out_sizes)
    for o in np.ndindex(*out_sizes):
        window = data[(slice(None), slice(None)) + tuple(slice(o[i] * stride[i], o[i] * stride[i] + kernel[i])
                                                         for i in range(rank))]
        window = window.reshape(x.shape[0], x.shape[1], -1)
        out[(slice(None), slice(None)) + o] = np.where(np.isnan(window).any(-1), np.nan, np.max(window, -1))
    out[out == -1e-300] = -0.0
    return out


# (shape, kernel, stride, pads): 3x3 s2 p1 and 3x3 s1 p1 passes, a doubling 1-D window, a
# 2x2 s2 window (all taps in one pass), a 3-D window, a global window (the flat plane) and a
# larger one (the keyed plane: one reduction of the keys)
GEOMETRIES = [
    ([1, 3, 20, 19], [20, 19], [1, 1], [0, 0, 0, 0]),
    ([2, 3, 9, 10], [3, 3], [2, 2], [1, 1, 1, 1]),
    ([1, 4, 7, 7], [3, 3], [1, 1], [1, 1, 1, 1]),
    ([1, 2, 70], [32], [1], [16, 15]),
    ([1, 3, 8, 6], [2, 2], [2, 2], [0, 0, 0, 0]),
    ([1, 2, 4, 5, 6], [2, 3, 3], [1, 2, 2], [0, 1, 1, 1, 1, 1]),
    ([2, 5, 7, 9], [7, 9], [1, 1], [0, 0, 0, 0]),
]


@pytest.mark.parametrize("dtype", sorted(HALF))
@pytest.mark.parametrize("channel_last", [False, True], ids=["channel_first", "channel_last"])
@pytest.mark.parametrize("geometry", range(len(GEOMETRIES)))
def test_half_max_pool_is_the_window_max(dtype, channel_last, geometry):
    shape, kernel, stride, pads = GEOMETRIES[geometry]
    x = _special(np.random.default_rng(geometry), shape, dtype)
    data_shape = layout.to_channel_last(shape) if channel_last else shape
    data = te.placeholder(data_shape, dtype, name="x")
    lay = {3: "NWC", 4: "NHWC", 5: "NDHWC"}[len(shape)] if channel_last else None
    pooled = compute.max_pool(data, kernel, strides=stride, pads=pads, layout=lay)
    func = te.create_prim_func([data, pooled])
    if not (channel_last and kernel == shape[2:]):  # a channel-last global window: one reduction over C vectors
        assert "int16" in func.script(), "not computed on int16 keys"
    lib = tvm.compile(func, target="llvm")
    feed = np.ascontiguousarray(np.moveaxis(x, 1, -1)) if channel_last else x
    out = tvm.runtime.tensor(np.zeros([int(d) for d in pooled.shape], HALF[dtype]))
    lib(tvm.runtime.tensor(feed), out)
    got = np.moveaxis(out.numpy(), -1, 1) if channel_last else out.numpy()
    want = _reference(x, kernel, stride, pads)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    assert set(got[nan].view(np.uint16).tolist()) <= set(x[np.isnan(x.astype(np.float32))].view(np.uint16).tolist())
    assert np.array_equal(got[~nan].astype(np.float64), want[~nan])
    assert np.array_equal(np.signbit(got[~nan].astype(np.float32)), np.signbit(want[~nan]))  # +0.0 over -0.0
