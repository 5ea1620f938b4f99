"""The GPU benchmark as a bundle: built here, run on a GPU machine that has only TVM's runtime.

``tvm-pool bench --device cuda --export DIR --arch sm_90`` compiles every workload of the GPU
benchmark (``bench/cuda.py``) for the arch, with no GPU and no time on one: tvm_pool's module,
stock TVM's and, for a channel-last workload, tvm_pool's channel-first twin, each exported as a
shared object (``export_library``). Beside them it writes what the run needs to check the
results: the input's recipe (the seeded generator of ``workloads.make_input``, with a checksum
that the run verifies), a sample of the expected output with its sum (tvm_pool's CPU build, the
x86 schedule that the CPU tests hold exact), the PyTorch call of the workload, and the minimum
bytes. Checks that are not benchmarks (the GPU tests' cases) go into the same manifest through
:func:`add_check`.

``python bench/cuda_replay.py DIR OUT`` then runs on the GPU machine with numpy, TVM's runtime
(``TVM_USE_RUNTIME_LIB=1``; no compiler, no tvm_pool) and PyTorch; ``--device cuda --replayed
OUT/bench_cuda_replay.json`` turns its results into the GPU benchmark's report here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import numpy as np

from .peers import NotAvailable, runtime_errors, torch_spec
from .summary import short_reason
from .cuda import _vm_runner, builders, every_workload, target_for
from .workloads import (
    KERNEL_BOUND_PREFIX, Workload, build_model, channel_first_twin, fused_bias, make_input, out_bytes, reference,
    relax_module,
)

MANIFEST = "manifest.json"
SAMPLE = 1 << 16  # expected values kept per output (every n-th element); the sum covers the rest


def save_arrays(path: str, arrays: list) -> list:
    """``arrays`` into one .npz (raw bytes, so that bfloat16 survives); their dtypes and shapes,
    which :func:`bench.cuda_replay.load_arrays` reads back."""
    raw = {f"a{i}": np.ascontiguousarray(a).view(np.uint8).reshape(-1) for i, a in enumerate(arrays)}
    np.savez(path, **raw)
    return [{"dtype": str(a.dtype), "shape": list(a.shape)} for a in arrays]


def input_recipe(w: Workload, x: np.ndarray) -> dict:
    """How the run regenerates ``make_input(w)`` (the 100 MB inputs do not travel), with the
    float64 sum it must come to."""
    kind = "integers" if w.dtype in ("int8", "uint8") else "normal"
    return {"shape": list(x.shape), "dtype": w.dtype, "gen": kind, "seed": 0,
            "sum": float(x.astype(np.float64).sum())}


def expected_sample(outputs: list) -> list:
    """Per output: every n-th element (at most SAMPLE of them) and the float64 sum of all."""
    out = []
    for y in outputs:
        flat = np.ascontiguousarray(y).reshape(-1)
        step = max(1, flat.size // SAMPLE)
        out.append({"step": step, "values": flat[::step], "sum": float(np.nansum(flat.astype(np.float64))),
                    "dtype": str(y.dtype), "shape": list(y.shape)})
    return out


KERNELS = "kernels"  # <sha256 of a CUDA source>.fatbin


def kernel_sources(mod) -> list:
    """The CUDA source of every CUDA module imported by ``mod``. TVM 0.27 exports a CUDA
    module as its source and compiles it when it is loaded (``tvm_callback_cuda_compile``,
    NVRTC through the ``cuda-bindings`` package by default), so the bundle carries the binaries."""
    out = []
    for m in mod.imports:
        if m.kind == "cuda":
            out.append(m.inspect_source(""))
        out += kernel_sources(m)
    return out


def kernel_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def compile_kernels(sources: list, arch: str, folder: str, workers: int = 2) -> int:
    """Each distinct source compiled by nvcc for ``arch`` into ``folder/<sha256>.fatbin``, which
    the run hands to TVM's runtime instead of compiling on the GPU machine. Returns how many."""
    from concurrent.futures import ThreadPoolExecutor  # pylint: disable=import-outside-toplevel

    from tvm.support import nvcc  # pylint: disable=import-outside-toplevel

    os.makedirs(folder, exist_ok=True)
    todo = {kernel_key(s): s for s in sources}
    todo = {k: s for k, s in todo.items() if not os.path.exists(os.path.join(folder, f"{k}.fatbin"))}

    def build(item):
        key, source = item
        with target_for(arch):  # nvcc.py reads the compute version off the current target
            binary = nvcc.compile_cuda(source, target_format="fatbin", arch=arch, compiler="nvcc")
        with open(os.path.join(folder, f"{key}.fatbin"), "wb") as fh:
            fh.write(bytes(binary))

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(build, todo.items()))
    return len(todo)


