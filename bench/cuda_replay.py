"""Runs a GPU bundle (``bench/cuda_bundle.py``) on a machine with a CUDA GPU and TVM's runtime
only: no TVM compiler, no tvm_pool, no ONNX.

    TVM_USE_RUNTIME_LIB=1 python bench/cuda_replay.py BUNDLE_DIR OUT_DIR [--repeat N]

Needs numpy, ml_dtypes, TVM's runtime (``import tvm`` with ``TVM_USE_RUNTIME_LIB=1``) and, for
the PyTorch peer, torch with CUDA. It writes ``OUT_DIR/bench_cuda_replay.json``:

- ``checks``: each check's verdict (every output against the expected one: integers and exact
  outputs bit for bit with NaN where NaN, others within the check's tolerance);
- ``rows``: each benchmark workload as ``bench/cuda.py`` records it (``ms`` per peer, ``na``
  with the reason a peer did not run or was wrong, ``min_bytes``, ``copy_ms``), every peer's
  first output checked against the expected sample and sum before it is timed (tvm_pool's
  every output), and ``ms_sync`` beside ``ms``.

Times: ``ms`` is the median over ``--repeat`` rounds of ``--number`` back-to-back calls and one
synchronisation, per call (what a stream of such layers costs); ``ms_sync`` the median of
single calls each followed by a synchronisation (launch latency included). The copy limit is a
device-to-device copy of as many bytes, timed the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

import numpy as np


# What loading or running a module, or PyTorch, raises on the device: TVM's errors (TVMError and
# its kinds are RuntimeErrors, a missing function an AttributeError), numpy's and torch's.
RUN_ERRORS = (RuntimeError, ValueError, TypeError, IndexError, KeyError, AttributeError, OSError)


def numpy_dtype(name: str):
    """NumPy's dtype of ``name`` (bfloat16 through ml_dtypes). Here, in the replay, which runs
    without tvm_pool; the benchmark's workloads use it too."""
    if name == "bfloat16":
        import ml_dtypes  # pylint: disable=import-outside-toplevel

        return ml_dtypes.bfloat16
    return np.dtype(name)


def load_arrays(path: str, specs: list) -> list:
    """The arrays ``cuda_bundle.save_arrays`` wrote (bfloat16 through ml_dtypes)."""
    data = np.load(path)
    return [data[f"a{i}"].view(numpy_dtype(spec["dtype"])).reshape(spec["shape"]) for i, spec in enumerate(specs)]


def make_input(recipe: dict) -> np.ndarray:
    """``workloads.make_input``'s array, regenerated and checked against its recorded sum."""
    rng = np.random.default_rng(recipe["seed"])
    if recipe["gen"] == "integers":
        info = np.iinfo(recipe["dtype"])
        x = rng.integers(info.min, info.max, size=recipe["shape"], dtype=recipe["dtype"])
    else:
        x = rng.standard_normal(recipe["shape"]).astype(numpy_dtype(recipe["dtype"]))
    total = float(x.astype(np.float64).sum())
    if not np.isclose(total, recipe["sum"], rtol=1e-9, atol=1e-6):
        raise SystemExit(f"input of shape {recipe['shape']} regenerated differently (sum {total} != {recipe['sum']})")
    return x


def flat_outputs(out) -> list:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [a for o in out for a in flat_outputs(o)]


def compare(got: np.ndarray, want: np.ndarray, exact: bool, tol: float) -> str | None:
    """None when ``got`` is ``want``; else what differs."""
    if got.shape != want.shape or str(got.dtype) != str(want.dtype):
        return f"got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    if exact or got.dtype.kind in "iub":
        bad = ~((g == w) | (np.isnan(g) & np.isnan(w)))
    else:
        bad = ~np.isclose(g, w, rtol=tol, atol=tol, equal_nan=True)
    if bad.any():
        diff = np.abs(g[bad] - w[bad])
        rel = diff / np.maximum(np.abs(w[bad]), np.finfo(np.float64).tiny)
        return (f"{int(bad.sum())} of {bad.size} values differ (first at flat {int(np.flatnonzero(bad)[0])}; "
                f"by up to {np.nanmax(diff):.3g}, relative {np.nanmax(rel):.3g})")
    return None


