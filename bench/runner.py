"""Pooling benchmark: tvm_pool against stock TVM, onnxruntime, PyTorch and OpenVINO.

Every workload is one ONNX model (onnx.helper) that every peer runs, in one process, with the
same thread count. Times are medians of repeated runs; each workload also gets a limit, a
same-size memory copy (bytes read + bytes written) timed in the same run.

The channel-last workloads (``--only nhwc``) are Relax pools in NHWC/NDHWC, timed for
tvm_pool, stock TVM, LiteRT, onnxruntime and PyTorch (channels_last) with tvm_pool's
channel-first twin alongside (bench/channel_last.py), and reported on their own.

``--layers`` (or ``--only layers``) times the pooling layers of torchvision's classification
models instead, each at batch 1 and 8, traced once into bench/layers.json (``--retrace`` traces
again), and reports them on their own (bench/layers.py, bench/layers_report.py).

``--models`` times whole models instead: torchvision's classic CNNs on tvm_pool (shipped logs),
onnxruntime, OpenVINO, PyTorch and stock TVM, outputs checked first (bench/models.py,
bench/models_report.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

from tvm_pool.targets import host_cpu

from . import channel_last, peers, report, timing
from .peers import PEERS, NotAvailable, torch_call
from .report import RESULTS_DIR, plot, to_markdown
from .summary import geomean
from .timing import ROUNDS, copy_runner
from .workloads import (
    CHANNEL_LAST_GROUPS, Workload, build_model, channel_last_workloads, fused_bias, make_input, out_bytes, reference,
    torch_workloads, workloads,
)

# The benchmark's public names, as before the split into modules: tune_shipped, the tests and
# users import them from here.
__all__ = ["PEERS", "RESULTS_DIR", "ROUNDS", "NotAvailable", "Workload", "build_model", "copy_runner", "fused_bias",
           "geomean", "main", "make_input", "out_bytes", "parse_args", "plot", "run_channel_last", "run_threads",
           "run_workload", "select", "summarize", "summarize_channel_last", "to_markdown", "torch_call",
           "torch_workloads", "workloads"]


# --------------------------------------------------------------------------------------------
# one thread count (runs in its own process: TVM reads TVM_NUM_THREADS at start)
# --------------------------------------------------------------------------------------------


def run_threads(threads: int, quick: bool, repeat: int, only=None) -> dict:
    """Time every workload (or those ``only`` selects, see :func:`select`) for every peer at
    ``threads`` threads.

    Peers take turns (``timing.take_turns``) and a peer's figure is the median over all its
    calls; the summary is the geometric mean of tvm_pool's speedups over the best peer. The
    channel-last workloads' rows and summary are ``["channel_last"]`` (present when any ran).
    """
    rows = [run_workload(w, threads, repeat) for w in select(workloads(quick) + torch_workloads(quick), only)]
    geo = geomean([r["speedup"] for r in rows if "speedup" in r])
    res = {"threads": threads, "quick": quick, "repeat": repeat, "rounds": ROUNDS, "rows": rows,
           "geomean_speedup": geo, "machine": _machine()}
    cl_rows = [run_channel_last(w, threads, repeat) for w in select(channel_last_workloads(quick), only)]
    if cl_rows:
        res["channel_last"] = channel_last.summary(cl_rows)
    return res


def run_layer_threads(threads: int, quick: bool, repeat: int, only=None, path: str | None = None) -> dict:
    """Time every case of the traced torchvision layers (``layers.layer_workloads``) for every
    peer at ``threads`` threads, each as :func:`run_workload` times a workload. Each row also has
    ``layer``, ``batch``, ``models``, ``road`` and, for a torch-road case, ``road_reason``."""
    from . import layers  # pylint: disable=import-outside-toplevel
    from .layers_report import summary  # pylint: disable=import-outside-toplevel

    data = layers.load_layers(path)
    ws, skipped = layers.layer_workloads(data["layers"], quick, only)
    by_name = {layer["name"]: layer for layer in data["layers"]}
    rows = []
    for w in ws:
        layer = by_name[w.name.rsplit("_b", 1)[0]]
        row = run_workload(w, threads, repeat)
        row.update(layer=layer["name"], fn=layer["fn"], params=layer["params"], batch=w.shape[0],
                   models=layer["models"], road=w.road)
        if w.road_reason:
            row["road_reason"] = w.road_reason
        rows.append(row)
    return {"threads": threads, "quick": quick, "repeat": repeat, "rounds": ROUNDS, "rows": rows,
            "skipped": skipped, "layers": len({r["layer"] for r in rows}),
            "traced": {k: data.get(k) for k in ("torch", "torchvision", "image_size", "image_sizes", "no_pooling")}
            | {"models": len(data.get("models", {})), "layers": len(data["layers"])},
            "summary": summary(rows), "machine": _machine()}


def select(ws: list[Workload], only) -> list[Workload]:
    """The workloads ``only`` names (every one when it is empty); "nhwc" / "channel_last"
    name every channel-last workload."""
    if not only:
        return ws
    every_cl = any(g in only for g in CHANNEL_LAST_GROUPS)
    return [w for w in ws if w.name in only or (every_cl and w.road == "nhwc")]


def known_names() -> set:
    """Every name ``--only`` takes: the workloads' and the channel-last group's."""
    every = workloads(False) + torch_workloads(False) + channel_last_workloads(False)
    return {w.name for w in every} | set(CHANNEL_LAST_GROUPS)


def run_workload(w: Workload, threads: int, repeat: int) -> dict:
    """One workload's row: every peer that starts is timed with the copy limit; a peer that
    cannot run it (or fails while timed) gets its reason in ``row["na"]``."""
    model = build_model(w)
    x = make_input(w)
    row = {"workload": w.name, "source": w.source, "op": w.op, "shape": w.shape, "dtype": w.dtype,
           "attrs": w.attrs, "indices": w.indices, "large": w.large, "ms": {}, "na": {}}
    runners, compile_s = start_peers(PEERS, lambda peer: peers.start(peer, model, x, threads, w), row["na"])
    runners["copy"] = copy_runner(x.nbytes, out_bytes(model), threads)
    samples = take_turns(runners, peers.runtime_errors, repeat, row["na"])
    summarize(row, samples, x.nbytes + out_bytes(model), compile_s)
    print(f"[{threads}t] {w.name}: " + ", ".join(f"{p} {t:.3f}ms" for p, t in row["ms"].items()), file=sys.stderr)
    return row


def start_peers(names, start, na: dict) -> tuple[dict, float | None]:
    """``({peer: run}, tvm_pool's compile seconds)`` of the peers ``start(peer)`` starts; one
    that raises NotAvailable gets its reason in ``na``."""
    runners, compile_s = {}, None
    for peer in names:
        try:
            runners[peer], cs = start(peer)
        except NotAvailable as err:
            na[peer] = str(err)
            continue
        if peer == "tvm_pool":
            compile_s = cs
    return runners, compile_s


def take_turns(runners: dict, runtime_errors, repeat: int, na: dict, first_calls: dict | None = None) -> dict:
    """:func:`timing.take_turns` over ``runners`` (``runtime_errors(name)``: what each raises
    when it fails; ``first_calls``: see there), then the runners freed (sessions and their
    thread pools) and the machine settled before the next workload."""
    errors = {name: runtime_errors(name) for name in runners}
    samples = timing.take_turns(runners, errors, repeat, na, first_calls)
    runners.clear()
    timing.settle()
    return samples


def run_channel_last(w: Workload, threads: int, repeat: int) -> dict:
    """One channel-last workload's row: every peer whose result matches the NumPy reference
    is timed, with tvm_pool's channel-first twin and the copy limit taking turns with them; a
    peer that cannot run it (or whose result differs) gets its reason in ``row["na"]``."""
    x = make_input(w)
    expected = reference(w, x)
    row = {"workload": w.name, "source": w.source, "op": w.op, "shape": w.shape, "layout": w.layout,
           "dtype": w.dtype, "attrs": w.attrs, "large": w.large, "ms": {}, "na": {}}
    # the twin's turn right after tvm_pool's: the ratio compares times taken seconds apart
    order = ("tvm_pool", channel_last.CHANNEL_FIRST) + tuple(p for p in channel_last.PEERS if p != "tvm_pool")
    runners, compile_s = start_peers(order,
                                     lambda peer: channel_last.start(peer, w, x, expected, threads), row["na"])
    runners["copy"] = copy_runner(x.nbytes, expected.nbytes, threads)
    first_calls: dict = {}
    samples = take_turns(runners, channel_last.runtime_errors, repeat, row["na"], first_calls)
    summarize_channel_last(row, samples, x.nbytes + expected.nbytes, compile_s, first_calls)
    times = {**row["ms"], **({"channel_first": row["channel_first_ms"]} if "channel_first_ms" in row else {})}
    print(f"[{threads}t] {w.name}: " + ", ".join(f"{p} {t:.3f}ms" for p, t in times.items()), file=sys.stderr)
    return row


def summarize_channel_last(row: dict, samples: dict, nbytes: int, compile_s: float | None,
                           first_calls: dict | None = None) -> dict:
    """:func:`summarize` over the channel-last peers, and where they ran: tvm_pool's
    channel-first twin's median (``channel_first_ms``), tvm_pool's time over it
    (``vs_channel_first``) and LiteRT's time over tvm_pool's (``speedup_litert``); from
    ``first_calls`` (seconds of each turn's first call, by runner), the median first call of
    every runner (``first_call_ms``) and tvm_pool's over its twin's
    (``first_call_vs_channel_first``)."""
    summarize(row, samples, nbytes, compile_s, peer_names=channel_last.PEERS)
    ours = row["ms"].get("tvm_pool")
    if channel_last.CHANNEL_FIRST in samples:
        row["channel_first_ms"] = timing.median_ms(samples[channel_last.CHANNEL_FIRST])
        if ours is not None:
            row["vs_channel_first"] = ours / row["channel_first_ms"]
    firsts = {p: timing.median_ms(s) for p, s in (first_calls or {}).items() if p in samples}
    if firsts:
        row["first_call_ms"] = firsts
    if "tvm_pool" in firsts and channel_last.CHANNEL_FIRST in firsts:
        row["first_call_vs_channel_first"] = firsts["tvm_pool"] / firsts[channel_last.CHANNEL_FIRST]
    if ours is not None and "litert" in row["ms"]:
        row["speedup_litert"] = row["ms"]["litert"] / ours
    return row


def summarize(row: dict, samples: dict, nbytes: int, compile_s: float | None, peer_names=PEERS) -> dict:
    """Fills ``row`` from the recorded ``samples`` (seconds per call, by peer and "copy"): each
    of ``peer_names``' median ms, the bytes one call moves, the copy limit's median, and where they
    exist the best other peer, tvm_pool's speedup over it and tvm_pool's time as a % of the
    copy's."""
    row["ms"] = {p: timing.median_ms(samples[p]) for p in peer_names if p in samples}
    row["bytes"] = nbytes
    row["copy_ms"] = timing.median_ms(samples["copy"])
    row["compile_s"] = compile_s
    others = {p: t for p, t in row["ms"].items() if p != "tvm_pool"}
    if others:
        best = min(others, key=others.get)
        row["best_peer"], row["best_peer_ms"] = best, others[best]
        if "tvm_pool" in row["ms"]:
            row["speedup"] = others[best] / row["ms"]["tvm_pool"]
    if "tvm_pool" in row["ms"]:
        row["pct_copy"] = 100.0 * row["copy_ms"] / row["ms"]["tvm_pool"]
    return row


def _machine() -> dict:
    """The CPU, its cores and the load when the run started: a loaded machine's times are not
    comparable with another's."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"cpu": host_cpu(), "cores": os.cpu_count(), "python": platform.python_version(), "load_1min": load}


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m tvm_pool.bench", description=__doc__)
    p.add_argument("--threads", default="2,1", help="comma-separated thread counts (default 2,1)")
    p.add_argument("--quick", action="store_true", help="a few workloads, fewer repeats")
    p.add_argument("--repeat", type=int, default=None, help="timed runs per peer (default 50; quick 15)")
    p.add_argument("--output-dir", default=RESULTS_DIR, help=f"where to write results (default {RESULTS_DIR})")
    p.add_argument("--only", default=None,
                   help="comma-separated workload names; nhwc (or channel_last): every channel-last workload; "
                        "layers: the same as --layers; with --layers: layer names (both batches) or cases "
                        "(<layer>_b1, <layer>_b8)")
    p.add_argument("--layers", action="store_true",
                   help="time the pooling layers of torchvision's classification models (bench/layers.json) at "
                        "batch 1 and 8 instead of the workloads; writes layers.{json,md,png}")
    p.add_argument("--models", action="store_true",
                   help="time whole models instead: torchvision's classic CNNs (bench/models.py) on tvm_pool with the "
                        "shipped logs, onnxruntime, OpenVINO, PyTorch and stock TVM; --only: model names; writes "
                        "models.{json,md,png}")
    p.add_argument("--retrace", action="store_true",
                   help="trace torchvision's classification models again and rewrite bench/layers.json (alone: "
                        "only that; with --layers: then time them)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu (default): the CPU peers; cuda: tvm_pool, stock TVM and PyTorch on a GPU (bench/cuda.py)")
    p.add_argument("--export", default=None, metavar="DIR",
                   help="with --device cuda: build the GPU benchmark as a bundle in DIR for --arch, with no GPU "
                        "(bench/cuda_bundle.py); run it with bench/cuda_replay.py on a machine with TVM's runtime")
    p.add_argument("--arch", default="sm_90", help="with --export: the CUDA arch to build for (default sm_90)")
    p.add_argument("--replayed", default=None, metavar="JSON",
                   help="with --device cuda: the report of a bundle's run (bench_cuda_replay.json) instead of timing")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    """Runs one child process per thread count (``--child``: TVM reads TVM_NUM_THREADS once,
    at start), collects their JSON lines and writes the report."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.device == "cuda" and (args.layers or args.retrace or args.models or LAYERS in str(args.only).split(",")):
        print("--layers / --retrace / --models: the CPU benchmark only (not with --device cuda)", file=sys.stderr)
        return 2
    if args.device == "cuda" and args.export:
        from . import cuda_bundle  # pylint: disable=import-outside-toplevel

        print(cuda_bundle.export(args.export, args.arch, args.quick, set(args.only.split(",")) if args.only else None))
        return 0
    if args.device == "cuda":
        from . import cuda  # pylint: disable=import-outside-toplevel

        return cuda.main(args)
    repeat = args.repeat or (15 if args.quick else 50)
    only = {name.strip() for name in args.only.split(",") if name.strip()} if args.only else None
    threads = [int(t) for t in str(args.threads).split(",") if t.strip()]
    if args.models:
        return _main_models(args, threads, only)
    with_layers = args.layers or bool(only and LAYERS in only)
    if only:
        only.discard(LAYERS)
    if args.retrace and not args.child:
        from . import layers  # pylint: disable=import-outside-toplevel

        layers.main([])
        if not with_layers:
            return 0
    unknown = sorted(only - _known(with_layers)) if only else []
    if unknown:
        where = "bench/layers.json" if with_layers else "bench/workloads.py; nhwc: the channel-last ones"
        print(f"--only: unknown workload(s) {', '.join(unknown)} (see {where})", file=sys.stderr)
        return 2
    if args.child:
        if with_layers:
            from . import layers  # pylint: disable=import-outside-toplevel

            res = run_layer_threads(threads[0], args.quick, repeat, only)
        else:
            res = run_threads(threads[0], args.quick, repeat, only)
        print(json.dumps(res))
        return 0
    flags = ["--repeat", str(repeat)] + (["--quick"] if args.quick else []) + (["--layers"] if with_layers else [])
    results = _run_children(threads, flags, only, "benchmark")
    if results is None:
        return 1
    if with_layers:
        from . import layers_report  # pylint: disable=import-outside-toplevel

        print(layers_report.write(results, args.output_dir))
    else:
        print(report.write(results, args.output_dir))
    return 0


def _run_children(threads: list, flags: list, only, what: str) -> list | None:
    """The JSON result of ``python -m tvm_pool.bench --child --threads T <flags> [--only ...]``
    for each thread count T, each in its own process (TVM reads TVM_NUM_THREADS once); None,
    with a line on stderr, when one fails."""
    results = []
    for t in threads:
        cmd = [sys.executable, "-m", "tvm_pool.bench", "--child", "--threads", str(t), *flags]
        if only:
            cmd += ["--only", ",".join(sorted(only))]
        proc = subprocess.run(cmd, env=timing.child_env(t), stdout=subprocess.PIPE, text=True, check=False)
        if proc.returncode != 0:
            print(f"{what} with {t} thread(s) failed (exit {proc.returncode})", file=sys.stderr)
            return None
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return results


def _main_models(args, threads: list, only) -> int:
    """``--models``: one child process per thread count (``--child --models``), then the report."""
    from . import models  # pylint: disable=import-outside-toplevel

    if unknown := models.unknown(only):
        allowed = ", ".join([*models.MODELS, *models.OTHER_DEPTHS])
        print(f"--only: unknown model(s) {', '.join(unknown)}; allowed: {allowed}", file=sys.stderr)
        return 2
    if args.child:
        print(json.dumps(models.run_threads(threads[0], only)))
        return 0
    results = _run_children(threads, ["--models"], only, "model benchmark")
    if results is None:
        return 1
    from . import models_report  # pylint: disable=import-outside-toplevel

    print(models_report.write(results, args.output_dir))
    return 0


# ``--only`` name of the layers benchmark (the same as ``--layers``).
LAYERS = "layers"


def _known(with_layers: bool) -> set:
    """The names ``--only`` takes: the layers' and their cases' with --layers, else the workloads'."""
    if not with_layers:
        return known_names()
    from . import layers  # pylint: disable=import-outside-toplevel

    return layers.known_names(layers.load_layers()["layers"])