class Bundle:
    """A folder of exported modules and its manifest."""

    def __init__(self, root: str, arch: str):
        self.root, self.arch = root, arch
        self.manifest = {"arch": arch, "bench": [], "checks": [], "kernels": KERNELS}
        self.sources = []  # the CUDA source of every exported module
        for sub in ("bench", "checks"):
            os.makedirs(os.path.join(root, sub), exist_ok=True)

    def export(self, ex, rel: str) -> str:
        ex.export_library(os.path.join(self.root, rel))
        self.sources.extend(kernel_sources(ex.mod))
        return rel

    def save(self) -> str:
        """The manifest, after compiling every kernel source with nvcc (:func:`compile_kernels`)."""
        if self.arch != "cpu":
            compile_kernels(self.sources, self.arch, os.path.join(self.root, KERNELS))
        path = os.path.join(self.root, MANIFEST)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.manifest, fh, indent=1)
        return path


def add_check(bundle: Bundle, name: str, ex, inputs: list, expected: list, exact, tol: float = 1e-5) -> None:
    """One GPU check: ``ex`` (compiled for the bundle's arch) on ``inputs`` must give ``expected``
    (integers and ``exact`` outputs bit for bit, NaN where NaN; others within ``tol``)."""
    exact = [exact] * len(expected) if isinstance(exact, bool) else list(exact)
    module = bundle.export(ex, f"checks/{name}.so")
    data = f"checks/{name}.npz"
    specs = save_arrays(os.path.join(bundle.root, data), list(inputs) + list(expected))
    bundle.manifest["checks"].append({"name": name, "module": module, "data": data, "n_inputs": len(inputs),
                                      "arrays": specs, "exact": exact, "tol": tol})


def _cpu_expected(w: Workload, model, x) -> list:
    """The workload's outputs from tvm_pool's CPU build (held exact to onnxruntime by the tests)."""
    import tvm  # pylint: disable=import-outside-toplevel

    import tvm_pool  # pylint: disable=import-outside-toplevel


    if w.road == "nhwc":
        return [reference(w, x)]
    out = _vm_runner(tvm_pool.compile(_tvm_pool_import(w, model), target="llvm"), tvm.cpu(), x)()
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]


def _tvm_pool_import(w: Workload, model):
    """tvm_pool's Relax module of a workload: its torch.export program or its ONNX model."""
    import tvm_pool  # pylint: disable=import-outside-toplevel

    if w.road == "torch":
        return tvm_pool.from_exported_program(model)
    return relax_module(w) if w.road == "nhwc" else tvm_pool.from_onnx(model)


# Peers whose module takes the GPU machine's process down (a segfault: nothing to catch), with
# what was seen; their modules are not exported and the report says why.
DEVICE_CRASHES = {
    ("kb_adaptive_avg", "tvm"): "stock TVM's module segfaulted the replay on an H200 (2026-11-27), at its first call",
}