def run_checks(root: str, manifest: dict, tvm, dev) -> list:
    from tvm.runtime.vm import VirtualMachine  # pylint: disable=import-outside-toplevel

    results = []
    for c in manifest["checks"]:
        arrays = load_arrays(os.path.join(root, c["data"]), c["arrays"])
        inputs, expected = arrays[:c["n_inputs"]], arrays[c["n_inputs"]:]
        try:
            vm = VirtualMachine(tvm.runtime.load_module(os.path.join(root, c["module"])), dev)
            got = flat_outputs(vm["main"](*[tvm.runtime.tensor(x, dev) for x in inputs]))
            problems = [compare(g, w, e, c["tol"]) for g, w, e in zip(got, expected, c["exact"])]
            if len(got) != len(expected):
                problems.append(f"{len(got)} outputs, expected {len(expected)}")
            bad = [p for p in problems if p]
            results.append({"name": c["name"], "ok": not bad, "problems": bad})
        except RUN_ERRORS as err:  # a failure on the device is this check's verdict
            results.append({"name": c["name"], "ok": False, "problems": [f"{type(err).__name__}: {str(err)[-300:]}"]})
        print(("ok   " if results[-1]["ok"] else "FAIL ") + c["name"], *results[-1]["problems"], flush=True)
    return results


def time_calls(call, sync, repeat: int, number: int) -> tuple[float, float]:
    """(median ms per call over ``repeat`` rounds of ``number`` calls and one sync, median ms of
    one call with its sync)."""
    for _ in range(3):
        call()
    sync()
    rounds, singles = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            call()
        sync()
        rounds.append((time.perf_counter() - t0) / number)
        t0 = time.perf_counter()
        call()
        sync()
        singles.append(time.perf_counter() - t0)
    return statistics.median(rounds) * 1e3, statistics.median(singles) * 1e3


def check_sample(got: list, want: list, entry: dict, outputs: int) -> str | None:
    """``got``'s first ``outputs`` outputs against the expected samples ``want`` and sums."""
    for i, (g, w, meta) in enumerate(zip(got[:outputs], want, entry["expected_meta"])):
        if list(g.shape) != meta["shape"] or str(g.dtype) != meta["dtype"]:
            return f"output {i}: got {g.dtype}{list(g.shape)}, expected {meta['dtype']}{meta['shape']}"
        tol = 1e-3 if g.dtype == np.float16 else 1e-5
        problem = compare(np.ascontiguousarray(g).reshape(-1)[::meta["step"]], w, entry["exact"] or i > 0, tol)
        total = float(np.nansum(g.astype(np.float64)))
        if problem is None and not np.isclose(total, meta["sum"], rtol=1e-4, atol=1e-3):
            problem = f"sum {total:.6g} != {meta['sum']:.6g}"
        if problem:
            return f"wrong result, output {i}: {problem}"
    return None


def tvm_runner(tvm, dev, path: str, x: np.ndarray):
    from tvm.runtime.vm import VirtualMachine  # pylint: disable=import-outside-toplevel

    vm = VirtualMachine(tvm.runtime.load_module(path), dev)
    arg = tvm.runtime.tensor(x, dev)
    fn = vm["main"]
    return lambda: fn(arg), lambda: flat_outputs(fn(arg))


def graph_replay(call):
    """``call`` (PyTorch work on the current CUDA device) captured once in a CUDA graph: (the
    graph's replay, the tensors its replays write). Warmed up on a side stream first, as
    capture requires; a replay launches every kernel of ``call`` with no Python in between."""
    import torch  # pylint: disable=import-outside-toplevel

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = call()

    def replay(_keep=(graph, call)):  # the captured inputs live as long as the replay
        graph.replay()

    return replay, static


