"""Tuning (issue 13): tvm_pool.tune writes a MetaSchedule JSON database that TVM reads and
tvm_pool.compile applies; mismatched and corrupt logs; the pooling design space of every target
family; the builder's finish pass; an interrupted run's log; RPC tracker."""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.s_tir import meta_schedule as ms

import tvm_pool
from tvm_pool import schedules, tuning
from tvm_pool.errors import TvmPoolError
from tvm_pool.schedules import meta_schedule as ms_rules
from tvm_pool.schedules import x86
from tvm_pool.targets import is_x86, resolve_target

from tuning_helpers import (
    arg_shapes,
    assert_applied,
    conv_pool_model,
    free_port,
    host_processes,
    pool_mod,
    pool_onnx,
    run_prim,
    start_tracker,
    tasks,
    wait_for_server,
)

TARGET = resolve_target("host")
pytestmark = pytest.mark.skipif(not is_x86(TARGET), reason="tunes for this machine, taken to be an x86 CPU with AVX2")


@pytest.mark.parametrize(
    "kind, kwargs",
    [
        ("max", dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))),
        ("max", dict(pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))),
        ("avg", dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True)),
        ("max", dict(pool_size=(2, 2), strides=(2, 2))),
    ],
)
def test_pool_design_space_has_hand_written_first_and_is_bit_exact(kind, kwargs):
    mod = pool_mod(kind, **kwargs)
    task = next(t for t in tasks(mod, TARGET) if "pool" in t.task_name)
    task_mod = task.dispatched[0]
    cands = ms_rules.pool_candidates(task_mod, TARGET)
    assert len(cands) >= 2
    label, first = cands[0]
    assert label.startswith("hand-written")
    hand = x86.Pool().apply(task_mod["main"], TARGET, False)
    assert tvm_ffi.structural_equal(first.mod["main"].body, hand.mod["main"].body)
    x = np.random.default_rng(1).standard_normal(arg_shapes(task_mod)[0][0]).astype("float32")
    want = run_prim(task_mod, [x], TARGET)
    for label, sch in cands:
        got = run_prim(sch.mod, [x], TARGET)
        for g, w in zip(got, want):
            assert np.array_equal(g, w), label
        # every candidate's trace replays on the workload (what the database stores)
        replay = tvm.s_tir.Schedule(task_mod)
        sch.trace.apply_to_schedule(replay, remove_postproc=False)
        assert tvm_ffi.structural_equal(replay.mod, sch.mod), label


