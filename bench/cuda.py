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

The channel-last workloads (``workloads.channel_last_workloads``, ``--only nhwc``) are timed on
the GPU too: their Relax modules (TVM's own NHWC/NDHWC pools) through tvm_pool and stock TVM,
PyTorch on a channels_last tensor, and tvm_pool's channel-first twin (the same pool on the same
data in NCHW/NCDHW); every result is checked against the workload's NumPy reference before it
is timed (``channel_last.check``), and their rows and geometric means are reported apart.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import sys
import time

from . import channel_last
from .peers import TVM_ERRORS, NotAvailable, runtime_errors, torch_call
from .summary import fmt, geomean, short_reason
from .timing import copy_size, sample_times
from .workloads import (
    CHANNEL_LAST_GROUPS, KERNEL_BOUND_GROUPS, KERNEL_BOUND_PREFIX, Workload, build_model, channel_first_twin, channel_last_workloads,
    kernel_bound_workloads, make_input, out_bytes, reference, relax_module, to_channel_first, to_channel_last,
    workloads,
)

# torch_graph: PyTorch's call captured once in a CUDA graph and replayed, so that its Python
# launch cost is gone (cuda_replay.graph_replay)
PEERS = ("tvm_pool", "tvm", "torch", "torch_graph")
CHANNEL_FIRST = channel_last.CHANNEL_FIRST  # tvm_pool on a channel-last workload's channel-first twin


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


def target_for(arch: str):
    """The GPU target of ``arch`` ("sm_90"), or with "cpu" this host's (a bundle that the tests
    run here, on the CPU device)."""
    from tvm_pool.targets import host_target  # pylint: disable=import-outside-toplevel

    return host_target() if arch == "cpu" else gpu_target(arch)


def _vm_runner(ex, dev, x):
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    vm = relax.VirtualMachine(ex, dev)
    arg = tvm.runtime.tensor(x, dev)
    fn = vm["main"]
    return lambda: fn(arg)


def builders(w: Workload, arch: str) -> dict:
    """Peer -> a function returning its compiled executable for the GPU."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm.relax.frontend.onnx import from_onnx  # pylint: disable=import-outside-toplevel

    import tvm_pool  # pylint: disable=import-outside-toplevel

    target = target_for(arch)
    if w.road == "nhwc":
        stock = _stock_tflite(w) if w.tflite_padding is not None else None
        return {"tvm_pool": lambda: tvm_pool.compile(relax_module(w), target=target),
                "tvm": lambda: tvm.compile(stock if stock is not None else relax_module(w), target=target),
                CHANNEL_FIRST: lambda: tvm_pool.compile(relax_module(channel_first_twin(w)), target=target)}
    model = build_model(w)
    if w.road == "torch":
        from tvm.relax.frontend.torch import from_exported_program  # pylint: disable=import-outside-toplevel

        return {"tvm_pool": lambda: tvm_pool.compile(tvm_pool.from_exported_program(model), target=target),
                "tvm": lambda: tvm.compile(from_exported_program(model), target=target)}
    return {"tvm_pool": lambda: tvm_pool.compile(tvm_pool.from_onnx(model), target=target),
            "tvm": lambda: tvm.compile(from_onnx(model), target=target)}


def peer_tvm_pool(w: Workload, model, x, dev, arch):  # pylint: disable=unused-argument
    """tvm_pool with its CUDA schedule (its ONNX or torch.export importer); ``(call, sync)``."""
    return _vm_runner(builders(w, arch)["tvm_pool"](), dev, x), dev.sync


def peer_tvm(w: Workload, model, x, dev, arch):  # pylint: disable=unused-argument
    """Stock TVM 0.27: its ONNX or torch.export importer and its CUDA pipeline (dlight's
    default GPU rules)."""
    return _vm_runner(builders(w, arch)["tvm"](), dev, x), dev.sync


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
    from .cuda_replay import to_torch  # pylint: disable=import-outside-toplevel

    return torch_call(w, to_torch(x, "cuda")), torch.cuda.synchronize


def peer_torch_graph(w: Workload, model, x, dev, arch):
    """PyTorch's call captured in a CUDA graph and replayed (no Python launch cost)."""
    from .cuda_replay import graph_replay  # pylint: disable=import-outside-toplevel

    call, sync = peer_torch(w, model, x, dev, arch)
    return graph_replay(call)[0], sync


