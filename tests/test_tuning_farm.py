"""Tuning on a farm (issue 23): ``tvm_pool.tune(..., rpc=...)`` measures on every device the RPC
tracker lists under the key at once, one session per device at a time, and goes on when a device
dies or stops answering mid-run.

The farm is TVM's tracker (a thread of this process) and three RPC servers (processes) on
127.0.0.1 that log when each of their sessions starts and ends (tuning_helpers.LOGGING_SERVER):
the logs show the sessions overlapping and every device used. One server is killed halfway
through the run; the run ends with a log that compile applies, and the tuned module's output is
exact. About 25 s on this loaded 2-core machine (three servers importing TVM take most of it);
a device that stops answering (SIGSTOP) is under ``-m slow``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_pool
from tvm_pool import tuning
from tvm_pool.errors import TvmPoolError
from tvm_pool.targets import is_x86, resolve_target
from tvm_pool.tuning import farm as farm_mod
from tvm_pool.tuning.workers import Workers

from tuning_helpers import assert_applied, most_at_once, pool_mod, pool_onnx, rpc_farm, tracker_thread

TARGET = resolve_target("host")
KEY = "tvm-pool-farm"
pytestmark = pytest.mark.skipif(not is_x86(TARGET), reason="tunes for this machine, taken to be an x86 CPU")


def _mod():
    return pool_mod("max", pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))


class Saboteur(threading.Thread):
    """Sends ``sig`` to ``victim``'s process group (the server and its session) once it has
    served one session and started another, and at least ``after`` sessions have started on
    all ``servers``: halfway through the run, in the middle of a measurement."""

    def __init__(self, servers, victim, after, sig=signal.SIGKILL):
        super().__init__(daemon=True)
        self.servers, self.victim, self.after, self.sig = servers, victim, after, sig
        self.when = None
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(0.02):
            started = sum(e == "start" for s in self.servers for e, _ in s.events())
            events = [e for e, _ in self.victim.events()]
            if started >= self.after and events.count("end") >= 1 and events[-1] == "start":
                os.killpg(self.victim.proc.pid, self.sig)
                self.when = time.time()
                return


@pytest.fixture(scope="module")
def farm_run(tmp_path_factory):
    """Relu -> MaxPool tuned on three devices (6 pooling candidates x 3 rounds: 18 measurements),
    the third killed when about half of them have started."""
    tmp = tmp_path_factory.mktemp("farm")
    with rpc_farm(3, KEY, tmp) as (port, servers):
        saboteur = Saboteur(servers, servers[2], after=8)
        saboteur.start()
        lines = []
        result = tvm_pool.tune(_mod(), "host", trials=0, log_dir=str(tmp / "log"), source="relu_pool",
                               rpc={"tracker": f"127.0.0.1:{port}", "key": KEY}, progress=lines.append)
        saboteur.stop.set()
        saboteur.join()
        ended = time.time()
    return result, lines, servers, saboteur.when, ended


def test_sessions_overlap_on_every_device(farm_run):
    _, _, servers, _, _ = farm_run
    sessions = [[s for s in server.sessions() if s[1] is not None] for server in servers]
    assert all(sessions), [len(s) for s in sessions]  # all three devices measured
    assert most_at_once([s for per_server in sessions for s in per_server]) >= 2
    for per_server in sessions:  # one session per device at a time
        assert most_at_once(per_server) == 1


def test_progress_names_the_devices(farm_run):
    _, lines, _, _, _ = farm_run
    assert f"measuring on 3 devices (key '{KEY}')" in lines[0], lines[0]
    assert f"measuring on 2 devices (key '{KEY}'), 3 before" in lines, lines


def test_a_device_killed_mid_run_costs_only_its_candidate(farm_run):
    """The killed device's measurement fails and is measured again on another: every candidate
    is timed in every round, the hand-written schedule included."""
    result, _, servers, killed, ended = farm_run
    assert killed is not None and killed < ended, "the device was not killed during the run"
    assert servers[2].sessions()[-1][1] is None  # killed in the middle of a session
    (pool,) = result.tasks
    assert pool.trials >= 2 and pool.default_ms is not None and pool.best_ms <= pool.default_ms
    with open(os.path.join(result.log_dir, tuning.META_FILE), encoding="utf-8") as f:
        run = json.load(f)["runs"][-1]
    assert run["rpc"] is True and "stopped" not in run and run["measurements"] == pool.trials


def test_the_log_applies_and_the_tuned_module_is_exact(farm_run):
    result, _, _, _, _ = farm_run
    mod = _mod()
    assert_applied(mod, result.log_dir, TARGET)
    x = tvm.runtime.tensor(np.random.default_rng(23).standard_normal([1, 8, 20, 20]).astype("float32"))
    outs = [relax.VirtualMachine(tvm_pool.compile(mod, "host", **kw), tvm.cpu())["main"](x).numpy()
            for kw in (dict(tuning_logs=[result.log_dir], shipped_logs=False), dict(schedule=False))]
    np.testing.assert_array_equal(outs[0], outs[1])


# --------------------------------------------------------------------------------------------
# The pieces, without devices
# --------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the job that raises
def test_workers_answer_for_a_job_that_hangs_or_raises():
    """A job past the limit (a device that stopped answering) is answered for, and its worker
    goes on with the next job; so is one that raises; closing cancels the jobs not started."""
    workers = Workers(1, limit=0.5)
    blocked = threading.Event()
    try:
        hung = workers.submit(blocked.wait, lambda still_running: ("failed", still_running))
        raised = workers.submit(lambda: 1 / 0, lambda still_running: ("failed", still_running))
        fine = workers.submit(lambda: "measured", lambda still_running: ("failed", still_running))
        assert hung.result(timeout=10) == ("failed", True)
        assert raised.result(timeout=10) == ("failed", False)
        assert fine.result(timeout=10) == "measured"
        started = threading.Event()
        busy = workers.submit(lambda: started.set() or blocked.wait(), lambda still_running: ("failed", still_running))
        queued = workers.submit(lambda: "late", lambda still_running: ("failed", still_running))
        assert started.wait(10)
        workers.close()  # the job not started is cancelled, the running one finishes
        assert queued.cancelled() and busy.result(timeout=10) == ("failed", True)
    finally:
        blocked.set()
        workers.close()
    # a job left behind that finishes later sets its own future, not the one its worker runs now
    gate, go, workers = threading.Event(), threading.Event(), Workers(1, limit=1)
    try:
        left_behind = workers.submit(gate.wait, lambda still_running: ("failed", still_running))
        later = workers.submit(lambda: go.wait() and "later", lambda still_running: ("failed", still_running))
        assert left_behind.result(timeout=10) == ("failed", True)
        gate.set()  # the left-behind job ends while its worker runs `later`
        time.sleep(0.2)
        go.set()
        assert later.result(timeout=10) == "later"
    finally:
        gate.set()
        go.set()
        workers.close()


class _Plan:
    """What Farm reads of a tuning plan."""

    def __init__(self, port, devices, **rpc):
        self.rpc = {"tracker": f"127.0.0.1:{port}", "key": KEY, **rpc}
        self.devices, self.workers = devices, rpc.get("workers", devices)
        self.fcompile, self.target = None, TARGET


def test_with_no_device_left_candidates_fail_at_once():
    """The devices all gone (here: none registered), a batch fails unmeasured, with one line
    saying so, instead of waiting on the tracker."""
    from tvm.s_tir.meta_schedule.arg_info import TensorInfo  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.runner import RunnerInput  # pylint: disable=import-outside-toplevel

    lines = []
    with tracker_thread() as port:
        farm = farm_mod.Farm(_Plan(port, devices=2), lines.append, build_threads=1)
        try:
            start = time.time()
            item = RunnerInput("/nonexistent/tvm_tmp_mod.so", "cpu", [TensorInfo("float32", [1, 8])])
            (future,) = farm.run([item])
            assert future.done() and time.time() - start < 10
            assert f"no RPC server left under key '{KEY}'" in future.result().error_msg
        finally:
            farm.close()
    assert lines == [f"no RPC server left under key '{KEY}': the candidates left are not measured"], lines


def test_rpc_workers_option():
    assert tuning.rpc_workers({"tracker": "h:1", "key": "k"}, 3) == 3
    assert tuning.rpc_workers({"tracker": "h:1", "key": "k", "workers": 5}, 3) == 5
    with pytest.raises(TvmPoolError, match="workers must be an integer >= 1"):
        tuning.rpc_workers({"workers": 0}, 3)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rpc-workers", "2"], "--rpc-workers needs --rpc-tracker"),
        (["--rpc-tracker", "127.0.0.1:1", "--rpc-key", "k", "--rpc-workers", "0"], "--rpc-workers must be >= 1"),
    ],
)
def test_cli_rpc_workers_errors_are_one_line(tmp_path, capsys, args, message):
    from tvm_pool import cli  # pylint: disable=import-outside-toplevel

    assert cli.main(["tune", pool_onnx(tmp_path / "pool.onnx"), *args]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tvm-pool: error:") and message in lines[0], err


# --------------------------------------------------------------------------------------------
# A device that stops answering
# --------------------------------------------------------------------------------------------


@pytest.mark.slow  # ~30 s: its own farm, and a device given up after twice the session timeout
def test_a_device_that_stops_answering_is_given_up(tmp_path):
    """SIGSTOP one of two devices in the middle of a session: neither its server's session
    timeout nor the socket ends that session, so the farm gives it up after twice the session
    timeout (here 2 x 5 s) and measures the candidate on the other device; the run ends."""
    with rpc_farm(2, KEY, tmp_path) as (port, servers):
        saboteur = Saboteur(servers, servers[1], after=6, sig=signal.SIGSTOP)
        saboteur.start()
        try:
            lines = []
            result = tvm_pool.tune(_mod(), "host", trials=0, log_dir=str(tmp_path / "log"),
                                   rpc={"tracker": f"127.0.0.1:{port}", "key": KEY, "timeout": 5}, progress=lines.append)
        finally:
            saboteur.stop.set()
            saboteur.join()
            os.killpg(servers[1].proc.pid, signal.SIGKILL)  # a stopped process takes SIGKILL only
    assert saboteur.when is not None, "the device was not stopped during the run"
    (pool,) = result.tasks
    assert pool.default_ms is not None and pool.best_ms <= pool.default_ms
    assert result.seconds >= 10  # the hung measurement was waited for, then given up
    assert_applied(_mod(), result.log_dir, TARGET)
