"""``tune``: plan the run, search the pooling tasks exhaustively and the others with
MetaSchedule's evolutionary search, then record the run in the log's ``target.json``."""

from __future__ import annotations

import contextlib
import sys
import time

import tvm

from ..targets import describe_target
from . import evolutionary, foreign, logs, pooling
from .farm import Farm
from .measure import busy_note, in_process_builder, make_runner
from .meta import Run, TuneResult, fmt_secs, write_meta
from .plan import plan as plan_run
from .stop import INTERRUPTED, Stop


def tune(  # pylint: disable=too-many-arguments
    mod: tvm.IRModule,
    target="host",
    *,
    trials: int = 64,
    log_dir: str | None = None,
    rpc=None,
    trials_per_iter: int | None = None,
    seed: int | None = 0,
    source: str = "",
    progress=None,
    time_budget_s: float | None = None,
) -> TuneResult:
    """Tune every task of the Relax module ``mod`` for ``target`` and write the log.

    ``trials``: measurements for the evolutionary search over the non-pooling tasks (pooling
    tasks are searched exhaustively on top). ``log_dir``: where the database goes (default
    ``./tuning_logs/<family>``); an existing log there is extended. ``rpc``: measure on a
    device registered with TVM's RPC tracker, ``{"tracker": "HOST:PORT", "key": KEY}``: on every
    device under the key at once (``"workers": N`` measures N candidates at once instead of one
    per device; ``"timeout": S`` the session timeout, 60 s; :mod:`.farm`); the builder then
    builds on the host's cores and cross-compiles with the target's toolchain (required for
    another CPU's target), and :func:`~tvm_pool.tuning.remote.rpc_device` checks the tracker
    first (``TuneResult.emulated`` says when the device is :mod:`tvm_pool.emulation`'s, whose
    timings are not hardware time). ``progress``: a callable taking one line (default: print to
    stderr). ``time_budget_s``: stop the search after this long (the trials measured so far are
    in the log).
    """
    from tvm.s_tir.meta_schedule.database import JSONDatabase  # pylint: disable=import-outside-toplevel

    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    plan = plan_run(mod, target, trials=trials, log_dir=log_dir, rpc=rpc, budget_s=time_budget_s)
    say(plan.summary(source, trials))
    if not plan.rpc and (busy := busy_note()):
        say(busy)
    counter = evolutionary.BatchCounter(say)
    logs.expand_gzipped(plan.log_dir)  # a gzipped log (a copy of a shipped one) is extended as plain JSON
    database = JSONDatabase(work_dir=plan.log_dir)
    results: list = []
    stop = Stop(plan.deadline)
    stopped = INTERRUPTED  # unless the search returns: Ctrl-C or an error, the log written still
    try:
        with _measurers(plan, say, counter, stop) as (builder, runner):
            results.extend(pooling.tune_pools(plan, builder, runner, database, say))
            foreign.remeasure(plan, builder, runner, database, say)
            evolutionary.search(plan, trials, builder, runner, database, say, results, counter=counter,
                                trials_per_iter=trials_per_iter, seed=seed, stop=stop)
        stopped = stop.check()
    finally:
        seconds = time.time() - plan.start
        measured = sum(r.trials for r in results)
        write_meta(plan.log_dir, plan.target, Run(source, trials, measured, seconds, bool(rpc), threads=plan.threads,
                                                  emulated=plan.emulated, stopped=stopped))
    say(f"wrote {plan.log_dir}: {measured} measurements in {fmt_secs(seconds)}")
    return TuneResult(plan.log_dir, describe_target(plan.target), results, seconds, measured, plan.emulated, stopped)


@contextlib.contextmanager
def _measurers(plan, say, counter, stop):
    """(builder, runner): on the devices behind the RPC tracker (:class:`~.farm.Farm`), else in
    this process; both fail what is left at once when ``stop`` fires (:mod:`.stop`)."""
    if not plan.rpc:
        yield in_process_builder(plan.fcompile, stop), make_runner(on_batch=counter, stop=stop)
        return
    farm = Farm(plan, say, on_batch=counter, stop=stop)
    try:
        yield farm.builder(), farm.runner()
    finally:
        farm.close()
