"""What a target is (tvm_pool.targets): its CPU architecture and the family its tuning logs are
filed under, whatever machine the tests run on (every CPU target names its triple)."""

from __future__ import annotations

import platform

import pytest
from tvm.target import Target

from tvm_pool import targets
from tvm_pool.targets import cpu_arch, cuda_target, describe_target, resolve_target, target_family
from tvm_pool.tuning.logs import mismatch


def llvm(triple, **attrs):
    return Target({"kind": "llvm", "mtriple": triple, **attrs})


@pytest.mark.parametrize(
    "triple, arch",
    [
        ("x86_64-linux-gnu", "x86_64"),
        ("x86_64-pc-windows-msvc", "x86_64"),
        ("i686-linux-gnu", "x86_64"),
        ("aarch64-linux-gnu", "aarch64"),
        ("arm64-apple-darwin", "aarch64"),
        ("riscv64-linux-gnu", "riscv64"),
    ],
)
def test_cpu_arch_is_the_triple_s(triple, arch):
    assert cpu_arch(llvm(triple)) == arch


def test_cpu_arch_without_a_triple_is_this_machine_s_and_none_for_a_gpu():
    machine = platform.machine().lower()
    assert cpu_arch(Target({"kind": "llvm"})) == {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    assert cpu_arch(resolve_target("cuda")) is None
    assert cpu_arch(resolve_target("arm")) == "aarch64"


@pytest.mark.parametrize(
    "target, family",
    [
        (llvm("x86_64-linux-gnu", mcpu="x86-64"), "x86-sse"),
        (llvm("x86_64-linux-gnu", mcpu="haswell"), "x86-avx2"),
        (llvm("x86_64-linux-gnu", mcpu="znver4"), "x86-avx512"),
        ("x86", "x86-avx2"),
        ("arm", "aarch64-neon"),
        (llvm("aarch64-linux-gnu", mcpu="neoverse-v1"), "aarch64-sve"),
        (llvm("aarch64-linux-gnu", mattr=["+sve"]), "aarch64-sve"),
        (llvm("riscv64-linux-gnu"), "riscv64"),
        (llvm("riscv64-linux-gnu", mattr=["+v"]), "riscv64"),
        ("cuda", "cuda-sm_90"),
        (cuda_target("sm_80"), "cuda-sm_80"),
    ],
)
def test_target_family(target, family):
    assert target_family(target) == family


def test_a_risc_v_log_is_filed_as_risc_v_and_not_applied_to_aarch64():
    """Every non-x86 CPU used to be taken as aarch64: a RISC-V log was labelled aarch64-neon."""
    riscv = describe_target(llvm("riscv64-linux-gnu", mattr=["+v"]))
    assert riscv["family"] == "riscv64" and "v" in riscv["features"]
    assert mismatch(riscv, resolve_target("arm")) == "tuned for riscv64, not aarch64-neon"
    assert mismatch(describe_target("arm"), llvm("riscv64-linux-gnu")) == "tuned for aarch64-neon, not riscv64"
    # a vector log is not applied to a core without the V extension
    assert "lacks: v" in mismatch(riscv, llvm("riscv64-linux-gnu"))
    assert mismatch(riscv, llvm("riscv64-linux-gnu", mattr=["+v"])) is None


def test_features_are_the_architecture_s():
    assert "avx2" in targets.target_features(resolve_target("x86"))
    assert targets.target_features(resolve_target("arm")) == ["neon"]
    assert targets.target_features(resolve_target("cuda")) == ["sm_90"]


def test_target_json_round_trips_and_num_cores_is_added_to_cpus_only():
    for name in ("x86", "arm", "cuda"):
        target = resolve_target(name)
        assert str(Target(targets.target_json(target))) == str(target)
    assert int(targets.with_num_cores(resolve_target("arm"), 4).attrs["num-cores"]) == 4
    assert int(targets.with_num_cores(llvm("x86_64-linux-gnu", **{"num-cores": 2}), 4).attrs["num-cores"]) == 2
    assert "num-cores" not in targets.with_num_cores(resolve_target("cuda"), 4).attrs


def test_avx512_cpus_get_full_width_vectors():
    """LLVM's models of Intel's AVX-512 server CPUs prefer 256-bit vectors: its vectorisers then
    vectorise the loops TVM leaves to them at half width. tvm_pool's host target asks for the full
    width on every AVX-512 CPU (a no-op where the model does not prefer 256 bits) and on no
    other."""
    assert targets._full_width("emeraldrapids") == {"mattr": ["-prefer-256-bit"]}
    assert targets._full_width("skylake-avx512") == {"mattr": ["-prefer-256-bit"]}
    assert targets._full_width("znver4") == {"mattr": ["-prefer-256-bit"]}
    assert targets._full_width("haswell") == {} and targets._full_width("znver2") == {}
    assert targets._full_width("not-a-cpu") == {}  # LLVM takes it as its generic CPU: no AVX-512
    host = resolve_target("host")
    if "avx512f" not in targets.target_features(host):
        assert "mattr" not in host.attrs
        return
    import tvm
    from tvm import te

    a = te.placeholder((64,), "float32", name="a")
    b = te.compute((64,), lambda i: a[i] * 2.0 + 1.0, name="b")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))  # a serial loop: LLVM's vectorisers choose
    asm = {}
    for name, target in (("host", host), ("model's", Target({"kind": "llvm", "mcpu": str(host.attrs["mcpu"])}))):
        built = tvm.compile(sch.mod, target=target)
        asm[name] = getattr(built, "mod", built).inspect_source("asm")
    assert "zmm" in asm["host"]
    model = Target({"kind": "llvm", "mcpu": str(host.attrs["mcpu"])})
    if "prefer-256-bit" in str(tvm.target.codegen.llvm_get_cpu_features(model)):  # Intel's server CPUs
        assert "zmm" not in asm["model's"]  # what the full width undoes
