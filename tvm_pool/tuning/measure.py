"""Building and timing candidates: in this process, or on a device behind TVM's RPC tracker."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass

import tvm

from ..errors import TvmPoolError
from .logs import TVM_ERRORS, short_error

logger = logging.getLogger(__name__)

# Settings for a small machine (2 cores): measured in the README's Tune section.
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


def in_process_builder(fcompile):
    """A builder that builds in this process. MetaSchedule's LocalBuilder starts fresh worker
    processes for every batch, each importing TVM (7-11 s on a loaded 2-core machine), and its
    per-candidate timeout then counts the import: measured here, 6 pooling candidates took
    140 s and all timed out at 30 s. Here one build of such a candidate takes 0.15 s + 0.2 s
    export. (The price: a build that hangs hangs the tuner; TVM's builds of these schedules
    do not.) Every candidate gets the target family's rewrites of a scheduled pooling function
    first (``schedules.finish_pass``), as ``compile`` gives them to a tuned one, so what is
    measured is what is built."""
    # pylint: disable=import-outside-toplevel
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from .. import schedules

    @derived_object
    class InProcessBuilder(PyBuilder):
        def build(self, build_inputs):  # noqa: D102
            results = []
            for item in build_inputs:
                try:
                    # MetaSchedule's default_build, without its `import tvm.s_tir.tensor_intrin`
                    # (54-180 s on this loaded machine; float schedules use no tensor intrinsics)
                    mod = schedules.finish_pass(item.target, scheduled_only=False)(item.mod)
                    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
                    rt_mod = tvm.tirx.build(mod, target=item.target)
                    results.append(BuilderResult(_export_so(rt_mod, fcompile), None))
                except (OSError, *TVM_ERRORS) as err:  # the candidate is measured as failed
                    logger.debug("candidate not built: %s", err)
                    results.append(BuilderResult(None, f"InProcessBuilder: {short_error(err)}"))
            return results

    return InProcessBuilder()


def in_process_runner(evaluator_config, on_batch=None):
    """A runner that loads and times each candidate in this process (see in_process_builder).
    ``on_batch(n)`` is called after each batch of ``n`` candidates is measured."""
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
            for item in runner_inputs:
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
                on_batch(len(runner_inputs))
            return futures

    return InProcessRunner()


def make_runner(rpc, on_batch=None):
    """The runner for a tuning run: on the device behind the tracker ``rpc`` (one candidate at a
    time), else in this process, calling ``on_batch(n)`` after each batch."""
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, RPCRunner  # pylint: disable=import-outside-toplevel

    evaluator = EvaluatorConfig(**EVALUATOR)
    if rpc:
        return RPCRunner(rpc_config=rpc_config(rpc), evaluator_config=evaluator, max_workers=1,
                         f_alloc_argument=_rpc_alloc_argument)
    return in_process_runner(evaluator, on_batch=on_batch)


def rpc_config(rpc):
    """``{"tracker": "HOST:PORT", "key": KEY}`` or ``"HOST:PORT/KEY"`` -> RPCConfig."""
    from tvm.s_tir.meta_schedule.runner import RPCConfig  # pylint: disable=import-outside-toplevel

    if isinstance(rpc, RPCConfig):
        return rpc
    if isinstance(rpc, str):
        tracker, _, key = rpc.partition("/")
        rpc = {"tracker": tracker, "key": key}
    tracker, key = rpc.get("tracker", ""), rpc.get("key", "")
    host, _, port = str(tracker).rpartition(":")
    if not host or not port.isdigit() or not key:
        raise TvmPoolError(f"invalid RPC tracker {tracker!r} / key {key!r}: use HOST:PORT and a key")
    return RPCConfig(
        tracker_host=host,
        tracker_port=int(port),
        tracker_key=str(key),
        session_timeout_sec=int(rpc.get("timeout", 60)),
    )


@dataclass
class RpcDevice:
    """What :func:`rpc_device` learnt from the device behind the tracker."""

    threads: int  # TVM's thread count there: the target's num-cores when it names none
    emulated: str | None = None  # the emulated device's description; None for real hardware


def rpc_device(rpc) -> RpcDevice:
    """Check the tracker and the device before tuning, and ask the device what it is.

    MetaSchedule's runner waits on the tracker for every candidate, so a tracker that does not
    answer, or has no server under the key, fails here in one line (TvmPoolError) instead. One
    session is then opened: an RPC server started by :mod:`tvm_pool.emulation` answers
    ``EMULATED_DEVICE_FUNC`` with a description of the emulation (its timings are not the
    hardware's); a real device has no such function."""
    from tvm import rpc as tvm_rpc  # pylint: disable=import-outside-toplevel

    from ..emulation import EMULATED_DEVICE_FUNC  # pylint: disable=import-outside-toplevel

    config = rpc_config(rpc)
    where = f"{config.tracker_host}:{config.tracker_port}"
    try:
        # TVM's own connect retries a refused connection for 60 s
        socket.create_connection((config.tracker_host, config.tracker_port), timeout=10).close()
        summary = tvm_rpc.connect_tracker(config.tracker_host, config.tracker_port).summary()
    except (OSError, *TVM_ERRORS) as err:  # refused, reset, timed out, or not a tracker
        raise TvmPoolError(f"RPC tracker {where} does not answer: {short_error(err)}") from None
    keys = sorted({str(item.get("key", "")).partition(":")[2] for item in summary.get("server_info", [])})
    if config.tracker_key not in keys:
        raise TvmPoolError(
            f"no RPC server with key {config.tracker_key!r} on the tracker {where} "
            f"(registered: {', '.join(map(repr, keys)) or 'none'})"
        )
    session = config.connect_server()
    device = RpcDevice(threads=int(session.get_function("runtime.NumThreads")()))
    try:
        device.emulated = str(session.get_function(EMULATED_DEVICE_FUNC)())
    except AttributeError:  # real hardware
        pass
    return device


def _rpc_alloc_argument(session, device, args_info, alloc_repeat):
    """RPCRunner's ``f_alloc_argument``. MetaSchedule's default fills the inputs on the device
    with ``tvm.contrib.random.random_fill_for_measure``, which TVM's runtime-only library (all a
    device without a compiler has, e.g. the aarch64 wheel's) lacks: there they are filled here
    by the same function and copied to the device."""
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    name = "tvm.contrib.random.random_fill_for_measure"
    try:
        fill = session.get_function(name)
    except AttributeError:
        fill_here = tvm.get_global_func(name)

        def fill(tensor):
            host = tvm.runtime.empty(tensor.shape, tensor.dtype, tvm.cpu())
            fill_here(host)
            host.copyto(tensor)

    return alloc_argument_common(fill, device, args_info, alloc_repeat)
