"""The one schedule path (``Pool.schedule`` with a config) and its settings as data.

* every fallback level of the CPU rule schedules, and what it schedules equals the unscheduled
  function (x86, run here);
* a level TVM refuses falls back to the next; a bug in a step (a TypeError) is not swallowed;
* knobs are ``dataclasses.replace`` of a frozen config, each family its own space, safe to use
  from several threads at once;
* ``compile``'s rule, tuning's ``pool_candidates`` and the MetaSchedule custom rule give the
  same hand-written schedule, aarch64's rewrites included.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses

import pytest
import tvm
import tvm_ffi
from tvm import s_tir, te

import tvm_pool
from tvm_pool import compute
from tvm_pool.schedules import analysis, arm, cpu, cpu_reduction, families, finish_pass, meta_schedule, x86
from tvm_pool.schedules.cpu_config import FULL, NO_VECTOR, PARALLEL_ONLY, CpuConfig
from tvm_pool.targets import resolve_target

from primfunc_check import check_pairs

X86 = resolve_target("x86")
ARM = resolve_target("arm")
HOST = resolve_target("host")


def _max_indices():
    x = te.placeholder((1, 8, 15, 15), "float32", name="x")
    y, i = compute.max_pool(x, [3, 3], [2, 2], None, [1, 1, 1, 1], return_indices=True)
    return te.create_prim_func([x, y, i])


def _padded_rows():  # a padded non-separable value reduction: the vector-row schedule at FULL
    x = te.placeholder((1, 32, 40, 40), "float32", name="x")
    func = te.create_prim_func([x, compute.avg_pool(x, [2, 2], [2, 2], None, [1, 1, 1, 1])])
    assert len(analysis.main_blocks(s_tir.Schedule(func))) == 1  # a window reduction, not passes
    return func


def _passes():  # separable passes, padded
    x = te.placeholder((1, 16, 30, 30), "float32", name="x")
    return te.create_prim_func([x, compute.avg_pool(x, [3, 3], [2, 2], None, [1, 1, 1, 1], count_include_pad=False)])


def _long_sum():  # vector partial sums at FULL
    x = te.placeholder((1, 4, 1000), "float32", name="x")
    return te.create_prim_func([x, compute.avg_pool(x, [64], [32], [1], [0, 0])])


def _fused():  # relu -> max pool -> add of a bias
    x = te.placeholder((1, 16, 28, 28), "float32", name="x")
    b = te.placeholder((1, 16, 1, 1), "float32", name="b")
    relu = te.compute(x.shape, lambda *i: te.max(x(*i), tvm.tirx.const(0, "float32")), name="relu")
    pooled = compute.max_pool(relu, [3, 3], [2, 2], None, [1, 1, 1, 1])
    out = te.compute(pooled.shape, lambda n, c, h, w: pooled[n, c, h, w] + b[n, c, 0, 0], name="add")
    return te.create_prim_func([x, b, out])


FUNCS = {"max_indices": _max_indices, "padded_rows": _padded_rows, "passes": _passes, "long_sum": _long_sum,
         "fused": _fused}


def _loop_kinds(func) -> set:
    kinds = set()
    tvm_ffi.structural_walk(func, (tvm.tirx.For, lambda loop: kinds.add(int(loop.kind))))
    return kinds


@pytest.mark.skipif(not tvm_pool.targets.is_x86(HOST), reason="runs x86 code")
@pytest.mark.parametrize("level", [FULL, NO_VECTOR, PARALLEL_ONLY])
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_every_fallback_level_schedules_exactly(name, level):
    func = FUNCS[name]()
    rule = x86.Pool()
    config = dataclasses.replace(rule.config(X86), level=level, min_parallel_bytes=0, num_threads=2)
    sch = rule.schedule(s_tir.Schedule(func), config)
    assert sch is not None, f"{name} not scheduled at level {level}"
    kinds = _loop_kinds(sch.mod["main"])
    assert int(tvm.tirx.ForKind.PARALLEL) in kinds, kinds
    if level < FULL:
        assert int(tvm.tirx.ForKind.VECTORIZED) not in kinds, f"level {level} vectorised"
    report = check_pairs([(name, func, sch.mod["main"])], X86, seed=level)
    assert report.checked == [name] and not report.mismatches, report.summary()


def test_a_refused_level_falls_back(monkeypatch):
    """TVM refusing a step at FULL (a RuntimeError, as its ScheduleError is) gives NO_VECTOR."""
    func = _padded_rows()
    rule = x86.Pool()
    config = rule.config(X86)
    want = rule.schedule(s_tir.Schedule(func), dataclasses.replace(config, level=NO_VECTOR))

    def refuse(*_args, **_kwargs):
        raise RuntimeError("ScheduleError: refused")

    monkeypatch.setattr(cpu_reduction, "_schedule_vector_rows", refuse)
    got = rule.schedule(s_tir.Schedule(func), config)
    assert got is not None and tvm_ffi.structural_equal(got.mod, want.mod)


def test_a_bug_in_a_step_is_not_swallowed(monkeypatch):
    def broken(*_args, **_kwargs):
        raise TypeError("a bug")

    monkeypatch.setattr(cpu_reduction, "_schedule_vector_rows", broken)
    with pytest.raises(TypeError, match="a bug"):
        x86.Pool().schedule(s_tir.Schedule(_padded_rows()), x86.Pool().config(X86))


def test_config_is_frozen_data():
    config = x86.Pool().config(X86)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.min_parallel_bytes = 0  # type: ignore[misc]
    fields = {f.name for f in dataclasses.fields(CpuConfig)}
    for rule in (x86.Pool(), arm.Pool()):
        labels = [label for label, _ in rule.knobs()]
        assert labels[0] == "hand-written" and rule.knobs()[0][1] == {}
        assert len(set(labels)) == len(labels)
        for label, overrides in rule.knobs():
            assert set(overrides) <= fields, (rule.name, label)
    x86_space = {label for label, _ in x86.Pool().knobs()}
    arm_space = {label for label, _ in arm.Pool().knobs()}
    assert "padding: copied per plane" in x86_space and "padding: copied per plane" not in arm_space
    assert "vector: pass rows in chunks of 2 registers" in arm_space - x86_space


def test_knobs_leave_the_hand_written_schedule_alone():
    """Scheduling every knob, then the hand-written config again, gives what it gave first."""
    func = _passes()
    rule = x86.Pool()
    first = rule.schedule(s_tir.Schedule(func), rule.config(X86))
    labels = [label for label, _ in meta_schedule.candidates(rule, s_tir.Schedule(func), X86)]
    assert len(labels) > 1 and labels[0].startswith("hand-written")
    again = rule.schedule(s_tir.Schedule(func), rule.config(X86))
    assert tvm_ffi.structural_equal(first.mod, again.mod)


def test_schedules_from_several_threads_are_the_sequential_ones():
    funcs = [_passes(), _padded_rows(), _long_sum()]
    rule = x86.Pool()
    configs = [dataclasses.replace(rule.config(X86), **overrides) for _, overrides in rule.knobs()]
    jobs = [(f, c) for f in funcs for c in configs]

    def run(job):
        sch = rule.schedule(s_tir.Schedule(job[0]), job[1])
        return None if sch is None else sch.mod

    sequential = [run(job) for job in jobs]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        concurrent_ = list(pool.map(run, jobs))
    for want, got in zip(sequential, concurrent_):
        assert (want is None and got is None) or tvm_ffi.structural_equal(want, got)


def _fused_pool(target, model_attrs):
    from oracles import pool_model  # pylint: disable=import-outside-toplevel

    mod = tvm_pool.from_onnx(pool_model(**model_attrs))
    fused = tvm_pool.lowering.fuse(mod, target)
    ((gv, func),) = [(gv, f) for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    return fused, gv, func


@pytest.mark.parametrize("model_attrs", [
    dict(op_type="MaxPool", x_shape=[1, 16, 30, 30], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(op_type="GlobalAveragePool", x_shape=[1, 64, 7, 7]),
])
def test_one_path_on_aarch64(model_attrs):
    """The dlight rule, pool_candidates' hand-written point and the MetaSchedule custom rule's
    first point are one schedule, with aarch64's FMAX / whole-plane rewrites (already in the
    fused, prepared function) and, once finished, its -0.0 sum start."""
    fused, gv, func = _fused_pool(ARM, model_attrs)
    rule = families.rule_for(ARM)
    assert isinstance(rule, arm.Pool) and rule.prepare(func).same_as(func)  # prepared when fused
    dlight = rule.apply(func, ARM, False).mod["main"]

    (label, hand), *_ = meta_schedule.pool_candidates(tvm.IRModule({"main": func}), ARM)
    assert label.startswith("hand-written")
    meta_schedule.register()
    base = s_tir.Schedule(tvm.IRModule({"main": func}))
    anchor = base.get_sblock(analysis.unit_anchors(base)[0])
    with ARM:
        spaces = tvm.get_global_func("s_tir.meta_schedule.arm_cpu.tvm_pool." + analysis.pool_kind(base.get(anchor)))(base, anchor)
    assert tvm_ffi.structural_equal(spaces[0].mod, hand.mod)

    # a candidate being measured (no tirx.is_scheduled mark) is finished by the builder's pass
    candidate = finish_pass(ARM, scheduled_only=False)(hand.mod)["main"]
    assert tvm_ffi.structural_equal(candidate, dlight)
    if "Average" in model_attrs["op_type"]:  # a sum: started at -0.0 once finished
        assert "-0.0" in candidate.script() and "-0.0" not in hand.mod["main"].script()
        assert finish_pass(ARM)(hand.mod)["main"].same_as(hand.mod["main"])  # unmarked: left alone

    # the tuned function (a trace replayed, then tirx.is_scheduled) gets the same finish as dlight's
    tuned = fused.shallow_copy() if hasattr(fused, "shallow_copy") else tvm.IRModule(dict(fused.functions_items()))
    tuned[gv] = hand.mod["main"].with_attr("tirx.is_scheduled", True)
    finished = finish_pass(ARM)(tuned)[gv]
    assert tvm_ffi.structural_equal(finished.without_attr("tirx.is_scheduled"), dlight)


def test_other_blocks_keep_the_schedule():
    """The custom rule schedules a function once: a block that is not the anchor is left alone."""
    meta_schedule.register()
    func = _passes()
    sch = s_tir.Schedule(func)
    chain = analysis.pass_chains(sch)[0]
    first_pass = chain.passes[0]
    with X86:
        kept = tvm.get_global_func("s_tir.meta_schedule.cpu.tvm_pool.avg_sum_pass")(sch, first_pass)
        spaces = meta_schedule._rule(sch, first_pass)  # pylint: disable=protected-access
    assert len(kept) == 1 and kept[0].same_as(sch) and len(spaces) == 1 and spaces[0].same_as(sch)