# Each peer's set-up, by name: (workload, model, x, dev, arch) -> (call, sync). The errors its
# runtime raises when it refuses or fails a workload (peers.runtime_errors) become its "n/a" reason.
STARTERS = {"tvm_pool": peer_tvm_pool, "tvm": peer_tvm, "torch": peer_torch, "torch_graph": peer_torch_graph}


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
    for peer in PEERS[1:]:
        if ours and peer in row["ms"]:
            row[f"speedup_vs_{peer}"] = row["ms"][peer] / ours
    if ours and others:
        row["speedup"] = min(others) / ours
    if ours and row["ms"].get(CHANNEL_FIRST):
        row["vs_channel_first"] = ours / row["ms"][CHANNEL_FIRST]
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
    """Every workload (or those named in ``only``; "nhwc" / "channel_last": every channel-last
    one) on CUDA device 0; NoDevice where there is none."""
    from .cuda_replay import clocks  # pylint: disable=import-outside-toplevel

    dev, arch = device_or_reason()
    info = dict(gpu_info(dev, arch), clocks_start=clocks())
    rows = [time_workload(w, dev, arch, repeat) for w in select(workloads(quick), only)]
    result = with_geomeans({"device": f"CUDA {arch}", "gpu": info, "rows": rows})
    cl_rows = [time_channel_last(w, dev, arch, repeat) for w in select(channel_last_workloads(quick), only)]
    if cl_rows:
        result["channel_last"] = with_geomeans({"rows": cl_rows}, CHANNEL_LAST_MEANS)
    kb_rows = [(time_channel_last if w.road == "nhwc" else time_workload)(w, dev, arch, repeat)
               for w in select(kernel_bound_workloads(quick), only)]
    if kb_rows:
        result["kernel_bound"] = with_geomeans({"rows": kb_rows}, KERNEL_BOUND_MEANS)
    info["clocks_end"] = clocks()
    return result


def select(ws: list, only) -> list:
    """The workloads ``only`` names (every one when it is empty); a channel-last group name
    (``workloads.CHANNEL_LAST_GROUPS``) names every channel-last workload, a kernel-bound one
    (``workloads.KERNEL_BOUND_GROUPS``) every kernel-bound one."""
    cl_group = bool(only) and bool(set(only) & set(CHANNEL_LAST_GROUPS))
    kb_group = bool(only) and bool(set(only) & set(KERNEL_BOUND_GROUPS))
    return [w for w in ws if not only or w.name in only or (cl_group and w.road == "nhwc")
            or (kb_group and w.name.startswith(KERNEL_BOUND_PREFIX))]


def every_workload(quick: bool, only=None) -> list:
    """The launch-bound table's workloads, the channel-last ones and the kernel-bound ones
    (:func:`workloads.kernel_bound_workloads`) that ``only`` selects."""
    return (select(workloads(quick), only) + select(channel_last_workloads(quick), only)
            + select(kernel_bound_workloads(quick), only))


MEANS = ("speedup_vs_torch", "speedup")
CHANNEL_LAST_MEANS = MEANS + ("vs_channel_first",)  # tvm_pool's time over its channel-first twin's
# The kernel-bound table's means: against each peer (stock TVM, PyTorch eager, PyTorch in a CUDA
# graph), the best of them, and the share of the copy limit.
KERNEL_BOUND_MEANS = ("speedup_vs_tvm", "speedup_vs_torch", "speedup_vs_torch_graph", "speedup", "pct_copy")


def with_geomeans(result: dict, keys=MEANS) -> dict:
    """The geometric means of ``keys`` (tvm_pool's speedups over PyTorch and over the best peer)
    across the rows that have them."""
    for key in keys:
        values = [r[key] for r in result["rows"] if key in r]
        result[f"geomean_{key}"] = geomean(values)
        result[f"n_{key}"] = len(values)
    return result


# --------------------------------------------------------------------------------------------
# Channel-last workloads: (call, sync, output) per peer, each output checked before timing
# --------------------------------------------------------------------------------------------


def _compiled(mod, build, dev, x):
    ex = build(mod)
    call = _vm_runner(ex, dev, x)
    return call, dev.sync, lambda: call().numpy()


def cl_tvm_pool(w: Workload, x, dev, arch):
    """tvm_pool.compile of the workload's Relax module for the GPU."""
    import tvm_pool  # pylint: disable=import-outside-toplevel

    return _compiled(relax_module(w), lambda m: tvm_pool.compile(m, target=gpu_target(arch)), dev, x)


