"""Building and timing candidates in this process (:mod:`.farm` times them on the devices behind
TVM's RPC tracker, building with :func:`build_candidate` on several threads)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time

import tvm

from .logs import TVM_ERRORS, short_error

logger = logging.getLogger(__name__)

# Settings for a small machine (2 cores): measured in docs/tuning.md, "What is tuned, how".
EVALUATOR = dict(number=5, repeat=3, min_repeat_ms=20, enable_cpu_cache_flush=False)


def device_type(target) -> str:
    """The runtime device candidates for ``target`` run on."""
    return "cuda" if target.kind.name == "cuda" else "cpu"


def _export_so(rt_mod, fcompile) -> str:
    """Builder export: a shared object made with the target's toolchain (``fcompile``, a cross
    g++ for another CPU), so a device needs no compiler, only TVM's runtime."""
    path = os.path.join(tempfile.mkdtemp(prefix="tvm_pool_tune_"), "tvm_tmp_mod.so")
    if fcompile is None:
        rt_mod.export_library(path)
    else:
        rt_mod.export_library(path, fcompile=fcompile)
    return path


def remove_artifact(path: str) -> None:
    """Delete a built candidate (the temporary directory :func:`_export_so` made)."""
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def measure_round(runner, inputs) -> list:
    """One round: every candidate measured, and those that failed measured once more. Through
    the RPC tracker a failure is mostly the device's (it died or stopped answering, :mod:`.farm`),
    and the next measurement goes to another device; a candidate that fails twice is dropped."""
    results = [future.result() for future in runner.run(inputs)]
    failed = [i for i, res in enumerate(results) if res.error_msg is not None]
    if failed:
        for i, future in zip(failed, runner.run([inputs[i] for i in failed])):
            results[i] = future.result()
    return results


def measure_candidates(builder, runner, target, candidates, rounds: int = 1) -> list:
    """Build every candidate (a ``(scheduled IRModule, args_info)`` pair) for ``target`` and
    measure those that built in ``rounds`` rounds over all of them in turn (:func:`measure_round`),
    so that a drift of the machine (another job, the clock) hits every candidate alike. Returns,
    per candidate, its RunnerResults (one a round), or None where it did not build; the built
    artifacts are removed."""
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    # pylint: enable=import-outside-toplevel
    built = builder.build([BuilderInput(mod, target) for mod, _ in candidates])
    inputs, where = [], []
    for i, ((_, args_info), res) in enumerate(zip(candidates, built)):
        if res.error_msg is None:
            inputs.append(RunnerInput(res.artifact_path, device_type(target), args_info))
            where.append(i)
    try:
        per_round = [measure_round(runner, inputs) for _ in range(rounds)] if inputs else []
    finally:
        for res in built:
            if res.artifact_path:
                remove_artifact(res.artifact_path)
    measured = [None] * len(candidates)
    for k, i in enumerate(where):
        measured[i] = [results[k] for results in per_round]
    return measured


def build_candidate(item, fcompile):
    """Build one candidate (a BuilderInput) in this process: its BuilderResult. Every candidate
    gets the target family's rewrites of a scheduled pooling function first
    (``schedules.finish_pass``), as ``compile`` gives them to a tuned one, and is lowered as
    ``compile`` lowers its kernel: a pooling function through the family's TIR pipeline
    (``schedules.tir_pipeline``), any other through TVM's default one (``compile`` builds a
    tuned kernel that is not a pool ``AS_MEASURED``), so what is measured is what is built.
    Safe to call from several threads (TVM's FFI releases the GIL)."""
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.builder import BuilderResult
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from .. import schedules

    try:
        # MetaSchedule's default_build, without its `import tvm.s_tir.tensor_intrin`
        # (54-180 s on this loaded machine; float schedules use no tensor intrinsics)
        mod = schedules.finish_pass(item.target, scheduled_only=False)(item.mod)
        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
        pipeline = schedules.tir_pipeline(item.target) if schedules.analysis.has_pool_blocks(mod) else "default"
        rt_mod = tvm.tirx.build(mod, target=item.target, pipeline=pipeline)
        return BuilderResult(_export_so(rt_mod, fcompile), None)
    except (OSError, *TVM_ERRORS) as err:  # the candidate is measured as failed
        logger.debug("candidate not built: %s", err)
        return BuilderResult(None, f"InProcessBuilder: {short_error(err)}")


