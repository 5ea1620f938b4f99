"""The aarch64 rule without a device: what it chooses and what LLVM makes of it (assembly).

Running the arm artifacts is tests/test_arm_emulated.py's job (qemu); these checks need only
TVM's LLVM, so they run everywhere and quickly.
"""

from __future__ import annotations

import dataclasses

import re
import warnings

import numpy as np
import pytest
import tvm
from tvm import relax, te

import tvm_pool
from tvm_pool import compute, lowering, relax_ops
from tvm_pool.schedules import arm, cpu_passes, rules_for, strided_loads, x86
from tvm_pool.targets import has_fullfp16, is_aarch64, is_x86, resolve_target

from oracles import pool_model

A72 = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "mattr": ["+neon"]}
A76 = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a76"}


def test_target_facts():
    a72, a76 = tvm.target.Target(A72), tvm.target.Target(A76)
    assert is_aarch64(a72) and is_aarch64(resolve_target("arm"))
    assert not is_aarch64(resolve_target("x86")) and not is_x86(a72)
    assert [type(r) for r in rules_for(a72)] == [arm.Pool]
    c72, c76 = arm.Pool().config(a72), arm.Pool().config(a76)
    assert c72.vector_bits_for("float32") == 128 and c72.vector_bits_for("int8") == 128
    assert not has_fullfp16(a72) and c72.vector_bits_for("float16") == 64
    assert has_fullfp16(a76) and c76.vector_bits_for("float16") == 128
    assert not c72.masked_loads and c72.deinterleaving_loads and c72.family == "arm"


def _primfuncs(mod):
    """The PrimFuncs of ``mod`` after tvm_pool's legalization (the ONNX road's 2-D pools are Relax
    pool ops until then)."""
    mod = relax.transform.LegalizeOps(customize_legalize_map=lowering.legalize_map())(mod)
    return [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]


def _imported(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tvm_pool.from_onnx(model)


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[2, 2], strides=[2, 2])])
def test_use_fmax_rewrites_the_nan_max(attrs):
    (func,) = _primfuncs(_imported(pool_model("MaxPool", [1, 4, 12, 12], **attrs)))
    assert "T.isnan" in func.script()
    text = arm.use_fmax(func).script()
    assert "T.isnan" not in text and '"llvm.maximum"' in text


def test_use_fmax_rewrites_a_reduction_combiner_and_leaves_the_rest():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 3, 9, 7], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax_ops.adaptive_max_pool(bb, x, [4, 3], return_indices=False))
        bb.emit_func_output(out)
    funcs = _primfuncs(bb.get())
    rewritten = [arm.use_fmax(f).script() for f in funcs]
    assert any('"llvm.maximum"' in t for t in rewritten)
    (avg,) = _primfuncs(_imported(pool_model("AveragePool", [1, 4, 12, 12], kernel_shape=[3, 3])))
    assert arm.use_fmax(avg).same_as(avg)


def _asm(model, target):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = tvm_pool.compile(_imported(model), target)
    return ex.mod.imports[0].inspect_source("asm")


@pytest.mark.parametrize("dtype,fmax", [("float32", "fmax\tv"), ("int8", "smax\tv"), ("uint8", "umax\tv")])
def test_neon_max_instructions(dtype, fmax):
    asm = _asm(pool_model("MaxPool", [1, 8, 32, 32], dtype, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), A72)
    assert fmax in asm
    assert "fcmeq" not in asm or dtype != "float32"  # no isnan tests left: FMAX propagates NaN
    assert "ld2\t" in asm  # the stride-2 pass row's taps as de-interleaving loads (strided_loads)


def test_pairwise_max_where_windows_cover_both_phases():
    # 2x2 s2: the max of a load's even and odd lanes is FMAXP; 3x3 s2 (a third tap) keeps LD2
    assert "fmaxp\t" in _asm(pool_model("MaxPool", [1, 4, 16, 64], kernel_shape=[2, 2], strides=[2, 2]), A72)
    asm = _asm(pool_model("MaxPool", [1, 4, 16, 64], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), A72)
    assert "fmaxp\t" not in asm and "ld2\t" in asm


