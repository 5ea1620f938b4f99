"""The CPU rule on channel-last pools (NWC / NHWC / NDHWC; schedules/cpu_channels.py): structure,
exactness, fused graphs, x86 and aarch64.

- Every channel-last pooling PrimFunc (each operator, 1-D to 3-D, float32 / float16 / bfloat16 /
  int8 / uint8) gets the one CPU schedule, x86's and aarch64's, well-formed: a parallel loop,
  and every pooling stage TVM-vectorised over C (``channel_vectorised``).
- Scheduled equals unscheduled, bit-exact on this x86 machine, NaNs included: each case, random
  windows (every attribute, C below and above a register; 300 more under ``-m slow``), the
  levels a failing step falls back to (every tuning knob under ``-m slow``). The aarch64 rule's
  functions run here too (its strided-load pipeline included).
- Fused graphs (a conv and a relu before, an Add with a branch, a Concat, a pool used twice, a
  pool of a pool, int8, float16, 1-D, 3-D, global): ``tvm_pool.compile(..., schedule=False)``
  against the scheduled build on x86 and on the emulated aarch64 device (tvm_pool/emulation.py);
  every pooling PrimFunc scheduled, its pointwise consumers in its loop nest.
- A PrimFunc the rule does not understand is declined (None).
- The channel-last modules of bench/arm_instructions.py match onnxruntime.

Channel-first schedules are pinned by tests/test_fingerprints.py and the other schedule tests.
"""

from __future__ import annotations

import dataclasses
import warnings

import ml_dtypes
import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax, s_tir, te, tirx

import tvm_pool
from tvm_pool import compute, emulation
from tvm_pool.compute import forms
from tvm_pool.compute.common import LAYOUT_ATTR, block_attrs
from tvm_pool.schedules import ScheduleDeclined, analysis, arm, strided_loads, x86
from tvm_pool.schedules.cpu_config import NO_VECTOR, PARALLEL_ONLY
from tvm_pool.targets import export_compiler, resolve_target

from helpers import emulated_device, tolerance, x86_only

X86 = tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "haswell", "num-cores": 2})
A72 = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "mattr": ["+neon"],
                         "num-cores": 2})
LAST = {1: "NWC", 2: "NHWC", 3: "NDHWC"}
P1, P0 = [1, 1, 1, 1], [0, 0, 0, 0]


def to_last(shape):
    return [shape[0], *shape[2:], shape[1]]


def clamped(build):
    """``build`` inside ``forms.clamped_taps()``: a max's taps clamped, as x86 legalizes them."""

    def within(x, layout):
        with forms.clamped_taps():
            return build(x, layout)

    return within