@pytest.mark.parametrize("target", ["host", "arm", "cuda"])
def test_every_target_family_searches_its_pools_exhaustively(target):
    """Pooling tasks are planned for every family with a pooling rule, not x86 alone: the
    family's design space, the hand-written schedule first; no pool is left to the search."""
    target = resolve_target(target)
    mod = pool_mod("max", pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    _, pool_tasks, search_tasks = tuning.plan._tasks(mod, target)  # pylint: disable=protected-access
    assert not search_tasks
    ((task, cands),) = pool_tasks
    assert "pool" in task.task_name and len(cands) >= 2 and cands[0][0].startswith("hand-written")


def test_the_builder_finishes_every_candidate_before_building_it(monkeypatch):
    """The in-process builder applies the family's rewrites of a scheduled pooling function
    (``schedules.finish_pass``) to each candidate, as compile does to a tuned function."""
    finished = []
    real = schedules.finish_pass

    def recording(target, scheduled_only=True):
        assert not scheduled_only  # a candidate carries no tirx.is_scheduled mark
        def apply(mod):
            finished.append((str(target.kind.name), mod))
            return real(target, scheduled_only)(mod)

        return apply

    monkeypatch.setattr(schedules, "finish_pass", recording)
    from tvm.s_tir.meta_schedule.builder import BuilderInput  # pylint: disable=import-outside-toplevel

    task = next(t for t in tasks(pool_mod("avg", pool_size=(2, 2), strides=(2, 2)), TARGET) if "pool" in t.task_name)
    cands = ms_rules.pool_candidates(task.dispatched[0], TARGET)[:2]
    built = tuning.measure.in_process_builder(None).build([BuilderInput(sch.mod, TARGET) for _, sch in cands])
    try:
        assert all(res.error_msg is None for res in built), [res.error_msg for res in built]
        assert [kind for kind, _ in finished] == ["llvm"] * len(cands)
        assert all(tvm_ffi.structural_equal(mod, sch.mod) for (_, mod), (_, sch) in zip(finished, cands))
    finally:
        for res in built:
            if res.artifact_path:
                tuning.measure.remove_artifact(res.artifact_path)


def test_an_interrupted_search_still_records_the_run(tmp_path, monkeypatch):
    """Ctrl-C (or an error) in the search: the run is written to target.json as interrupted, with
    what it measured, and the interruption goes on to the caller."""

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tuning.pooling, "tune_pools", lambda *_args: [])
    monkeypatch.setattr(tuning.evolutionary, "search", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tvm_pool.tune(pool_mod("max", pool_size=(2, 2), strides=(2, 2)), "host", trials=4, log_dir=str(tmp_path),
                      source="relu_pool", progress=lambda _line: None)
    run = json.load(open(os.path.join(tmp_path, tuning.META_FILE)))["runs"][-1]
    assert run["stopped"] == "interrupted" and run["model"] == "relu_pool" and run["measurements"] == 0


def test_the_time_budget_stops_the_search_through_tvm():
    """The progress callback stops the search by raising once the budget is spent; MetaSchedule
    calls it through TVM's FFI, which hands the exception back as the RuntimeError that
    ``evolutionary.search`` catches (with the callback's state saying it stopped)."""
    import time  # pylint: disable=import-outside-toplevel

    from tvm.s_tir.meta_schedule.builder import BuilderResult  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.runner import RunnerResult  # pylint: disable=import-outside-toplevel

    from tvm_pool.tuning.stop import Stop  # pylint: disable=import-outside-toplevel

    results = [tuning.TaskResult("conv", "search")]
    lines = []
    stop = Stop(deadline=time.time() - 1)
    stop.begin_search()
    stop.handed_out = 1  # one batch handed out, collected by this call
    callback, state = tuning.evolutionary._progress_callback(  # pylint: disable=protected-access
        results, 8, lines.append, [(1.0, results[0])], stop
    )
    scheduler = ms.task_scheduler.TaskScheduler.create("round-robin")
    with pytest.raises(RuntimeError, match=r"the search stopped \(time budget\)"):
        ms.measure_callback.MeasureCallback.apply(
            callback, scheduler, 0, [], [BuilderResult("x.so", None)], [RunnerResult([1e-3], None)]
        )
    assert state["stopped"] and results[0].trials == 1 and results[0].best_ms == 1.0
    assert lines and lines[0].startswith("[task 1/1] conv: 1 trials")
    # the whole model's estimate as tuning goes: weight x best over the tasks measured yet
    assert lines[0].endswith("; model 1.000 ms over 1/1 tasks measured"), lines[0]
    pool = tuning.TaskResult("pool", "pool", best_ms=0.25)
    waiting = tuning.TaskResult("dense", "search")
    assert tuning.evolutionary.model_estimate([(2.0, pool), (3.0, results[0]), (1.0, waiting)]) == (
        "; model 3.500 ms over 2/3 tasks measured")
    assert tuning.evolutionary.model_estimate([(1.0, waiting)]) == ""


def test_a_stopped_search_fails_what_is_left_and_ends_when_nothing_is_outstanding(monkeypatch):
    """Once the budget is spent (or Ctrl-C), the builder and the runner fail every candidate left
    at once, and the progress callback ends the search only when every batch handed out has been
    collected: MetaSchedule collects a round's batches one after the other, and the records of
    those after a raise would be lost."""
    import signal  # pylint: disable=import-outside-toplevel
    import time  # pylint: disable=import-outside-toplevel

    from tvm_pool.tuning import measure  # pylint: disable=import-outside-toplevel
    from tvm_pool.tuning.stop import INTERRUPTED, Stop  # pylint: disable=import-outside-toplevel

    from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.runner import RunnerInput  # pylint: disable=import-outside-toplevel

    stop = Stop(deadline=time.time() - 1)
    assert stop.check() is None  # the budget is the search's: pooling candidates before it are all measured
    stop.deadline = time.time() + 3600
    stop.begin_search()
    built = []

    def fake_build(item, _fcompile):
        built.append(item)
        return BuilderResult("x.so", None)

    monkeypatch.setattr(measure, "build_candidate", fake_build)
    builder = measure.in_process_builder(None, stop)
    item = BuilderInput(tvm.IRModule(), tvm.target.Target("llvm"))
    assert [r.error_msg for r in builder.build([item, item])] == [None, None] and stop.handed_out == 1
    stop.deadline = time.time() - 1
    failed = builder.build([item, item, item])
    assert len(built) == 2 and stop.handed_out == 2 and stop.reason == "time budget"
    assert [r.error_msg for r in failed] == ["not built: the search stopped (time budget)"] * 3
    runner = measure.make_runner(stop=stop)
    (future,) = runner.run([RunnerInput("x.so", "cpu", [])])
    assert future.result().error_msg == "not measured: the search stopped (time budget)"
    assert not stop.may_raise() and stop.may_raise()  # two batches out: raise after the second
    # Ctrl-C: the first stops the search, a second interrupts; the handler before is restored
    before = signal.getsignal(signal.SIGINT)
    stop = Stop()
    with stop.on_interrupt():
        signal.raise_signal(signal.SIGINT)
        assert stop.check() == INTERRUPTED
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_a_stopped_search_generates_no_more_candidates_and_trains_no_more(monkeypatch):
    """Once the search has stopped, each task's search strategy returns no batch (its task ends)
    without running the evolutionary generation, and the cost model's update is skipped; a
    generation longer than SLOW_GENERATION_S is reported (the step the deadline cannot cut)."""
    import time  # pylint: disable=import-outside-toplevel

    from tvm.ir.utils import derived_object  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy  # pylint: disable=import-outside-toplevel

    from tvm_pool.tuning import stop as stopping  # pylint: disable=import-outside-toplevel

    calls = {"generate": 0, "update": 0}

    @derived_object
    class Inner(PySearchStrategy):
        def _initialize_with_tune_context(self, context):
            pass

        def pre_tuning(self, *args):
            pass

        def post_tuning(self):
            pass

        def generate_measure_candidates(self):
            calls["generate"] += 1
            return []

        def notify_runner_results(self, *args):
            pass

        def clone(self):
            return Inner()

    @derived_object
    class Update(PyMeasureCallback):
        def apply(self, *args):
            calls["update"] += 1

    lines = []
    stop = stopping.Stop(deadline=time.time() + 3600)
    stop.begin_search()
    strategy = stopping.stoppable_strategy(Inner(), stop, lines.append, "conv").clone()
    update = stopping.unless_stopped(Update(), stop)
    scheduler = ms.task_scheduler.TaskScheduler.create("round-robin")
    monkeypatch.setattr(stopping, "SLOW_GENERATION_S", -1.0)
    assert list(strategy.generate_measure_candidates()) == [] and calls["generate"] == 1
    assert lines == ["[search] conv: generating candidates took 0 s"]
    ms.measure_callback.MeasureCallback.apply(update, scheduler, 0, [], [], [])
    assert calls["update"] == 1
    stop.deadline = time.time() - 1
    assert strategy.generate_measure_candidates() is None and calls["generate"] == 1
    ms.measure_callback.MeasureCallback.apply(update, scheduler, 0, [], [], [])
    assert calls["update"] == 1 and stop.reason == "time budget"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """Relu -> MaxPool, tuned: one pooling task, searched exhaustively (no search trials)."""
    mod = pool_mod("max", pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    log_dir = str(tmp_path_factory.mktemp("tune") / "x86")
    lines = []
    result = tvm_pool.tune(mod, "host", trials=0, log_dir=log_dir, source="relu_pool", progress=lines.append)
    return mod, log_dir, result, lines


def test_tune_writes_a_database_tvm_reads(tuned):
    mod, log_dir, result, lines = tuned
    for name in (tuning.WORKLOAD_FILE, tuning.RECORD_FILE, tuning.META_FILE):
        assert os.path.exists(os.path.join(log_dir, name))
    database = ms.database.JSONDatabase(work_dir=log_dir)
    (pool,) = result.tasks
    assert pool.kind == "pool" and pool.trials >= 2
    # every candidate measured; recorded: the hand-written one and the knobs clearly faster
    assert 1 <= len(database) == pool.recorded <= pool.trials
    assert pool.default_ms is not None and pool.best_ms <= pool.default_ms
    meta = json.load(open(os.path.join(log_dir, tuning.META_FILE)))
    assert meta["family"] == tuning.target_family(TARGET) and "avx2" in meta["features"]
    assert meta["runs"][-1]["model"] == "relu_pool"
    assert meta["runs"][-1]["threads"] == tvm.get_global_func("runtime.NumThreads")()
    # progress: a line per task with the candidates measured, the best time, and an ETA
    assert any(l.startswith("[pool 1/1]") and "best" in l and "ETA" in l for l in lines), lines


def test_a_knob_is_recorded_only_when_clearly_faster_than_the_hand_written_schedule():
    gain = tuning.POOL_MIN_GAIN
    measured = [("hand-written", None, [1e-3], 1.0), ("threads: one", None, [0.99e-3], 0.99),
                ("vector: off", None, [0.5e-3], 1.0 - gain), ("padding: copy", None, [2e-3], 2.0)]
    kept = [label for label, *_ in tuning.pool_records_to_keep(measured)]
    assert kept == ["hand-written", "vector: off"]


def test_compile_applies_the_tuned_records(tuned):
    mod, log_dir, _, _ = tuned
    assert_applied(mod, log_dir, TARGET)
    x = np.random.default_rng(2).standard_normal([1, 8, 20, 20]).astype("float32")
    outs = []
    for kwargs in (dict(tuning_logs=[log_dir], shipped_logs=False), dict(schedule=False)):
        ex = tvm_pool.compile(mod, "host", **kwargs)
        outs.append(relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
    names = dict(tuning.records_for(mod, TARGET, [log_dir], shipped=False))
    assert names and all("ms" in v and log_dir in v for v in names.values()), names


@pytest.mark.slow
def test_tune_searches_convolutions(tmp_path):
    """Conv -> Relu -> MaxPool: the convolution goes to MetaSchedule's evolutionary search (a
    few trials), the pool to the exhaustive search; compile applies both."""
    mod = tvm_pool.from_onnx(conv_pool_model())
    lines = []
    result = tvm_pool.tune(mod, "host", trials=4, log_dir=str(tmp_path), source="conv_pool", progress=lines.append)
    assert {t.kind for t in result.tasks} == {"pool", "search"}
    search = next(t for t in result.tasks if t.kind == "search")
    assert search.trials >= 4 and search.best_ms is not None
    assert any(l.startswith("[task 1/1]") and "trials" in l and "ETA" in l for l in lines), lines
    assert_applied(mod, str(tmp_path), TARGET)


def _two_convs():
    """x -> conv 3x3 (8 -> 16) -> relu -> conv 1x1 (16 -> 8): two search tasks."""
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 14, 14), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w1 = relax.const(rng.standard_normal((16, 8, 3, 3)).astype("float32"))
            w2 = relax.const(rng.standard_normal((8, 16, 1, 1)).astype("float32"))
            y = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, w1, padding=1)))
            out = bb.emit_output(relax.op.nn.conv2d(y, w2))
        bb.emit_func_output(out)
    return bb.get()