def _scheduled_script(build, shape, rule, target, dtype="float32") -> str:
    x = te.placeholder(shape, dtype, name="x")
    func = te.create_prim_func([x, build(x)]).with_attr("global_symbol", "main")
    sch = rule.apply(func, tvm.target.Target(target) if isinstance(target, dict) else target, False)
    assert sch is not None
    return sch.mod["main"].script()


def test_neon_schedule_forms_and_x86_unchanged():
    """What the aarch64 facts change, each against x86 (exactness: test_pass_rows_bit_exact and
    test_long_sums_as_vector_partial_sums, and the emulated suite)."""
    x86_target = resolve_target("x86")
    long_avg = lambda x: compute.avg_pool(x, [64], strides=[32])  # noqa: E731
    # partial sums added by halving vector adds (one more rfactor, a 2-lane vector), on x86 too;
    # x86's knob "sums: lanes added in order" adds them lane by lane
    neon = _scheduled_script(long_avg, [1, 3, 1000], arm.Pool(), A72)
    assert "_rf_1" in neon and "T.vectorized(2)" in neon
    assert "_rf_1" in _scheduled_script(long_avg, [1, 3, 1000], x86.Pool(), x86_target)
    overrides = dict(x86.KNOBS)["sums: lanes added in order"]

    class InOrder(x86.Pool):
        def config(self, target):
            return dataclasses.replace(super().config(target), **overrides)

    assert "_rf_1" not in _scheduled_script(long_avg, [1, 3, 1000], InOrder(), x86_target)
    # the first doubling level of a long max reads the data, its row cut at the padding's edges
    long_max = lambda x: compute.max_pool(x, [32], strides=[1], pads=[16, 16])  # noqa: E731
    neon = _scheduled_script(long_max, [1, 3, 200], arm.Pool(), A72)
    assert 'T.sblock("pad")' not in neon and "_partition" in neon
    # non-overlapping 2x2x2 windows in one pass over every tap
    avg3d = lambda x: compute.avg_pool(x, [2, 2, 2], strides=[2, 2, 2])  # noqa: E731
    assert "pass0" not in _scheduled_script(avg3d, [1, 2, 4, 8, 56], arm.Pool(), A72)
    assert "pass0" in _scheduled_script(avg3d, [1, 2, 4, 8, 56], x86.Pool(), x86_target)
    # a row's rest after its whole registers vectorised from half a register (18 = 16 + 2)
    k3s3 = _scheduled_script(lambda x: compute.max_pool(x, [3, 3], strides=[3, 3]), [1, 2, 9, 54], arm.Pool(), A72)
    assert "T.vectorized(16, 18)" in k3s3
    # a padded copy that stays (float16 widened to float32) is cut at the data's edges, not hinted
    fp16 = _scheduled_script(lambda x: compute.max_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                             [1, 4, 56, 56], arm.Pool(), A72, "float16")
    assert 'T.sblock("pad_ax10_partition")' in fp16 and "pragma_loop_partition_hint" not in fp16
    # int8 rows in whole 16-lane registers (CpuConfig.max_row_lanes): the 57-wide first pass of a
    # 3x3 s2 p1 max over 56x56 with its padding inlined (no copy), 16 + 16 + 16 + 8 after the
    # edge; the 28-wide last pass 16 + 12, its rest one piece (cpu_passes._rest_pieces)
    int8 = _scheduled_script(lambda x: compute.max_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                             [1, 4, 56, 56], arm.Pool(), A72, "int8")
    assert 'T.sblock("pad")' not in int8
    for piece in ("T.vectorized(1, 17)", "T.vectorized(33, 49)", "T.vectorized(49, 57)", "T.vectorized(16, 28)"):
        assert piece in int8, piece


def test_float_sums_start_at_negative_zero_on_neon():
    """-0.0 + x is x for every x (LLVM drops the add; 0.0 + x is not, for x = -0.0): aarch64
    starts its float sums there; x86 keeps 0.0. The sums are exact either way (test_pass_rows)."""
    x = te.placeholder([1, 3, 16, 16], "float32", name="x")
    out = compute.avg_pool(x, [2, 2], strides=[2, 2])
    func = te.create_prim_func([x, out]).with_attr("global_symbol", "main")
    arm_script = arm.Pool().apply(func, tvm.target.Target(A72), False).mod["main"].script()
    assert "T.float32(-0.0)" in arm_script and "T.float32(0.0)" not in arm_script
    x86_script = x86.Pool().apply(func, resolve_target("x86"), False).mod["main"].script()
    assert "T.float32(-0.0)" not in x86_script
    data = -np.zeros([1, 3, 16, 16], "float32")
    got = _run_host(arm.Pool().apply(func, tvm.target.Target(A72), False).mod["main"].with_attr("global_symbol", "main"), data, out)
    assert np.all(np.signbit(got)) and np.all(got == 0)  # the IEEE sum of negative zeros


