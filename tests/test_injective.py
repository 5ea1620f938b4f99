"""The x86 fallback schedule of untuned elementwise kernels (schedules/injective.py): inside
fused graphs (producers, a concatenation, a broadcast add with a second input, two uses, a
layout transpose, a symbolic batch) the scheduled module equals the unscheduled one (to an FMA's
rounding where LLVM contracts a multiply-add in vector code), the rule
takes every elementwise kernel, and it declines reductions, pools and the Winograd transforms."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax, tirx

import tvm_pool
from tvm_pool import lowering
from tvm_pool.schedules import injective


def _graph(case, shape):
    """A Relax module of elementwise ops only, each case a pattern the models have."""
    bb = relax.BlockBuilder()
    batch = tirx.Var("n", "int64") if case == "symbolic_batch" else shape[0]
    x = relax.Var("x", relax.TensorType((batch, *shape[1:]), "float32"))
    y = relax.Var("y", relax.TensorType((batch, *shape[1:]), "float32"))
    channels = shape[1]
    scale = relax.const(np.linspace(0.5, 1.5, 2 * channels, dtype="float32").reshape(1, -1, 1, 1))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            if case == "concat_batch_norm_relu":  # DenseNet's BN over the concatenated features
                h = bb.emit(relax.op.concat([x, relax.op.nn.relu(y)], axis=1))
                h = bb.emit(relax.op.add(relax.op.multiply(h, scale), relax.const(np.float32(0.25))))
                out = relax.op.nn.relu(h)
            elif case == "broadcast_add_two_uses":
                h = bb.emit(relax.op.add(x, relax.op.sum(y, axis=[1], keepdims=True)))
                out = relax.op.concat([h, relax.op.multiply(h, relax.const(np.float32(2.0)))], axis=1)
            elif case == "transpose":  # a layout change between channel-last and channel-first
                out = relax.op.permute_dims(relax.op.subtract(x, y), [0, 2, 3, 1])
            else:  # symbolic_batch
                out = relax.op.nn.relu(relax.op.multiply(x, y))
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get()


CASES = [("concat_batch_norm_relu", (1, 24, 14, 14)), ("concat_batch_norm_relu", (2, 7, 5, 3)),
         ("broadcast_add_two_uses", (1, 16, 9, 32)), ("broadcast_add_two_uses", (3, 3, 2, 17)),
         ("transpose", (1, 32, 28, 28)), ("transpose", (2, 3, 11, 13)),
         ("symbolic_batch", (2, 8, 10, 48))]


def _run(mod, target, inputs, schedule):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm_pool.compile(mod, target, schedule=schedule, shipped_logs=False)
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*(tvm.runtime.tensor(a) for a in inputs))
    return out.numpy()


@pytest.mark.parametrize("case,shape", CASES, ids=[f"{c}-{'x'.join(map(str, s))}" for c, s in CASES])
def test_scheduled_equals_unscheduled(case, shape, rng, host):
    mod = _graph(case, shape)
    inputs = [rng.standard_normal(shape).astype("float32") for _ in range(2)]
    scheduled, unscheduled = _run(mod, host, inputs, True), _run(mod, host, inputs, False)
    if case == "concat_batch_norm_relu":  # LLVM contracts the vectorised x * s + b into an FMA
        np.testing.assert_allclose(scheduled, unscheduled, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(scheduled, unscheduled)
    elementwise = [f for _, f in lowering.fuse(mod, host).functions_items()
                   if isinstance(f, tirx.PrimFunc) and not _reduces(f)]
    assert elementwise, "the case has elementwise kernels"
    for func in elementwise:
        sch = injective.Elementwise().apply(func, host, False)
        assert sch is not None, func
        if np.prod(shape) >= injective.config(host).min_parallel:  # a smaller one stays serial
            assert _parallel_or_vectorised(sch.mod["main"]), sch.mod["main"]


def _reduces(func) -> bool:
    found = []
    tvm_ffi.structural_walk(func.body, [(tvm.s_tir.SBlock, found.append)], order="post")
    return any(iv.iter_type != tirx.IterVar.DataPar for b in found for iv in b.iter_vars)


def _parallel_or_vectorised(func) -> bool:
    loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, loops.append)], order="post")
    return any(loop.kind in (tirx.ForKind.PARALLEL, tirx.ForKind.VECTORIZED) for loop in loops)


def test_declines_reductions_pools_and_other_targets(host):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16, 14, 14), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            s = bb.emit(relax.op.sum(x, axis=[2, 3]))
            p = bb.emit(relax.op.nn.max_pool2d(x, pool_size=2, strides=2))
            out = bb.emit_output(relax.Tuple([s, p]))
        bb.emit_func_output(out)
    funcs = [f for _, f in lowering.fuse(bb.get(), host).functions_items() if isinstance(f, tirx.PrimFunc)]
    assert len(funcs) == 2
    for func in funcs:
        assert injective.Elementwise().apply(func, host, False) is None
    elementwise = lowering.fuse(_graph("transpose", (1, 4, 4, 4)), host)
    (func,) = [f for _, f in elementwise.functions_items() if isinstance(f, tirx.PrimFunc)]
    assert injective.Elementwise().apply(func, tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), False) is None