def test_the_budget_holds_in_the_first_round_and_keeps_its_records(tmp_path):
    """MetaSchedule's first round hands every task a batch before it collects one; a budget spent
    inside it stops the builds and runs left (they fail at once) and the round's measured
    candidates still reach the log."""
    import time  # pylint: disable=import-outside-toplevel

    from tvm_pool.tuning.logs import mean_secs  # pylint: disable=import-outside-toplevel

    lines = []
    begin = time.time()
    result = tvm_pool.tune(_two_convs(), "host", trials=512, log_dir=str(tmp_path), source="two_convs",
                           progress=lines.append, time_budget_s=15.0, trials_per_iter=64)  # a round of 128
    assert result.stopped == "time budget" and time.time() - begin < 90, (time.time() - begin, lines[-3:])
    assert any(l.startswith("time budget of 15s reached: stopped after") for l in lines), lines[-3:]
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    measured = [r for r in db.get_all_tuning_records() if r.run_secs and not tuning.is_pooling(r.workload.mod)]
    assert measured and all(mean_secs(r.run_secs) > 0 for r in measured)
    assert len(measured) < 2 * 64  # the round (two batches of 64) was not measured whole


def test_the_first_round_takes_at_most_half_the_time_budget():
    """The first round's batch per task: half the trials, and with a time budget at most half
    of it at the fitted cost of a candidate (VGG-16's 13 tasks got 64 each and never left it)."""
    from tvm_pool.tuning import evolutionary, plan  # pylint: disable=import-outside-toplevel

    def batch(trials, budget_s):
        made = plan.plan(_two_convs(), resolve_target("host"), trials=trials, log_dir=None, rpc=None, budget_s=budget_s)
        return made, evolutionary.first_round_batch(made, trials)

    made, n = batch(3200, None)
    tasks = len(made.search_tasks)  # the two convolutions (and on x86 the NHWC layout's two transposes)
    assert n == 64 and batch(40, None)[1] == max(4, 40 // (2 * tasks)) and batch(8, None)[1] == 4
    made, n = batch(3200, 60.0)
    one_each = tasks * evolutionary.TRIAL_BASE_S  # small kernels: their FLOPs add little
    assert 4 <= n < 64 and n * one_each <= 30.0 < (n + 2) * one_each * 1.01, (n, len(made.search_tasks))


def _copy(log_dir, tmp_path, name):
    dst = tmp_path / name
    shutil.copytree(log_dir, dst)
    return str(dst)


def test_mismatched_family_warns_and_is_not_used(tuned, tmp_path):
    _, log_dir, _, _ = tuned
    other = _copy(log_dir, tmp_path, "arm")
    meta_path = os.path.join(other, tuning.META_FILE)
    meta = json.load(open(meta_path))
    meta["family"] = "aarch64-neon"
    json.dump(meta, open(meta_path, "w"))
    with pytest.warns(tuning.TuningLogWarning, match="tuned for aarch64-neon.*not used"):
        assert tuning.load_logs(TARGET, [other], shipped=False) is None
    # the same ISA family, but a feature this target lacks
    meta["family"] = tuning.target_family(TARGET)
    meta["features"] = meta["features"] + ["amx-tile", "not-a-feature"]
    json.dump(meta, open(meta_path, "w"))
    with pytest.warns(tuning.TuningLogWarning, match="lacks: .*not-a-feature.*not used"):
        assert tuning.load_logs(TARGET, [other], shipped=False) is None
    # an AVX-512 log is never applied to an AVX2 target
    if "avx512f" in tuning.target_features(TARGET):
        haswell = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})
        with pytest.warns(tuning.TuningLogWarning, match="not used"):
            assert tuning.load_logs(haswell, [log_dir], shipped=False) is None