def test_deinterleaving_loads_for_strides_two_to_four():
    for kernel, stride, load in ((3, 2, "ld2\t"), (3, 3, "ld3\t"), (4, 4, "ld4\t")):
        model = pool_model("MaxPool", [1, 4, 12, 48], kernel_shape=[kernel, kernel], strides=[stride, stride])
        assert load in _asm(model, A72), stride
    x86_asm = _asm(pool_model("MaxPool", [1, 8, 32, 32], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                   resolve_target("x86"))
    assert strided_loads.PIPELINE not in str(x86_asm)  # x86 has no strided-load rewrite (gathers)


def test_padding_inlined_into_the_first_pass_on_neon():
    """No masked loads: the padded plane is not copied; the first pass's row is cut at the
    padding's edges, its middle in vector pieces with no bounds checks. x86 keeps the copy of
    a small plane."""
    x = te.placeholder([1, 4, 56, 56], "float32", name="x")
    out = compute.max_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    func = te.create_prim_func([x, out]).with_attr("global_symbol", "main")
    arm_script = arm.Pool().apply(func, tvm.target.Target(A72), False).mod["main"].script()
    assert 'T.sblock("pad")' not in arm_script
    assert "T.vectorized(1, 9)" in arm_script  # the first 8 columns after the padded one
    x86_script = x86.Pool().apply(func, resolve_target("x86"), False).mod["main"].script()
    assert 'T.sblock("pad")' in x86_script


# ---------------------------------------------------------------------------------------------
# Strided vector loads as contiguous loads + shuffles (schedules/strided_loads.py)
# ---------------------------------------------------------------------------------------------

def _lowered_taps(n_in, n_out, stride, taps, lanes):
    """B[j] = max of A[stride * j + k], k < taps, j vectorised by ``lanes``, after TVM's TIR
    pipeline and the strided-load rewrite: (the rewritten loads, the function)."""
    a = te.placeholder((n_in,), "float32", name="A")
    b = te.compute((n_out,), lambda j: _max_of([a[stride * j + k] for k in range(taps)]), name="B")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
    (j,) = sch.get_loops(sch.get_sblock("B"))
    sch.vectorize(sch.split(j, [None, lanes])[1])
    from tvm.tirx import compilation_pipeline  # pylint: disable=import-outside-toplevel

    name = "tvm_pool_test_strided_loads_capture"
    if name not in compilation_pipeline.PIPELINE_MAP:
        @tvm.transform.module_pass(opt_level=0)
        def capture(mod, _ctx):
            _CAPTURED["mod"] = mod
            return mod

        def factory():
            pipeline, host, device = compilation_pipeline.get_tir_pipeline(strided_loads.register_pipeline())
            return tvm.transform.Sequential([pipeline, capture]), host, device
        compilation_pipeline.register_tir_pipeline(name, factory)
    lib = tvm.tirx.build(sch.mod, tvm.target.Target("llvm"), pipeline=name)
    return _CAPTURED.pop("mod").script(), lib


_CAPTURED = {}


def _max_of(values):
    out = values[0]
    for v in values[1:]:
        out = tvm.te.max(out, v)
    return out


def test_strided_loads_rewritten_only_inside_the_buffer():
    # 3 taps, stride 2, A exactly as long as the last window needs: the third tap's contiguous
    # load is taken one element back (odd lanes), so it ends inside A
    script, lib = _lowered_taps(2 * 16 + 1, 16, 2, 3, 4)
    assert "T.Shuffle" in script and "[1, 3, 5, 7]" in script and "T.Ramp(" in script
    assert ", 2, 4)]" not in script  # no strided load left
    data = np.random.default_rng(2).standard_normal(33).astype("float32")
    res = tvm.runtime.tensor(np.zeros(16, "float32"))
    lib["main"](tvm.runtime.tensor(data), res)
    want = np.max(np.stack([data[k : k + 31 : 2] for k in range(3)]), axis=0)
    np.testing.assert_array_equal(res.numpy(), want)
    # one vector over the whole of A: neither 8 elements from 0 nor from -1 fit in 7, so the
    # strided load stays as it is
    script, _ = _lowered_taps(7, 4, 2, 1, 4)
    assert "T.Shuffle" not in script and ", 2, 4)]" in script


def test_strided_loads_trust_no_loop_variable_defined_twice():
    """One loop variable in two loops with different ranges (TVM's analyser refuses to bind it
    twice): left unknown, so a contiguous load that fits the first loop's range is not assumed
    to fit the second's."""
    from tvm import tirx

    a = tirx.decl_buffer((40,), "float32", name="A")
    i = tirx.Var("i", "int32")
    load = tirx.BufferLoad(a, [tirx.Ramp(i * 8, 2, 4)])  # i < 2 fits A; i < 8 does not
    short = tirx.For(i, 0, 2, tirx.ForKind.SERIAL, tirx.Evaluate(load))
    long = tirx.For(i, 0, 8, tirx.ForKind.SERIAL, tirx.Evaluate(load))
    def rewritten(stmt):
        chosen = strided_loads._choose_phases(stmt, strided_loads._scope(stmt))  # pylint: disable=protected-access
        return strided_loads._rewrite_load(load, chosen)  # pylint: disable=protected-access

    assert isinstance(rewritten(short), tirx.Shuffle)
    assert rewritten(tirx.SeqStmt([short, long])).same_as(load)


def test_lonely_strided_tap_loads_up_to_its_last_lane():
    """3 taps, stride 2, 16 int8 lanes over a row with room on both sides: taps 0 and 1 share
    one contiguous load (its even and odd lanes); tap 2, alone in its load, is loaded from one
    element back so that it picks the load's last lane (odd lanes) instead of leaving it unread:
    LLVM narrows a load whose last element nothing reads (31 int8) and moves the picked lanes
    one by one."""
    from tvm import tirx

    a = tirx.decl_buffer((80,), "int8", name="A")
    i = tirx.Var("i", "int32")
    taps = [tirx.BufferLoad(a, [tirx.Ramp(i * 32 + 2 + k, 2, 16)]) for k in range(3)]
    body = tirx.For(i, 0, 2, tirx.ForKind.SERIAL, tirx.SeqStmt([tirx.Evaluate(t) for t in taps]))
    chosen = strided_loads._choose_phases(body, strided_loads._scope(body))  # pylint: disable=protected-access
    assert [chosen[t] for t in taps] == [0, 1, 1]
    even, odd = list(range(0, 32, 2)), list(range(1, 32, 2))
    for tap, start, lanes in zip(taps, [2, 2, 3], [even, odd, odd]):
        shuffle = strided_loads._rewrite_load(tap, chosen)  # pylint: disable=protected-access
        assert [int(x) for x in shuffle.indices] == lanes
        assert tvm.sym.Analyzer().can_prove_equal(shuffle.vectors[0].indices[0].base, i * 32 + start)


@pytest.mark.parametrize("n,longest,lanes,long_chunks,want", [
    (112, 16, 4, False, [16] * 7),
    (56, 16, 4, False, [8] * 7),
    (28, 16, 4, False, [4] * 7),  # single registers: best for rows of passes
    (28, 16, 4, True, [16, 8, 4]),  # rows read from the data: fewer, longer iterations
    (18, 16, 4, False, [16, 2]),  # the rest vectorised from half a register on
    (113, 16, 4, False, [16] * 7 + [1]),
    (12, 16, 4, False, [4, 4, 4]),  # never 3 registers in one vector
    (7, 16, 4, False, None),  # short rows no chunk divides stay LLVM's
    (56, 64, 16, False, [16, 16, 16, 8]),  # int8: whole registers, then the rest
    (28, 64, 16, False, [16, 12]),  # a rest of whole words of bytes: one piece
    (26, 64, 16, False, None),  # a rest under whole words: LLVM's
    (14, 16, 4, False, None),  # the rest under 4 lanes
])
def test_row_pieces(n, longest, lanes, long_chunks, want):
    assert cpu_passes._row_pieces(n, longest, lanes, long_chunks) == want  # pylint: disable=protected-access


@pytest.mark.parametrize("target", [A76, A72], ids=["fullfp16", "no_fullfp16"])
def test_half_max_in_16_bit_lanes(target):
    """A float16 max runs on int16 keys (compute.common.half_order): 8 lanes a register, never
    widened to float32, with or without half-precision arithmetic."""
    asm = _asm(pool_model("MaxPool", [1, 8, 32, 32], "float16", kernel_shape=[2, 2], strides=[2, 2]), target)
    assert re.search(r"smaxp?\tv\d+\.8h", asm) and "fcvtl" not in asm


def test_x86_unchanged_by_the_arm_rewrite():
    (func,) = _primfuncs(_imported(pool_model("MaxPool", [1, 4, 12, 12], kernel_shape=[3, 3], strides=[2, 2])))
    sch = x86.Pool().apply(func, tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "haswell"}), False)
    assert sch is not None and "T.isnan" in sch.mod["main"].script()
    assert np.isnan(np.float32("nan"))  # (the x86 NaN semantics are tested bit-exact in test_schedules_x86)


