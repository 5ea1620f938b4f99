"""The NaN-propagating max lowered as two plain maxima ORed (schedules/nan_max.py, x86).

What it rewrites (the compute's three Select shapes, each tap checked), what it leaves alone
(lookalikes), and the result on data whose every window position holds NaN, +-inf or a signed
zero: equal to PyTorch's max pool and to the unscheduled module, NaN for NaN, inside fused
graphs and channel-last too."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax, tirx

import tvm_pool
from tvm_pool import relax_ops
from tvm_pool.schedules import nan_max, tir_pipeline, x86
from tvm_pool.targets import host_target
from helpers import emit_module, host_is_x86

LANES = 16


def _load(name: str, lanes: int = LANES):
    buf = tirx.decl_buffer((1024,), "float32", name=name)
    return tirx.BufferLoad(buf, [tirx.Ramp(tirx.IntImm("int32", 0), 1, lanes)])


def _isnan(x):
    return tirx.call_intrin("bool" if str(x.ty) == "float32" else f"boolx{LANES}", "tirx.isnan", x)


NAN = tirx.Broadcast(tirx.FloatImm("float32", float("nan")), LANES)


def _any(*terms):
    out = terms[0]
    for t in terms[1:]:
        out = tirx.Or(out, t)
    return out


def test_matches_the_three_select_shapes():
    a, b, c = _load("a"), _load("b"), _load("c")
    relu = tirx.Max(c, tirx.Broadcast(tirx.FloatImm("float32", 0.0), LANES))  # a fused producer's ReLU
    taps = tirx.Select(_any(_isnan(a), _isnan(b), _isnan(relu)), NAN, tirx.Max(tirx.Max(a, b), relu))
    assert [str(x) for x in nan_max.match(taps)] == [str(a), str(b), str(relu)]
    pairs = tirx.Select(tirx.And(tirx.Not(_any(_isnan(a), _isnan(b))), tirx.Not(_isnan(c))),
                        tirx.Max(tirx.Max(a, b), c), NAN)
    assert len(nan_max.match(pairs)) == 3
    combiner = tirx.Select(_any(tirx.GT(a, b), _isnan(a)), a, b)
    assert len(nan_max.match(combiner)) == 2


def test_declines_lookalikes():
    a, b, c = _load("a"), _load("b"), _load("c")
    cases = [
        tirx.Select(_any(_isnan(a), _isnan(c)), NAN, tirx.Max(a, b)),  # tests another value
        tirx.Select(_any(_isnan(a), _isnan(b)), NAN, tirx.Min(a, b)),  # not a max
        tirx.Select(_isnan(a), NAN, tirx.Max(a, b)),  # b untested
        tirx.Select(_any(_isnan(a), _isnan(b)), a, tirx.Max(a, b)),  # not NaN when tested
        tirx.Select(_any(tirx.GT(a, b), _isnan(b)), a, b),  # the combiner testing the other side
        tirx.Select(_any(tirx.GT(b, a), _isnan(a)), a, b),  # a min
    ]
    for select in cases:
        assert nan_max.match(select) is None, str(select)


def _specials(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype("float32")
    flat = x.reshape(-1)
    n = flat.size
    for value, step in ((np.nan, 29), (np.inf, 31), (-np.inf, 37), (0.0, 41), (-0.0, 43)):
        flat[rng.integers(0, n, size=max(n // step, 1))] = value
    flat[: shape[-1]] = -np.inf  # a row whose windows are all -inf
    return x


def _module(shape, emit, prologue=None, epilogue=None):
    return emit_module(shape, "float32", emit, epilogue=epilogue, prologue=prologue)


def _run(mod, x, schedule=True):
    ex = tvm_pool.compile(mod, target=host_target(), schedule=schedule)
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


CASES = [  # (shape, kernel, stride, pads, ceil)
    ([2, 16, 29, 29], [3, 3], [2, 2], [0, 0, 0, 0], False),
    ([1, 8, 35, 35], [3, 3], [2, 2], [1, 1, 1, 1], True),
    ([2, 24, 28, 28], [2, 2], [2, 2], [0, 0, 0, 0], False),
    ([1, 16, 14, 14], [2, 2], [2, 2], [0, 0, 0, 0], True),
    ([1, 8, 40, 40], [3, 3], [1, 1], [1, 1, 1, 1], False),
    ([1, 4, 57, 33], [5, 3], [2, 1], [2, 1, 2, 1], False),
    ([2, 4, 131, 131], [3, 3], [2, 2], [0, 0, 0, 0], True),  # pass rows of 131 lanes: rewritten by default
]


@pytest.fixture(params=["every vector", "default"])
def or_bits(request, monkeypatch):
    """The rewrite over every vector Select (the semantics) and at x86's default size."""
    bits = 1 if request.param == "every vector" else x86.NAN_MAX_OR_BITS
    monkeypatch.setattr(x86, "NAN_MAX_OR_BITS", bits)
    return bits


