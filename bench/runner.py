"""Pooling benchmark: tvm_pool against stock TVM, onnxruntime, PyTorch and OpenVINO.

Every workload is one ONNX model (onnx.helper) that every peer runs, in one process, with the
same thread count. Times are medians of repeated runs; each workload also gets a limit, a
same-size memory copy (bytes read + bytes written) timed in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from tvm_pool.thread_pool import BIND_THREADS_VARIABLE

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
PEERS = ("tvm_pool", "tvm", "onnxruntime", "torch", "openvino")


@dataclass
class Workload:
    name: str
    source: str
    op: str  # MaxPool / AveragePool / GlobalAveragePool / GlobalMaxPool / LpPool
    shape: list
    attrs: dict = field(default_factory=dict)
    dtype: str = "float32"
    indices: bool = False
    large: bool = False  # out of cache: the copy limit matters
    fused: bool = False  # Relu before the pool and Add (a per-channel bias) after


def workloads(quick: bool) -> list[Workload]:
    w = [
        Workload("resnet_maxpool", "ResNet-50 stem", "MaxPool", [1, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        Workload("resnet_gap", "ResNet-50 head", "GlobalAveragePool", [1, 2048, 7, 7]),
        Workload("vgg_maxpool", "VGG-16 block1", "MaxPool", [1, 64, 224, 224],
                 dict(kernel_shape=[2, 2], strides=[2, 2]), large=True),
        Workload("inception_maxpool", "GoogLeNet 3x3 s1", "MaxPool", [1, 192, 28, 28],
                 dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
        Workload("inception_ceil", "GoogLeNet 3x3 s2 ceil", "MaxPool", [1, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
        Workload("densenet_avgpool", "DenseNet transition", "AveragePool", [1, 128, 56, 56],
                 dict(kernel_shape=[2, 2], strides=[2, 2])),
        Workload("avgpool_pad", "3x3 s1 p1 avg (count_include_pad=0)", "AveragePool", [1, 64, 56, 56],
                 dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
        Workload("video3d_maxpool", "C3D/I3D 3-D", "MaxPool", [1, 64, 16, 56, 56],
                 dict(kernel_shape=[1, 3, 3], strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1])),
        Workload("audio1d_maxpool", "1-D audio CNN", "MaxPool", [1, 128, 16000],
                 dict(kernel_shape=[4], strides=[4])),
        Workload("resnet_maxpool_b32", "ResNet stem, batch 32", "MaxPool", [32, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), large=True),
        Workload("maxpool_indices", "MaxPool with Indices", "MaxPool", [1, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), indices=True),
        Workload("maxpool_int8", "quantized stem (int8)", "MaxPool", [1, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), dtype="int8"),
        Workload("maxpool_fp16", "fp16 stem", "MaxPool", [1, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), dtype="float16"),
        Workload("fused_relu_pool_add", "Relu -> 3x3 s2 MaxPool -> Add", "MaxPool", [1, 64, 112, 112],
                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), fused=True),
        # non-overlapping windows (kernel = stride): each input read once, no pass to share
        Workload("avgpool3d_k2", "3-D avg 2x2x2 s2 (video, NCDHW)", "AveragePool", [1, 64, 16, 56, 56],
                 dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2])),
        Workload("maxpool3d_k2", "3-D max 2x2x2 s2 (video, NCDHW)", "MaxPool", [1, 64, 16, 56, 56],
                 dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2])),
        Workload("maxpool_k3s3", "2-D max 3x3 s3", "MaxPool", [1, 96, 54, 54],
                 dict(kernel_shape=[3, 3], strides=[3, 3])),
        # global pools at large batch (out of cache)
        Workload("gap_b32", "ResNet-50 head, batch 32", "GlobalAveragePool", [32, 2048, 7, 7], large=True),
        Workload("gmp_b32", "global max, batch 32", "GlobalMaxPool", [32, 2048, 7, 7], large=True),
        # long windows: more than 16 taps along an axis
        Workload("inception_v3_head", "Inception-v3 head 8x8 avg", "AveragePool", [1, 2048, 8, 8],
                 dict(kernel_shape=[8, 8], strides=[1, 1])),
        Workload("longwin_max1d", "1-D max k32 s1 p16 (time series)", "MaxPool", [1, 64, 4096],
                 dict(kernel_shape=[32], strides=[1], pads=[16, 16])),
        Workload("longwin_avg1d", "1-D avg k64 s32 (audio frames)", "AveragePool", [1, 128, 16000],
                 dict(kernel_shape=[64], strides=[32])),
    ]
    if quick:
        keep = {"resnet_maxpool", "resnet_gap", "inception_maxpool", "densenet_avgpool", "maxpool_int8"}
        w = [x for x in w if x.name in keep]
    return w


# --------------------------------------------------------------------------------------------
# model building
# --------------------------------------------------------------------------------------------


def _onnx_dtype(dtype):
    from onnx import TensorProto  # pylint: disable=import-outside-toplevel

    return {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "int8": TensorProto.INT8,
            "uint8": TensorProto.UINT8, "float64": TensorProto.DOUBLE}[dtype]


def build_model(w: Workload):
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import TensorProto, helper  # pylint: disable=import-outside-toplevel

    outs = ["y", "i"] if w.indices else ["y"]
    nodes, inits = [helper.make_node(w.op, ["x"], outs, **w.attrs)], []
    if w.fused:
        nodes = [
            helper.make_node("Relu", ["x"], ["x_relu"]),
            helper.make_node(w.op, ["x_relu"], ["pooled"], **w.attrs),
            helper.make_node("Add", ["pooled", "bias"], ["y"]),
        ]
        inits = [helper.make_tensor("bias", _onnx_dtype(w.dtype), [w.shape[1]] + [1] * (len(w.shape) - 2),
                                    fused_bias(w).ravel().tolist())]
    x = helper.make_tensor_value_info("x", _onnx_dtype(w.dtype), w.shape)
    ys = [helper.make_tensor_value_info("y", _onnx_dtype(w.dtype), None)]
    if w.indices:
        ys.append(helper.make_tensor_value_info("i", TensorProto.INT64, None))
    graph = helper.make_graph(nodes, w.name, [x], ys, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model = onnx.shape_inference.infer_shapes(model)
    model.ir_version = 10  # onnxruntime 1.31 refuses IR 14
    return model


def fused_bias(w: Workload) -> np.ndarray:
    """The per-channel bias a fused workload adds after the pool (shape C x 1 x ... x 1)."""
    return np.linspace(-1.0, 1.0, w.shape[1]).astype(w.dtype).reshape([w.shape[1]] + [1] * (len(w.shape) - 2))


def make_input(w: Workload) -> np.ndarray:
    rng = np.random.default_rng(0)
    if w.dtype in ("int8", "uint8"):
        info = np.iinfo(w.dtype)
        return rng.integers(info.min, info.max, size=w.shape, dtype=w.dtype)
    return rng.standard_normal(w.shape).astype(w.dtype)


def out_bytes(model) -> int:
    total = 0
    for o in model.graph.output:
        t = o.type.tensor_type
        n = int(np.prod([d.dim_value for d in t.shape.dim]))
        total += n * (8 if t.elem_type == 7 else np.dtype(_np_dtype(t.elem_type)).itemsize)
    return total


def _np_dtype(elem_type):
    from onnx import helper  # pylint: disable=import-outside-toplevel

    return helper.tensor_dtype_to_np_dtype(elem_type)


# --------------------------------------------------------------------------------------------
# peers: each returns a zero-argument callable running the model once, or raises NotAvailable
# --------------------------------------------------------------------------------------------


class NotAvailable(Exception):
    pass


def _tvm_runner(mod, ex, x):
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    vm = relax.VirtualMachine(ex, tvm.cpu())
    arg = tvm.runtime.tensor(x)
    fn = vm["main"]
    return lambda: fn(arg)


def peer_tvm_pool(model, x, threads):
    import tvm_pool  # pylint: disable=import-outside-toplevel

    try:
        mod = tvm_pool.from_onnx(model)
    except Exception as err:  # pylint: disable=broad-except
        raise NotAvailable(f"import: {_short(err)}") from err
    start = time.perf_counter()
    ex = tvm_pool.compile(mod, target="host")
    compile_s = time.perf_counter() - start
    return _tvm_runner(mod, ex, x), compile_s


def peer_tvm(model, x, threads):
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm.relax.frontend.onnx import from_onnx  # pylint: disable=import-outside-toplevel

    from tvm_pool.targets import host_target  # pylint: disable=import-outside-toplevel

    try:
        mod = from_onnx(model)
        start = time.perf_counter()
        ex = tvm.compile(mod, target=host_target())
        compile_s = time.perf_counter() - start
        return _tvm_runner(mod, ex, x), compile_s
    except Exception as err:  # pylint: disable=broad-except
        raise NotAvailable(_short(err)) from err


def peer_onnxruntime(model, x, threads):
    import onnxruntime as ort  # pylint: disable=import-outside-toplevel

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    try:
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # pylint: disable=broad-except
        raise NotAvailable(_short(err)) from err
    feed = {"x": x}
    sess.run(None, feed)
    return lambda: sess.run(None, feed), None


def peer_torch(model, x, threads, w: Workload = None):
    import torch  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(threads)
    call = torch_call(w, torch.from_numpy(x))
    try:
        call()
    except Exception as err:  # pylint: disable=broad-except
        raise NotAvailable(_short(err)) from err
    if w.dtype in ("int8", "uint8"):
        raise NotAvailable(f"{w.dtype} pooling not supported by torch CPU kernels")
    return call, None


def torch_call(w: Workload, t):
    """PyTorch's functional pool for workload ``w`` on tensor ``t`` (CPU or GPU)."""
    import torch  # pylint: disable=import-outside-toplevel
    import torch.nn.functional as F  # pylint: disable=import-outside-toplevel

    rank = len(w.shape) - 2
    a = w.attrs
    k = a.get("kernel_shape")
    if w.op.startswith("Global"):
        fn = {"GlobalAveragePool": F.adaptive_avg_pool2d, "GlobalMaxPool": F.adaptive_max_pool2d}.get(w.op)
        fn = fn if rank == 2 else None
        if fn is None:
            raise NotAvailable("no torch equivalent")
        call = lambda: fn(t, 1)  # noqa: E731
    else:
        pads = a.get("pads", [0] * 2 * rank)
        if pads[:rank] != pads[rank:]:
            raise NotAvailable("asymmetric pads")
        kw = dict(kernel_size=k, stride=a.get("strides", k), padding=pads[:rank], ceil_mode=bool(a.get("ceil_mode", 0)))
        if w.op == "MaxPool":
            fn = getattr(F, f"max_pool{rank}d")
            kw["return_indices"] = w.indices
        else:
            fn = getattr(F, f"avg_pool{rank}d")
            kw["count_include_pad"] = bool(a.get("count_include_pad", 0))
        call = lambda: fn(t, **kw)  # noqa: E731
        if w.fused:
            bias = torch.from_numpy(fused_bias(w)).to(t.device)
            call = lambda: fn(torch.relu(t), **kw) + bias  # noqa: E731
    return call


