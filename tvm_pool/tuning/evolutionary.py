"""Every task but the pooling ones: MetaSchedule's evolutionary search with its cost model,
``trials`` measurements in all, shared out by the gradient task scheduler. tvm_pool's schedules
are registered as MetaSchedule custom rules first, so pooling blocks inside these tasks get
tvm_pool's design space, not TVM's defaults."""

from __future__ import annotations

import time

from ..targets import num_cores
from . import intrin
from .logs import mean_secs
from .meta import TaskResult, fmt_ms, fmt_secs
from .stop import INTERRUPTED, TIME_BUDGET, Stop, stoppable_strategy, unless_stopped

SEARCH = dict(
    population_size=64,
    init_measured_ratio=0.2,
    init_min_unmeasured=16,
    max_fail_count=5,
    genetic_num_iters=2,
    genetic_mutate_prob=0.85,
    genetic_max_fail_count=5,
    eps_greedy=0.05,
)


class BatchCounter:
    """The search's progress line as measured batches arrive (the in-process runner calls it
    after each batch). The gradient scheduler hands measured batches to the callbacks (the
    per-task progress lines) only when it joins a task, after its first round over every task;
    this line reports the search's measurements as they happen."""

    def __init__(self, say):
        self.say = say
        self.total = self.done = 0
        self.start = None

    def begin(self, total: int) -> None:
        self.total, self.start = total, time.time()

    def __call__(self, n: int) -> None:
        if self.start is None or n == 0:
            return  # pooling candidates: reported per task; a batch the stopped search left unmeasured
        self.done += n
        elapsed = time.time() - self.start
        left = max(self.total - self.done, 0)
        self.say(
            f"[search] {self.done}/{self.total} trials measured, {fmt_secs(elapsed)} elapsed, "
            f"ETA {fmt_secs(elapsed / self.done * left)}"
        )


class _Stop(RuntimeError):
    """Raised by the progress callback when the search has stopped (:mod:`.stop`; TVM's FFI hands
    it back from the search as a RuntimeError)."""


# What one candidate of a task costs to build and measure here (2 cores), in seconds, by the
# task's work (TVM's FLOP estimate): fitted to ResNet-18 (0.75 s a candidate, about 0.15 GFLOP a
# task) and VGG-16 (its first round of 13 x 23 candidates took 646 s, 2.16 s a candidate, 1.67
# GFLOP a task).
TRIAL_BASE_S = 0.61
TRIAL_S_PER_GFLOP = 0.93


def first_round_batch(plan, trials: int) -> int:
    """Candidates per task in MetaSchedule's first round, which gives every task a batch before
    the cost model and the gradient scheduler choose where the rest goes: half of ``trials``,
    and with a time budget at most half of that time, at :data:`TRIAL_BASE_S` and
    :data:`TRIAL_S_PER_GFLOP` a candidate. (Sized by trials alone, a 20-minute budget gave
    VGG-16's 13 tasks 64 candidates each, 832 in all, and the budget ran out inside the first
    round: 4 tasks without a valid candidate.)"""
    from tvm.s_tir.analysis import estimate_tir_flops  # pylint: disable=import-outside-toplevel

    tasks = plan.search_tasks
    batch = trials // max(2 * len(tasks), 1)
    if plan.budget_s:
        one_each = sum(TRIAL_BASE_S + TRIAL_S_PER_GFLOP * float(estimate_tir_flops(t.dispatched[0])) / 1e9
                       for t in tasks)
        batch = min(batch, int(plan.budget_s / 2 / max(one_each, 1e-9)))
    return max(4, min(64, batch))