# name: (channel-first shape, dtype, compute(x, layout)). Inputs of 100 KB and more, so that every
# schedule runs in parallel (CpuConfig.min_parallel_bytes).
CASES = {
    "max_3x3_s2_p1": ([1, 32, 40, 40], "float32", lambda x, L: compute.max_pool(x, [3, 3], [2, 2], None, P1, layout=L)),
    "max_3x3_s1_p1_fp16": ([1, 64, 28, 28], "float16", lambda x, L: compute.max_pool(x, [3, 3], [1, 1], None, P1, layout=L)),
    "max_3x3_s2_p1_int8": ([1, 64, 56, 56], "int8", lambda x, L: compute.max_pool(x, [3, 3], [2, 2], None, P1, layout=L)),
    "max_2x2_s2_uint8": ([1, 64, 56, 56], "uint8", lambda x, L: compute.max_pool(x, [2, 2], [2, 2], layout=L)),
    "max_3x3_s2_ceil": ([2, 16, 33, 33], "float32", lambda x, L: compute.max_pool(x, [3, 3], [2, 2], ceil_mode=True, layout=L)),
    "max_3x3_s2_p1_bf16": ([1, 64, 32, 32], "bfloat16", lambda x, L: compute.max_pool(x, [3, 3], [2, 2], None, P1, layout=L)),
    "max_indices": ([1, 16, 40, 40], "float32", lambda x, L: compute.max_pool(
        x, [3, 3], [2, 2], None, P1, return_indices=True, layout=L)),
    "max_indices_plane_int8": ([1, 64, 48, 48], "int8", lambda x, L: compute.max_pool(
        x, [2, 2], [2, 2], return_indices=True, index_scope="plane", layout=L)),
    "avg_3x3_s1_p1_excl": ([1, 48, 28, 28], "float32", lambda x, L: compute.avg_pool(
        x, [3, 3], [1, 1], None, P1, count_include_pad=False, layout=L)),
    "avg_3x3_s2_p1_incl": ([1, 32, 40, 40], "float32", lambda x, L: compute.avg_pool(
        x, [3, 3], [2, 2], None, P1, count_include_pad=True, layout=L)),
    "avg_3x3_s2_p1_int8": ([1, 64, 56, 56], "int8", lambda x, L: compute.avg_pool(x, [3, 3], [2, 2], None, P1, layout=L)),
    "avg_2x2_s2_fp16": ([1, 64, 28, 28], "float16", lambda x, L: compute.avg_pool(x, [2, 2], [2, 2], layout=L)),
    "avg_dilated_uint8": ([1, 64, 48, 48], "uint8", lambda x, L: compute.avg_pool(x, [3, 3], [1, 1], [2, 2], P1, layout=L)),
    "lp2": ([1, 32, 32, 32], "float32", lambda x, L: compute.lp_pool(x, [3, 3], [2, 2], None, P1, p=2.0, layout=L)),
    "global_avg": ([2, 256, 7, 7], "float32", lambda x, L: compute.global_pool(x, "avg", layout=L)),
    "global_max_batch1": ([1, 512, 7, 7], "float32", lambda x, L: compute.global_pool(x, "max", layout=L)),
    "adaptive_avg": ([1, 64, 20, 20], "float32", lambda x, L: compute.adaptive_avg_pool(x, [6, 5], layout=L)),
    "adaptive_max": ([1, 64, 20, 20], "float32", lambda x, L: compute.adaptive_max_pool(x, [6, 5], layout=L)),
    "trt_blend": ([1, 32, 32, 32], "float32", lambda x, L: compute.tensorrt_pool(
        x, "MAX_AVERAGE_BLEND", [3, 3], [2, 2], [1, 1], [1, 1], blend_factor=0.25, layout=L)),
    "trt_avg_int8": ([1, 64, 48, 48], "int8", lambda x, L: compute.tensorrt_pool(
        x, "AVERAGE", [3, 3], [2, 2], [1, 1], [1, 1], layout=L)),
    "max_1d_k4_s4": ([1, 64, 800], "float32", lambda x, L: compute.max_pool(x, [4], [4], layout=L)),
    "max_1d_k20_s1_p3": ([1, 32, 900], "float32", lambda x, L: compute.max_pool(x, [20], [1], None, [3, 4], layout=L)),
    "avg_1d_k64_s32": ([1, 32, 1000], "float32", lambda x, L: compute.avg_pool(x, [64], [32], layout=L)),
    "max_3d_1x3x3": ([1, 16, 6, 20, 20], "float32", lambda x, L: compute.max_pool(
        x, [1, 3, 3], [1, 2, 2], None, [0, 1, 1, 0, 1, 1], layout=L)),
    "avg_3d_2x2x2": ([1, 16, 8, 20, 20], "float32", lambda x, L: compute.avg_pool(x, [2, 2, 2], [2, 2, 2], layout=L)),
    "max_3x3_s2_p1_clamped": ([1, 32, 40, 40], "float32", clamped(
        lambda x, L: compute.max_pool(x, [3, 3], [2, 2], None, P1, layout=L))),
    "max_3x3_s2_ceil_int8_clamped": ([2, 64, 33, 33], "int8", clamped(
        lambda x, L: compute.max_pool(x, [3, 3], [2, 2], None, P1, ceil_mode=True, layout=L))),
    "max_3d_1x3x3_clamped": ([1, 16, 6, 20, 20], "float32", clamped(lambda x, L: compute.max_pool(
        x, [1, 3, 3], [1, 2, 2], None, [0, 1, 1, 0, 1, 1], layout=L))),
}


def channel_last_func(name):
    shape, dtype, build = CASES[name]
    x = te.placeholder(to_last(shape), dtype, name="x")
    out = build(x, LAST[len(shape) - 2])
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    return te.create_prim_func([x, *outs]).with_attr("global_symbol", "main")


