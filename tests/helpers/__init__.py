"""What several test files need, written once: which host this is, the optional tools a test
needs (each a skip marker saying what is missing and how to get it), how close each kind of
comparison must come, named outputs against an oracle's, a Relax module compiled to a VM, the
``tvm-pool`` command in its own process, and an ELF file's machine.

Optional tools are found as a user's machine finds them: programs on ``PATH`` (``shutil.which``),
packages by import, a GPU by TVM's runtime. An optional *package* a whole test file imports is
skipped with ``pytest.importorskip`` at the top of the file (``conftest.py`` also turns a
collection ``ModuleNotFoundError`` of one of :data:`OPTIONAL_PACKAGES` into a skip).

The ONNX model builders and the runners of tvm_pool and the oracles are in ``oracles.py``; the
fixtures (this machine's target, a seeded generator) in ``conftest.py``.
"""

from __future__ import annotations

import importlib.util
import shutil
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
QEMU_AARCH64 = "qemu-aarch64"
EM_AARCH64 = 183  # ELF e_machine of aarch64

# Installed by the test extra (pip install -e '.[test]'), absent on a lean machine: a test that
# needs one skips, naming it. Top-level import names.
OPTIONAL_PACKAGES = {
    "torch": "pip install 'tvm_pool[torch]'",
    "torchvision": "pip install torchvision",
    "onnxscript": "pip install onnxscript",
    "tflite": "pip install 'tvm_pool[tflite]'",
    "ai_edge_litert": "pip install ai-edge-litert",
}


def has_package(name: str) -> bool:
    """Whether the package ``name`` can be imported (without importing it)."""
    return importlib.util.find_spec(name) is not None


def needs_package(name: str, why: str = ""):
    """A skip marker for a test that imports ``name`` inside (a file that imports it at the top
    uses ``pytest.importorskip``); ``why``: what the test uses it for, said in the reason."""
    hint = OPTIONAL_PACKAGES.get(name, f"pip install {name}")
    because = f" ({why})" if why else ""
    return pytest.mark.skipif(not has_package(name), reason=f"{name} is not installed{because}: {hint}")


needs_torch = needs_package("torch")
needs_tflite = needs_package("tflite")

# The aarch64 cross toolchain: `tvm-pool compile --target arm` links with it.
needs_cross_compiler = pytest.mark.skipif(
    shutil.which(CROSS_CXX) is None, reason=f"{CROSS_CXX} missing: apt-get install g++-aarch64-linux-gnu"
)
# qemu-user runs the emulated aarch64 device (tvm_pool/emulation.py). The tests do not install it
# (emulation.build would, as root): .ci/run does.
needs_qemu = pytest.mark.skipif(
    shutil.which(QEMU_AARCH64) is None, reason=f"{QEMU_AARCH64} missing: apt-get install qemu-user"
)
# nvcc/ptxas check the generated CUDA (tests/cuda_checks.py); TVM itself writes CUDA source
# without it. Found on PATH, as cuda_checks.have_nvcc does.
needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None, reason="nvcc (CUDA toolkit) is not on PATH: no ptxas/PTX check"
)


def cuda_device_present() -> bool:
    """Whether TVM's runtime sees a CUDA device (False where TVM has no CUDA runtime at all)."""
    try:
        return bool(tvm.cuda(0).exist)
    except Exception:  # pylint: disable=broad-except  (no CUDA runtime library: TVMError, OSError)
        return False


NO_GPU_REASON = "no CUDA device on this machine (tvm.cuda(0) does not exist)"
# conftest.py also skips every `gpu`-marked test with this reason when no device is present.
needs_gpu = pytest.mark.skipif(not cuda_device_present(), reason=NO_GPU_REASON)


def emulated_device():
    """The emulated aarch64 device (built on first use, about a minute), for a fixture; skips,
    saying what is missing, without the cross compiler, qemu-aarch64 or the registries."""
    from tvm_pool import emulation  # pylint: disable=import-outside-toplevel

    for mark in (needs_cross_compiler, needs_qemu):
        if mark.args[0]:
            pytest.skip(mark.kwargs["reason"])
    try:
        return emulation.build(quiet=True)
    except emulation.EmulationError as err:
        pytest.skip(f"emulated aarch64 device unavailable: {err}")


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


def pool_module(shape, pool, dtype: str = "float32") -> tvm.IRModule:
    """A Relax module whose ``main`` applies ``pool`` (a Relax expression of its input) to one
    input of ``shape`` and ``dtype``."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(pool(x)))
        bb.emit_func_output(out)
    return bb.get()


def emit_module(shape, dtype, emit, epilogue=None, prologue=None) -> tvm.IRModule:
    """A Relax module whose ``main`` takes one input of ``shape`` and ``dtype`` through
    ``prologue`` (a Relax expression of it, optional), ``emit(bb, x)`` (a pool emitted with
    the block builder) and ``epilogue`` (optional)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            inp = bb.emit(prologue(x)) if prologue else x
            y = emit(bb, inp)
            if epilogue is not None:
                y = bb.emit(epilogue(y))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


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
