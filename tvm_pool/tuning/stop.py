"""Stopping a search early, keeping what it measured: at the time budget, or at Ctrl-C.

MetaSchedule's gradient task scheduler hands every task one batch before it collects any
result, and a result reaches the database (and tvm_pool's progress callback, which checks the
budget) only when it is collected. A model of slow candidates (VGG-16: 2.2 s a trial, 13 tasks of
61 trials) then spends half an hour in that first round: ``--minutes 10`` ran 15 minutes with no
record written, and Ctrl-C lost everything. With a :class:`Stop`, the builder and the runner
check it before every candidate, and once it has fired they fail what is left at once ("not
built: the search stopped"), so the round ends in seconds; the progress callback raises only
when every batch handed out has been collected (:meth:`Stop.may_raise`), so every measured
candidate is in the log.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

TIME_BUDGET = "time budget"
INTERRUPTED = "interrupted"


class Stop:
    """Why a search stops early (None while it runs): ``deadline`` (time.time()) passed, or
    Ctrl-C within :meth:`on_interrupt`. Counts the search's batches handed to the builder and
    collected by its callback, so the callback raises only when none is outstanding."""

    def __init__(self, deadline: float | None = None):
        self.deadline = deadline
        self.reason: str | None = None
        self.searching = False
        self.handed_out = 0
        self.collected = 0

    def check(self) -> str | None:
        """The reason to stop, if any (the deadline is checked now, once the search has begun:
        the budget is the search's, and pooling candidates are all measured)."""
        if self.reason is None and self.searching and self.deadline is not None and time.time() >= self.deadline:
            self.reason = TIME_BUDGET
        return self.reason

    def failed(self, what: str) -> str:
        """The error message of a candidate left unbuilt or unmeasured."""
        return f"not {what}: the search stopped ({self.reason})"

    def begin_search(self) -> None:
        """The search begins: the deadline holds from here, and batches are counted from here (the
        pooling candidates' builds before are not the search's)."""
        self.searching = True
        self.handed_out = self.collected = 0

    def may_raise(self) -> bool:
        """After a batch is collected: has the search stopped with no batch outstanding?"""
        self.collected += 1
        return self.check() is not None and self.collected >= self.handed_out

    @contextlib.contextmanager
    def on_interrupt(self):
        """Within it (main thread only), the first Ctrl-C stops the search this way; a second
        one interrupts as usual."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(_signum, _frame):
            if self.reason == INTERRUPTED:
                raise KeyboardInterrupt
            self.reason = INTERRUPTED

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


# Candidate generation longer than this is reported (a step the deadline cannot cut short).
SLOW_GENERATION_S = 30.0


def stoppable_strategy(inner, stop: Stop, say=None, label: str = ""):
    """MetaSchedule search strategy ``inner`` (EvolutionarySearch) that generates no more
    candidates once ``stop`` has fired: its task then ends (a None batch), where before the
    scheduler went on generating, building and failing batches until the progress callback
    could raise. What the deadline cannot cut short is a generation already under way (the
    evolutionary search and its cost model's predictions run in C++): one longer than
    :data:`SLOW_GENERATION_S` is reported through ``say``, with ``label`` (the task)."""
    # pylint: disable=import-outside-toplevel
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

    @derived_object
    class _Stoppable(PySearchStrategy):
        def __init__(self, wrapped):
            self.wrapped = wrapped

        def _initialize_with_tune_context(self, context) -> None:
            self.wrapped._initialize_with_tune_context(context)  # pylint: disable=protected-access

        def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
            self.wrapped.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

        def post_tuning(self) -> None:
            self.wrapped.post_tuning()

        def generate_measure_candidates(self):
            if stop.check() is not None:
                return None
            start = time.time()
            candidates = self.wrapped.generate_measure_candidates()
            took = time.time() - start
            if say is not None and took > SLOW_GENERATION_S:
                say(f"[search] {label}: generating candidates took {took:.0f} s")
            return candidates

        def notify_runner_results(self, measure_candidates, results) -> None:
            self.wrapped.notify_runner_results(measure_candidates, results)

        def clone(self):
            return _Stoppable(self.wrapped.clone())

    return _Stoppable(inner)


def unless_stopped(callback, stop: Stop):
    """Measure callback ``callback`` (the cost model's update: XGBoost training on every record
    so far) skipped once ``stop`` has fired: the search is ending, and no prediction follows."""
    # pylint: disable=import-outside-toplevel
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class _UnlessStopped(PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:  # noqa: D102
            if stop.check() is None:
                callback.apply(task_scheduler, task_id, measure_candidates, builder_results, runner_results)

    return _UnlessStopped()