def _pool_blocks_under_loops(func):
    """(block, [enclosing For loops, outermost first]) for every channel-last pooling stage."""
    found = []

    def visit(stmt, loops):
        if isinstance(stmt, tirx.For):
            visit(stmt.body, loops + [stmt])
        elif isinstance(stmt, s_tir.SBlockRealize):
            block = stmt.block
            if analysis.is_channel_last(block) and analysis.is_pool_block(block):
                found.append((stmt, loops))
            visit(block.body, loops)
            if block.init is not None:
                visit(block.init, loops)
        elif isinstance(stmt, tirx.SeqStmt):
            for s in stmt:
                visit(s, loops)
        elif hasattr(stmt, "body"):
            visit(stmt.body, loops)

    visit(func.body, [])
    return found


def _uses(expr, var) -> bool:
    used = []
    tvm_ffi.structural_walk(expr, (tirx.Var, lambda v: used.append(v.same_as(var))))
    return any(used)


def channel_vectorised(realize, loops) -> bool:
    """Is the block's C iterator bound to a TVM-vectorised loop's variable?"""
    block = realize.block
    channel = [i for i, iv in enumerate(block.iter_vars) if int(iv.iter_type) == 0][-1]
    vector_loops = [l for l in loops if l.kind == tirx.ForKind.VECTORIZED]
    return any(_uses(realize.iter_values[channel], l.loop_var) for l in vector_loops)


def assert_channel_last_structure(func, family: str):
    """Parallel, and every pooling stage (passes, reductions; padded copies and consumers where
    the family TVM-vectorises them) vectorised over C."""
    blocks = _pool_blocks_under_loops(func)
    assert blocks, "no channel-last pooling block"
    assert any(any(l.kind == tirx.ForKind.PARALLEL for l in loops) for _, loops in blocks), "no parallel loop"
    nests = [loops[0] for realize, loops in blocks if loops and not _is_finalize(realize.block)]
    for realize, loops in blocks:
        kind = analysis.pool_kind(realize.block)
        if kind in ("pad", "widen"):
            continue  # a padded copy is inlined or LLVM's
        if _is_finalize(realize.block) and (family == "x86" or not any(loops[0].same_as(n) for n in nests)):
            # a finalize is LLVM's on x86 (CpuConfig.vector_consumers), and where it is not
            # pointwise over the pool (a long window's block sums) it is its own nest at the root
            continue
        assert channel_vectorised(realize, loops), f"{realize.block.name_hint} ({kind}) not vectorised over C"


def _is_finalize(block) -> bool:
    return analysis.pool_kind(block).endswith("_finalize")


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_channel_last_pool_gets_the_channel_schedule(name):
    func = channel_last_func(name)
    for rule, target in ((x86.Pool(), X86), (arm.Pool(), A72)):
        sch = rule.apply(func, target, False)
        assert sch is not None, f"{rule.name} declined {name}"
        s_tir.Schedule(sch.mod["main"])  # well-formed (what lowering's passes build from it)
        assert_channel_last_structure(sch.mod["main"], rule.name)


def _first_loop_using(loops, expr) -> int:
    return next(i for i, l in enumerate(loops) if _uses(expr, l.loop_var))


def _channel_tile_loop(loops, expr) -> int:
    """The innermost loop over tiles of C: the deepest non-vectorised loop C's binding uses."""
    return max(i for i, l in enumerate(loops) if _uses(expr, l.loop_var) and l.kind != tirx.ForKind.VECTORIZED)


def test_x86_computes_the_average_in_its_last_pass_and_reads_long_windows_row_by_row():
    """x86 only (CpuConfig.channel_inline_consumers, long_window_rows_outer; NEON measured
    worse with both): the average's division is computed inside the last pass, so no finalize
    block is left; a 7x7 adaptive average to 1x1 (ResNet's head as Relax's adaptive_avg_pool2d
    legalizes) reads its window's rows outside the tiles of C (each row's taps added into all
    of C), where NEON keeps register tiles over every tap."""
    x = te.placeholder((2, 7, 7, 256), "float32", name="x")
    head = te.create_prim_func([x, compute.adaptive_avg_pool(x, [1, 1], layout="NHWC")]).with_attr("global_symbol", "main")
    kinds = {rule.name: [analysis.pool_kind(r.block) for r, _ in _pool_blocks_under_loops(
        rule.apply(channel_last_func("avg_3x3_s1_p1_excl"), target, False).mod["main"])]
        for rule, target in ((x86.Pool(), X86), (arm.Pool(), A72))}
    assert not any(k.endswith("_finalize") for k in kinds["x86"]), kinds["x86"]
    assert any(k.endswith("_finalize") for k in kinds["arm"]), kinds["arm"]
    for rule, target, rows_outside in ((x86.Pool(), X86, True), (arm.Pool(), A72, False)):
        func = rule.apply(head, target, False).mod["main"]
        reductions = [(r, loops) for r, loops in _pool_blocks_under_loops(func)
                      if any(int(iv.iter_type) == 2 for iv in r.block.iter_vars)]
        assert reductions, rule.name
        for realize, loops in reductions:
            ivs = realize.block.iter_vars
            channel = [i for i, iv in enumerate(ivs) if int(iv.iter_type) == 0][-1]
            row = next(i for i, iv in enumerate(ivs) if int(iv.iter_type) == 2)
            tile = _channel_tile_loop(loops, realize.iter_values[channel])
            assert (_first_loop_using(loops, realize.iter_values[row]) < tile) == rows_outside, rule.name