def peer_openvino(model, x, threads):
    import openvino as ov  # pylint: disable=import-outside-toplevel

    core = ov.Core()
    try:
        ovm = core.read_model(model.SerializeToString(), b"")
        compiled = core.compile_model(ovm, "CPU", {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"})
        req = compiled.create_infer_request()
        req.infer({0: x})
    except Exception as err:  # pylint: disable=broad-except
        raise NotAvailable(_short(err)) from err
    return lambda: req.infer({0: x}), None


def copy_runner(nbytes_read: int, nbytes_written: int, threads: int):
    """A copy reading and writing as many bytes as the workload (torch copy_, same threads):
    the memory-bandwidth limit timed alongside the peers."""
    import torch  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(threads)
    n = max((nbytes_read + nbytes_written) // 2, 64)
    src = torch.empty(n, dtype=torch.uint8).fill_(1)
    dst = torch.empty(n, dtype=torch.uint8)
    return lambda: dst.copy_(src)


def _settle() -> None:
    """Let the previous peer's worker threads stop spinning before the next measurement:
    runtimes spin-wait between calls, and a spinning pool on a 2-core machine halves whatever
    is timed next (seen as everything taking ~8 ms)."""
    import gc  # pylint: disable=import-outside-toplevel

    gc.collect()
    time.sleep(0.2)


def _times(fn, repeat: int, warmup: int = 3) -> list:
    """Seconds of ``repeat`` calls of ``fn`` (after ``warmup`` untimed ones)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _short(err) -> str:
    text = str(err).strip().splitlines()
    line = next((t for t in reversed(text) if t.strip()), type(err).__name__)
    return line.strip()[:160]


# --------------------------------------------------------------------------------------------
# one thread count (runs in its own process: TVM reads TVM_NUM_THREADS at start)
# --------------------------------------------------------------------------------------------


ROUNDS = 5  # peers take turns, ROUNDS times per workload (see run_threads)


def run_threads(threads: int, quick: bool, repeat: int, only=None) -> dict:
    """Time every workload for every peer at ``threads`` threads.

    Peers take turns: each of ROUNDS rounds times every peer (and the copy) for repeat/ROUNDS
    calls, and a peer's figure is the median over all its calls. Memory bandwidth on a shared
    machine drifts over seconds; timing the peers one after the other would hand that drift
    to whichever peer ran at a bad moment (seen as 2x swings on the out-of-cache workloads).
    """
    rows = []
    for w in workloads(quick):
        if only and w.name not in only:
            continue
        model = build_model(w)
        x = make_input(w)
        row = {"workload": w.name, "source": w.source, "op": w.op, "shape": w.shape, "dtype": w.dtype,
               "attrs": w.attrs, "indices": w.indices, "large": w.large, "ms": {}, "na": {}}
        runners, compile_s = {}, None
        for peer in PEERS:
            fn = globals()[f"peer_{peer}"]
            try:
                run, cs = fn(model, x, threads, w) if peer == "torch" else fn(model, x, threads)
                if peer == "tvm_pool":
                    compile_s = cs
                runners[peer] = run
            except NotAvailable as err:
                row["na"][peer] = str(err)
            except Exception as err:  # pylint: disable=broad-except
                row["na"][peer] = f"failed: {_short(err)}"
        runners["copy"] = copy_runner(x.nbytes, out_bytes(model), threads)
        samples = {name: [] for name in runners}
        per_round = max(repeat // ROUNDS, 1)
        for rnd in range(ROUNDS):
            for name, run in list(runners.items()):
                _settle()
                try:
                    samples[name] += _times(run, per_round, warmup=3 if rnd == 0 else 1)
                except Exception as err:  # pylint: disable=broad-except
                    row["na"][name] = f"failed: {_short(err)}"
                    del runners[name], samples[name]
        del runners  # free the sessions (and their thread pools) before the next workload
        _settle()
        row["ms"] = {p: float(np.median(samples[p])) * 1e3 for p in PEERS if p in samples}
        row["bytes"] = x.nbytes + out_bytes(model)
        row["copy_ms"] = float(np.median(samples["copy"])) * 1e3
        row["compile_s"] = compile_s
        others = {p: t for p, t in row["ms"].items() if p != "tvm_pool"}
        if others:
            best = min(others, key=others.get)
            row["best_peer"], row["best_peer_ms"] = best, others[best]
            if "tvm_pool" in row["ms"]:
                row["speedup"] = others[best] / row["ms"]["tvm_pool"]
        if "tvm_pool" in row["ms"]:
            row["pct_copy"] = 100.0 * row["copy_ms"] / row["ms"]["tvm_pool"]
        rows.append(row)
        print(f"[{threads}t] {w.name}: " + ", ".join(f"{p} {t:.3f}ms" for p, t in row["ms"].items()), file=sys.stderr)
    geo = geomean([r["speedup"] for r in rows if "speedup" in r])
    return {"threads": threads, "quick": quick, "repeat": repeat, "rounds": ROUNDS, "rows": rows,
            "geomean_speedup": geo, "machine": _machine()}


def geomean(values) -> float | None:
    """Geometric mean of positive ``values`` (None when there are none)."""
    values = [v for v in values if v]
    return float(np.exp(np.mean(np.log(values)))) if values else None


def _machine() -> dict:
    import platform  # pylint: disable=import-outside-toplevel

    from tvm_pool.targets import host_cpu  # pylint: disable=import-outside-toplevel

    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"cpu": host_cpu(), "cores": os.cpu_count(), "python": platform.python_version(), "load_1min": load}


# --------------------------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------------------------


def to_markdown(results: list[dict]) -> str:
    lines = ["# tvm_pool pooling benchmark", ""]
    for res in results:
        t = res["threads"]
        lines += [f"## {t} thread{'s' if t > 1 else ''}", "",
                  f"median of {res['repeat']} runs in {res.get('rounds', 1)} rounds (peers take turns); "
                  f"machine {res['machine']}; "
                  f"geomean speedup of tvm_pool vs best peer: **{_fmt(res['geomean_speedup'], 'x')}**", "",
                  "| workload | dtype | " + " | ".join(PEERS) + " | best peer | speedup | copy limit ms | % of copy | compile s |",
                  "|---|---|" + "---|" * len(PEERS) + "---|---|---|---|---|"]
        for r in res["rows"]:
            cells = []
            for p in PEERS:
                cells.append(f"{r['ms'][p]:.3f}" if p in r["ms"] else f"n/a ({r['na'].get(p, '')[:60]})")
            lines.append(f"| {r['workload']} | {r['dtype']} | " + " | ".join(cells) +
                         f" | {r.get('best_peer', '-')} | {_fmt(r.get('speedup'), 'x')} | {r['copy_ms']:.3f} | "
                         f"{_fmt(r.get('pct_copy'), '%', 0)} | {_fmt(r.get('compile_s'), '', 2)} |")
        lines.append("")
    return "\n".join(lines)


def _fmt(v, unit, digits=2):
    return "-" if v is None else f"{v:.{digits}f}{unit}"


def plot(results: list[dict], path: str) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    fig, axes = plt.subplots(len(results), 1, figsize=(12, 4.5 * len(results)), squeeze=False)
    for ax, res in zip(axes[:, 0], results):
        rows = res["rows"]
        names = [r["workload"] for r in rows]
        xs = np.arange(len(rows))
        width = 0.8 / len(PEERS)
        for i, p in enumerate(PEERS):
            # time relative to the copy limit (1.0 = memory-bound optimum); lower is better
            vals = [r["ms"][p] / r["copy_ms"] if p in r["ms"] else np.nan for r in rows]
            ax.bar(xs + i * width, vals, width, label=p)
        ax.set_yscale("log")
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xticks(xs + 0.4 - width / 2)
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("time / copy limit (log, lower is better)")
        ax.set_title(f"{res['threads']} thread(s): geomean tvm_pool speedup vs best peer "
                     f"{_fmt(res['geomean_speedup'], 'x')}")
        ax.legend(fontsize=8, ncol=len(PEERS))
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m tvm_pool.bench", description=__doc__)
    p.add_argument("--threads", default="2,1", help="comma-separated thread counts (default 2,1)")
    p.add_argument("--quick", action="store_true", help="a few workloads, fewer repeats")
    p.add_argument("--repeat", type=int, default=None, help="timed runs per peer (default 50; quick 15)")
    p.add_argument("--output-dir", default=RESULTS_DIR, help=f"where to write results (default {RESULTS_DIR})")
    p.add_argument("--only", default=None, help="comma-separated workload names")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu (default): the CPU peers; cuda: tvm_pool, stock TVM and PyTorch on a GPU (bench/cuda.py)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.device == "cuda":
        from . import cuda  # pylint: disable=import-outside-toplevel

        return cuda.main(args)
    repeat = args.repeat or (15 if args.quick else 50)
    only = set(args.only.split(",")) if args.only else None
    threads = [int(t) for t in str(args.threads).split(",") if t.strip()]
    if args.child:
        res = run_threads(threads[0], args.quick, repeat, only)
        print(json.dumps(res))
        return 0
    results = []
    for t in threads:
        # Same thread count for every peer; idle OpenMP workers (torch) sleep instead of spinning.
        env = dict(os.environ, TVM_NUM_THREADS=str(t), OMP_NUM_THREADS=str(t), OMP_WAIT_POLICY="PASSIVE")
        # TVM's thread pool as a user gets it: its default spin count, and its workers unpinned,
        # which importing tvm_pool sets for the whole process (tvm_pool/thread_pool.py; stock
        # TVM's peer shares the process, but its pools run on one thread anyway).
        env.setdefault(BIND_THREADS_VARIABLE, "0")
        cmd = [sys.executable, "-m", "tvm_pool.bench", "--child", "--threads", str(t), "--repeat", str(repeat)]
        if args.quick:
            cmd.append("--quick")
        if args.only:
            cmd += ["--only", args.only]
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=False)
        if proc.returncode != 0:
            print(f"benchmark with {t} thread(s) failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    os.makedirs(args.output_dir, exist_ok=True)
    with open(os.path.join(args.output_dir, "bench.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    md = to_markdown(results)
    with open(os.path.join(args.output_dir, "bench.md"), "w", encoding="utf-8") as fh:
        fh.write(md)
    try:
        plot(results, os.path.join(args.output_dir, "bench.png"))
    except ImportError:
        print("matplotlib not installed: no chart", file=sys.stderr)
    print(md)
    return 0