def torch_runner(spec: dict, x: np.ndarray, channel_last: bool, device: str, graph: bool = False):
    """(one call, the call's outputs as NumPy arrays) of PyTorch's pool on ``x``; ``graph``: the
    call replayed from a CUDA graph (:func:`graph_replay`)."""
    import torch  # pylint: disable=import-outside-toplevel
    import torch.nn.functional as F  # pylint: disable=import-outside-toplevel

    t = to_torch(x, device)
    rank = x.ndim - 2
    if channel_last:  # an NCHW view of the NHWC memory: torch's channels_last
        t = t.permute(0, rank + 1, *range(1, rank + 1))
    fn, args, kw = getattr(F, spec["fn"]), spec["args"], spec["kwargs"]
    if spec["fused"]:
        bias = torch.tensor(spec["bias"], device=device, dtype=t.dtype).reshape([-1] + [1] * rank)
        call = lambda: fn(torch.relu(t), *args, **kw) + bias  # noqa: E731
    else:
        call = lambda: fn(t, *args, **kw)  # noqa: E731

    def numpy(out):
        out = list(out) if isinstance(out, tuple) else [out]
        if channel_last:
            out = [o.permute(0, *range(2, rank + 2), 1) for o in out]
        return [_to_numpy(o.contiguous().cpu()) for o in out]

    if graph:
        replay, static = graph_replay(call)
        return replay, lambda: (replay(), numpy(static))[1]
    return call, lambda: numpy(call())


def to_torch(x: np.ndarray, device: str):
    """``x`` as a torch tensor on ``device`` (bfloat16 through its bits: torch reads no
    ml_dtypes array)."""
    import torch  # pylint: disable=import-outside-toplevel

    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.view(np.int16)).to(device).view(torch.bfloat16)
    return torch.from_numpy(x).to(device)


def _to_numpy(t) -> np.ndarray:
    import torch  # pylint: disable=import-outside-toplevel

    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(numpy_dtype("bfloat16"))
    return t.numpy()


def warm_up(tvm, dev, seconds: float = 1.0) -> None:
    """Copies on the device for ``seconds`` before anything is timed: an idle GPU clocks down
    (an H100 read 345 MHz before the run) and the first workloads would pay for the ramp."""
    src = tvm.runtime.tensor(np.ones(64 << 20, "uint8"), dev)
    dst = tvm.runtime.empty((64 << 20,), "uint8", dev)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            src.copyto(dst)
        dev.sync()


def bench_row(entry: dict, root: str, tvm, dev, repeat: int, number: int) -> dict:
    import torch  # pylint: disable=import-outside-toplevel

    x = make_input(entry["input"])
    row = {"workload": entry["workload"], "dtype": entry["dtype"], "ms": {}, "ms_sync": {}, "na": dict(entry["na"]),
           "min_bytes": entry["min_bytes"], "table": entry.get("table", "launch_bound")}
    if "knobs" in entry:
        row["knobs"] = entry["knobs"]
    if entry["channel_last"]:
        row["layout"] = entry["layout"]
    n = max(entry["min_bytes"] // 2, 1)
    src, dst = tvm.runtime.tensor(np.ones(n, "uint8"), dev), tvm.runtime.empty((n,), "uint8", dev)
    row["copy_ms"], row["copy_ms_sync"] = time_calls(lambda: src.copyto(dst), dev.sync, repeat, number)
    runners = {}
    for peer, rel in entry["modules"].items():
        print(f"  {entry['workload']}: loading {peer}", file=sys.stderr, flush=True)
        xin = np.ascontiguousarray(np.moveaxis(x, -1, 1)) if peer.endswith("channel_first") else x
        call, outs = tvm_runner(tvm, dev, os.path.join(root, rel), xin)
        if peer.endswith("channel_first"):
            outs = (lambda o: lambda: [np.moveaxis(a, 1, -1) for a in o()])(outs)
        runners[peer] = (call, outs, dev.sync)
    if "torch" in entry:
        torch_device = "cuda" if int(dev.dlpack_device_type()) == 2 else "cpu"
        sync = torch.cuda.synchronize if torch_device == "cuda" else (lambda: None)
        call, outs = torch_runner(entry["torch"], x, entry["channel_last"], torch_device)
        runners["torch"] = (call, outs, sync)
        if torch_device == "cuda":
            try:
                call, outs = torch_runner(entry["torch"], x, entry["channel_last"], torch_device, graph=True)
                runners["torch_graph"] = (call, outs, sync)
            except RUN_ERRORS as err:  # a call that cannot be captured
                row["na"]["torch_graph"] = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:160]}"
    want = load_arrays(os.path.join(root, entry["expected"]), entry["expected_arrays"])
    for peer, (call, outs, sync) in runners.items():
        print(f"  {entry['workload']}: running {peer}", file=sys.stderr, flush=True)
        try:
            problem = check_sample(outs(), want, entry, 99 if peer == "tvm_pool" else 1)
            if problem:
                row["na"][peer] = problem + ", not timed"
                continue
            row["ms"][peer], row["ms_sync"][peer] = time_calls(call, sync, repeat, number)
        except RUN_ERRORS as err:  # a peer failing on the device is its n/a
            row["na"][peer] = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:160]}"
    print(row["workload"], {p: round(v, 4) for p, v in row["ms"].items()}, "copy", round(row["copy_ms"], 4),
          {p: r for p, r in row["na"].items()}, flush=True)
    return row


