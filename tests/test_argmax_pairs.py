"""MaxPool with Indices as passes of a max and a position (``compute.window_reduce.
window_max_position``, issue 40): the same indices as the (value, index) reduction, exactly,
and the same values (zeros of either sign compare equal: the max of +0.0 and -0.0 is either, as
in the values-only pool), for every type, both layouts, both NaN rules and both numberings, in
every form the passes take; windows whose data are all the max identity, or that see no data,
come out as the reduction's."""

import numpy as np
import pytest
from tvm import te

from tvm_pool.compute import argmax, forms
from tvm_pool.compute.windows import windows_for

from test_argmax_keys import _run, assert_like_reduction, random_cases


def _same_values(a, b):
    if np.issubdtype(a.dtype, np.floating):
        return np.array_equal(a, b, equal_nan=True)  # -0.0 == +0.0
    return np.array_equal(a, b)


def _pairs(data, windows, nan_index, fold):
    pair = argmax._argmax_pairs(data, windows, nan_index, fold)
    assert pair is not None
    return pair


@pytest.mark.parametrize("seed", range(5))
def test_pairs_give_the_reductions_values_and_indices(seed):
    def takes_pairs(windows):
        return forms.choose_form(windows, "argmax") in (forms.AXIS_PASSES, forms.ALL_TAPS)

    for x, windows, case, where in random_cases(np.random.default_rng(100 + seed), 6, takes_pairs):
        assert_like_reduction(_pairs, x, windows, case, where, _same_values)


@pytest.mark.parametrize("nan_index", ["first", "last"])
def test_first_maximum_nan_rules_and_zeros(nan_index):
    x = np.array([[[[-0.0, 0.0, 1.0, 1.0, np.nan, 2.0, np.nan, -np.inf, -np.inf]]]], "float32")
    windows = windows_for(te.placeholder(x.shape, "float32"), [1, 3], [1, 2], pads=[0, 1, 0, 1])
    values, index = _run(_pairs, x, windows, nan_index, True, False)
    # windows: [pad, -0, +0], [+0, 1, 1], [1, nan, 2], [2, nan, -inf], [-inf, -inf, pad]
    np.testing.assert_array_equal(index[0, 0, 0], [0, 2, 4, 6, 7])
    assert values[0, 0, 0, 0] == 0 and np.isnan(values[0, 0, 0, 2]) and values[0, 0, 0, 4] == -np.inf
    two_nans = np.array([[[[np.nan, 1.0, np.nan, 3.0]]]], "float32")
    windows = windows_for(te.placeholder(two_nans.shape, "float32"), [1, 3], [1, 1])
    _, index = _run(_pairs, two_nans, windows, nan_index, True, False)
    np.testing.assert_array_equal(index[0, 0, 0], [0, 2] if nan_index == "first" else [2, 2])


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_windows_of_the_identity_take_their_first_data_tap(dtype):
    """The padding holds the max identity and matches it: a window whose data are all -inf (or
    the least integer) takes its first data tap, a window of padding only no index; dilated
    windows that start in the padding skip to their first tap inside."""
    least = -np.inf if dtype == "float32" else np.iinfo(dtype).min
    x = np.full((1, 2, 5, 7), least, dtype)
    x[0, 1, 3, 4] = 1
    windows = windows_for(te.placeholder(x.shape, dtype), [3, 3], [2, 2], [2, 2], pads=[3, 3, 3, 3])
    got = _run(_pairs, x, windows, "first", False, False)
    want = _run(argmax._argmax_reduction, x, windows, "first", False, False)
    np.testing.assert_array_equal(got[1], want[1])
    assert _same_values(got[0], want[0])
    x = np.full((1, 1, 2, 2), least, dtype)
    windows = windows_for(te.placeholder(x.shape, dtype), [1, 1], [1, 3], pads=[0, 3, 0, 0])
    values, index = _run(_pairs, x, windows, "first", True, False)
    assert index[0, 0, 0, 0] == argmax._SENTINEL_INDEX and values[0, 0, 0, 0] == least
    assert index[0, 0, 0, 1] == 0 and values[0, 0, 0, 1] == least


def test_each_pass_is_one_block_writing_the_max_and_the_tap():
    """TE gives each output of a pass a block of its own; the rules' prepare merges them into
    one block per pass (schedules.multi_output), once: merging again changes nothing, and the
    x86 rule then schedules the pool (vectorised)."""
    import tvm
    import tvm_ffi
    from tvm.s_tir import SBlock

    from tvm_pool import compute
    from tvm_pool.schedules import schedule_pass
    from tvm_pool.schedules.multi_output import merge_sibling_blocks

    x = te.placeholder((1, 4, 20, 20), "float32", name="x")
    func = te.create_prim_func([x, *compute.max_pool(x, [3, 3], [2, 2], pads=[1, 1, 1, 1], return_indices=True)])

    def writes(f):
        found = []
        tvm_ffi.structural_walk(f, (SBlock, lambda b: found.append((b.name_hint, len(b.writes)))))
        return found

    merged = merge_sibling_blocks(func)
    assert [n for n, w in writes(func) if n.startswith("max_pool_key")] == [
        "max_pool_key_pass0_v0", "max_pool_key_pass0_v1", "max_pool_key_v0", "max_pool_key_v1"]
    assert [(n, w) for n, w in writes(merged) if n.startswith("max_pool_key")] == [
        ("max_pool_key_pass0", 2), ("max_pool_key", 2)]
    assert merge_sibling_blocks(merged).same_as(merged)
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    with target:
        text = schedule_pass(target)(tvm.IRModule({"main": func}))["main"].script()

