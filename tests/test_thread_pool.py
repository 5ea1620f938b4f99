"""tvm_pool unpins TVM's worker threads and runs one per physical core (tvm_pool/thread_pool.py)
unless the user chose a setting."""

import json
import os
import platform
import subprocess
import sys

import pytest

from tvm_pool.thread_pool import physical_cores

# Runs a parallel tvm_pool module, then reports every thread's CPU affinity.
_CHILD = r"""
import json, os
import numpy as np
import tvm
import tvm_pool
from onnx import TensorProto, helper
from tvm import relax
from tvm_pool.targets import host_target
node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
mod = tvm_pool.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]))
vm = relax.VirtualMachine(tvm_pool.compile(mod, target=host_target()), tvm.cpu())
vm["main"](tvm.runtime.tensor(np.ones((1, 64, 56, 56), "float32")))
tasks = os.listdir("/proc/self/task")
print(json.dumps({"env": os.environ.get("TVM_BIND_THREADS"),
                  "num_threads": tvm.get_global_func("runtime.NumThreads")(),
                  "process": sorted(os.sched_getaffinity(0)),
                  "threads": [sorted(os.sched_getaffinity(int(t))) for t in tasks]}))
"""


def _run_child(bind, threads=None):
    """``threads``: the thread-count variables the child gets (default TVM_NUM_THREADS=2)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_BIND_THREADS", "TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    env.update({"TVM_NUM_THREADS": "2"} if threads is None else threads)
    if bind is not None:
        env["TVM_BIND_THREADS"] = bind
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_workers_unpinned_by_default():
    res = _run_child(None)
    assert res["env"] == "0"
    assert len(res["threads"]) >= 2  # the worker thread exists
    assert all(t == res["process"] for t in res["threads"]), res


@pytest.mark.slow  # ~11 s: TVM's own pinning when asked for; the default's unpinning is checked above
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="TVM pins workers only with 2+ cores")
def test_user_setting_kept():
    res = _run_child("1")
    assert res["env"] == "1"
    # TVM's own behaviour with pinning on: some worker bound to a single core. If this ever
    # fails, TVM stopped pinning and tvm_pool/thread_pool.py may no longer be needed.
    assert any(len(t) == 1 for t in res["threads"]), res


@pytest.mark.skipif(platform.machine() != "x86_64", reason="TVM halves the CPU count on x86 only")
def test_one_thread_per_physical_core_by_default():
    # TVM alone would run len(affinity) // 2 threads (it assumes two hyper-threads per core).
    res = _run_child(None, threads={})
    assert res["num_threads"] == physical_cores()
    assert physical_cores() >= len(os.sched_getaffinity(0)) // 2


def test_user_thread_count_kept():
    assert _run_child(None, threads={"OMP_NUM_THREADS": "1"})["num_threads"] == 1
    assert _run_child(None, threads={"TVM_NUM_THREADS": "1"})["num_threads"] == 1


def test_physical_cores_counts_hyper_threads_once(tmp_path, monkeypatch):
    """Two logical CPUs of one core (an SMT machine) count once; sysfs is faked under tmp_path."""
    real_open = open

    def fake_open(path, *args, **kwargs):
        if str(path).startswith("/sys/devices/system/cpu/"):
            cpu = int(str(path).split("/cpu/cpu")[1].split("/")[0])
            name = os.path.basename(str(path))
            target = tmp_path / f"{cpu}-{name}"
            target.write_text("0\n" if name == "physical_package_id" else f"{cpu // 2}\n")
            return real_open(target, *args, **kwargs)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr("builtins.open", fake_open)
    assert physical_cores() == 2
