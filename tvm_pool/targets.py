"""Target names users type, resolved to ``tvm.target.Target``.

``host`` (the default) detects this machine's CPU; ``x86`` is a generic x86-64; ``arm`` is
aarch64-linux-gnu with NEON; ``cuda`` is an NVIDIA GPU with the host CPU as its host. A JSON
object (or dict) is taken as TVM's own target syntax.
"""

from __future__ import annotations

import json

import tvm
from tvm.target import Target

from .errors import TvmPoolError

TARGET_ALIASES = ("host", "x86", "arm", "cuda")


def host_cpu() -> str:
    """LLVM's name for this machine's CPU (e.g. "znver2", "skylake-avx512")."""
    name = tvm.target.codegen.llvm_get_system_cpu() if hasattr(tvm.target, "codegen") else ""
    return str(name) or "generic"


def host_target() -> Target:
    return Target({"kind": "llvm", "mcpu": host_cpu(), "num-cores": num_cores()})


def num_cores() -> int:
    """The logical CPUs this process may run on."""
    from .thread_pool import allowed_cpus

    return max(1, len(allowed_cpus()))


_ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def foreign_triple(target: Target) -> str | None:
    """The LLVM triple of ``target``'s CPU code (a CUDA target's host) when it names another CPU
    than this machine's, else None: such code is cross-compiled and cannot run here."""
    import platform

    host = target.host if target.kind.name == "cuda" and target.host is not None else target
    triple = str(host.attrs["mtriple"]) if "mtriple" in host.attrs and host.attrs["mtriple"] else None
    if not triple:
        return None
    arch = _ARCH_ALIASES.get(triple.split("-")[0], triple.split("-")[0])
    return None if arch == _ARCH_ALIASES.get(platform.machine().lower(), platform.machine().lower()) else triple


def export_compiler(target: Target):
    """``fcompile`` for export_library: None for this machine, a cross g++ for another CPU.

    A missing cross toolchain is a TvmPoolError saying what to install."""
    import shutil

    triple = foreign_triple(target)
    if triple is None:
        return None
    compiler = f"{triple}-g++"
    if shutil.which(compiler) is None:
        raise TvmPoolError(
            f"cross compiler {compiler} not found (needed for target {triple}); install it with: apt-get install g++-{triple}"
        )
    from tvm.support import cc  # pylint: disable=import-outside-toplevel

    # The triple query must ask the cross compiler too (the default asks the host's g++).
    return cc.cross_compiler(compiler, get_target_triple=cc.get_target_by_dump_machine(compiler))


def resolve_target(target) -> Target:
    """Turn "host" / "x86" / "arm" / "cuda" / "llvm" / a JSON string / a dict into a Target."""
    if isinstance(target, Target):
        return target
    if isinstance(target, dict):
        return Target(target)
    if target is None or target == "host":
        return host_target()
    if target == "llvm":
        return Target({"kind": "llvm", "mcpu": host_cpu()})
    if target == "x86":
        return Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "x86-64-v3"})
    if target == "arm":
        return Target(
            {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "mattr": ["+neon"]}
        )
    if target == "cuda":
        return Target({"kind": "cuda", "arch": "sm_90"}, host=host_target())
    if isinstance(target, str) and target.lstrip().startswith("{"):
        try:
            return Target(json.loads(target))
        except (ValueError, TypeError, tvm.error.InternalError) as err:
            raise TvmPoolError(f"invalid JSON target {target!r}: {err}") from None
    raise TvmPoolError(
        f"unknown target {target!r}: use one of {', '.join(TARGET_ALIASES)} or a JSON target such as "
        '\'{"kind": "llvm", "mcpu": "znver2"}\''
    )