def cl_channel_first(w: Workload, x, dev, arch):
    """tvm_pool on the channel-first twin (its input transposed once, its output back for the
    check, both outside the timed call)."""
    call, sync, output = cl_tvm_pool(channel_first_twin(w), to_channel_first(x), dev, arch)
    return call, sync, lambda: to_channel_last(output())


def cl_tvm(w: Workload, x, dev, arch):
    """Stock TVM 0.27: tvm.compile of the same Relax module (its own legalization, dlight); a
    TFLite workload through its own from_tflite (as the CPU benchmark's)."""
    import tvm  # pylint: disable=import-outside-toplevel

    mod = relax_module(w) if w.tflite_padding is None else _stock_tflite(w)
    return _compiled(mod, lambda m: tvm.compile(m, target=gpu_target(arch)), dev, x)


def _stock_tflite(w: Workload):
    try:
        importlib.import_module("tflite")
    except ImportError as err:
        raise NotAvailable(f"not installed ({short_reason(err)})") from err
    from tvm.relax.frontend.tflite import from_tflite  # pylint: disable=import-outside-toplevel

    from tvm_pool.tflite.models import load_model  # pylint: disable=import-outside-toplevel

    return from_tflite(load_model(channel_last.tflite_model(w)))


def cl_torch(w: Workload, x, dev, arch):  # pylint: disable=unused-argument
    """PyTorch on the GPU, on ``x`` as a channels_last tensor (an NCHW view of NHWC memory)."""
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError as err:
        raise NotAvailable(f"not installed ({short_reason(err)})") from err
    if not torch.cuda.is_available():
        raise NotAvailable("torch has no CUDA device (a CPU-only wheel?)")
    if x.dtype.kind in "iu":
        raise NotAvailable(f"{x.dtype} pooling not supported by torch CUDA kernels")
    rank = x.ndim - 2
    t = torch.from_numpy(x).cuda().permute(0, rank + 1, *range(1, rank + 1))
    call = torch_call(channel_first_twin(w), t)
    return call, torch.cuda.synchronize, lambda: call().permute(0, *range(2, rank + 2), 1).cpu().numpy()


CL_STARTERS = {"tvm_pool": cl_tvm_pool, "tvm": cl_tvm, "torch": cl_torch, CHANNEL_FIRST: cl_channel_first}


def time_channel_last(w: Workload, dev, arch: str, repeat: int) -> dict:
    """One channel-last workload's row: the copy limit, every peer whose result matches the
    NumPy reference (``channel_last.check``), and tvm_pool's channel-first twin; a peer that
    cannot run it, or differs, gets its reason in ``row["na"]``."""
    x = make_input(w)
    expected = reference(w, x)
    row = {"workload": w.name, "dtype": w.dtype, "layout": w.layout, "ms": {}, "na": {}}
    row["min_bytes"] = int(x.nbytes + expected.nbytes)
    row["copy_ms"] = time_ms(copy_runner(dev, x.nbytes, expected.nbytes), dev.sync, repeat)
    for peer, start in CL_STARTERS.items():
        errors = runtime_errors("tvm_pool" if peer == CHANNEL_FIRST else peer)
        try:
            call, sync, output = start(w, x, dev, arch)
            channel_last.check(output(), expected, w)
            row["ms"][peer] = time_ms(call, sync, repeat)
        except NotAvailable as err:
            row["na"][peer] = str(err)
        except errors as err:
            row["na"][peer] = short_reason(err)
    return summarize(row)