def add_workload(bundle: Bundle, w: Workload) -> dict:
    """Exports every peer's module of ``w`` (a peer that fails to build gets its reason) and
    the manifest entry that the run checks and times them by."""
    x = make_input(w)
    model = None if w.road == "nhwc" else build_model(w)
    expected = _cpu_expected(w, model, x)
    entry = {"workload": w.name, "dtype": w.dtype, "layout": w.layout, "op": w.op, "channel_last": w.road == "nhwc",
             "table": "kernel_bound" if w.name.startswith(KERNEL_BOUND_PREFIX) else "launch_bound",
             "input": input_recipe(w, x), "modules": {}, "na": {},
             "min_bytes": int(x.nbytes + (sum(e.nbytes for e in expected) if model is None else out_bytes(model)))}
    entry["exact"] = w.op.endswith("MaxPool") or "max_pool" in w.op or w.dtype in ("int8", "uint8")
    for peer, build in builders(w, bundle.arch).items():
        if (w.name, peer) in DEVICE_CRASHES and bundle.arch != "cpu":
            entry["na"][peer] = DEVICE_CRASHES[w.name, peer]
            continue
        try:
            entry["modules"][peer] = bundle.export(build(), f"bench/{w.name}.{peer}.so")
        except runtime_errors("tvm" if peer == "tvm" else "tvm_pool") as err:
            entry["na"][peer] = short_reason(err)
    if w.dtype in ("int8", "uint8"):
        entry["na"]["torch"] = f"{w.dtype} pooling not supported by torch CUDA kernels"
    else:
        try:
            entry["torch"] = torch_spec(channel_first_twin(w) if w.road == "nhwc" else w)
            if w.fused:
                entry["torch"]["bias"] = fused_bias(w).ravel().tolist()
        except NotAvailable as err:
            entry["na"]["torch"] = str(err)
    sample = expected_sample(expected)
    entry["expected"] = f"bench/{w.name}.expected.npz"
    entry["expected_arrays"] = save_arrays(os.path.join(bundle.root, entry["expected"]), [s.pop("values") for s in sample])
    entry["expected_meta"] = sample
    bundle.manifest["bench"].append(entry)
    return entry


def add_knobs(bundle: Bundle, entry: dict, w: Workload, points=None) -> None:
    """tvm_pool's module of ``w`` once per point of the CUDA rule's design space
    (``schedules.cuda.KNOBS`` after the hand-written one; ``points``: only these indices), as peers ``tvm_pool[<i>]`` of
    ``entry``: the run times every point on the same data, as tuning would on the device."""
    import tvm_pool  # pylint: disable=import-outside-toplevel
    from tvm_pool.schedules import cuda as cuda_rule  # pylint: disable=import-outside-toplevel

    target = target_for(bundle.arch)
    mod = _tvm_pool_import(w, None if w.road == "nhwc" else build_model(w))
    original = cuda_rule.Pool.config
    entry["knobs"] = {}
    for i, (label, overrides) in enumerate(cuda_rule.KNOBS[1:], start=1):
        if points is not None and i not in points:
            continue
        cuda_rule.Pool.config = lambda self, t, o=overrides: dataclasses.replace(original(self, t), **o)
        try:
            ex = tvm_pool.compile(mod, target=target, shipped_logs=False)
        finally:
            cuda_rule.Pool.config = original
        entry["modules"][f"tvm_pool[{i}]"] = bundle.export(ex, f"bench/{w.name}.knob{i}.so")
        entry["knobs"][f"tvm_pool[{i}]"] = label


def export(root: str, arch: str, quick: bool, only=None) -> str:
    """The GPU benchmark's bundle for ``arch`` in ``root``: every workload ``only`` selects (as
    ``bench/cuda.py``'s ``select``). Returns the manifest's path."""

    bundle = Bundle(root, arch)
    for w in every_workload(quick, only):
        entry = add_workload(bundle, w)
        print(f"{w.name}: {sorted(entry['modules'])}" + (f", n/a {entry['na']}" if entry["na"] else ""), flush=True)
    return bundle.save()