# ---------------------------------------------------------------------------------------------
# Scheduled equals unscheduled: single pools (x86 and the aarch64 rule's function, run here)
# ---------------------------------------------------------------------------------------------


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype in ("int8", "uint8"):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    x = (rng.integers(-8, 9, size=shape) / 4).astype("float32")  # ties
    x.flat[::37] = np.nan
    return x.astype(ml_dtypes.bfloat16) if dtype == "bfloat16" else x.astype(dtype)


def _numpy_dtype(dtype: str):
    return ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype


def _run_func(func, data, pipeline="default"):
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm", tir_pipeline=pipeline)
    outs = [tvm.runtime.tensor(np.zeros([int(d) for d in p.shape], _numpy_dtype(str(p.dtype)))) for p in func.params[1:]]
    lib["main"](tvm.runtime.tensor(data), *outs)
    # bfloat16 as float32 (numpy sees no NaN in ml_dtypes arrays; widening is exact)
    return [o.numpy().astype(np.float32) if str(o.dtype) == "bfloat16" else o.numpy() for o in outs]


@x86_only
@pytest.mark.parametrize("name", sorted(CASES))
def test_scheduled_equals_unscheduled(name):
    func = channel_last_func(name)
    shape, dtype, _ = CASES[name]
    data = _data(to_last(shape), dtype)
    want = _run_func(func, data)
    got_x86 = _run_func(x86.Pool().apply(func, X86, False).mod["main"].with_attr("global_symbol", "main"), data)
    arm_func = arm.Pool().apply(func, A72, False).mod["main"].with_attr("global_symbol", "main")
    got_arm = _run_func(arm_func, data, strided_loads.register_pipeline())
    for g, a, w in zip(got_x86, got_arm, want):
        np.testing.assert_array_equal(g, w)  # NaNs in the same places too
        # aarch64's float sums start at -0.0 (arm.negative_zero_sums): equal as numbers
        np.testing.assert_array_equal(a, w)


