"""GPU benchmark (``tvm-pool bench --device cuda``): tvm_pool's CUDA schedule against stock TVM
0.27's dlight path and PyTorch (cuDNN), the same workloads as the CPU benchmark, on one CUDA
device, in one process.

Each time is the median of ``--repeat`` calls, each call synchronised with the device. Each row
also gives the bytes a call must move at least (input read once, output written once), the
bandwidth that makes, and tvm_pool's time as a percentage of the memory limit: a
device-to-device copy reading and writing as many bytes, timed the same way (100% = as fast as
the copy). The summary line gives the geometric mean of tvm_pool's speedup over PyTorch and
over the best peer. Where there is no CUDA device it refuses in one line (exit status 2) and
times nothing.
"""

from __future__ import annotations

import json
import os
import statistics
import time

from . import runner

PEERS = ("tvm_pool", "tvm", "torch")


class NoDevice(RuntimeError):
    """No CUDA device to run on."""


def device_or_reason():
    """``(tvm device, arch)`` of CUDA device 0, or raise NoDevice saying why not."""
    import tvm  # pylint: disable=import-outside-toplevel

    try:
        dev = tvm.cuda(0)
        exists = bool(dev.exist)
    except Exception as err:  # pylint: disable=broad-except
        raise NoDevice(f"TVM's CUDA runtime is unavailable ({runner._short(err)})") from err  # pylint: disable=protected-access
    if not exists:
        raise NoDevice("no CUDA device found (tvm.cuda(0) does not exist)")
    return dev, arch_of(str(dev.compute_version))


def arch_of(compute_version: str) -> str:
    """"8.0" -> "sm_80", "9.0" -> "sm_90"."""
    major, minor = compute_version.split(".")[:2]
    return f"sm_{int(major)}{int(minor)}"


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


def peer_tvm_pool(model, x, dev, arch):
    import tvm_pool  # pylint: disable=import-outside-toplevel

    ex = tvm_pool.compile(tvm_pool.from_onnx(model), target=gpu_target(arch))
    return _vm_runner(ex, dev, x)


def peer_tvm(model, x, dev, arch):
    """Stock TVM 0.27: its ONNX importer and its CUDA pipeline (dlight's default GPU rules)."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm.relax.frontend.onnx import from_onnx  # pylint: disable=import-outside-toplevel

    ex = tvm.compile(from_onnx(model), target=gpu_target(arch))
    return _vm_runner(ex, dev, x)


def peer_torch(w: runner.Workload, x):
    """PyTorch on the GPU (cuDNN pooling where it has one)."""
    import torch  # pylint: disable=import-outside-toplevel

    if not torch.cuda.is_available():
        raise runner.NotAvailable("torch has no CUDA device (a CPU-only wheel?)")
    if w.dtype in ("int8", "uint8"):
        raise runner.NotAvailable(f"{w.dtype} pooling not supported by torch CUDA kernels")
    return runner.torch_call(w, torch.from_numpy(x).cuda())


def copy_runner(dev, nbytes_read: int, nbytes_written: int):
    """A device-to-device copy reading and writing as many bytes as the workload (TVM's
    runtime, on ``dev``): the memory-bandwidth limit, timed like the peers."""
    import tvm  # pylint: disable=import-outside-toplevel

    n = max((nbytes_read + nbytes_written) // 2, 64)
    src = tvm.runtime.empty((n,), "uint8", dev)
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


def time_ms(call, sync, repeat: int, warmup: int = 3) -> float:
    """Median wall time of ``call`` in ms, each call followed by ``sync()``."""
    for _ in range(warmup):
        call()
    sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def run(quick: bool, repeat: int, only=None) -> dict:
    dev, arch = device_or_reason()
    import torch  # pylint: disable=import-outside-toplevel

    rows = []
    for w in runner.workloads(quick):
        if only and w.name not in only:
            continue
        model, x = runner.build_model(w), runner.make_input(w)
        row = {"workload": w.name, "dtype": w.dtype, "ms": {}, "na": {}}
        row["min_bytes"] = int(x.nbytes + runner.out_bytes(model))
        row["copy_ms"] = time_ms(copy_runner(dev, x.nbytes, runner.out_bytes(model)), dev.sync, repeat)
        for peer in PEERS:
            try:
                if peer == "torch":
                    call, sync = peer_torch(w, x), torch.cuda.synchronize
                else:
                    call = (peer_tvm_pool if peer == "tvm_pool" else peer_tvm)(model, x, dev, arch)
                    sync = dev.sync
                row["ms"][peer] = time_ms(call, sync, repeat)
            except Exception as err:  # pylint: disable=broad-except
                row["na"][peer] = runner._short(err)  # pylint: disable=protected-access
        rows.append(summarize(row))
    return with_geomeans({"device": f"CUDA {arch}", "rows": rows})


def with_geomeans(result: dict) -> dict:
    """The geometric means of tvm_pool's speedups (over PyTorch, over the best peer) across the
    rows that have them."""
    for key in ("speedup_vs_torch", "speedup"):
        values = [r[key] for r in result["rows"] if key in r]
        result[f"geomean_{key}"] = runner.geomean(values)
        result[f"n_{key}"] = len(values)
    return result


def to_markdown(result: dict) -> str:
    fmt = runner._fmt  # pylint: disable=protected-access
    lines = [
        f"GPU benchmark on {result['device']}: median ms per call (synchronised); GB/s = minimum bytes / tvm_pool's time;"
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
    import sys  # pylint: disable=import-outside-toplevel

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

