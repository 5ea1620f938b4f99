"""What several test files need, written once: which host this is, how close each kind of
comparison must come, named outputs against an oracle's, a Relax module compiled to a VM, the
``tvm-pool`` command in its own process, and an ELF file's machine.

The ONNX model builders and the runners of tvm_pool and the oracles are in ``oracles.py``; the
fixtures (this machine's target, a seeded generator) in ``conftest.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_pool
from tvm_pool.targets import is_x86, resolve_target

CROSS_CXX = "aarch64-linux-gnu-g++"
EM_AARCH64 = 183  # ELF e_machine of aarch64


def host_is_x86() -> bool:
    """Whether this machine is x86-64 (the x86 schedules' run tests need one)."""
    return is_x86(resolve_target("host"))


x86_only = pytest.mark.skipif(not host_is_x86(), reason="x86 schedules run on an x86 host")


# (rtol, atol) per dtype for each kind of comparison; a dtype not listed compares exactly.
TOLERANCES = {
    # A scheduled PrimFunc against its unscheduled self: the same arithmetic, only reductions
    # in another order (primfunc_check.py).
    "unscheduled": {
        "float16": (2e-3, 2e-3), "bfloat16": (2e-2, 2e-2), "float32": (1e-5, 1e-5), "float64": (1e-10, 1e-10),
    },
    # A graph against onnxruntime; a float16 graph against the float32 model of the same graph,
    # which rounds once where the float16 one rounds after each elementwise op (test_fusion.py).
    "onnxruntime": {"float16": (1e-2, 1e-2), "float32": (1e-5, 1e-5)},
    # Emulated aarch64 against onnxruntime or the unscheduled build on this machine: NEON's
    # float16 arithmetic and bfloat16 rounding (test_arm_emulated.py, test_schedules_arm.py).
    "aarch64": {"float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2), "float32": (1e-5, 1e-6), "float64": (1e-5, 1e-6)},
}


def tolerance(dtype, comparison: str) -> tuple[float, float]:
    """(rtol, atol) for ``dtype`` in ``comparison`` (a key of :data:`TOLERANCES`)."""
    return TOLERANCES[comparison].get(str(dtype), (0.0, 0.0))


def assert_matches(got: dict, want: dict) -> None:
    """Named outputs equal the oracle's: the same names, shapes and dtypes, integers (MaxPool's
    Indices) exactly, floats to 1e-4 (a whole CNN sums in another order than onnxruntime)."""
    assert sorted(got) == sorted(want)
    for name, ref in want.items():
        assert got[name].shape == ref.shape and got[name].dtype == ref.dtype, name
        if ref.dtype.kind in "iu":
            np.testing.assert_array_equal(got[name], ref, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-4, err_msg=name)


def compile_vm(mod) -> relax.VirtualMachine:
    """``mod`` (a Relax module) compiled by tvm_pool for this CPU, as a VirtualMachine on it."""
    return relax.VirtualMachine(tvm_pool.compile(mod, "llvm"), tvm.cpu())


def tvm_pool_command() -> list[str]:
    """The installed console script when present (it is, after pip install -e .), else -m."""
    script = Path(sys.executable).with_name("tvm-pool")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tvm_pool.cli"]


def run_cli(*args: str, env=None) -> subprocess.CompletedProcess:
    """``tvm-pool ARGS...`` in its own process (what a user's shell runs)."""
    return subprocess.run(tvm_pool_command() + list(args), capture_output=True, text=True, timeout=300, env=env)


def elf_machine(path) -> int:
    """The e_machine field of the ELF file at ``path`` (62: x86-64, :data:`EM_AARCH64`)."""
    header = Path(path).read_bytes()[:20]
    assert header[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")