def to_markdown(result: dict) -> str:
    """The heading (the device: name, arch, driver), one row per workload (every peer's median
    or "n/a (reason)", bandwidth, % of copy, speedups) and the geometric-mean summary; then the
    channel-last workloads' table (with tvm_pool's channel-first twin) and summary, if any ran."""
    gpu = result["gpu"]
    device = f"{result['device']} ({gpu['name']}, CUDA driver {gpu['driver']}, TVM built with CUDA {gpu['tvm_cuda']})"
    lines = [
        f"GPU benchmark on {device}: {result.get('timing', 'median ms per call (synchronised)')}; GB/s = minimum "
        "bytes / tvm_pool's time; % of copy = a device-to-device copy of as many bytes, time over tvm_pool's time; "
        "torch_graph = PyTorch's call replayed from a CUDA graph", "", _clock_line(gpu), "",
    ]
    if "kernel_bound" in result:
        kb = result["kernel_bound"]
        lines += ["Kernel-bound workloads (each moves at least 50 MB per call, so the kernel decides the time; "
                  f"channel-last rows also give {CHANNEL_FIRST}, the same pool in NCHW/NCDHW):", "",
                  *_table(kb["rows"], PEERS + (CHANNEL_FIRST,), ("vs stock TVM", "speedup_vs_tvm")), "",
                  _kernel_bound_summary(kb), ""]
    lines += [
        "Launch-bound workloads (batch 1 and small planes: most take 5-10 us, the per-call floor of TVM's VM, "
        "so this table measures launches more than kernels):", "",
        *_table(result["rows"], PEERS),
        "", _summary(result),
    ]
    if "checks" in result:
        c = result["checks"]
        lines.insert(1, f"\nGPU checks (the gpu-marked tests' cases, tests/gpu_bundle.py): {c['passed']} of {c['total']} "
                        "passed" + (f"; failed: {', '.join(sorted(c['failed']))}" if c["failed"] else ""))
    if "channel_last" in result:
        cl = result["channel_last"]
        lines += ["", "Channel-last workloads (NHWC/NDHWC; every result checked against NumPy before timing; "
                  f"{CHANNEL_FIRST} = tvm_pool on the same pool in NCHW/NCDHW):", "",
                  *_table(cl["rows"], PEERS + (CHANNEL_FIRST,), ("vs channel-first", "vs_channel_first")),
                  "", _summary(cl) + f"; tvm_pool channel-last over channel-first: "
                  f"**{fmt(cl.get('geomean_vs_channel_first'), 'x')}** ({cl.get('n_vs_channel_first', 0)} workloads)"]
    return "\n".join(lines) + "\n"


def _table(rows: list, peers: tuple, extra: tuple | None = None) -> list:
    """A markdown table of ``rows``: each of ``peers``' median, then the figures of every row;
    ``extra``: (heading, row key) of one more ratio column."""
    head = ["workload", "dtype", *peers, "min MB", "tvm_pool GB/s", "% of copy", "vs torch", "vs best peer"]
    lines = ["| " + " | ".join(head + ([extra[0]] if extra else [])) + " |", "|" + "---|" * (len(head) + bool(extra))]
    for row in rows:
        cells = [f"{row['ms'][p]:.4f}" if p in row["ms"] else f"n/a ({row['na'][p][:40]})" if p in row["na"] else "-"
                 for p in peers]
        ours = row["ms"].get("tvm_pool")
        gbps = f"{row['min_bytes'] / (ours * 1e-3) / 1e9:.1f}" if ours else "n/a"
        lines.append(f"| {row['workload']} | {row['dtype']} | " + " | ".join(cells)
                     + f" | {row['min_bytes'] / 1e6:.2f} | {gbps} | {fmt(row.get('pct_copy'), '%', 0)}"
                     + f" | {fmt(row.get('speedup_vs_torch'), 'x')} | {fmt(row.get('speedup'), 'x')} |"
                     + (f" {fmt(row.get(extra[1]), 'x')} |" if extra else ""))
    return lines


def _clock_line(gpu: dict) -> str:
    """The GPU's clocks as nvidia-smi read them before and after the timed workloads."""
    parts = []
    for key, when in (("clocks_start", "before timing"), ("clocks_end", "after")):
        c = gpu.get(key)
        if not c:
            continue
        if "error" in c:
            parts.append(f"{when}: {c['error']}")
            continue
        parts.append(f"{when}: SM {c.get('clocks.sm')} MHz (max {c.get('clocks.max.sm')}), memory "
                     f"{c.get('clocks.mem')} MHz (max {c.get('clocks.max.mem')}), {c.get('power.draw')} W of "
                     f"{c.get('power.limit')}, {c.get('temperature.gpu')} C")
    return "Clocks " + "; ".join(parts) if parts else "Clocks: not read"