def test_corrupt_log_warns_naming_the_file_and_keeps_good_records(tuned, tmp_path):
    mod, log_dir, _, _ = tuned
    bad = _copy(log_dir, tmp_path, "corrupt")
    records = os.path.join(bad, tuning.RECORD_FILE)
    lines = open(records).read().splitlines()
    good = len(lines)
    with open(records, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.write("[0, {not json\n")
        f.write('[99, ["x"]]\n')
        f.write(lines[-1][: len(lines[-1]) // 2])  # truncated last line, as from an interrupted write
    with pytest.warns(tuning.TuningLogWarning, match=r"3 corrupt line\(s\).*database_tuning_record.json:\d+"):
        database = tuning.load_logs(TARGET, [bad], shipped=False)
    # the good lines are used: one workload in this log, so its best record
    assert good >= 1 and database is not None and len(database.get_all_tuning_records()) == 1
    # the build never fails because of a log: garbage everywhere still compiles
    with open(os.path.join(bad, tuning.WORKLOAD_FILE), "w") as f:
        f.write("garbage\n")
    with open(os.path.join(bad, tuning.META_FILE), "w") as f:
        f.write("{")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tvm_pool.compile(mod, "host", tuning_logs=[bad, str(tmp_path / "missing")], shipped_logs=False)
    messages = [str(w.message) for w in caught if issubclass(w.category, tuning.TuningLogWarning)]
    assert any(tuning.WORKLOAD_FILE in m for m in messages)
    assert any("missing" in m and "not a directory" in m for m in messages)


def test_a_faster_record_that_is_not_usable_gives_way_to_another_logs(tuned, tmp_path):
    """Logs are read lazily, per workload: when the fastest log's records are not usable (they
    do not parse or do not replay on their workload), the next log's record is the one applied,
    and named as its source."""
    from tvm_pool.tuning import lookup  # pylint: disable=import-outside-toplevel

    mod, log_dir, _, _ = tuned
    fast, good = _copy(log_dir, tmp_path, "fast"), _copy(log_dir, tmp_path, "good")
    records = os.path.join(fast, tuning.RECORD_FILE)
    lines = []
    for line in open(records).read().splitlines():
        workload, (_, _, *rest) = json.loads(line)
        lines.append(json.dumps([workload, [[[["GetSBlock", [], ["no_such_block", "main"], ["b0"]]], []], [1e-9], *rest]]))
    with open(records, "w") as f:
        f.write("\n".join(lines) + "\n")
    with pytest.warns(tuning.TuningLogWarning, match="corrupt record skipped|does not replay"):
        (record,) = tuning.load_logs(TARGET, [fast, good], shipped=False).get_all_tuning_records()
    assert float(record.run_secs[0]) > 1e-9
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tuning.TuningLogWarning)
        sources = [source for _, source in lookup.records_for(mod, TARGET, [fast, good], shipped=False)]
    assert any(source.endswith(f"from {good}") for source in sources), sources


def test_a_gzipped_log_reads_as_the_plain_one(tuned, tmp_path):
    """The shipped logs are gzipped (database_*.json.gz): read as their plain twins, and
    tune_shipped's plain_log decompresses them for a step and gzips them back, byte for byte."""
    from tvm_pool.bench.tune_shipped import compress, plain_log

    mod, log_dir, _, _ = tuned
    packed = _copy(log_dir, tmp_path, "packed")
    names = (tuning.WORKLOAD_FILE, tuning.RECORD_FILE)
    for name in names:
        compress(os.path.join(packed, name))
        assert os.path.exists(os.path.join(packed, name + ".gz")) and not os.path.exists(os.path.join(packed, name))
    records = {d: tuning.load_logs(TARGET, [d], shipped=False).get_all_tuning_records() for d in (log_dir, packed)}
    assert [[float(t) for t in r.run_secs] for r in records[log_dir]] == [[float(t) for t in r.run_secs] for r in records[packed]]
    assert_applied(mod, packed, TARGET)
    before = {n: open(os.path.join(packed, n + ".gz"), "rb").read() for n in names}
    with plain_log(packed):
        assert all(os.path.exists(os.path.join(packed, n)) for n in names)
    assert {n: open(os.path.join(packed, n + ".gz"), "rb").read() for n in names} == before
    assert not any(os.path.exists(os.path.join(packed, n)) for n in names)


# Under -m slow (34 s): the default suite tunes through the RPC tracker on the emulated aarch64
# board (test_arm_emulated.py), which covers this flow and cross-compilation too.
@pytest.mark.slow
def test_tune_through_the_rpc_tracker(tmp_path):
    """python -m tvm.exec.rpc_tracker + rpc_server on 127.0.0.1; the builder exports a shared
    object (the device needs no compiler); Conv -> Relu -> MaxPool is measured on the server:
    the pool exhaustively, the convolution by MetaSchedule's evolutionary search (4 trials)."""
    key = "tvm-pool-test"
    with host_processes() as start:
        port = start_tracker(start)
        server_port = free_port()
        start(["-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", server_port, "--port-end", server_port + 1,
               "--tracker", f"127.0.0.1:{port}", "--key", key])
        wait_for_server(port, key)
        with pytest.raises(TvmPoolError, match=f"no RPC server with key 'nobody' .*registered: '{key}'"):
            tuning.rpc_device({"tracker": f"127.0.0.1:{port}", "key": "nobody"})
        mod = tvm_pool.from_onnx(conv_pool_model())
        log_dir = str(tmp_path / "rpc")
        result = tvm_pool.tune(
            mod, "host", trials=4, log_dir=log_dir, rpc={"tracker": f"127.0.0.1:{port}", "key": key},
            progress=lambda _line: None,
        )
    assert {t.kind for t in result.tasks} == {"pool", "search"}
    assert all(t.best_ms is not None and t.best_ms > 0 for t in result.tasks), result.tasks
    assert result.emulated is None  # a real device: no "emulated" note
    run = json.load(open(os.path.join(log_dir, tuning.META_FILE)))["runs"][-1]
    assert run["rpc"] is True and "emulated" not in run
    assert_applied(mod, log_dir, TARGET)


# --------------------------------------------------------------------------------------------
# tvm-pool tune / compile --tuning-log / inspect
# --------------------------------------------------------------------------------------------


def test_cli_tune_compile_inspect(tmp_path, capsys):
    from tvm_pool import cli  # pylint: disable=import-outside-toplevel

    model = pool_onnx(tmp_path / "pool.onnx")
    log_dir = str(tmp_path / "log")
    assert cli.main(["tune", model, "--trials", "0", "--log-dir", log_dir]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"wrote {log_dir}: 1 tasks (1 pooling)")
    assert "[pool 1/1]" in err and "ETA" in err
    # the closing line: the model timed without and with the log, and in onnxruntime (outputs agree)
    last = out.rstrip().splitlines()[-1]
    assert re.fullmatch(r"latency \(\d+ thread\(s\), median\): without this log [\d.]+ ms, with it [\d.]+ ms "
                        r"\([\d.]+x\), onnxruntime [\d.]+ ms \(with the log: [\d.]+x its time\)", last), out
    assert "differ" not in out
    assert cli.main(["-q", "compile", model, "-o", str(tmp_path / "pool.so"), "--tuning-log", log_dir]) == 0
    assert cli.main(["inspect", model, "--tuning-log", log_dir, "--no-tuning-logs"]) == 0
    out, _ = capsys.readouterr()
    assert "tuning:" in out and log_dir in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["tune", "missing.onnx"], "missing.onnx"),
        (["tune", "MODEL", "--trials", "-1"], "--trials must be >= 0"),
        (["tune", "MODEL", "--minutes", "0"], "--minutes must be > 0, got 0"),
        (["tune", "MODEL", "--minutes", "-2"], "--minutes must be > 0, got -2"),
        (["tune", "MODEL", "--minutes", "nan"], "--minutes must be > 0, got nan"),
        (["tune", "MODEL", "--rpc-tracker", "127.0.0.1:9190"], "go together"),
        (["tune", "MODEL", "--rpc-tracker", "nohost", "--rpc-key", "k"], "invalid RPC tracker"),
        (["tune", "MODEL", "--rpc-tracker", "127.0.0.1:1", "--rpc-key", "k"], "RPC tracker 127.0.0.1:1 does not answer"),
        (["tune", "MODEL", "--target", "arm"], "not this machine's CPU"),
        (["tune", "MODEL", "--log-dir", "/nonexistent/dir/log"], "does not exist"),
        (["tune", "MODEL", "--target", "nonsense"], "unknown target"),
        (["compile", "MODEL", "--tuning-log", "/nonexistent/log"], "not a directory"),
    ],
)
def test_cli_tune_errors_are_one_line_exit_2(tmp_path, capsys, args, message):
    from tvm_pool import cli  # pylint: disable=import-outside-toplevel

    model = pool_onnx(tmp_path / "pool.onnx")
    args = [model if a == "MODEL" else a for a in args]
    if args[0] == "compile":
        args += ["-o", str(tmp_path / "x.so")]
    assert cli.main(args) == 2
    out, err = capsys.readouterr()
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("tvm-pool: error:") and message in lines[0], err