def in_process_builder(fcompile, stop=None):
    """A builder that builds in this process, one candidate after the other. MetaSchedule's
    LocalBuilder starts fresh worker processes for every batch, each importing TVM (7-11 s on a
    loaded 2-core machine), and its per-candidate timeout then counts the import: measured
    here, 6 pooling candidates took 140 s and all timed out at 30 s. Here one build of such a
    candidate takes 0.15 s + 0.2 s export. (The price: a build that hangs hangs the tuner;
    TVM's builds of these schedules do not.) Once ``stop`` (a :class:`.stop.Stop`) has fired,
    candidates fail unbuilt at once."""
    # pylint: disable=import-outside-toplevel
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder

    @derived_object
    class InProcessBuilder(PyBuilder):
        def build(self, build_inputs):  # noqa: D102
            if stop is not None:
                stop.handed_out += 1
            return [BuilderResult(None, stop.failed("built")) if stop is not None and stop.check()
                    else build_candidate(item, fcompile) for item in build_inputs]

    return InProcessBuilder()


def in_process_runner(evaluator_config, on_batch=None, stop=None):
    """A runner that loads and times each candidate in this process (see in_process_builder).
    ``on_batch(n)`` is called after each batch of ``n`` candidates is measured; once ``stop``
    has fired, candidates fail unmeasured at once."""
    # pylint: disable=import-outside-toplevel
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerResult
    from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument, default_run_evaluator

    class _Done(PyRunnerFuture):
        def __init__(self, result):
            super().__init__()
            self._result = result

        def done(self):  # noqa: D102
            return True

        def result(self):  # noqa: D102
            return self._result

    done = derived_object(_Done)

    @derived_object
    class InProcessRunner(PyRunner):
        def run(self, runner_inputs):  # noqa: D102
            futures = []
            skipped = 0
            for item in runner_inputs:
                if stop is not None and stop.check():
                    futures.append(done(RunnerResult(None, stop.failed("measured"))))
                    skipped += 1
                    continue
                try:
                    rt_mod = tvm.runtime.load_module(item.artifact_path)
                    device = tvm.runtime.device(str(item.device_type), 0)
                    args = default_alloc_argument(device, [a.as_json() for a in item.args_info], 1)
                    secs = default_run_evaluator(rt_mod, device, evaluator_config, args)
                    futures.append(done(RunnerResult([float(x) for x in secs], None)))
                except (OSError, *TVM_ERRORS) as err:  # the candidate is measured as failed
                    logger.debug("candidate %s did not run: %s", item.artifact_path, err)
                    futures.append(done(RunnerResult(None, f"InProcessRunner: {short_error(err)}")))
            if on_batch is not None:
                on_batch(len(runner_inputs) - skipped)
            return futures

    return InProcessRunner()


def make_runner(on_batch=None, stop=None):
    """The runner of a tuning run measured in this process, calling ``on_batch(n)`` after each
    batch (a run through the RPC tracker measures on its devices instead: :mod:`.farm`)."""
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig  # pylint: disable=import-outside-toplevel

    return in_process_runner(EvaluatorConfig(**EVALUATOR), on_batch=on_batch, stop=stop)


# A local tune measures on this machine: other jobs on it make the measurements noisy. With one
# core of two taken, a pool's two-thread schedule waits for its descheduled worker (GoogLeNet's
# 3x3 max over 1x512x14x14: 0.48 ms against 0.033 ms on one thread), so "threads: one" won
# most pooling tasks and the convolutions' best candidates were timed high.
BUSY_CORES_PER_CORE = 0.5
SAMPLE_SECONDS = 0.5


def _cpu_times():
    """(total, idle) jiffies of all CPUs from /proc/stat (Linux), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(values), values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait


def busy_cores() -> float | None:
    """Cores busy with other work now: sampled from /proc/stat over SAMPLE_SECONDS while this
    process sleeps; where there is none, the last minute's load average; None if neither."""
    cores = os.cpu_count() or 1
    first = _cpu_times()
    if first is not None:
        time.sleep(SAMPLE_SECONDS)
        second = _cpu_times()
        if second is not None and second[0] > first[0]:
            return (1 - (second[1] - first[1]) / (second[0] - first[0])) * cores
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def busy_note() -> str | None:
    """A one-line note when other work keeps at least half of the cores busy (and at least one),
    else None."""
    busy, cores = busy_cores(), os.cpu_count() or 1
    if busy is None or busy < max(1.0, BUSY_CORES_PER_CORE * cores):
        return None
    return (f"note: this machine is busy ({busy:.1f} of its {cores} cores in use by other work): other jobs make "
            "tuning's measurements noisy, and a pool's one-thread schedule then often wins; tune on an idle machine")
