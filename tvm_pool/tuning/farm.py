"""Measuring on every device behind TVM's RPC tracker: a farm of boards under one key.

TVM's tracker hands each session to a free server registered under the key, and a server
serves one session at a time. :class:`Farm` keeps ``workers`` sessions going at once (by
default one per server the tracker lists, more if servers register during the run), one
candidate per session as MetaSchedule's RPCRunner does: each device measures one candidate at a
time, as a lone board would, and N boards measure N candidates at once.

Candidates are built on the host's cores (threads: TVM's FFI releases the GIL while it builds,
and the export runs the toolchain as a subprocess), and each is sent to be measured as soon as
it is built, so that building and measuring overlap. Per batch of B candidates, with b and r a
candidate's build and measurement (session) times, c build threads and N devices::

    wall ~ max(B*b / c, B*r / N) + b + r        (before: one device, one build at a time: B*(b + r))

plus MetaSchedule's own work between batches (candidate generation, cost model: on the host, not
parallel); the pooling search's rounds wait for each other (a round of k candidates costs
ceil(k/N)*r). Measured and modelled figures: docs/tuning.md, "A farm: every device under the key".

Failures cost only the candidates they hit:

- a device that dies (server killed, board reset) ends its session: that candidate's result is
  an error, which MetaSchedule's search skips (the pooling search measures it again,
  :mod:`.pooling`), and the tracker drops the server, so no later candidate goes to it;
- a candidate that runs past the session timeout is killed by its server (TVM's RPC server);
- a device that stops answering (hung, unplugged) is given up after twice the session timeout:
  that candidate is an error, its session is left behind, and its worker goes on;
- with no device left under the key, or the tracker gone, candidates fail at once, unmeasured.

MetaSchedule's RPCRunner, which this replaces, measures in worker processes (a TVM import each)
without a deadline of its own: a server that stops answering blocks its worker, and the tuning
run, for good; one that dies gives an error result, as here.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor, as_completed

from ..errors import TvmPoolError
from ..targets import num_cores
from .logs import TVM_ERRORS, short_error
from .measure import EVALUATOR, build_candidate, device_type
from .remote import alloc_argument, count_devices, rpc_config
from .workers import Workers

logger = logging.getLogger(__name__)


class Farm:
    """The builder and runner of a tuning run measured through the RPC tracker (``plan.rpc``,
    ``plan.devices`` servers under its key, ``plan.workers`` measured at once); ``close()``
    when done. ``say`` gets a line when the devices under the key change; ``on_batch(n)`` is
    called when a batch of ``n`` candidates has been measured."""

    def __init__(self, plan, say, on_batch=None, build_threads: int | None = None, stop=None):
        from tvm.s_tir.meta_schedule.runner import EvaluatorConfig  # pylint: disable=import-outside-toplevel

        self.config = rpc_config(plan.rpc)
        self.evaluator = EvaluatorConfig(**EVALUATOR)
        self.fcompile, self.device_type = plan.fcompile, device_type(plan.target)
        self.say, self.on_batch, self.stop = say, on_batch, stop
        self.devices = plan.devices
        self.grow = not (isinstance(plan.rpc, dict) and plan.rpc.get("workers"))  # one worker per device
        timeout = self.config.session_timeout_sec
        self.limit = 2 * timeout if timeout > 0 else None  # TVM: a timeout of 0 is none
        self.workers = Workers(plan.workers, self.limit, name="tvm_pool-farm")
        self.builds = ThreadPoolExecutor(build_threads or num_cores(), thread_name_prefix="tvm_pool-build")
        self._ahead: dict = {}  # artifact path -> (its arguments, its measurement started at build)
        self._lost: str | None = None  # why candidates fail unmeasured: no device left

    def builder(self):
        """A MetaSchedule builder building on this farm's threads."""
        from tvm.ir.utils import derived_object  # pylint: disable=import-outside-toplevel
        from tvm.s_tir.meta_schedule.builder import PyBuilder  # pylint: disable=import-outside-toplevel

        farm = self

        @derived_object
        class FarmBuilder(PyBuilder):
            def build(self, build_inputs):  # noqa: D102
                return farm.build(build_inputs)

        return FarmBuilder()

    def runner(self):
        """A MetaSchedule runner measuring on this farm's devices."""
        from tvm.ir.utils import derived_object  # pylint: disable=import-outside-toplevel
        from tvm.s_tir.meta_schedule.runner import PyRunner  # pylint: disable=import-outside-toplevel

        farm = self

        @derived_object
        class FarmRunner(PyRunner):
            def run(self, runner_inputs):  # noqa: D102
                return farm.run(runner_inputs)

        return FarmRunner()

    def build(self, inputs) -> list:
        """Build ``inputs`` (BuilderInputs) on the build threads; each built candidate starts
        being measured at once (``run`` then hands out that measurement)."""
        from tvm.s_tir.meta_schedule.builder import BuilderResult  # pylint: disable=import-outside-toplevel

        if self.stop is not None:
            self.stop.handed_out += 1
            if self.stop.check():  # the search stopped: the batch fails unbuilt (tuning.stop)
                return [BuilderResult(None, self.stop.failed("built")) for _ in inputs]
        self._check_devices()
        pending = {self.builds.submit(build_candidate, item, self.fcompile): i for i, item in enumerate(inputs)}
        results = [None] * len(inputs)
        for future in as_completed(pending):
            index = pending[future]
            results[index] = result = future.result()
            args = _args_json(inputs[index].mod) if result.error_msg is None and not self._lost else None
            if args is not None:
                self._ahead[str(result.artifact_path)] = (args, self._measure(str(result.artifact_path), args))
        return results

    def run(self, inputs) -> list:
        """Measure ``inputs`` (RunnerInputs): RunnerFutures, one per input."""
        self._check_devices()
        futures = []
        for item in inputs:
            path, args = str(item.artifact_path), [a.as_json() for a in item.args_info]
            ahead_args, ahead = self._ahead.pop(path, (None, None))
            futures.append(ahead if ahead is not None and ahead_args == args else self._measure(path, args))
        self._report_batch(futures)
        return [_runner_future(future) for future in futures]

    def close(self) -> None:
        self.workers.close()
        self.builds.shutdown(wait=True, cancel_futures=True)
        self._ahead.clear()

    def _measure(self, path: str, args) -> Future:
        if self._lost:
            return _done(_failed_result(self._lost))
        job = functools.partial(measure_remote, self.config, self.evaluator, path, self.device_type, args)
        return self.workers.submit(job, self._failed)

    def _failed(self, still_running: bool):
        if still_running:
            return _failed_result(f"no result after {self.limit} s: the device stopped answering")
        return _failed_result("the measurement raised (see the log)")

    def _check_devices(self) -> None:
        """Count the servers under the key (one tracker query a batch); say when it changed."""
        key = self.config.tracker_key
        try:
            count, why = count_devices(self.config), f"no RPC server left under key {key!r}"
        except TvmPoolError as err:
            count, why = 0, str(err)
        if count == self.devices:
            return
        if count:
            self.say(f"measuring on {_devices(count)} (key {key!r}), {self.devices} before")
            if self.grow:
                self.workers.grow(count)
        else:
            self.say(f"{why}: the candidates left are not measured")
        self.devices = count
        self._lost = None if count else why

    def _report_batch(self, futures: list) -> None:
        """``on_batch(n)`` once every future of the batch is done."""
        if self.on_batch is None or not futures:
            return
        left, lock = [len(futures)], threading.Lock()

        def one_done(_future):  # on the thread that finished the future
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                self.on_batch(len(futures))

        for future in futures:
            future.add_done_callback(one_done)