@pytest.mark.skipif(not host_is_x86(), reason="the x86 lowering")
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}k{c[1]}s{c[2]}p{c[3]}{'ceil' if c[4] else ''}")
def test_equals_torch_on_nan_inf_and_signed_zeros(case, or_bits):
    shape, k, s, p, ceil = case
    mod = _module(shape, lambda bb, x: relax_ops.max_pool(bb, x, k, strides=s, pads=p, ceil_mode=ceil))
    x = _specials(shape, sum(shape))
    want = torch.nn.functional.max_pool2d(torch.from_numpy(x), k, s, [p[0], p[1]], ceil_mode=ceil).numpy()
    got = _run(mod, x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, _run(mod, x, schedule=False))


@pytest.mark.skipif(not host_is_x86(), reason="the x86 lowering")
@pytest.mark.parametrize("producer", ["add", "relu"])
def test_fused_producer_and_consumer(producer, or_bits):
    """A producer fused into the taps (an Add, or a ReLU, whose max(x, 0) is then a tap of its
    own), and a consumer: equal to PyTorch (TVM's ReLU gives 0 for NaN: max(NaN, 0) is 0)."""
    shape = [2, 16, 30, 30]
    prologue = {"add": lambda x: relax.op.add(x, x), "relu": relax.op.nn.relu}[producer]
    mod = _module(shape, lambda bb, x: relax_ops.max_pool(bb, x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                  prologue=prologue, epilogue=lambda y: relax.op.add(y, y))
    x = _specials(shape, 7)
    xt = torch.from_numpy(x)
    xt = xt + xt if producer == "add" else torch.where(xt > 0, xt, torch.zeros_like(xt))
    want = torch.nn.functional.max_pool2d(xt, 3, 2, 1) * 2
    got = _run(mod, x)
    np.testing.assert_array_equal(got, want.numpy())
    np.testing.assert_array_equal(got, _run(mod, x, schedule=False))
    assert np.isinf(got).any() and np.isnan(got).any() == (producer == "add")


@pytest.mark.skipif(not host_is_x86(), reason="the x86 lowering")
def test_the_x86_pipeline_rewrites_every_long_vector_max(monkeypatch):
    """Every vector Select of the NaN max of x86's size or more in the lowered modules is
    rewritten (counted in the pass); shorter and scalar ones keep the select (faster there:
    schedules/x86.py)."""
    seen = {"rewritten": 0, "left": [], "short": 0}
    rewrite = nan_max._rewrite

    def spy(select, min_bits):
        out = rewrite(select, min_bits)
        long_vector = nan_max._vector_bits(str(select.ty)) >= x86.NAN_MAX_OR_BITS
        if out is not select:
            seen["rewritten"] += 1
            assert long_vector
        elif "isnan" in str(select) and "T.max(" in str(select):
            seen["short"] += not long_vector
            if long_vector:
                seen["left"].append(str(select))
        return out

    monkeypatch.setattr(nan_max, "_rewrite", spy)
    assert f"or_max{x86.NAN_MAX_OR_BITS}" in tir_pipeline(tvm.target.Target(host_target()))
    for shape, k, s, p, ceil in CASES:
        mod = _module(shape, lambda bb, x: relax_ops.max_pool(bb, x, k, strides=s, pads=p, ceil_mode=ceil))
        tvm_pool.compile(mod, target=host_target())
    assert seen["rewritten"] >= 1 and seen["short"] >= 1
    assert not seen["left"], seen["left"][:2]