def load_cuda_runtime(tvm) -> None:
    """TVM's CUDA runtime (``libtvm_runtime_cuda.so`` beside ``libtvm_runtime.so``): a
    runtime-only ``import tvm`` does not load it, and without it a module built for CUDA does
    not load ("a loader of that name is not registered")."""
    import ctypes  # pylint: disable=import-outside-toplevel

    lib = os.path.join(os.path.dirname(tvm.__file__), "lib", "libtvm_runtime_cuda.so")
    if os.path.exists(lib):
        ctypes.CDLL(lib, ctypes.RTLD_GLOBAL)


KERNEL_STATS = {"bundled": 0, "compiled_here": 0}


def use_bundled_kernels(folder: str) -> None:
    """TVM's runtime compiles a loaded module's CUDA source through ``tvm_callback_cuda_compile``;
    this one returns the binary that the bundle's builder compiled with nvcc
    (``cuda_bundle.compile_kernels``), and only for a source it lacks compiles with nvcc here."""
    import hashlib  # pylint: disable=import-outside-toplevel

    import tvm_ffi  # pylint: disable=import-outside-toplevel

    @tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
    def _compile(code, *_):
        path = os.path.join(folder, hashlib.sha256(code.encode()).hexdigest() + ".fatbin")
        if os.path.exists(path):
            KERNEL_STATS["bundled"] += 1
            with open(path, "rb") as fh:
                return bytearray(fh.read())
        KERNEL_STATS["compiled_here"] += 1
        return nvcc_fatbin(code)


def nvcc_fatbin(code: str, arch: str | None = None) -> bytearray:
    """``code`` compiled by nvcc into a fatbin for ``arch`` (default: device 0's), with the
    flags of TVM 0.27's ``tvm.support.nvcc.compile_cuda``. That function needs TVM's compiler
    (it reads the current target through ``tvm.target``), which a runtime-only TVM lacks."""
    import subprocess  # pylint: disable=import-outside-toplevel
    import tempfile  # pylint: disable=import-outside-toplevel

    if arch is None:
        import tvm  # pylint: disable=import-outside-toplevel

        arch = "sm_" + "".join(str(tvm.cuda(0).compute_version).split(".")[:2])
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "tvm_kernels.cu"), os.path.join(tmp, "tvm_kernels.fatbin")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(code)
        cmd = ["nvcc", "--fatbin", "-O3", "-gencode", f"arch=compute_{arch[3:]},code={arch}", *NVCC_FLAGS, "-o", out, src]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"nvcc failed ({res.returncode}): {res.stderr.strip()[-400:]}")
        with open(out, "rb") as fh:
            return bytearray(fh.read())


# TVM 0.27's nvcc flags (tvm/support/nvcc.py, compile_cuda) after the architecture.
NVCC_FLAGS = (
    "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
    "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
    "--ptxas-options=-v,--register-usage-level=10,--warn-on-local-memory-usage",
)