def _devices(count: int) -> str:
    return f"{count} device{'s' if count != 1 else ''}"


def measure_remote(config, evaluator, path: str, device_type_: str, args) -> object:
    """Measure the built candidate at ``path`` in a session of a free device under the key: its
    RunnerResult (failures as an error message: the search skips it)."""
    from tvm.s_tir.meta_schedule.runner import RunnerResult  # pylint: disable=import-outside-toplevel

    try:
        return RunnerResult(_session_run(config, evaluator, path, device_type_, args), None)
    except (OSError, *TVM_ERRORS) as err:  # the device died or refused, the candidate failed there
        logger.debug("candidate %s not measured: %s", path, err)
        return _failed_result(short_error(err))


def _session_run(config, evaluator, path, device_type_, args) -> list[float]:
    """MetaSchedule's RPCRunner steps (session, upload, inputs, time, clean up) in this thread."""
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.runner.rpc_runner import default_run_evaluator, default_upload_module

    session = config.connect_server()
    remote_path = os.path.basename(path)  # in the session's own directory on the device
    try:
        device = session.device(device_type_, 0)
        rt_mod = default_upload_module(session, path, remote_path)
        repeated = alloc_argument(session, device, args, 1)
        return [float(s) for s in default_run_evaluator(session, rt_mod, device, evaluator, repeated)]
    finally:
        _cleanup(session, remote_path)


def _cleanup(session, remote_path: str) -> None:
    from tvm.s_tir.meta_schedule.runner.rpc_runner import default_cleanup  # pylint: disable=import-outside-toplevel

    try:
        default_cleanup(session, remote_path)
    except (OSError, *TVM_ERRORS) as err:  # a dead session: nothing left to clean
        logger.debug("RPC session not cleaned up: %s", short_error(err))


def _args_json(mod):
    """The arguments a built candidate is measured with (as MetaSchedule gives its runner), or
    None when they cannot be read (it is then measured when the runner is asked)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo  # pylint: disable=import-outside-toplevel

    try:
        return [a.as_json() for a in ArgInfo.from_entry_func(mod, remove_preproc=True)]
    except TVM_ERRORS as err:
        logger.debug("arguments not read ahead: %s", short_error(err))
        return None


def _failed_result(message: str):
    from tvm.s_tir.meta_schedule.runner import RunnerResult  # pylint: disable=import-outside-toplevel

    return RunnerResult(None, f"FarmRunner: {message}")


def _done(value) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


@functools.cache
def _runner_future_type():
    from tvm.ir.utils import derived_object  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.runner import PyRunnerFuture  # pylint: disable=import-outside-toplevel

    class _FarmFuture(PyRunnerFuture):
        def __init__(self, future):
            super().__init__()
            self._future = future

        def done(self):  # noqa: D102
            return self._future.done()

        def result(self):  # noqa: D102
            return self._future.result()

    return derived_object(_FarmFuture)


def _runner_future(future: Future):
    """A MetaSchedule RunnerFuture holding ``future``'s RunnerResult."""
    return _runner_future_type()(future)
