"""Target names users type, resolved to ``tvm.target.Target``, and what a target is.

``host`` (the default) detects this machine's CPU; ``x86`` is a generic x86-64; ``arm`` is
aarch64-linux-gnu with NEON; ``cuda`` is an NVIDIA GPU with the host CPU as its host. A JSON
object (or dict) is taken as TVM's own target syntax.

Every schedule, tuning log and benchmark asks here what a target is: its CPU architecture
(:func:`cpu_arch`), ISA features, and the family its tuning logs are filed under
(:func:`target_family`: ``x86-avx2``, ``aarch64-neon``, ``riscv64``, ``cuda-sm_90``, ...).
"""

from __future__ import annotations

import functools
import json
import logging

import tvm
from tvm.target import Target

from .errors import TvmPoolError

TARGET_ALIASES = ("host", "x86", "arm", "cuda")

logger = logging.getLogger(__name__)


def host_cpu() -> str:
    """LLVM's name for this machine's CPU (e.g. "znver2", "skylake-avx512")."""
    name = tvm.target.codegen.llvm_get_system_cpu() if hasattr(tvm.target, "codegen") else ""
    return str(name) or "generic"


def host_target() -> Target:
    return Target({"kind": "llvm", "mcpu": host_cpu(), **_full_width(host_cpu()), "num-cores": num_cores()})


@functools.lru_cache(maxsize=None)
def _full_width(cpu: str) -> dict:
    """``{"mattr": ["-prefer-256-bit"]}`` for an x86 CPU with AVX-512, else ``{}``. LLVM's
    models of Intel's AVX-512 server CPUs (skylake-avx512 to emeraldrapids) prefer 256-bit
    vectors: TVM's own vectors keep their 512 bits, but every loop TVM leaves to LLVM's loop and
    SLP vectorisers is vectorised at half width, much of MetaSchedule's convolution code among
    them (ResNet-50 with the shipped logs on an Emerald Rapids, 2 threads: 110 ms, 84 ms at
    full width; onnxruntime's kernels use the full width). On CPUs whose model does not prefer
    256 bits (znver4) it changes nothing."""
    target = Target({"kind": "llvm", "mcpu": cpu})
    try:
        wide = is_x86(target) and has_feature(target, "avx512f")
    except (RuntimeError, ValueError) as err:  # LLVM refusing the CPU name (TVM's InternalError)
        logger.debug("cpu %s: AVX-512 not asked: %s", cpu, err)
        return {}
    return {"mattr": ["-prefer-256-bit"]} if wide else {}


def num_cores() -> int:
    """The logical CPUs this process may run on."""
    from .thread_pool import allowed_cpus

    return max(1, len(allowed_cpus()))


_ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}

# --------------------------------------------------------------------------------------------
# What a target is: every schedule, tuning log and benchmark asks here.
# --------------------------------------------------------------------------------------------

_X86_TRIPLES = ("x86_64", "i686", "i386", "x86")
# The GPU the "cuda" alias and a CUDA schedule without a target assume (Hopper).
DEFAULT_CUDA_ARCH = "sm_90"


def _host_triple() -> str:
    """LLVM's triple for this machine, else one made of Python's machine name."""
    import platform  # pylint: disable=import-outside-toplevel

    get = getattr(getattr(tvm.target, "codegen", None), "llvm_get_system_triple", None)
    triple = str(get()) if get is not None else ""
    return triple or f"{platform.machine().lower()}-unknown-linux-gnu"


def cpu_arch(target: Target) -> str | None:
    """The CPU architecture of an LLVM target: "x86_64", "aarch64", or the first part of any
    other triple ("riscv64", ...); None for a target that is not a CPU. The target's mtriple
    decides; without one, the ``arm_cpu`` key means aarch64, else it is this machine's (what
    LLVM builds for)."""
    if target.kind.name != "llvm":
        return None
    triple = str(target.attrs.get("mtriple", "") or "")
    if not triple:
        if "arm_cpu" in [str(k) for k in target.keys]:
            return "aarch64"
        triple = _host_triple()
    arch = triple.split("-")[0]
    if arch.startswith(_X86_TRIPLES):
        return "x86_64"
    return _ARCH_ALIASES.get(arch, arch)


def is_x86(target: Target) -> bool:
    return cpu_arch(target) == "x86_64"


def is_aarch64(target: Target) -> bool:
    return cpu_arch(target) == "aarch64"


def is_cuda(target: Target) -> bool:
    return target.kind.name == "cuda" and "gpu" in [str(k) for k in target.keys]


def cuda_target(arch: str = DEFAULT_CUDA_ARCH, host: Target | None = None) -> Target:
    """A CUDA target for ``arch`` (the "cuda" alias: :data:`DEFAULT_CUDA_ARCH`, this machine as host)."""
    return Target({"kind": "cuda", "arch": arch}, host=host)


def has_feature(target: Target, feature: str) -> bool:
    """Whether LLVM says ``target`` has the ISA ``feature`` (LLVM's name: "avx512f", "fullfp16")."""
    return bool(tvm.target.codegen.target_has_features(feature, target))


def has_fullfp16(target: Target) -> bool:
    """Does an aarch64 target compute float16 natively (Armv8.2-A FEAT_FP16, LLVM ``+fullfp16``)?
    An explicit ``+fullfp16`` / ``-fullfp16`` in mattr decides; else LLVM's CPU model."""
    mattr = [str(a) for a in (target.attrs.get("mattr", None) or [])]
    if "+fullfp16" in mattr or "-fullfp16" in mattr:
        return "+fullfp16" in mattr
    return has_feature(target, "fullfp16")