# ---------------------------------------------------------------------------------------------
# Long sums as vector partial sums (rfactor): the aarch64 rule run on this machine's CPU
# ---------------------------------------------------------------------------------------------

def _bias_add(t):
    return te.compute(t.shape, lambda *i: t(*i) + tvm.tirx.const(0.25, t.dtype) * i[1].astype(t.dtype), name="bias_add")


def _relu(t):
    return te.compute(t.shape, lambda *i: tvm.tirx.max(t(*i), tvm.tirx.const(0, t.dtype)), name="relu")


# name: (input shape, TE graph, reassociated?). Partial sums need contiguous taps, a multiple of
# the lanes, more taps than the row schedule unrolls and no padded copy (padded windows take
# the vector-row schedule); the rest keeps the in-order sum.
LONG_SUMS = {
    "avg_k64_s32": ([2, 3, 1000], lambda x: compute.avg_pool(x, [64], strides=[32]), True),  # block sums
    "avg_k57_s19_p7_blocks": ([1, 3, 500], lambda x: compute.avg_pool(x, [57], strides=[19], pads=[7, 30]), False),
    "avg_k32_s8": ([1, 4, 300], lambda x: compute.avg_pool(x, [32], strides=[8]), True),
    "avg_k32_s8_padded": ([1, 4, 300], lambda x: compute.avg_pool(x, [32], strides=[8], pads=[5, 7]), False),
    "lp2_k32_s32": ([1, 3, 640], lambda x: compute.lp_pool(x, [32], strides=[32], p=2), True),
    "fused_relu_avg_add": ([1, 5, 512], lambda x: _bias_add(compute.avg_pool(_relu(x), [64], strides=[32])), True),
    "avg_k18_s9_tail": ([1, 3, 400], lambda x: compute.avg_pool(x, [18], strides=[9]), True),
    # whole-plane averages: rebuilt as one reduction (arm.whole_plane_sums), then partial sums
    "global_avg_7x7": ([2, 6, 7, 7], lambda x: compute.global_pool(x, "avg"), True),
    "avg_whole_8x8": ([1, 5, 8, 8], lambda x: compute.avg_pool(x, [8, 8]), True),
    "global_avg_one_reduction": ([1, 4, 5, 9], lambda x: compute.global_pool(x, "avg", by_axis=False), True),
    "global_avg_relu": ([1, 4, 7, 7], lambda x: _relu(compute.global_pool(x, "avg")), False),  # not the exact function
    "global_lp": ([1, 4, 7, 7], lambda x: compute.global_pool(x, "lp", p=2), False),
    "avg_dilated": ([1, 3, 400], lambda x: compute.avg_pool(x, [32], strides=[16], dilations=[2]), False),
}