def _kernel_bound_summary(kb: dict) -> str:
    rows = kb["rows"]
    below = [r["workload"] for r in rows if r.get("pct_copy") is not None and r["pct_copy"] < 80]
    slower = [r["workload"] for r in rows if r.get("speedup_vs_tvm") is not None and r["speedup_vs_tvm"] < 1.0]
    return (f"geomean of tvm_pool against stock TVM: **{fmt(kb.get('geomean_speedup_vs_tvm'), 'x')}**, PyTorch: "
            f"**{fmt(kb.get('geomean_speedup_vs_torch'), 'x')}**, PyTorch in a CUDA graph: "
            f"**{fmt(kb.get('geomean_speedup_vs_torch_graph'), 'x')}**, the best peer: "
            f"**{fmt(kb.get('geomean_speedup'), 'x')}**; % of copy: **{fmt(kb.get('geomean_pct_copy'), '%', 0)}** "
            f"on the geometric mean. Below 80% of copy: {', '.join(below) or 'none'}. "
            f"Slower than stock TVM: {', '.join(slower) or 'none'}.")


def _summary(result: dict) -> str:
    return (f"geomean speedup of tvm_pool vs PyTorch: **{fmt(result.get('geomean_speedup_vs_torch'), 'x')}** "
            f"({result.get('n_speedup_vs_torch', 0)} workloads); vs the best peer: "
            f"**{fmt(result.get('geomean_speedup'), 'x')}** ({result.get('n_speedup', 0)} workloads)")


def main(args) -> int:
    """``args``: the CPU benchmark's parsed arguments (``--quick``, ``--repeat``, ``--only``,
    ``--output-dir``)."""
    repeat = args.repeat or (20 if args.quick else 100)
    only = set(args.only.split(",")) if args.only else None
    if getattr(args, "replayed", None):
        with open(args.replayed, encoding="utf-8") as fh:
            return write_report(replayed(json.load(fh)), args.output_dir)
    try:
        result = run(args.quick, repeat, only)
    except NoDevice as err:
        print(f"tvm-pool bench --device cuda: {err}; nothing timed", file=sys.stderr)
        return 2
    return write_report(result, args.output_dir)


def write_report(result: dict, output_dir: str) -> int:
    os.makedirs(output_dir, exist_ok=True)
    md = to_markdown(result)
    for name, text in (("bench_cuda.json", json.dumps(result, indent=1)), ("bench_cuda.md", md)):
        with open(os.path.join(output_dir, name), "w", encoding="utf-8") as fh:
            fh.write(text)
    if "kernel_bound" in result:
        try:
            from .report import plot_kernel_bound  # pylint: disable=import-outside-toplevel

            kb = result["kernel_bound"]
            title = (f"{result['gpu']['name']}: kernel-bound pooling, % of a device-to-device copy of the same bytes\n"
                     f"tvm_pool, geometric means: {fmt(kb.get('geomean_speedup_vs_tvm'), 'x')} stock TVM, "
                     f"{fmt(kb.get('geomean_speedup_vs_torch_graph'), 'x')} PyTorch in a CUDA graph, "
                     f"{fmt(kb.get('geomean_pct_copy'), '%', 0)} of copy")
            plot_kernel_bound(result["kernel_bound"], title, os.path.join(output_dir, "bench_cuda.png"))
        except ImportError as err:  # matplotlib missing: the table is the report
            print(f"no chart ({err})", file=sys.stderr)
    print(md)
    return 0


def replayed(run: dict) -> dict:
    """The report's result from a bundle's run on a GPU (``bench/cuda_replay.py``): the same
    rows, summarised here, and the GPU checks' tally."""
    rows = [summarize(r) for r in run["rows"]]
    cl_rows = [summarize(r) for r in run.get("channel_last_rows", [])]
    kernel_bound = [r for r in rows + cl_rows if r.get("table") == "kernel_bound"]
    channel_last = [r for r in cl_rows if r.get("table") != "kernel_bound"]
    result = with_geomeans({"device": run["device"], "gpu": run["gpu"],
                            "rows": [r for r in rows if r.get("table") != "kernel_bound"]})
    result["timing"] = ("median ms per call over rounds of back-to-back calls, one synchronisation a round "
                        "(bench/cuda_replay.py; modules built here, run with TVM's runtime only)")
    if channel_last:
        result["channel_last"] = with_geomeans({"rows": channel_last}, CHANNEL_LAST_MEANS)
    if kernel_bound:
        result["kernel_bound"] = with_geomeans({"rows": kernel_bound}, KERNEL_BOUND_MEANS)
    checks = run.get("checks", [])
    result["checks"] = {"passed": sum(c["ok"] for c in checks), "total": len(checks),
                        "failed": {c["name"]: c["problems"] for c in checks if not c["ok"]}}
    return result

