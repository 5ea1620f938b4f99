"""GPU benchmark (``tvm-pool bench --device cuda``): tvm_pool's CUDA schedule against stock TVM
0.27's dlight path and PyTorch (cuDNN), the same workloads as the CPU benchmark, on one CUDA
device, in one process.

Each time is the median of ``--repeat`` calls, each call synchronised with the device. Each row
also gives the bytes a call must move at least (input read once, output written once), the
bandwidth that makes, and tvm_pool's time as a percentage of the memory limit: a
device-to-device copy reading and writing as many bytes, timed the same way (100% = as fast as
the copy). The summary line gives the geometric mean of tvm_pool's speedup over PyTorch and
over the best peer; the heading names the GPU, its architecture and the CUDA driver. Where
there is no CUDA device it refuses in one line (exit status 2) and times nothing.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

from .peers import TVM_ERRORS, NotAvailable, runtime_errors, torch_call
from .summary import fmt, geomean, short_reason
from .timing import copy_size, sample_times
from .workloads import Workload, build_model, make_input, out_bytes, workloads

PEERS = ("tvm_pool", "tvm", "torch")


class NoDevice(RuntimeError):
    """No CUDA device to run on."""


def device_or_reason():
    """``(tvm device, arch)`` of CUDA device 0, or raise NoDevice saying why not."""
    import tvm  # pylint: disable=import-outside-toplevel

    try:
        dev = tvm.cuda(0)
        exists = bool(dev.exist)
    except TVM_ERRORS as err:
        raise NoDevice(f"TVM's CUDA runtime is unavailable ({short_reason(err)})") from err
    if not exists:
        raise NoDevice("no CUDA device found (tvm.cuda(0) does not exist)")
    return dev, arch_of(str(dev.compute_version))


def arch_of(compute_version: str) -> str:
    """"8.0" -> "sm_80", "9.0" -> "sm_90"."""
    major, minor = compute_version.split(".")[:2]
    return f"sm_{int(major)}{int(minor)}"


def gpu_info(dev, arch: str) -> dict:
    """What the report says about the device, since GPU timings mean little without it: its
    name, architecture, the CUDA driver's version and the CUDA version TVM was built with."""
    api = dev.api_version
    return {"name": str(dev.device_name), "arch": arch, "driver": driver_version(),
            "tvm_cuda": cuda_version(api) if api else "unknown"}


def driver_version() -> str:
    """The CUDA driver's version ("12.8"), asked of libcuda itself: TVM's CUDA device API leaves
    its driver_version empty. "unknown (why)" where libcuda cannot say."""
    import ctypes  # pylint: disable=import-outside-toplevel

    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError as err:
        return f"unknown ({short_reason(err)})"
    value = ctypes.c_int()
    status = libcuda.cuDriverGetVersion(ctypes.byref(value))
    return cuda_version(value.value) if status == 0 else f"unknown (cuDriverGetVersion returned {status})"


def cuda_version(number: int) -> str:
    """CUDA's version numbers as people write them: 12080 -> "12.8", 11040 -> "11.4"."""
    return f"{number // 1000}.{number % 1000 // 10}"


def gpu_target(arch: str):
    import tvm  # pylint: disable=import-outside-toplevel

    from tvm_pool.targets import host_target  # pylint: disable=import-outside-toplevel

    return tvm.target.Target({"kind": "cuda", "arch": arch}, host=host_target())


def _vm_runner(ex, dev, x):
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    vm = relax.VirtualMachine(ex, dev)
    arg = tvm.runtime.tensor(x, dev)
    fn = vm["main"]
    return lambda: fn(arg)


def peer_tvm_pool(w: Workload, model, x, dev, arch):  # pylint: disable=unused-argument
    """tvm_pool with its CUDA schedule; ``(call, sync)``."""
    import tvm_pool  # pylint: disable=import-outside-toplevel

    ex = tvm_pool.compile(tvm_pool.from_onnx(model), target=gpu_target(arch))
    return _vm_runner(ex, dev, x), dev.sync


def peer_tvm(w: Workload, model, x, dev, arch):  # pylint: disable=unused-argument
    """Stock TVM 0.27: its ONNX importer and its CUDA pipeline (dlight's default GPU rules)."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm.relax.frontend.onnx import from_onnx  # pylint: disable=import-outside-toplevel

    ex = tvm.compile(from_onnx(model), target=gpu_target(arch))
    return _vm_runner(ex, dev, x), dev.sync


def peer_torch(w: Workload, model, x, dev, arch):  # pylint: disable=unused-argument
    """PyTorch on the GPU (cuDNN pooling where it has one), synchronised by its own CUDA stream."""
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError as err:
        raise NotAvailable(f"not installed ({short_reason(err)})") from err
    if not torch.cuda.is_available():
        raise NotAvailable("torch has no CUDA device (a CPU-only wheel?)")
    if w.dtype in ("int8", "uint8"):
        raise NotAvailable(f"{w.dtype} pooling not supported by torch CUDA kernels")
    return torch_call(w, torch.from_numpy(x).cuda()), torch.cuda.synchronize


# Each peer's set-up, by name: (workload, model, x, dev, arch) -> (call, sync). The errors its
# runtime raises when it refuses or fails a workload (peers.runtime_errors) become its "n/a" reason.
STARTERS = {"tvm_pool": peer_tvm_pool, "tvm": peer_tvm, "torch": peer_torch}


def copy_runner(dev, nbytes_read: int, nbytes_written: int):
    """A device-to-device copy reading and writing as many bytes as the workload (TVM's
    runtime, on ``dev``): the memory-bandwidth limit, timed like the peers. Each call returns
    the destination."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tvm  # pylint: disable=import-outside-toplevel

    n = copy_size(nbytes_read, nbytes_written)
    src = tvm.runtime.tensor(np.ones(n, "uint8"), dev)
    dst = tvm.runtime.empty((n,), "uint8", dev)
    return lambda: src.copyto(dst)