def x86_vector_bits(target: Target) -> int:
    """512 with AVX-512F, 256 with AVX2, else 128 (SSE)."""
    if has_feature(target, "avx512f"):
        return 512
    return 256 if has_feature(target, "avx2") else 128


# ISA features a tuning log records, per architecture (LLVM's names): a log tuned with one of
# them is not applied to a target without it (its code could fault there).
_FEATURES = {
    "x86": (
        "sse4.2", "avx", "avx2", "fma", "f16c", "bmi2",
        "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512vnni", "avx512bf16",
        "avx512fp16", "avxvnni", "amx-tile",
    ),
    "aarch64": ("neon", "fullfp16", "dotprod", "i8mm", "bf16", "sve", "sve2"),
    "riscv64": ("v", "zfh", "zvfh"),
}


def _arch(target: Target) -> str:
    """"cuda", "x86", "aarch64", another CPU's architecture as its triple names it ("riscv64"),
    or the kind of any other target."""
    if target.kind.name == "cuda":
        return "cuda"
    arch = cpu_arch(target)
    if arch is None:
        return str(target.kind.name)
    return "x86" if arch == "x86_64" else arch


def target_features(target: Target) -> list[str]:
    """The ISA features of ``target`` among those a tuning log records (LLVM's names); a CUDA
    target's: its arch."""
    arch = _arch(target)
    if arch == "cuda":
        return [str(target.attrs.get("arch", "") or "")]
    found = []
    for feature in _FEATURES.get(arch, ()):
        try:
            if has_feature(target, feature):
                found.append(feature)
        except RuntimeError as err:  # LLVM refusing the target (TVM's InternalError)
            logger.debug("target %s: feature %s not asked: %s", target, feature, err)
    return found


def target_family(target) -> str:
    """``x86-avx512``, ``x86-avx2``, ``x86-sse``, ``aarch64-sve``, ``aarch64-neon``,
    ``cuda-sm_90``, or another CPU's architecture (``riscv64``): one directory of shipped
    tuning logs per family."""
    target = resolve_target(target)
    arch = _arch(target)
    if arch == "cuda":
        return f"cuda-{target.attrs.get('arch', 'unknown')}"
    features = set(target_features(target))
    if arch == "x86":
        return "x86-avx512" if "avx512f" in features else ("x86-avx2" if "avx2" in features else "x86-sse")
    if arch == "aarch64":
        return "aarch64-sve" if "sve" in features else "aarch64-neon"
    return arch


def target_json(target: Target) -> dict:
    """``target.export()`` as plain JSON values (what ``Target(...)`` takes back)."""

    def plain(value):
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        if isinstance(value, Target):
            return target_json(value)
        if hasattr(value, "items"):
            return {str(k): plain(v) for k, v in value.items()}
        if hasattr(value, "__iter__"):
            return [plain(v) for v in value]
        return str(value)

    return plain(target.export())


def describe_target(target) -> dict:
    """What a tuning log records of its target (``target.json``): family, target, ISA features."""
    target = resolve_target(target)
    return {"family": target_family(target), "target": target_json(target), "features": target_features(target)}


def with_num_cores(target: Target, cores: int) -> Target:
    """``target`` with ``num-cores`` (MetaSchedule's CPU rules refuse a target without it, and
    the aliases "arm" and "x86" name none: the device's count is known only when tuning)."""
    if target.kind.name != "llvm" or "num-cores" in target.attrs:
        return target
    return Target({**target_json(target), "num-cores": int(cores)})


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


def runs_here(target: Target) -> bool:
    """Whether code built for ``target`` runs on this machine: a CPU target of this machine's
    architecture and its CPU, none named, or (x86) vectors no wider than this CPU's."""
    if target.kind.name != "llvm" or foreign_triple(target) is not None:
        return False
    mcpu = str(target.attrs["mcpu"]) if "mcpu" in target.attrs and target.attrs["mcpu"] else ""
    if mcpu in ("", host_cpu()):
        return True
    host = host_target()
    return is_x86(target) and is_x86(host) and x86_vector_bits(target) <= x86_vector_bits(host)


def missing_cross_compiler(target: Target) -> str | None:
    """The cross g++ that building for ``target`` needs (``aarch64-linux-gnu-g++``) when it is not
    on PATH, else None (also for this machine's CPU, which needs none)."""
    import shutil

    triple = foreign_triple(target)
    if triple is None or shutil.which(f"{triple}-g++") is not None:
        return None
    return f"{triple}-g++"


def export_compiler(target: Target):
    """``fcompile`` for export_library: None for this machine, a cross g++ for another CPU.

    A missing cross toolchain is a TvmPoolError saying what to install."""
    triple = foreign_triple(target)
    if triple is None:
        return None
    compiler = f"{triple}-g++"
    if missing_cross_compiler(target):
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
        return Target({"kind": "llvm", "mcpu": host_cpu(), **_full_width(host_cpu())})
    if target == "x86":
        return Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "x86-64-v3"})
    if target == "arm":
        return Target(
            {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "mattr": ["+neon"]}
        )
    if target == "cuda":
        return cuda_target(host=host_target())
    if isinstance(target, str) and target.lstrip().startswith("{"):
        try:
            return Target(json.loads(target))
        except (ValueError, TypeError, tvm.error.InternalError) as err:
            raise TvmPoolError(f"invalid JSON target {target!r}: {err}") from None
    raise TvmPoolError(
        f"unknown target {target!r}: use one of {', '.join(TARGET_ALIASES)} or a JSON target such as "
        '\'{"kind": "llvm", "mcpu": "znver2"}\''
    )
