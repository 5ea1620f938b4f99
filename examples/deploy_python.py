"""Run a module compiled by ``tvm-pool compile`` with TVM's runtime only (no compiler, no tvm_pool).

    TVM_USE_RUNTIME_LIB=1 python examples/deploy_python.py model.so [--inputs in.npz] [-o out.npz]

On a deployment machine only TVM's runtime library is needed (``libtvm_runtime.so``, loaded by
``import tvm`` in runtime-only mode) plus numpy; tvm_pool does not have to be installed. The
model's input/output names, shapes and dtypes come from the ``tvm_pool_signature`` function
that ``tvm-pool compile`` embeds in the module, so no ONNX file is needed either. Without
``--inputs``, random inputs of the right shapes are used.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")  # before importing tvm: load the runtime only
# tvm_pool's schedules are parallel: unpin TVM's workers, as tvm_pool itself does (tvm_pool/thread_pool.py).
# On x86 TVM also runs only half as many threads as logical CPUs unless TVM_NUM_THREADS is set
# (it assumes two hyper-threads per core): on a machine without SMT, set TVM_NUM_THREADS to
# the core count (tvm_pool does that when imported; this script runs without it).
os.environ.setdefault("TVM_BIND_THREADS", "0")

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm.runtime.vm import VirtualMachine  # noqa: E402


def load(path: str):
    """(VirtualMachine, signature dict) for a tvm-pool artifact."""
    lib = tvm.runtime.load_module(path)
    vm = VirtualMachine(lib, tvm.cpu())
    signature = json.loads(str(vm["tvm_pool_signature"]()))
    return vm, signature


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", help="the .so written by tvm-pool compile")
    parser.add_argument("--inputs", help=".npz with one array per input name (default: random inputs)")
    parser.add_argument("-o", "--output", help="save the outputs by name to this .npz")
    args = parser.parse_args(argv)

    vm, signature = load(args.module)
    runtime_only = bool(getattr(tvm.base, "_RUNTIME_ONLY", False))
    print(f"TVM runtime only: {runtime_only}; tvm_pool loaded: {sys.modules.get('tvm_pool') is not None}")

    rng = np.random.default_rng(0)
    given = dict(np.load(args.inputs)) if args.inputs else {}
    arrays = []
    for spec in signature["inputs"]:
        if spec["name"] in given:
            arr = np.ascontiguousarray(given[spec["name"]], dtype=spec["dtype"])
        else:
            arr = rng.standard_normal(spec["shape"]).astype(spec["dtype"])
        arrays.append(arr)

    result = vm[signature["entry"]](*[tvm.runtime.tensor(a) for a in arrays])
    outputs = [result] if hasattr(result, "numpy") else list(result)
    named = {spec["name"]: out.numpy() for spec, out in zip(signature["outputs"], outputs)}
    for name, value in named.items():
        print(f"{name}: {value.dtype}{list(value.shape)} sum={float(value.astype(np.float64).sum()):.6g}")
    if args.output:
        np.savez(args.output, **named)
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