def summarize(row: dict) -> dict:
    """Adds the row's derived figures: % of the copy limit, speedups over PyTorch and over the
    best peer (each where both times exist)."""
    ours = row["ms"].get("tvm_pool")
    others = [row["ms"][p] for p in PEERS[1:] if p in row["ms"]]
    if ours and row.get("copy_ms"):
        row["pct_copy"] = 100.0 * row["copy_ms"] / ours
    if ours and "torch" in row["ms"]:
        row["speedup_vs_torch"] = row["ms"]["torch"] / ours
    if ours and others:
        row["speedup"] = min(others) / ours
    return row


def time_ms(call, sync, repeat: int, warmup: int = 3, clock=time.perf_counter) -> float:
    """Median wall time of ``call`` in ms, each call followed by ``sync()`` inside its time
    (``clock``: a test's fake clock)."""
    return statistics.median(sample_times(call, repeat, warmup, sync=sync, clock=clock)) * 1e3


def time_workload(w: Workload, dev, arch: str, repeat: int) -> dict:
    """One workload's row: the copy limit and every peer's median; a peer that cannot run it
    gets its reason in ``row["na"]``."""
    model, x = build_model(w), make_input(w)
    row = {"workload": w.name, "dtype": w.dtype, "ms": {}, "na": {}}
    row["min_bytes"] = int(x.nbytes + out_bytes(model))
    row["copy_ms"] = time_ms(copy_runner(dev, x.nbytes, out_bytes(model)), dev.sync, repeat)
    for peer in PEERS:
        try:
            call, sync = STARTERS[peer](w, model, x, dev, arch)
            row["ms"][peer] = time_ms(call, sync, repeat)
        except NotAvailable as err:
            row["na"][peer] = str(err)
        except runtime_errors(peer) as err:
            row["na"][peer] = short_reason(err)
    return summarize(row)


def run(quick: bool, repeat: int, only=None) -> dict:
    """Every workload (or those named in ``only``) on CUDA device 0; NoDevice where there is none."""
    dev, arch = device_or_reason()
    rows = [time_workload(w, dev, arch, repeat) for w in workloads(quick) if not only or w.name in only]
    return with_geomeans({"device": f"CUDA {arch}", "gpu": gpu_info(dev, arch), "rows": rows})


def with_geomeans(result: dict) -> dict:
    """The geometric means of tvm_pool's speedups (over PyTorch, over the best peer) across the
    rows that have them."""
    for key in ("speedup_vs_torch", "speedup"):
        values = [r[key] for r in result["rows"] if key in r]
        result[f"geomean_{key}"] = geomean(values)
        result[f"n_{key}"] = len(values)
    return result


def to_markdown(result: dict) -> str:
    """The heading (the device: name, arch, driver), one row per workload (every peer's median
    or "n/a (reason)", bandwidth, % of copy, speedups) and the geometric-mean summary."""
    gpu = result["gpu"]
    device = f"{result['device']} ({gpu['name']}, CUDA driver {gpu['driver']}, TVM built with CUDA {gpu['tvm_cuda']})"
    lines = [
        f"GPU benchmark on {device}: median ms per call (synchronised); GB/s = minimum bytes / tvm_pool's time;"
        " % of copy = a device-to-device copy of as many bytes, time over tvm_pool's time",
        "",
        "| workload | dtype | " + " | ".join(PEERS) + " | min MB | tvm_pool GB/s | % of copy | vs torch | vs best peer |",
        "|---|---|" + "---|" * len(PEERS) + "---|---|---|---|---|",
    ]
    for row in result["rows"]:
        cells = [f"{row['ms'][p]:.4f}" if p in row["ms"] else f"n/a ({row['na'].get(p, '?')[:40]})" for p in PEERS]
        ours = row["ms"].get("tvm_pool")
        gbps = f"{row['min_bytes'] / (ours * 1e-3) / 1e9:.1f}" if ours else "n/a"
        lines.append(f"| {row['workload']} | {row['dtype']} | " + " | ".join(cells)
                     + f" | {row['min_bytes'] / 1e6:.2f} | {gbps} | {fmt(row.get('pct_copy'), '%', 0)}"
                     + f" | {fmt(row.get('speedup_vs_torch'), 'x')} | {fmt(row.get('speedup'), 'x')} |")
    lines += ["", f"geomean speedup of tvm_pool vs PyTorch: **{fmt(result.get('geomean_speedup_vs_torch'), 'x')}** "
              f"({result.get('n_speedup_vs_torch', 0)} workloads); vs the best peer: "
              f"**{fmt(result.get('geomean_speedup'), 'x')}** ({result.get('n_speedup', 0)} workloads)"]
    return "\n".join(lines) + "\n"


def main(args) -> int:
    """``args``: the CPU benchmark's parsed arguments (``--quick``, ``--repeat``, ``--only``,
    ``--output-dir``)."""
    repeat = args.repeat or (20 if args.quick else 100)
    only = set(args.only.split(",")) if args.only else None
    try:
        result = run(args.quick, repeat, only)
    except NoDevice as err:
        print(f"tvm-pool bench --device cuda: {err}; nothing timed", file=sys.stderr)
        return 2
    os.makedirs(args.output_dir, exist_ok=True)
    md = to_markdown(result)
    for name, text in (("bench_cuda.json", json.dumps(result, indent=1)), ("bench_cuda.md", md)):
        with open(os.path.join(args.output_dir, name), "w", encoding="utf-8") as fh:
            fh.write(text)
    print(md)
    return 0

