"""Pooling tasks: every point of the target family's design space built and measured.

The design space is the family's rule with each of its knobs (the hand-written schedule first,
:func:`tvm_pool.schedules.meta_schedule.pool_candidates`), so the search is exhaustive and a
tuned pool is never slower than the hand-written one it was measured against. These trials are
not counted in ``tune``'s ``trials``.
"""

from __future__ import annotations

import time

from .logs import mean_secs
from .measure import measure_candidates
from .meta import TaskResult, fmt_ms, fmt_secs

# Rounds over all candidates, and the gain a knob needs over the hand-written schedule to be
# recorded. Measured on the benchmark's workloads (2 threads, znver4): with one round, a knob that
# timed 18% faster (3x3 s2 ceil max) was 1-3% slower when re-timed; the spread between rounds of
# one candidate is about 2-4%.
POOL_ROUNDS = 3
POOL_MIN_GAIN = 0.05


def pool_records_to_keep(measured):
    """Of the measured pooling candidates ``[(label, schedule, run_secs, ms), ...]``, those whose
    records go in the log: the hand-written schedule, and each knob that beat it by at least
    ``POOL_MIN_GAIN`` (a gain within the noise of a measurement did not hold up when re-timed,
    and the database applies whatever record is fastest)."""
    default_ms = _hand_written_ms(measured)
    return [item for item in measured
            if item[0].startswith("hand-written") or default_ms is None or item[3] <= default_ms * (1 - POOL_MIN_GAIN)]


def _hand_written_ms(measured):
    """The hand-written candidate's time among ``[(label, schedule, run_secs, ms), ...]`` (None
    when it did not run)."""
    return next((ms for label, _, _, ms in measured if label.startswith("hand-written")), None)


def _median(values) -> float:
    ordered = sorted(values)
    return (ordered[(len(ordered) - 1) // 2] + ordered[len(ordered) // 2]) / 2


def tune_pools(plan, builder, runner, database, say) -> list[TaskResult]:
    """Measure every pooling task's candidates (``plan.pool_tasks``) and commit the records
    worth keeping to ``database``; one progress line per task."""
    results = []
    for index, (task, cands) in enumerate(plan.pool_tasks):
        result = _tune_pool(task, cands, plan.target, builder, runner, database)
        results.append(result)
        elapsed = time.time() - plan.start
        left = len(plan.pool_tasks) - index - 1
        say(
            f"[pool {index + 1}/{len(plan.pool_tasks)}] {task.task_name}: {len(cands)}/{len(cands)} candidates, "
            f"best {fmt_ms(result.best_ms)} ({result.best_label.split(' = ')[0]}), hand-written {fmt_ms(result.default_ms)}; "
            f"{fmt_secs(elapsed)} elapsed, ETA pooling {fmt_secs(elapsed / (index + 1) * left)}"
        )
    return results


def _tune_pool(task, cands, target, builder, runner, database) -> TaskResult:
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord

    # pylint: enable=import-outside-toplevel
    task_mod = task.dispatched[0]
    args_info = ArgInfo.from_prim_func(task_mod["main"])
    # a candidate's time is the mean of its per-round medians; a knob is compared with the
    # hand-written schedule only when both ran in every round
    measured = measure_candidates(builder, runner, target, [(sch.mod, args_info) for _, sch in cands], POOL_ROUNDS)
    workload = database.commit_workload(task_mod)
    result = TaskResult(task.task_name, "pool", trials=len(cands))
    timed = []
    for (label, sch), per_round in zip(cands, measured):
        if per_round is None or any(res.error_msg is not None or not res.run_secs for res in per_round):
            continue
        secs = [_median([float(s) for s in res.run_secs]) for res in per_round]
        timed.append((label, sch, secs, mean_secs(secs) * 1e3))
    result.default_ms = _hand_written_ms(timed)
    for label, sch, secs, ms_time in pool_records_to_keep(timed):
        database.commit_tuning_record(TuningRecord(sch.trace, workload, secs, target, args_info))
        result.recorded += 1
        if result.best_ms is None or ms_time < result.best_ms:
            result.best_ms, result.best_label = ms_time, label
    return result