@pytest.mark.parametrize("name", sorted(LONG_SUMS))
def test_long_sums_as_vector_partial_sums(name):
    from helpers import tolerance  # the aarch64 tests' tolerances

    shape, build, reassociated = LONG_SUMS[name]
    x = te.placeholder(shape, "float32", name="x")
    out = build(x)
    func = te.create_prim_func([x, out]).with_attr("global_symbol", "main")
    sch = arm.Pool().apply(func, tvm.target.Target(A72), False)
    assert sch is not None
    scheduled = sch.mod["main"].with_attr("global_symbol", "main")
    assert ("_rf" in scheduled.script()) == reassociated
    data = np.random.default_rng(0).standard_normal(shape).astype("float32")
    want = _run_host(func, data, out)
    for pipeline in ("default", strided_loads.register_pipeline()):  # as aarch64 builds lower it too
        got = _run_host(scheduled, data, out, pipeline)
        if reassociated:
            rtol, atol = tolerance("float32", "aarch64")
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(got, want)


def _run_host(func, data, out, tir_pipeline="default"):
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm", tir_pipeline=tir_pipeline)
    res = tvm.runtime.tensor(np.zeros([int(d) for d in out.shape], "float32"))
    lib["main"](tvm.runtime.tensor(data), res)
    return res.numpy()


