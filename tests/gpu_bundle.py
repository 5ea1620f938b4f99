"""The GPU tests' cases as a bundle that a GPU machine with TVM's runtime alone can run.

    .venv/bin/python tests/gpu_bundle.py DIR [--arch sm_90] [--bench]

Every case of the ``gpu``-marked tests is compiled here for the arch (no GPU needed) and
written with its inputs and expected outputs through ``tvm_pool.bench.cuda_bundle.add_check``:

- ``test_schedules_cuda``: CASES (every op, dtype and edge geometry, NaN in the data) and FUSED
  against the unscheduled CPU build; ONNX_CASES against onnxruntime; TORCH_CASES against PyTorch
  eager on the CPU; random geometries (rank 1-3, dilations, ceil, pads; max, max with Indices,
  average) against the unscheduled CPU build;
- ``test_channel_last_cuda``: CASES against the unscheduled CPU build;
- ``fusion_graphs``: random fused graphs (BN, Relu, Clip, Add with a branch, Concat, two pools,
  Indices, float16) as one model, against the unscheduled CPU build.

With ``--bench`` the GPU benchmark's workloads go into the same bundle
(``cuda_bundle.export``). ``bench/cuda_replay.py DIR OUT`` runs it on the GPU machine.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cuda_checks as cc  # noqa: E402
import tvm_pool  # noqa: E402
from tvm_pool.bench import cuda_bundle  # noqa: E402


def _unscheduled(mod, xs):
    return cc.run_cpu(tvm_pool.compile(mod, target="llvm", schedule=False), *xs)


def bit_exact_on_gpu(name: str, dtype: str, exact: bool) -> bool:
    """Whether a case's ``exact`` holds on a real GPU: TVM compiles CUDA with ``--use_fast_math``
    (approximate division and powf, FMA contraction), so float averages, Lp and blends round
    within a few ulp of the CPU's (measured on an H100: at most 3 ulp; docs/conformance.md,
    "CUDA numerics"); max, Indices and integer pools stay bit-exact."""
    rounded = dtype.startswith(("float", "bfloat")) and any(k in name for k in ("avg", "lp", "blend"))
    return exact and not rounded


def relax_cases():
    """(name, module, inputs, expected, exact, tol) of the Relax-module cases."""
    import test_channel_last_cuda as cl  # pylint: disable=import-outside-toplevel
    import test_schedules_cuda as sc  # pylint: disable=import-outside-toplevel

    for name, shape, dtype, emit, exact in sc.CASES:
        mod = sc.module(shape, dtype, emit)
        xs = cc.inputs_for(mod, nan=True)
        yield (f"cf_{name}", mod, xs, _unscheduled(mod, xs), bit_exact_on_gpu(name, dtype, exact),
               2e-3 if "16" in dtype else 1e-5)
    for name, shape, dtype, emit, exact in cl.CASES:
        mod = cl.module(shape, dtype, emit)
        xs = cl.inputs_for(mod)
        yield (f"cl_{name}", mod, xs, _unscheduled(mod, xs), bit_exact_on_gpu(name, dtype, exact),
               2e-3 if "16" in dtype else 2e-5)
    for name, emit, epilogue, prologue, branch in sc.FUSED:
        shape = [1, 8, 14, 14] if "global" not in name else [1, 8, 7, 7]
        mod = sc.module(shape, "float32", emit, epilogue=epilogue, prologue=prologue, branch=branch)
        xs = cc.inputs_for(mod)
        yield f"fused_{name}", mod, xs, _unscheduled(mod, xs), False, 1e-5
    for name, emit in (("max_3x3s2", sc.maxp([3, 3], [2, 2], [1, 1, 1, 1])), ("max_2x2s2", sc.maxp([2, 2], [2, 2])),
                       ("indices_3x3s2", sc.maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True))):
        # subnormal inputs: TVM's CUDA build flushes them to zero (--use_fast_math implies -ftz)
        mod = sc.module([1, 4, 16, 16], "float32", emit)
        xs = [x * np.float32(1e-39) for x in cc.inputs_for(mod)]
        yield f"subnormal_{name}", mod, xs, _unscheduled(mod, xs), True, 0.0
    for seed in range(16):
        for kind, mod in sc.random_modules(seed):
            xs = cc.inputs_for(mod, nan=True)
            yield f"random{seed}_{kind}", mod, xs, _unscheduled(mod, xs), kind != "avg", 1e-5


def onnx_cases():
    """(name, model, inputs, expected) against onnxruntime (ONNX_CASES)."""
    import oracles  # pylint: disable=import-outside-toplevel
    import test_schedules_cuda as sc  # pylint: disable=import-outside-toplevel

    for name, (op, shape, dtype, attrs, outputs, opset) in sc.ONNX_CASES:
        model = oracles.pool_model(op, shape, dtype, opset=opset, num_outputs=outputs, **attrs)
        x = cc.data(shape, dtype)
        yield f"onnx_{name}", model, [x], oracles.run_onnxruntime(model, {"X": x}), 2e-3 if dtype == "float16" else 1e-5


def torch_cases():
    import torch  # pylint: disable=import-outside-toplevel
    import test_schedules_cuda as sc  # pylint: disable=import-outside-toplevel

    for name, shape, emit, reference in sc.TORCH_CASES:
        mod = sc.module(shape, "float32", emit)
        xs = cc.inputs_for(mod)
        want = reference(torch.nn.functional, torch.from_numpy(xs[0]))
        want = [w.numpy() for w in (want if isinstance(want, tuple) else (want,))]
        yield f"torch_{name}", mod, xs, want


def fusion_graph_case(seeds):
    from fusion_graphs import feeds, random_graph, to_model  # pylint: disable=import-outside-toplevel

    graphs = [random_graph(s) for s in seeds]
    mod = tvm_pool.from_onnx(to_model(graphs))
    given = feeds(graphs)
    xs = [given[p.name] for p in mod["main"].params]
    return mod, xs, _unscheduled(mod, xs)


def build(root: str, arch: str, bench: bool, knobs: bool = False, checks: bool = True, only=None) -> str:
    from tvm_pool.bench import cuda as bench_cuda  # pylint: disable=import-outside-toplevel

    target = cuda_bundle.target_for(arch)
    bundle = cuda_bundle.Bundle(root, arch)

    def add(name, mod, xs, want, exact, tol):
        cuda_bundle.add_check(bundle, name, tvm_pool.compile(mod, target=target), xs, want, exact, tol)
        print("built", name, flush=True)

    for name, mod, xs, want, exact, tol in (relax_cases() if checks else ()):
        add(name, mod, xs, want, exact, tol)
    for name, model, xs, want, tol in (onnx_cases() if checks else ()):
        add(name, tvm_pool.from_onnx(model), xs, want, False, tol)
    for name, mod, xs, want in (torch_cases() if checks else ()):
        add(name, mod, xs, want, False, 1e-5)
    for first in ((0, 12, 24) if checks else ()):
        mod, xs, want = fusion_graph_case(range(first, first + 12))
        add(f"fusion_graphs_{first}", mod, xs, want, False, 1e-4)
    if bench:
        for w in bench_cuda.every_workload(False, only):
            entry = cuda_bundle.add_workload(bundle, w)
            if knobs:
                cuda_bundle.add_knobs(bundle, entry, w, None if knobs is True else knobs)
            print("built bench", w.name, flush=True)
    return bundle.save()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--bench", action="store_true")
    p.add_argument("--knobs", nargs="?", const="all", default=None,
                   help="with --bench: every workload at every point of cuda.KNOBS too (or at the comma-separated indices)")
    p.add_argument("--no-checks", action="store_true", help="the benchmark only")
    p.add_argument("--only", default=None, help="comma-separated benchmark workloads (default: every one)")
    args = p.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    knobs = None if args.knobs is None else True if args.knobs == "all" else {int(i) for i in args.knobs.split(",")}
    print(build(args.root, args.arch, args.bench, knobs, not args.no_checks, only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
