"""Run many compiled artifacts in one process on a device with TVM's runtime only.

    TVM_USE_RUNTIME_LIB=1 python device_runner.py jobs.json

This file is run by path on the (emulated) device, where tvm_pool is not installed: it imports
only numpy and TVM's runtime. Starting Python and TVM under qemu costs ~10 s, so one process
runs every job. ``jobs.json``::

    {"jobs": [{"name": ..., "module": "x.so", "inputs": "in.npz", "output": "out.npz",
               "count_calls": 0}], "results": "results.json"}

Inputs are passed to ``main`` in the npz's order (``arr_0``, ``arr_1``, ... or the signature's
names); outputs are saved as ``out0``, ``out1``, ... With ``count_calls`` N > 0 the job is also
timed for the instruction counter: marks (syscall 4000, see tvm_pool/emulation.py) around one
call and around 1 + N calls of a saved closure, so the counter's difference of differences over
N is the instructions of one call.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import traceback

os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm.runtime.vm import VirtualMachine  # noqa: E402

MARK_SYSCALL = 4000
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def mark(tag: int) -> None:
    _libc.syscall(ctypes.c_long(MARK_SYSCALL), ctypes.c_long(tag))


def _restore(arr, dtype: str):
    """npz keeps bfloat16 (ml_dtypes) as raw 2-byte records: view them back."""
    if dtype == "bfloat16":
        import ml_dtypes  # pylint: disable=import-outside-toplevel

        return arr.view(np.uint16).view(ml_dtypes.bfloat16)
    return arr


def _storable(arr):
    return arr.view(np.uint16) if str(arr.dtype) == "bfloat16" else arr


def _outputs(result) -> list:
    if hasattr(result, "numpy"):
        return [result.numpy()]
    return [r.numpy() for r in result]


def run_job(index: int, job: dict) -> dict:
    lib = tvm.runtime.load_module(job["module"])
    dev = tvm.cpu()
    vm = VirtualMachine(lib, dev)
    with np.load(job["inputs"]) as data:
        names = job.get("input_names") or list(data.files)
        dtypes = job.get("input_dtypes") or [None] * len(names)
        arrays = [np.ascontiguousarray(_restore(data[n], d)) for n, d in zip(names, dtypes)]
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    outs = _outputs(vm["main"](*args))
    if job.get("output"):
        np.savez(job["output"], **{f"out{i}": _storable(o) for i, o in enumerate(outs)})
    result = {"name": job.get("name", job["module"]), "ok": True, "output_dtypes": [str(o.dtype) for o in outs]}
    n = int(job.get("count_calls", 0))
    if n > 0:
        vm.save_function("main", "tvm_pool_counted", *args)
        once = vm.time_evaluator("tvm_pool_counted", dev, number=1, repeat=1)
        many = vm.time_evaluator("tvm_pool_counted", dev, number=1 + n, repeat=1)
        base = 100 * (index + 1)
        once()  # lazy first-use work (timer, thread pool) stays out of the marks
        mark(base)
        once()
        mark(base + 1)
        mark(base + 2)
        many()
        mark(base + 3)
        result["mark_base"] = base
        result["count_calls"] = n
    return result


def main(argv) -> int:
    spec = json.loads(open(argv[1]).read())
    results = []
    for i, job in enumerate(spec["jobs"]):
        # Broad on purpose: whatever a job raises (TVM's runtime errors arrive as RuntimeError,
        # ValueError, TypeError, ...; a bad npz as zipfile.BadZipFile) is that job's result,
        # which the parent reports with its traceback, and the other jobs still run in this
        # process (a qemu start costs ~10 s).
        try:
            results.append(run_job(i, job))
        except Exception as err:  # pylint: disable=broad-except
            results.append({"name": job.get("name", job["module"]), "ok": False,
                            "error": f"{type(err).__name__}: {err}"[:2000], "traceback": traceback.format_exc()[-2000:]})
    with open(spec["results"], "w") as fh:
        json.dump({"runtime_only": bool(getattr(tvm.base, "_RUNTIME_ONLY", False)), "results": results}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