# Separable passes: rows in whole vector chunks, a row no chunk divides cut into whole chunks and
# a tail (loop_partition); rows left to LLVM in tiles of one register, a window reduction's
# consumers per tile. Max and in-order sums stay bit-exact.
PASS_ROWS = {
    "max1d_k32_s1_p16": ([1, 3, 100], lambda x: compute.max_pool(x, [32], strides=[1], pads=[16, 16])),
    "max3x3_s1_p1_odd": ([1, 3, 29, 37], lambda x: compute.max_pool(x, [3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    "avg3x3_s1_p1": ([1, 3, 56, 56], lambda x: compute.avg_pool(x, [3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    "video3d_1x3x3_s2": ([1, 2, 3, 27, 27], lambda x: compute.max_pool(x, [1, 3, 3], strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1])),
    "fused_relu_max1d_add": ([1, 4, 77], lambda x: _bias_add(compute.max_pool(_relu(x), [20], strides=[1], pads=[3, 4]))),
    # the padded average's division (count_include_pad=0) after the passes: a stage per row,
    # TVM-vectorised (CpuConfig.vector_consumers), on an odd row (chunks and a tail); with a
    # Relu and an Add after it, the division and both consumers in the last pass's vector row
    "avg3x3_s1_p1_excl_relu_add": ([1, 3, 20, 20], lambda x: _bias_add(_relu(
        compute.avg_pool(x, [3, 3], pads=[1, 1, 1, 1], count_include_pad=False)))),
    "avg3x3_s1_p1_excl_odd_row": ([1, 3, 13, 37], lambda x: compute.avg_pool(
        x, [3, 3], pads=[1, 1, 1, 1], count_include_pad=False)),
    # rows LLVM's loop would end in a scalar tail: tiles of one register (28 = 7 x 4 lanes)
    "max3d_k2_row28": ([1, 2, 4, 8, 56], lambda x: compute.max_pool(x, [2, 2, 2], strides=[2, 2, 2])),
    "max2x2_s2_row28_relu": ([1, 3, 6, 56], lambda x: _relu(compute.max_pool(x, [2, 2], strides=[2, 2]))),
    # window reductions (row schedule): the consumers per output, in a tile of vector lanes
    "avg2x2_s2_relu_add": ([1, 3, 28, 28], lambda x: _bias_add(_relu(compute.avg_pool(x, [2, 2], strides=[2, 2])))),
    "avg3d_k2": ([1, 2, 4, 12, 12], lambda x: compute.avg_pool(x, [2, 2, 2], strides=[2, 2, 2])),
    "avg2x2_s2_odd_row": ([1, 3, 14, 18], lambda x: compute.avg_pool(x, [2, 2], strides=[2, 2])),
    "lp2x2_s2": ([1, 3, 16, 16], lambda x: compute.lp_pool(x, [2, 2], strides=[2, 2], p=3)),
    # padding inlined into the first pass (no masked loads), its row cut at the padding's edges:
    # begin and end padded, end only (ceil_mode), zeros counted, a row of 58 (pieces + a rest)
    "max3x3_s2_p1_row112": ([1, 2, 9, 112], lambda x: compute.max_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "max3x3_s2_ceil": ([1, 2, 12, 112], lambda x: compute.max_pool(x, [3, 3], strides=[2, 2], ceil_mode=True)),
    "avg3x3_s2_p1_incl_row58": ([1, 2, 10, 58], lambda x: compute.avg_pool(
        x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=True)),
    "max3x3_s1_p2_relu_add": ([1, 2, 9, 28], lambda x: _bias_add(compute.max_pool(_relu(x), [3, 3], pads=[2, 2, 2, 2]))),
    # strided last passes as de-interleaving loads, the row's rest vectorised (18 = 16 + 2)
    "max3x3_s3_row18": ([1, 2, 9, 54], lambda x: compute.max_pool(x, [3, 3], strides=[3, 3])),
    "max4x4_s4_row12": ([1, 2, 8, 48], lambda x: compute.max_pool(x, [4, 4], strides=[4, 4])),
    # non-overlapping passes in one pass (cpu_passes._taps_in_one_pass), rows of 28 as 16 + 8 + 4
    "avg3d_k2_row28": ([1, 2, 4, 8, 56], lambda x: compute.avg_pool(x, [2, 2, 2], strides=[2, 2, 2])),
    "avg3d_k2_relu_add": ([1, 3, 4, 6, 20], lambda x: _bias_add(_relu(compute.avg_pool(x, [2, 2, 2], strides=[2, 2, 2])))),
    # one output column, rows in the parallel loop: the finalize has no loop of its own left, and
    # its vectorised "row" was the parallel loop around the padded copy and the pass (wrong
    # values; tests/test_torch_fusion.py seed 100091); 4 and 8 rows failed, 5 did not
    "avg4x1_p1_one_column": ([1, 1, 5, 1], lambda x: compute.avg_pool(x, [4, 1], pads=[1, 0, 1, 0], count_include_pad=True)),
    "avg4x3_p1_one_column": ([1, 1, 9, 3], lambda x: compute.avg_pool(x, [4, 3], pads=[1, 0, 1, 0], count_include_pad=True)),
}


@pytest.mark.parametrize("name", sorted(PASS_ROWS))
def test_pass_rows_bit_exact(name):
    shape, build = PASS_ROWS[name]
    x = te.placeholder(shape, "float32", name="x")
    out = build(x)
    func = te.create_prim_func([x, out]).with_attr("global_symbol", "main")
    sch = arm.Pool().apply(func, tvm.target.Target(A72), False)
    assert sch is not None
    data = np.random.default_rng(1).standard_normal(shape).astype("float32")
    data.flat[::31] = np.nan
    scheduled = sch.mod["main"].with_attr("global_symbol", "main")
    want = _run_host(func, data, out)
    # TVM's pipeline, then with the strided loads as contiguous loads + shuffles (as aarch64
    # builds lower them): both bit-exact
    for pipeline in ("default", strided_loads.register_pipeline()):
        np.testing.assert_array_equal(_run_host(scheduled, data, out, pipeline), want)


def _finalize_innermost_loop(scheduled) -> str:
    """The TVMScript header of the innermost loop around the average's finalize block (the
    division by the window count)."""
    lines = scheduled.script().splitlines()
    at = next(i for i, line in enumerate(lines) if 'T.sblock("avg_pool")' in line)
    indent = len(lines[at]) - len(lines[at].lstrip())
    for line in reversed(lines[:at]):
        if line.lstrip().startswith("for ") and len(line) - len(line.lstrip()) < indent:
            return line.strip()
    raise AssertionError("no loop around the finalize block")


def test_average_division_vectorised_on_neon_only():
    """The padded average's per-row division is TVM-vectorised on aarch64 (LLVM left its count
    arithmetic scalar there) and left to LLVM on x86 (faster there); bit-exact either way."""
    x = te.placeholder([1, 8, 20, 20], "float32", name="x")
    out = compute.avg_pool(x, [3, 3], pads=[1, 1, 1, 1], count_include_pad=False)
    func = te.create_prim_func([x, out]).with_attr("global_symbol", "main")
    loops = {}
    for name, rule, target in (("arm", arm.Pool(), tvm.target.Target(A72)),
                               ("x86", x86.Pool(), resolve_target("x86"))):
        sch = rule.apply(func, target, False)
        assert sch is not None
        scheduled = sch.mod["main"].with_attr("global_symbol", "main")
        loops[name] = _finalize_innermost_loop(scheduled)
        if name == "arm":
            data = np.random.default_rng(1).standard_normal([1, 8, 20, 20]).astype("float32")
            np.testing.assert_array_equal(*(_run_host(f, data, out) for f in (scheduled, func)))
    assert "T.vectorized" in loops["arm"], loops
    assert "T.vectorized" not in loops["x86"], loops