@pytest.mark.parametrize("toolchain", ["installed", "missing"])
def test_cli_tune_arm_without_device_says_rpc_first(tmp_path, capsys, monkeypatch, toolchain):
    """Tuning for arm without --rpc-tracker: the line says first that this machine cannot measure
    arm code (no install changes that), and names the missing cross compiler in the same line,
    so a user learns both at once. Both situations on any machine: which() answers for the tool."""
    from tvm_pool import cli  # pylint: disable=import-outside-toplevel
    from helpers import CROSS_CXX  # pylint: disable=import-outside-toplevel

    real_which = shutil.which
    fake = str(tmp_path / CROSS_CXX) if toolchain == "installed" else None
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: fake if name == CROSS_CXX else real_which(name, *a, **k))
    assert cli.main(["tune", pool_onnx(tmp_path / "pool.onnx"), "--target", "arm"]) == 2
    lines = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("tvm-pool: error: target aarch64-linux-gnu is not this machine's CPU")
    assert "--rpc-tracker HOST:PORT --rpc-key KEY" in lines[0]
    if toolchain == "missing":
        assert f"cross compiler {CROSS_CXX}, not found (apt-get install g++-aarch64-linux-gnu)" in lines[0]
    else:
        assert "cross compiler" not in lines[0]


@pytest.mark.parametrize("family_target", [{"kind": "llvm", "mcpu": "znver4", "num-cores": 2},
                                           {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}])
