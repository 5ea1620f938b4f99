"""The tensor-intrinsic workaround (tvm_pool/tuning/intrin.py): still needed on this TVM, and it
gives MetaSchedule's TuneContext the CPU intrinsics only for a CPU target.

Each check runs in a fresh Python (the package is imported once per process) with a finder that
refuses the GPU intrinsics modules: an import that reaches one stops there, instead of parsing
them for a minute or two.
"""

from __future__ import annotations

import json
import subprocess
import sys

import tvm

from tvm_pool.tuning import intrin

_REFUSE_GPU = r"""
import importlib.abc, json, sys

GPU = tuple(f"tvm.s_tir.tensor_intrin.{m}" for m in ("cuda", "rocm", "hexagon", "metal"))


class GpuIntrinsics(ImportError):
    pass


class RefuseGpu(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname in GPU:
            raise GpuIntrinsics(fullname)
        return None


sys.meta_path.insert(0, RefuseGpu())
"""


def _run(script: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _REFUSE_GPU + script], capture_output=True, text=True, timeout=580)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_workaround_is_still_needed():
    """Fails when TVM no longer imports every target's intrinsics with the package: then
    intrin.py, its use in evolutionary.py and this file can go."""
    out = _run(
        """
try:
    import tvm.s_tir.tensor_intrin
    print(json.dumps({"gpu": None}))
except GpuIntrinsics as err:
    print(json.dumps({"gpu": str(err)}))
"""
    )
    assert out["gpu"], (
        f"TVM {tvm.__version__}: `import tvm.s_tir.tensor_intrin` no longer imports the GPU intrinsics; "
        "the workaround in tvm_pool/tuning/intrin.py is not needed any more"
    )
    assert intrin.needed(), (
        f"TVM {tvm.__version__} still imports every target's intrinsics with tvm.s_tir.tensor_intrin "
        f"({out['gpu']} first): add its version to tvm_pool.tuning.intrin.EAGER_VERSIONS"
    )


def test_a_cpu_target_gets_the_cpu_intrinsics_only_and_another_target_all():
    out = _run(
        """
from tvm import te
from tvm.s_tir import TensorIntrin
from tvm.s_tir import meta_schedule as ms

from tvm_pool.targets import resolve_target, with_num_cores
from tvm_pool.tuning import intrin

assert intrin.PACKAGE not in sys.modules, "imported before tuning"
target = with_num_cores(resolve_target("x86"), 2)
intrin.prepare(target)
a = te.placeholder((8,), name="a")
add = te.create_prim_func([a, te.compute((8,), lambda i: a[i] + 1.0, name="b")])
ms.TuneContext(mod=add, target=target, space_generator="post-order-apply")  # imports the package
out = {
    "partial": intrin.is_partial(),
    "cpu": sorted(m for m in intrin.CPU_MODULES if f"{intrin.PACKAGE}.{m}" in sys.modules),
    "vnni": TensorIntrin.get("dot_16x4_vnni") is not None,
    "finder_left": [type(f).__name__ for f in sys.meta_path if type(f).__name__ == "_CpuOnlyFinder"],
}
try:
    intrin.prepare(resolve_target("cuda"))
    out["completed_with"] = None
except GpuIntrinsics as err:
    out["completed_with"] = str(err)
print(json.dumps(out))
"""
    )
    if not intrin.needed():
        assert out["partial"] is False
        return
    assert out["partial"] and out["cpu"] == sorted(intrin.CPU_MODULES) and out["vnni"], out
    assert out["finder_left"] == [], out
    # another kind of target runs the package's own __init__, which imports the GPU intrinsics
    assert out["completed_with"] == "tvm.s_tir.tensor_intrin.cuda", out
