"""Shared by the tuning tests (x86 in test_tuning.py and test_tuning_farm.py, aarch64 in
test_arm_emulated.py): the tiny Relu -> pool and Conv -> Relu -> MaxPool models, running a
PrimFunc, TVM's RPC tracker as a process or a thread, RPC servers that log their sessions, and
the check that compile applies a log's records."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import onnx
import tvm
import tvm_ffi
from onnx import TensorProto, helper
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from tvm_pool import lowering, tuning

from oracles import IR_VERSION


def pool_mod(kind="max", shape=(1, 8, 20, 20), relu=True, **kwargs):
    """A Relax module: (Relu ->) ``relax.op.nn.{max,avg}_pool2d(**kwargs)``."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(x)) if relu else x
            op = relax.op.nn.max_pool2d if kind == "max" else relax.op.nn.avg_pool2d
            z = bb.emit(op(y, **kwargs))
            gv = bb.emit_output(z)
        bb.emit_func_output(gv)
    return bb.get()


def pool_onnx(path):
    """An ONNX MaxPool (3x3 s2 p1 on [1, 8, 20, 20]) saved at ``path``; returns the path."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 20, 20])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 10])
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], name="pool")
    model = helper.make_model(helper.make_graph([node], "pool", [x], [y]), opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = IR_VERSION
    onnx.save(model, str(path))
    return str(path)


def arg_shapes(mod):
    """[(shape, dtype)] of the arguments of a task's ``main``."""
    return [([int(d) for d in a.shape], str(a.dtype)) for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]


def run_prim(mod, inputs, target):
    """Build a task's module for ``target`` (this CPU) and run it on ``inputs``: its outputs."""
    lib = tvm.tirx.build(mod, target=target)
    args = [tvm.runtime.tensor(a) for a in inputs]
    for shape, dtype in arg_shapes(mod)[len(inputs):]:
        args.append(tvm.runtime.empty(shape, dtype, tvm.cpu()))
    lib["main"](*args)
    return [a.numpy() for a in args[len(inputs):]]