def random_pool(seed: int):
    """A random channel-last max or average pool (ranks 1-3, every window attribute, C below
    and above a register, float32 / float16 / int8), as (PrimFunc, input)."""
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 4))
    kernel = [int(rng.integers(1, 5)) for _ in range(rank)]
    strides = [int(rng.integers(1, 4)) for _ in range(rank)]
    dilations = [int(rng.integers(1, 3)) for _ in range(rank)]
    pads = [int(rng.integers(0, k // 2 + 1)) for k in kernel] * 2
    sizes = {1: (8, 300), 2: (6, 40), 3: (4, 14)}[rank]
    spatial = [int(rng.integers(max(sizes[0], (k - 1) * d + 1), sizes[1])) for k, d in zip(kernel, dilations)]
    shape = [int(rng.integers(1, 3)), int(rng.choice([3, 5, 16, 24, 64]))] + spatial
    dtype = str(rng.choice(["float32", "float32", "float16", "int8"]))
    kind, ceil = str(rng.choice(["max", "avg"])), bool(rng.integers(0, 2))
    x = te.placeholder(to_last(shape), dtype, name="x")
    common = dict(ceil_mode=ceil, layout=LAST[rank])
    if kind == "max":
        out = compute.max_pool(x, kernel, strides, dilations, pads, **common)
    else:
        out = compute.avg_pool(x, kernel, strides, dilations, pads, count_include_pad=bool(rng.integers(0, 2)), **common)
    func = te.create_prim_func([x, out]).with_attr("global_symbol", "main")
    return func, _data(to_last(shape), dtype, seed)


def _assert_random_pools(seeds):
    for seed in seeds:
        func, data = random_pool(seed)
        want = _run_func(func, data)
        for rule, target in ((x86.Pool(), X86), (arm.Pool(), A72)):
            sch = rule.apply(func, target, False)
            assert sch is not None, f"seed {seed}: {rule.name} declined"
            scheduled = sch.mod["main"].with_attr("global_symbol", "main")
            s_tir.Schedule(scheduled)  # well-formed
            pipeline = strided_loads.register_pipeline() if rule.name == "arm" else "default"
            for got, ref in zip(_run_func(scheduled, data, pipeline), want):
                np.testing.assert_array_equal(got, ref, err_msg=f"seed {seed} {rule.name}")


@x86_only
def test_random_pools_scheduled_equal_unscheduled():
    _assert_random_pools(range(8))


@pytest.mark.slow
@x86_only
def test_random_pools_sweep():
    _assert_random_pools(range(8, 308))


def _knob_configs(names):
    """(rule, target, label, config) for each point of both families' design spaces named in
    ``names`` (None: all), and the lower levels a failing step falls back to."""
    out = []
    for rule, target in ((x86.Pool(), X86), (arm.Pool(), A72)):
        base = rule.config(target)
        points = list(rule.knobs()) + [("no TVM vectors", {"level": NO_VECTOR}), ("parallel only", {"level": PARALLEL_ONLY})]
        for label, overrides in points:
            if names is None or label in names:
                out.append((rule, target, label, dataclasses.replace(base, **overrides)))
    return out


def _assert_knobs_exact(name, configs):
    func = channel_last_func(name)
    shape, dtype, _ = CASES[name]
    data = _data(to_last(shape), dtype)
    want = _run_func(func, data)
    for rule, _target, label, config in configs:
        sch = rule.schedule(s_tir.Schedule(rule.prepare(func)), config)
        assert sch is not None, f"{rule.name} {label}"
        scheduled = rule.finish(sch.mod["main"]).with_attr("global_symbol", "main")
        pipeline = strided_loads.register_pipeline() if rule.name == "arm" else "default"
        for got, ref in zip(_run_func(scheduled, data, pipeline), want):
            np.testing.assert_array_equal(got, ref, err_msg=f"{rule.name} {label}")


@x86_only
@pytest.mark.parametrize("name", ["adaptive_avg", "max_1d_k20_s1_p3"])
def test_lower_levels_stay_exact(name):
    """The levels a schedule falls back to (no TVM vectors, parallel only) and the tuning knobs
    that reshape the parallel loop, on channel-last functions: exact."""
    _assert_knobs_exact(name, _knob_configs({"no TVM vectors", "parallel only", "threads: planes and rows in parallel",
                                             "threads: planes in parallel only"}))


@pytest.mark.slow
@x86_only
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_knob_stays_exact(name):
    """Every point of x86's and aarch64's tuning design spaces (tuning measures them all) on
    every channel-last case: a schedule, and exact."""
    _assert_knobs_exact(name, _knob_configs(None))


# ---------------------------------------------------------------------------------------------
# Fused graphs
# ---------------------------------------------------------------------------------------------


def _pool(y, kind, k, s, p, layout="NHWC", **kw):
    rank = len(k)
    op = getattr(relax.op.nn, f"{kind}_pool{rank}d")
    return op(y, k, s, p, layout=layout, **kw)


def graphs():
    """(name, input shapes (channel-last), dtype, body(bb, xs) -> outputs)."""
    c = relax.const

    def conv_relu_max_add(bb, xs):
        w = c(np.linspace(-1, 1, 3 * 3 * 8 * 16).astype("float32").reshape(3, 3, 8, 16))  # HWIO
        y = bb.emit(relax.op.nn.conv2d(xs[0], w, padding=1, data_layout="NHWC", kernel_layout="HWIO"))
        y = bb.emit(relax.op.nn.relu(y))
        p = bb.emit(_pool(y, "max", [3, 3], [2, 2], P1))
        return [bb.emit(relax.op.add(p, c(np.linspace(-1, 1, 16).astype("float32"))))]

    def avg_concat(bb, xs):
        p = bb.emit(_pool(xs[0], "avg", [3, 3], [1, 1], P1, count_include_pad=False))
        return [bb.emit(relax.op.concat([p, xs[1]], axis=3))]

    def max_add_branch(bb, xs):
        p = bb.emit(_pool(bb.emit(relax.op.nn.relu(xs[0])), "max", [2, 2], [2, 2], P0))
        return [bb.emit(relax.op.add(p, xs[1]))]

    def two_uses(bb, xs):
        p = bb.emit(_pool(xs[0], "avg", [3, 3], [2, 2], P1, count_include_pad=True))
        return [bb.emit(relax.op.nn.relu(p)), bb.emit(relax.op.multiply(p, c(np.float32(2))))]

    def max_ceil_two_uses(bb, xs):
        p = bb.emit(_pool(bb.emit(relax.op.nn.relu(xs[0])), "max", [3, 3], [2, 2], P1, ceil_mode=True))
        return [bb.emit(relax.op.add(p, xs[1])), bb.emit(relax.op.multiply(p, c(np.float32(2))))]

    def pool_of_pool(bb, xs):
        p = bb.emit(_pool(xs[0], "max", [3, 3], [1, 1], P1))
        return [bb.emit(_pool(p, "avg", [2, 2], [2, 2], P0))]

    def one_tap_after_pool(bb, xs):
        # a 1x1 pool is pointwise over the pool before it, but a unit of its own: it stays one
        # (it was attached to the first pool's loops, and its own schedule then failed)
        p = bb.emit(_pool(xs[0], "max", [2, 2], [2, 2], P0))
        return [bb.emit(relax.op.nn.relu(bb.emit(_pool(p, "max", [1, 1], [1, 1], P0))))]

    def int8_avg_relu(bb, xs):
        p = bb.emit(_pool(xs[0], "avg", [3, 3], [2, 2], P1))
        return [bb.emit(relax.op.nn.relu(p))]

    def fp16_max_relu(bb, xs):
        return [bb.emit(_pool(bb.emit(relax.op.nn.relu(xs[0])), "max", [3, 3], [2, 2], P1))]

    def max1d_add(bb, xs):
        p = bb.emit(_pool(xs[0], "max", [5], [1], [2, 2], layout="NWC"))
        return [bb.emit(relax.op.add(p, xs[0]))]

    def avg3d_relu(bb, xs):
        p = bb.emit(_pool(bb.emit(relax.op.nn.relu(xs[0])), "avg", [1, 3, 3], [1, 2, 2], [0, 1, 1, 0, 1, 1],
                          layout="NDHWC"))
        return [bb.emit(relax.op.nn.relu(p))]

    def global_avg_relu(bb, xs):
        p = bb.emit(relax.op.nn.adaptive_avg_pool2d(bb.emit(relax.op.nn.relu(xs[0])), [1, 1], layout="NHWC"))
        return [bb.emit(relax.op.add(p, c(np.float32(1))))]

    return [
        ("conv_relu_max_add", [[1, 20, 20, 8]], "float32", conv_relu_max_add),
        ("avg_concat", [[1, 14, 14, 24], [1, 14, 14, 8]], "float32", avg_concat),
        ("max_add_branch", [[2, 24, 24, 16], [2, 12, 12, 16]], "float32", max_add_branch),
        ("two_uses", [[1, 17, 17, 32]], "float32", two_uses),
        ("max_ceil_two_uses", [[1, 17, 17, 32], [1, 9, 9, 32]], "float32", max_ceil_two_uses),
        ("pool_of_pool", [[1, 16, 16, 24]], "float32", pool_of_pool),
        ("one_tap_after_pool", [[1, 8, 8, 4]], "float32", one_tap_after_pool),
        ("int8_avg_relu", [[1, 20, 20, 64]], "int8", int8_avg_relu),
        ("fp16_max_relu", [[1, 18, 18, 16]], "float16", fp16_max_relu),
        ("max1d_add", [[2, 60, 24]], "float32", max1d_add),
        ("avg3d_relu", [[1, 4, 12, 12, 16]], "float32", avg3d_relu),
        ("global_avg_relu", [[2, 7, 7, 96]], "float32", global_avg_relu),
    ]


def graph_module(shapes, dtype, body):
    bb = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(s, dtype)) for i, s in enumerate(shapes)]
    with bb.function("main", xs):
        with bb.dataflow():
            outs = body(bb, xs)
            out = bb.emit_output(relax.Tuple(outs) if len(outs) > 1 else outs[0])
        bb.emit_func_output(out)
    return bb.get()


def _run_vm(mod, inputs, schedule):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm_pool.compile(mod, target=resolve_target("host"), schedule=schedule)
    result = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(x) for x in inputs])
    return [result.numpy()] if isinstance(result, tvm.runtime.Tensor) else [r.numpy() for r in result]


