"""Records another CPU measured, measured again here before the search.

``compile`` applies, per workload, this CPU's fastest record before any other CPU's, whatever
their times (:func:`.logs._choose`: times taken on another CPU do not compare). A search on this
CPU therefore replaced a record of another CPU even when what it found ran slower here:
MobileNetV3-Large on the AMD znver4, with the Intel machine's channel-last records, took 5.07 ms;
after 10 minutes of tuning it took 6.02 ms, its 48 searched tasks' records now the znver4's own.
So before the search, the best record another CPU has for each searched task (in the log being
extended and the shipped logs) is built and timed here like any candidate, and recorded as this
CPU's: the search's records then compete with it on this CPU's times, and a tune never leaves
a task slower than the record it had.
"""

from __future__ import annotations

import time

from . import logs
from .measure import measure_candidates
from .meta import fmt_secs


def remeasure(plan, builder, runner, database, say) -> int:
    """Measure here the best record of another CPU for each of ``plan.search_tasks`` (none where
    the target names no CPU model) and commit those that ran to ``database`` as this target's;
    returns how many were committed."""
    # pylint: disable=import-outside-toplevel
    from tvm import s_tir
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord

    # pylint: enable=import-outside-toplevel
    start = time.time()
    mods = [task.dispatched[0] for task in plan.search_tasks]
    dirs = [plan.log_dir] if logs.log_written(plan.log_dir) else []
    found = logs.foreign_records(plan.target, dirs, mods)
    if not found:
        return 0
    candidates = []  # (task index, schedule, args_info)
    for i, record in sorted(found.items()):
        sch = s_tir.Schedule(record.workload.mod)
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        candidates.append((i, sch, ArgInfo.from_prim_func(mods[i]["main"])))
    measured = measure_candidates(builder, runner, plan.target, [(sch.mod, args) for _, sch, args in candidates])
    committed = 0
    for (i, sch, args_info), per_round in zip(candidates, measured):
        if per_round and per_round[0].error_msg is None and per_round[0].run_secs:
            workload = database.commit_workload(mods[i])
            database.commit_tuning_record(TuningRecord(sch.trace, workload, per_round[0].run_secs, plan.target,
                                                       args_info))
            committed += 1
    say(f"[other CPUs] {committed} of {len(mods)} searched tasks' records from other CPUs measured here "
        f"(they compete with the search's on this CPU's times); {fmt_secs(time.time() - start)}")
    return committed