def conv_pool_model(size=16):
    """Conv -> Relu -> MaxPool (3x3 s2 p1): one convolution task, one pooling task."""
    rng = np.random.default_rng(0)
    weight = helper.make_tensor("W", TensorProto.FLOAT, [4, 3, 3, 3], rng.standard_normal(108).astype("float32"))
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    ]
    out = (size + 1) // 2
    graph = helper.make_graph(
        nodes, "conv_pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, out, out])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = IR_VERSION
    return model


def tasks(mod, target):
    return list(ms.relax_integration.extract_tasks(lowering.fuse(mod, target), target))


def assert_applied(mod, log_dir, target):
    """compile's pipeline puts the database's best schedule of every task into the module."""
    database = tuning.load_logs(target, [log_dir], shipped=False)
    assert database is not None
    lowered = lowering.pipeline(target, database=database)(mod)
    funcs = [f for _, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    for task in tasks(mod, target):
        best = database.query_ir_module(task.dispatched[0], target, "main")
        assert best is not None, task.task_name
        assert any(tvm_ffi.structural_equal(f.body, best["main"].body) for f in funcs), task.task_name


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc):
    """End a process started with start_new_session and its group (TVM's tracker and server run
    their work in child processes that a plain terminate would leave behind)."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def host_processes():
    """``start(args)`` runs ``python args...`` (this Python) in its own process group; every one
    started is ended on exit, failures included."""
    procs = []
    env = dict(os.environ, PYTHONUNBUFFERED="1")

    def start(args):
        procs.append(subprocess.Popen([sys.executable, *map(str, args)], env=env, start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return procs[-1]

    try:
        yield start
    finally:
        for proc in reversed(procs):
            _stop(proc)


def start_tracker(start, timeout=120) -> int:
    """``python -m tvm.exec.rpc_tracker`` on 127.0.0.1 (``start`` from host_processes); its port,
    once it accepts connections."""
    port = free_port()
    proc = start(["-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", port, "--port-end", port + 1])
    deadline = time.time() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            return port
        except OSError:
            assert proc.poll() is None and time.time() < deadline, "the RPC tracker did not start"
            time.sleep(0.5)


def wait_for_server(port, key, timeout=240, count=1):
    """Until ``count`` servers have registered under ``key`` with the tracker on ``port``."""
    from tvm import rpc  # pylint: disable=import-outside-toplevel

    deadline = time.time() + timeout
    while True:
        try:
            servers = rpc.connect_tracker("127.0.0.1", port).summary()["server_info"]
            if sum(s["key"].partition(":")[2] == key for s in servers) >= count:
                return
        except (OSError, RuntimeError):  # the tracker not up yet, or resetting the connection
            pass
        assert time.time() < deadline, f"not {count} RPC server(s) registered under {key!r} within {timeout} s"
        time.sleep(0.5)


@contextlib.contextmanager
def tracker_thread():
    """TVM's RPC tracker on 127.0.0.1 as a thread of this process (no TVM import of its own, as
    ``python -m tvm.exec.rpc_tracker`` has); its port. Stopped on exit."""
    from tvm.rpc import tracker  # pylint: disable=import-outside-toplevel

    state = tracker.PopenTrackerServerState("127.0.0.1", port=free_port(), port_end=65535, silent=True)
    try:
        yield state.port
    finally:
        tracker.Tracker._stop_tracker(state)  # pylint: disable=protected-access  (host, port, stop_key)
        state.thread.join(30)


# A TVM RPC server registered with the tracker, run in this Python's main process (``python -m
# tvm.exec.rpc_server`` starts a second process that imports TVM again), which appends a line to
# its log (argv[1]) when a session starts and when it ends: TVM's server serves one session at a
# time, in a child process it forks per session, from its `_serving` (called by its listen loop).
LOGGING_SERVER = """
import json, sys, time
from tvm.rpc import server
log, port, tracker, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
serving = server._serving
def note(event):
    with open(log, "a") as f:
        f.write(json.dumps({"event": event, "time": time.time()}) + "\\n")
def _serving(*args):
    note("start")
    try:
        serving(*args)
    finally:
        note("end")
server._serving = _serving
host, _, tracker_port = tracker.rpartition(":")
state = server.PopenRPCServerState("127.0.0.1", port, port + 1, tracker_addr=(host, int(tracker_port)), key=key,
                                   silent=True)
state.thread.join()
"""


class LoggingServer:
    """A :data:`LOGGING_SERVER` process and its session log."""

    def __init__(self, proc, log):
        self.proc, self.log = proc, log

    def events(self) -> list:
        """[(event, time)]: "start" and "end" in turn (the last start may have no end yet)."""
        if not os.path.exists(self.log):
            return []
        with open(self.log, encoding="utf-8") as f:
            return [(e["event"], e["time"]) for e in map(json.loads, f.read().splitlines())]

    def sessions(self) -> list:
        """[(start, end)] of the sessions it served; end None for one cut short (killed)."""
        out = []
        for event, when in self.events():
            if event == "start":
                out.append([when, None])
            elif out:
                out[-1][1] = when
        return [tuple(s) for s in out]


@contextlib.contextmanager
def rpc_farm(count, key, log_dir):
    """A tracker (a thread of this process) and ``count`` :class:`LoggingServer` processes
    registered with it under ``key``: (tracker port, servers). All stopped on exit."""
    with tracker_thread() as port, host_processes() as start:
        servers = []
        for i in range(count):
            log = os.path.join(str(log_dir), f"server{i}.jsonl")
            servers.append(LoggingServer(start(["-c", LOGGING_SERVER, log, free_port(), f"127.0.0.1:{port}", key]), log))
        wait_for_server(port, key, count=count)
        yield port, servers


def most_at_once(intervals) -> int:
    """The most of the ``(start, end)`` intervals that were open at one time."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = level = 0
    for _, step in edges:
        level += step
        best = max(best, level)
    return best