def _graph_inputs(shapes, dtype, seed):
    return [_data(s, dtype, seed + i) for i, s in enumerate(shapes)]


def pool_primfuncs(mod, target):
    """The pooling PrimFuncs of ``mod`` after tvm_pool's lowering (schedules included)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = tvm_pool.lowering.pipeline(target)(mod)
    return {gv.name_hint: f for gv, f in lowered.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc) and f'"{LAYOUT_ATTR}": "channel_last"' in f.script()}


@x86_only
@pytest.mark.parametrize("name,shapes,dtype,body", graphs(), ids=[g[0] for g in graphs()])
def test_fused_graphs_scheduled_equal_unscheduled(name, shapes, dtype, body):
    mod = graph_module(shapes, dtype, body)
    inputs = _graph_inputs(shapes, dtype, seed=len(name))
    want = _run_vm(mod, inputs, schedule=False)
    got = _run_vm(mod, inputs, schedule=True)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    for target in (resolve_target("host"), A72):
        funcs = pool_primfuncs(mod, target)
        assert funcs, name
        for fname, func in funcs.items():
            assert func.attrs is not None and "tirx.is_scheduled" in func.attrs, f"{name}: {fname} unscheduled"
            assert "T.vectorized" in func.script(), f"{name}: {fname}"
            # consumers pointwise over the pool (finalize, relu, add) in the pool's loop nest; a
            # Concat's other branch is a nest of its own
            assert _top_level_nests(func) == (2 if name in ("avg_concat", "one_tap_after_pool") else 1), f"{name}: {fname}"


def _vm(mod, schedule):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm_pool.compile(mod, target=resolve_target("host"), schedule=schedule)
    return relax.VirtualMachine(ex, tvm.cpu())["main"]


@x86_only
@pytest.mark.parametrize("name,shapes,dtype,body", graphs(), ids=[g[0] for g in graphs()])
def test_fused_graphs_with_a_symbolic_batch(name, shapes, dtype, body):
    """The same graphs with a symbolic batch (torch.export's Dim, TFLite's -1): the batch is a
    serial loop around the parallel one, every pooling PrimFunc is scheduled (x86 and aarch64),
    and one module equals the unscheduled one at two batch sizes."""
    n = tirx.Var("n", "int64")
    mod = graph_module([[n, *s[1:]] for s in shapes], dtype, body)
    for target in (resolve_target("host"), A72):
        funcs = pool_primfuncs(mod, target)
        assert funcs, name
        for fname, func in funcs.items():
            assert func.attrs is not None and "tirx.is_scheduled" in func.attrs, f"{name}: {fname} unscheduled"
            assert "T.parallel" in func.script() and "T.vectorized" in func.script(), f"{name}: {fname}"
    ours, reference = _vm(mod, True), _vm(mod, False)
    for batch in (1, 3):
        inputs = [tvm.runtime.tensor(x) for x in _graph_inputs([[batch, *s[1:]] for s in shapes], dtype, seed=batch)]
        got, want = ours(*inputs), reference(*inputs)
        got, want = ([got], [want]) if isinstance(got, tvm.runtime.Tensor) else (got, want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())


def _top_level_nests(func) -> int:
    body = func.body.block.body if isinstance(func.body, s_tir.SBlockRealize) else func.body
    return len(list(body)) if isinstance(body, tirx.SeqStmt) else 1


@pytest.fixture(scope="module")
def device():
    return emulated_device()


@x86_only
def test_fused_graphs_on_emulated_aarch64(device, tmp_path):
    """Every fused graph compiled for aarch64 (the arm rule) and run on the emulated device, in
    one qemu process, against the unscheduled build on this machine."""
    target = resolve_target("arm")
    jobs, wants = [], []
    for name, shapes, dtype, body in graphs():
        mod = graph_module(shapes, dtype, body)
        inputs = _graph_inputs(shapes, dtype, seed=len(name))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ex = tvm_pool.compile(mod, target)
        so = tmp_path / f"{name}.so"
        ex.export_library(str(so), fcompile=export_compiler(target))
        jobs.append({"name": name, "module": so, "inputs": inputs})
        wants.append((name, _run_vm(mod, inputs, schedule=False)))
    results = emulation.run_artifacts(device, jobs, tmp_path / "run", timeout=900)
    failures = []
    for (name, want), res in zip(wants, results):
        if not res.get("ok"):
            failures.append(f"{name}: {res.get('error')}")
            continue
        for k, (got, ref) in enumerate(zip(res["outputs"], want)):
            rtol, atol = tolerance(ref.dtype, "aarch64")
            if ref.dtype.kind in "iu":
                ok = np.array_equal(got, ref)
            else:
                g, r = got.astype(np.float32), ref.astype(np.float32)
                ok = np.allclose(g, r, rtol=rtol, atol=atol, equal_nan=True) and np.array_equal(np.isnan(g), np.isnan(r))
            if not ok:
                failures.append(f"{name} out{k} differs from the unscheduled build")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------------------------
# What the rule declines
# ---------------------------------------------------------------------------------------------


@pytest.mark.declines
def test_rule_declines_what_it_does_not_understand():
    """A block that says channel-last but has no room for N, the spatial axes and C (its
    iterators do not match the layout): declined, with a warning that says why; a function
    with no pool: no schedule and no warning."""
    x = te.placeholder([6, 9], "float32", name="x")
    r0, r1 = te.reduce_axis((0, 2), "r0"), te.reduce_axis((0, 3), "r1")
    attrs = {**block_attrs("max", 2), LAYOUT_ATTR: "channel_last"}
    y = te.compute([5, 7], lambda i, j: te.max(x[i + r0, j + r1], axis=[r0, r1]), name="odd", attrs=attrs)
    odd = te.create_prim_func([x, y]).with_attr("global_symbol", "main")
    z = te.compute([6, 9], lambda i, j: x[i, j] * 2, name="double")
    plain = te.create_prim_func([x, z]).with_attr("global_symbol", "main")
    for rule, target in ((x86.Pool(), X86), (arm.Pool(), A72)):
        with pytest.warns(ScheduleDeclined, match="2 iterators for 2 spatial axes and C"):
            assert rule.apply(odd, target, False) is None
        assert rule.apply(plain, target, False) is None


def test_axis_roles():
    """Which iterators are spatial: channel-last loops 1..rank with C innermost; channel-first
    the last rank (unchanged)."""
    x = te.placeholder([2, 9, 9, 4], "float32", name="x")
    last = te.create_prim_func([x, compute.max_pool(x, [3, 3], [2, 2], layout="NHWC")])
    first = te.create_prim_func([x, compute.max_pool(x, [3, 3], [2, 2])])
    roles = {}
    for name, func in (("last", last), ("first", first)):
        sch = s_tir.Schedule(func)
        (chain,) = analysis.pass_chains(sch)
        roles[name] = analysis.axis_roles(sch.get(chain.passes[-1]), 2)
    assert roles["last"] == analysis.AxisRoles((0,), (1, 2), 3)
    assert roles["first"] == analysis.AxisRoles((0, 1), (2, 3), None)


# ---------------------------------------------------------------------------------------------
# The channel-last entries of bench/arm_instructions.py
# ---------------------------------------------------------------------------------------------


@x86_only
def test_arm_bench_channel_last_modules_match_onnxruntime():
    """The channel-last modules the aarch64 instruction count runs (tvm_pool's, and stock TVM's
    where it has the op), built for this machine: onnxruntime's channel-first outputs,
    transposed."""
    import onnxruntime as ort

    from tvm_pool.bench import arm_instructions
    from tvm_pool.bench.workloads import build_model, make_input, workloads

    chosen = {w.name: w for w in workloads(False)}
    for name in ("fused_relu_pool_add", "maxpool_indices", "resnet_gap", "maxpool_k3s3"):
        w = chosen[name]
        model, x = build_model(w), make_input(w)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        want = [arm_instructions.to_channel_last(np.asarray(v)) for v in want]
        for stock in (False, True):
            mod = arm_instructions.channel_last_module(w, stock=stock)
            if mod is None:
                assert stock and w.indices
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ex = (tvm.compile if stock else tvm_pool.compile)(mod, target=resolve_target("host"))
            out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(arm_instructions.to_channel_last(x)))
            got = [out.numpy()] if isinstance(out, tvm.runtime.Tensor) else [o.numpy() for o in out]
            for g, r in zip(got, want):
                np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5, err_msg=f"{name} stock={stock}")