def gpu_info(tvm, dev) -> dict:
    import ctypes  # pylint: disable=import-outside-toplevel

    major, minor = str(dev.compute_version).split(".")[:2]
    value = ctypes.c_int()
    ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(value))
    api = dev.api_version or 0
    return {"name": str(dev.device_name), "arch": f"sm_{major}{minor}",
            "driver": f"{value.value // 1000}.{value.value % 1000 // 10}",
            "tvm_cuda": f"{api // 1000}.{api % 1000 // 10}", "tvm_runtime_only": bool(tvm.base._RUNTIME_ONLY)}


CLOCK_FIELDS = ("clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem", "power.draw", "power.limit",
                "temperature.gpu", "driver_version")


def clocks() -> dict:
    """The GPU's clocks now (MHz), their maxima, power and temperature, as ``nvidia-smi`` reads
    them; ``{"error": why}`` where it cannot."""
    import subprocess  # pylint: disable=import-outside-toplevel

    try:
        res = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(CLOCK_FIELDS)}", "--format=csv,noheader,nounits",
                              "-i", "0"], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError) as err:
        return {"error": f"nvidia-smi: {type(err).__name__}: {str(err)[:120]}"}
    values = [v.strip() for v in res.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(CLOCK_FIELDS, values))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundle")
    p.add_argument("out")
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--skip-bench", action="store_true")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: a bundle built with --arch cpu, run on this CPU (the tests' check of this script)")
    args = p.parse_args(argv)
    import tvm  # pylint: disable=import-outside-toplevel

    if args.device == "cuda":
        try:
            load_cuda_runtime(tvm)
        except OSError as err:  # no driver (libcuda.so.1) or CUDA runtime on this machine
            print(f"no CUDA device: TVM's CUDA runtime does not load ({err})", file=sys.stderr)
            return 2
    dev = tvm.cuda(0) if args.device == "cuda" else tvm.cpu(0)
    if not dev.exist:
        print("no CUDA device", file=sys.stderr)
        return 2
    with open(os.path.join(args.bundle, "manifest.json"), encoding="utf-8") as fh:
        manifest = json.load(fh)
    info = gpu_info(tvm, dev) if args.device == "cuda" else {"name": "cpu", "arch": "cpu", "driver": "-", "tvm_cuda": "-"}
    result = {"device": f"CUDA {info['arch']}" if args.device == "cuda" else "cpu", "gpu": info,
              "bundle_arch": manifest["arch"]}
    os.makedirs(args.out, exist_ok=True)
    out_path = os.path.join(args.out, "bench_cuda_replay.json")
    if args.device == "cuda":
        use_bundled_kernels(os.path.join(args.bundle, manifest.get("kernels", "kernels")))
    result["checks"] = run_checks(args.bundle, manifest, tvm, dev)
    result["kernels"] = KERNEL_STATS
    result["rows"], result["channel_last_rows"] = [], []
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    if not args.skip_bench:
        warm_up(tvm, dev)
        if args.device == "cuda":
            result["gpu"]["clocks_start"] = clocks()
        for entry in manifest["bench"]:
            try:
                row = bench_row(entry, args.bundle, tvm, dev, args.repeat, args.number)
            except RUN_ERRORS:  # keep the other workloads' figures
                traceback.print_exc()
                continue
            result["channel_last_rows" if entry["channel_last"] else "rows"].append(row)
            with open(out_path, "w", encoding="utf-8") as fh:
                json.dump(result, fh, indent=1)
        if args.device == "cuda":
            result["gpu"]["clocks_end"] = clocks()
            with open(out_path, "w", encoding="utf-8") as fh:
                json.dump(result, fh, indent=1)
    failed = [c["name"] for c in result["checks"] if not c["ok"]]
    print(f"checks: {len(result['checks']) - len(failed)} of {len(result['checks'])} passed" +
          (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    # Before the first import of tvm: its runtime only. Set here, not in main(), so that calling
    # main() in a process (the tests) leaves the environment of later subprocesses alone.
    os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
    sys.exit(main())