def test_shipped_pooling_records_apply_and_stay_exact(family_target, monkeypatch):
    """The shipped logs hold the benchmark's pooling layers: compile applies their records
    (tuning.logs.SHIPPED_POOLING_RECORDS) when TVM runs the thread count they were tuned with, and
    the result is bit-exact."""
    from tvm_pool.bench.runner import build_model, make_input, workloads  # pylint: disable=import-outside-toplevel

    target = tvm.target.Target(family_target)
    if not os.path.isdir(tuning.shipped_log_dir(target)):
        pytest.skip(f"no shipped log for {tuning.target_family(target)}")
    if tuning.mismatch(tuning.describe_target(target), TARGET) is not None:
        pytest.skip(f"this CPU cannot run {tuning.target_family(target)} code")
    (workload,) = [w for w in workloads(quick=False) if w.name == "maxpool_int8"]
    mod = tvm_pool.from_onnx(build_model(workload))
    meta = json.load(open(os.path.join(tuning.shipped_log_dir(target), tuning.META_FILE)))
    (threads,) = tuning.tuned_threads(meta)  # one thread count per shipped log
    monkeypatch.setattr(tuning.logs, "runtime_threads", lambda: threads)
    # under other schedule rules than the log's, the pool keeps its hand-written schedule
    monkeypatch.setattr(tuning.logs, "rules_stamp", lambda: "other rules")
    assert set(dict(tuning.records_for(mod, target)).values()) == {"none"}
    monkeypatch.setattr(tuning.logs, "rules_stamp", lambda: meta.get("rules"))  # the log's rules
    applied = dict(tuning.records_for(mod, target))
    assert all(tuning.shipped_log_dir(target) in r for r in applied.values()), applied
    # another thread count than the log's: the pool keeps its hand-written schedule
    monkeypatch.setattr(tuning.logs, "runtime_threads", lambda: threads + 1)
    assert set(dict(tuning.records_for(mod, target)).values()) == {"none"}
    monkeypatch.setattr(tuning.logs, "runtime_threads", lambda: threads)
    monkeypatch.setattr(tuning.logs, "SHIPPED_POOLING_RECORDS", False)
    assert set(dict(tuning.records_for(mod, target)).values()) == {"none"}
    monkeypatch.setattr(tuning.logs, "SHIPPED_POOLING_RECORDS", True)
    x = tvm.runtime.tensor(make_input(workload))
    outs = [relax.VirtualMachine(tvm_pool.compile(mod, target, **kw), tvm.cpu())["main"](x).numpy()
            for kw in ({}, {"schedule": False})]
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("argv, trials, budget", [
    ([], 64, None),
    (["--minutes", "10"], 1600, 600.0),  # as many trials as 10 minutes measure: time is the bound
    (["--minutes", "0.5", "--trials", "7"], 7, 30.0),
])
def test_cli_tune_minutes_is_the_search_budget(tmp_path, capsys, monkeypatch, argv, trials, budget):
    import types  # pylint: disable=import-outside-toplevel

    import tvm_pool  # pylint: disable=import-outside-toplevel
    from tvm_pool import cli  # pylint: disable=import-outside-toplevel

    seen = {}

    def fake_tune(mod, target, **kwargs):
        seen.update(kwargs)
        return types.SimpleNamespace(tasks=[], trials=0, seconds=1.0, emulated=None, stopped=None)

    monkeypatch.setattr(tvm_pool, "tune", fake_tune)
    model = pool_onnx(tmp_path / "pool.onnx")
    assert cli.main(["-q", "tune", model, "--log-dir", str(tmp_path / "log"), "--no-compare", *argv]) == 0
    assert (seen["trials"], seen["time_budget_s"]) == (trials, budget)


