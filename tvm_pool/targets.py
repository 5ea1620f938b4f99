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
    return Target({"kind": "llvm", "mcpu": host_cpu(), "num-cores": _num_cores()})


def _num_cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


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