def search(plan, trials, builder, runner, database, say, results: list, *, counter: BatchCounter,
           trials_per_iter: int | None = None, seed: int | None = 0, stop=None) -> None:
    """Search ``plan.search_tasks`` with ``trials`` measurements in all, until ``stop`` fires (a
    :class:`.stop.Stop`: ``plan.deadline`` passed, or Ctrl-C). Their TaskResults are appended to
    ``results`` first and filled in as batches are measured, so a search stopped early leaves
    what it measured there (and in ``database``)."""
    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    task_results = [TaskResult(task.task_name, "search") for task in plan.search_tasks]
    results.extend(task_results)
    if not task_results or trials <= 0:
        return
    per_iter = trials_per_iter or first_round_batch(plan, trials)
    counter.begin(trials)
    stop = stop or Stop(plan.deadline)
    contexts, weights = _contexts(plan, seed, stop, say)
    pooled = [r for r in results if r.kind == "pool"]
    terms = [(float(task.weight), r) for (task, _), r in zip(plan.pool_tasks, pooled)] + list(zip(weights, task_results))
    stop.begin_search()
    callback, state = _progress_callback(task_results, trials, say, terms, stop)
    # MetaSchedule's default callbacks, with the progress callback (which ends a stopped search)
    # before the cost model's update, and the update skipped once the search has stopped
    callbacks = [ms.measure_callback.AddToDatabase(), ms.measure_callback.RemoveBuildArtifact(), callback,
                 unless_stopped(ms.measure_callback.UpdateCostModel(), stop)]
    try:
        with stop.on_interrupt():
            ms.tune.tune_tasks(
                tasks=contexts,
                task_weights=weights,
                work_dir=plan.log_dir,
                max_trials_global=trials,
                max_trials_per_task=None,
                num_trials_per_iter=per_iter,
                builder=builder,
                runner=runner,
                database=database,
                cost_model=ms.cost_model.XGBModel(num_tuning_cores=num_cores(), tree_method="auto"),
                measure_callbacks=callbacks,
                task_scheduler="gradient",
            )
    except RuntimeError:
        if not state["stopped"]:
            raise
    if stop.reason == TIME_BUDGET:
        say(f"time budget of {fmt_secs(plan.budget_s)} reached: stopped after {state['done']} trials")
    elif stop.reason == INTERRUPTED:
        say(f"interrupted: stopped after {state['done']} trials, every one measured kept")


def _contexts(plan, seed, stop: Stop, say) -> tuple[list, list]:
    """A TuneContext and a weight per task to search, each task's evolutionary search ending
    once ``stop`` fires (:func:`.stop.stoppable_strategy`)."""
    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    intrin.prepare(plan.target)  # before TuneContext imports the tensor intrinsics
    contexts, weights = [], []
    for offset, task in enumerate(plan.search_tasks):
        contexts.append(
            ms.TuneContext(
                mod=task.dispatched[0],
                target=plan.target,
                space_generator="post-order-apply",
                search_strategy=stoppable_strategy(ms.search_strategy.EvolutionarySearch(**SEARCH), stop, say,
                                                   task.task_name),
                task_name=task.task_name,
                rand_state=-1 if seed is None else seed + offset,
                num_threads=num_cores(),
            ).clone()
        )
        weights.append(float(task.weight))
    return contexts, weights


def model_estimate(terms: list) -> str:
    """The whole model's time as tuning stands: the sum over tasks of (its weight: how many
    times the model calls it) x (its best time so far), over the tasks measured yet; ``terms``:
    (weight, TaskResult) per task. "" before any task is measured."""
    measured = [(w, r.best_ms) for w, r in terms if r.best_ms is not None]
    if not measured:
        return ""
    total = sum(w * ms for w, ms in measured)
    return f"; model {total:.3f} ms over {len(measured)}/{len(terms)} tasks measured"


def _progress_callback(results: list, total: int, say, terms: list, stop):
    """A measure callback printing a line per measured batch of a task (its trials and best
    time, the search's ETA, and the whole model's estimate :func:`model_estimate` over
    ``terms``), and ending the search once ``stop`` has fired and every batch handed out is
    collected (so in the database); and its state."""
    # pylint: disable=import-outside-toplevel
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    state = {"done": 0, "start": time.time(), "stopped": False}

    @derived_object
    class _Progress(PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):  # noqa: D102
            result = results[int(task_id)]
            result.trials += len(runner_results)
            state["done"] += len(runner_results)
            for res in runner_results:
                if res.error_msg is None and res.run_secs:
                    ms_time = mean_secs([float(s) for s in res.run_secs]) * 1e3
                    if result.best_ms is None or ms_time < result.best_ms:
                        result.best_ms = ms_time
            elapsed = time.time() - state["start"]
            done = state["done"]
            eta = elapsed / done * max(total - done, 0) if done else 0.0
            say(
                f"[task {int(task_id) + 1}/{len(results)}] {result.name}: {result.trials} trials, "
                f"best {fmt_ms(result.best_ms)}; {done}/{total} trials, {fmt_secs(elapsed)} elapsed, ETA {fmt_secs(eta)}"
                + model_estimate(terms)
            )
            if stop.may_raise():
                state["stopped"] = True
                raise _Stop(f"the search stopped ({stop.reason})")

    return _Progress(), state
