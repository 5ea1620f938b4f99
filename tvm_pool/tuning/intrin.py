"""Only the CPU tensor intrinsics while tuning a CPU target, on the TVM versions that need it.

MetaSchedule's ``TuneContext`` starts with ``import tvm.s_tir.tensor_intrin``, and in TVM 0.27
that package's ``__init__`` imports every target's intrinsics: some 500 TVMScript functions
parsed, 45-110 s on this loaded 2-core machine, all but ~6 s of it CUDA's and ROCm's. Tuning an
LLVM target needs the CPU ones only (x86, Arm, RISC-V: the int8 dot products MetaSchedule's CPU
rules may tensorize with).

:func:`prepare` imports the package for an LLVM target through a meta-path finder installed for
that one import: the finder gives the package a loader that imports the CPU modules instead of
running the package's ``__init__``. The import system enters the package as usual, so
TuneContext's own import finds it and costs nothing. The package stays so in this process:
:func:`prepare` for any other target completes it (``importlib.reload`` runs the package's own
``__init__``), as other code that needs the GPU intrinsics registered after a CPU tuning run in
the same process must (``importlib.import_module("tvm.s_tir.tensor_intrin.cuda")``).

Only for :data:`EAGER_VERSIONS`; tests/test_tuning_intrin.py fails when a TVM of those versions
no longer imports every target's intrinsics with the package (the workaround can go then), or
when another version still does (add it here).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

import tvm

PACKAGE = "tvm.s_tir.tensor_intrin"
# What the package's __init__ imports for LLVM targets, less ROCm's and Hexagon's.
CPU_MODULES = ("x86", "arm_cpu", "riscv_cpu")
# TVM versions whose tensor_intrin package imports every target's intrinsics when imported.
EAGER_VERSIONS = ("0.27.",)


def needed() -> bool:
    """Whether this TVM parses every target's intrinsics on ``import tvm.s_tir.tensor_intrin``."""
    return str(tvm.__version__).startswith(EAGER_VERSIONS)


class _CpuOnlyLoader(importlib.abc.Loader):
    """Executes the package as its CPU modules only (the module itself is the default one)."""

    def create_module(self, spec):  # noqa: D102
        return None

    def exec_module(self, module):  # noqa: D102
        for name in CPU_MODULES:
            importlib.import_module(f"{module.__name__}.{name}")


class _CpuOnlyFinder(importlib.abc.MetaPathFinder):
    """Finds the package where it is, with :class:`_CpuOnlyLoader` as its loader; its
    submodules are found as usual."""

    def find_spec(self, fullname, path, target=None):  # noqa: D102
        if fullname != PACKAGE:
            return None
        found = importlib.machinery.PathFinder.find_spec(fullname, path)
        if found is None or found.origin is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, found.origin, loader=_CpuOnlyLoader(),
            submodule_search_locations=list(found.submodule_search_locations or []),
        )


def is_partial() -> bool:
    """Whether the package was imported as its CPU modules only (by :func:`prepare`)."""
    package = sys.modules.get(PACKAGE)
    return package is not None and isinstance(getattr(package.__spec__, "loader", None), _CpuOnlyLoader)


def prepare(target) -> None:
    """Make TuneContext's ``import tvm.s_tir.tensor_intrin`` register what tuning ``target``
    needs: for an LLVM target, when the package is not imported yet, import it as its CPU
    modules only; for any other target, complete a package imported so."""
    if not needed():
        return
    if target.kind.name != "llvm":
        if is_partial():
            importlib.reload(sys.modules[PACKAGE])
        return
    if PACKAGE in sys.modules:
        return
    finder = _CpuOnlyFinder()
    sys.meta_path.insert(0, finder)
    try:
        importlib.import_module(PACKAGE)
    finally:
        sys.meta_path.remove(finder)