def test_a_run_records_the_schedule_rules(tmp_path):
    """target.json holds the stamp of the schedule rules each run measured with (the stamp of this
    checkout's tvm_pool/schedules), which decides whether a shipped log's pooling records apply."""
    from tvm_pool.tuning.meta import Run, write_meta  # pylint: disable=import-outside-toplevel

    write_meta(str(tmp_path), TARGET, Run("m.onnx", 0, 0, 1.0, False, threads=2))
    meta = json.load(open(tmp_path / tuning.META_FILE))
    assert meta["rules"] == tuning.logs.rules_stamp() and len(meta["rules"]) == 16


def test_tune_comparison_notes(monkeypatch):
    """Where onnxruntime cannot be compared, the closing line says why instead (a note, not an
    error): the model is no ONNX model, or onnxruntime is not installed."""
    import builtins  # pylint: disable=import-outside-toplevel

    from tvm_pool.cli import tune_report  # pylint: disable=import-outside-toplevel

    assert tune_report._onnxruntime_ms(None, [], 1) == (None, "onnxruntime: not compared (the model is not ONNX)")
    real_import = builtins.__import__

    def no_ort(name, *args, **kwargs):
        if name == "onnxruntime":
            raise ImportError("No module named 'onnxruntime'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ort)
    ms, note = tune_report._onnxruntime_ms("m.onnx", [], 1)
    assert ms is None and note == "onnxruntime: not installed, not compared (pip install onnxruntime)"


@pytest.mark.parametrize("used, cores, busy", [(0.3, 2, False), (0.99, 2, False), (1.0, 2, True), (1.9, 2, True),
                                               (3.9, 16, False), (8.0, 16, True)])
def test_a_busy_machine_is_said_before_tuning(monkeypatch, used, cores, busy):
    """A local tune on a machine where other work keeps half the cores busy (at least one) says so
    in one line; an idle one says nothing. The cores in use are sampled from /proc/stat."""
    from tvm_pool.tuning import measure as tune_cli  # pylint: disable=import-outside-toplevel

    samples = iter([(1000, 500), (1000 + 100 * cores, 500 + 100 * (cores - used))])  # (total, idle) jiffies
    monkeypatch.setattr(tune_cli, "_cpu_times", lambda: next(samples))
    monkeypatch.setattr(tune_cli, "SAMPLE_SECONDS", 0.0)
    monkeypatch.setattr(tune_cli.os, "cpu_count", lambda: cores)
    note = tune_cli.busy_note()
    assert (note is not None) is busy
    if busy:
        assert "\n" not in note and note.startswith(f"note: this machine is busy ({used:.1f} of its {cores} cores")


def test_busy_cores_falls_back_to_the_load_average(monkeypatch):
    from tvm_pool.tuning import measure as tune_cli  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(tune_cli, "_cpu_times", lambda: None)
    monkeypatch.setattr(tune_cli.os, "getloadavg", lambda: (1.5, 0.0, 0.0))
    assert tune_cli.busy_cores() == 1.5


@pytest.mark.parametrize("target, here", [("host", True), ("x86", True), ("arm", False), ("cuda", False),
                                          ({"kind": "llvm", "mcpu": "cortex-a72", "mtriple": "aarch64-linux-gnu"}, False)])
def test_tune_compares_only_where_the_target_runs_here(target, here):
    from tvm_pool.targets import resolve_target, runs_here  # pylint: disable=import-outside-toplevel

    assert runs_here(resolve_target(target)) is here


@pytest.mark.slow
def test_shipped_log_takes_a_tuned_models_best_search_records(tmp_path):
    """bench/tune_shipped.py --merge: the best record of each non-pooling workload of a model's
    log joins the shipped log (its pooling records and rules stamp untouched), with the model's
    run named in target.json; compile then finds the convolution's record there."""
    from tvm_pool.bench.tune_shipped import merge_search_records

    model = str(tmp_path / "model")
    shipped = str(tmp_path / "shipped")
    conv = tvm_pool.from_onnx(conv_pool_model())
    tvm_pool.tune(conv, "host", trials=4, log_dir=model, source="conv_pool", progress=lambda _: None)
    tvm_pool.tune(pool_mod("max", pool_size=(2, 2), strides=(2, 2)), "host", trials=0, log_dir=shipped, source="pool",
                  progress=lambda _: None)
    stamp = json.load(open(os.path.join(shipped, tuning.META_FILE))).get("rules")
    # records measured on another CPU model (a copy of a shipped log tuned further) stay out
    assert merge_search_records(model, shipped, "conv_pool elsewhere", cpu="no-such-cpu") == 0
    assert merge_search_records(model, shipped, "conv_pool (torch.export)") == 1
    meta = json.load(open(os.path.join(shipped, tuning.META_FILE)))
    assert meta.get("rules") == stamp and meta["runs"][-1]["model"] == "conv_pool (torch.export)"
    assert meta["runs"][-1]["records_kept"] == 1
    names = dict(tuning.records_for(conv, TARGET, [shipped], shipped=False))
    assert any("conv" in name and shipped in how for name, how in names.items()), names
    # a copy of the shipped log (tuned further here) brings back none of its copied records or runs
    copy = str(tmp_path / "copy")
    shutil.copytree(shipped, copy)
    runs = len(json.load(open(os.path.join(shipped, tuning.META_FILE)))["runs"])
    assert merge_search_records(copy, shipped, "copied") == 0
    assert len(json.load(open(os.path.join(shipped, tuning.META_FILE)))["runs"]) == runs


def test_a_tune_measures_other_cpus_records_here_before_searching(tmp_path):
    """tuning.foreign: the best record another CPU model measured for a searched task is built
    and timed here first and recorded as this CPU's, so the search's records compete with it on
    this CPU's times (compile applies this CPU's records before any other's, whatever their
    times: a search that found only slower schedules would otherwise replace it)."""
    from tvm_pool.tuning import logs
    from tvm_pool.tuning.lookup import coverage

    here = logs.cpu_model(resolve_target("host"))
    if not here:
        pytest.skip("the host target names no CPU model")
    other = "icelake-server" if here != "icelake-server" else "skylake-avx512"
    log_dir = tmp_path / "log"
    conv = tvm_pool.from_onnx(conv_pool_model())
    tvm_pool.tune(conv, "host", trials=4, log_dir=str(log_dir), source="conv_pool", progress=lambda _: None)
    path = log_dir / tuning.RECORD_FILE
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for _, record in lines:
        record[2]["mcpu"] = other
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    conv_index = {i for i, w in enumerate(logs.read_log(str(log_dir)).records) if not logs.is_pooling(w[0].mod)}
    best = {}  # workload index -> the other CPU's fastest trace
    for index, record in lines:
        secs = logs.mean_secs(record[1]) if record[1] else float("inf")
        if index in conv_index and secs < best.get(index, (float("inf"),))[0]:
            best[index] = (secs, record[0])
    assert len(best) == 1, best
    said = []
    tvm_pool.tune(conv, "host", trials=0, log_dir=str(log_dir), source="conv_pool", progress=said.append)
    assert any(l.startswith(f"[other CPUs] {len(best)} of ") and "records from other CPUs measured here" in l
               for l in said), "\n".join(said)
    after = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    mine = [record for index, record in after if index in best and record[2].get("mcpu") == here]
    assert [record[0] for record in mine] == [trace for _, trace in best.values()]
    assert all(record[1] for record in mine)
    # compile now applies this CPU's record, the other CPU's schedule measured here
    cov = coverage(conv, "host", [str(log_dir)], shipped=False)
    assert cov.elsewhere == 0 and cov.kernels - cov.untuned >= len(best), cov
