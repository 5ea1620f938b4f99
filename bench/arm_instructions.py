"""aarch64 instructions per call on the emulated device: tvm_pool vs stock TVM vs a lower bound.

    python -m tvm_pool.bench.arm_instructions [--quick] [--only NAME ...] [--layout channel_first|channel_last|both]

Each of the benchmark's workloads (``bench/workloads.py``) is compiled for ``--target arm``
(aarch64-linux-gnu, cortex-a72, NEON) twice: by tvm_pool, and by stock TVM 0.27
(``tvm.relax.frontend.onnx.from_onnx`` + ``tvm.compile``). Both run on the emulated device
(``tvm_pool.emulation``: qemu-aarch64, TVM's runtime only, ``TVM_NUM_THREADS=1``) in one
process, and a qemu TCG plugin counts the executed aarch64 instructions. The guest marks the
count (an unused syscall the plugin watches) around one call and around 1 + N calls of the
compiled ``main`` (TVM's ``time_evaluator`` loop, so no Python between calls); the difference of
the two differences over N is one call. Python's start-up, the imports and the module load are
outside the marks. The lower bound is the bytes a call must move (input read + outputs written)
over 16 bytes, one 128-bit NEON load or store each.

Emulated instruction counts are not hardware time: they weigh a gather, a shuffle and a load
alike and know nothing of caches. ARM timings on a real board are still to be taken.

Channel-last entries (``--layout channel_last``, or ``both``, the default): the same workloads
with their input in channel-last layout (NWC / NHWC / NDHWC), built as Relax modules of TVM's
own pooling ops with that ``layout`` (:func:`channel_last_module`; tvm_pool's computes where TVM
has no op: indices, the global pools), compiled by tvm_pool and by stock TVM, and checked against
onnxruntime's channel-first outputs transposed. The summary compares each channel-last count with
the channel-first one of the same workload (tvm_pool both).

Writes ``bench/results/arm.{md,json}``; every output is also checked against onnxruntime on the
host (``match``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from tvm_pool.errors import TvmPoolError

from .peers import TVM_ERRORS
from .report import RESULTS_DIR
from .summary import geomean
from .workloads import build_model, fused_bias, make_input, out_bytes, workloads

# Calls counted per workload: enough that the marks' own cost is noise, few enough that the
# largest workload (batch 32) stays a few seconds of emulation.
_MAX_CALLS, _MIN_CALLS, _BYTES_BUDGET = 300, 5, 400e6
NEON_BYTES = 16


def calls_for(in_bytes: int) -> int:
    return int(max(_MIN_CALLS, min(_MAX_CALLS, _BYTES_BUDGET // max(in_bytes, 1))))


def _compile(kind: str, model, target, path: Path) -> str | None:
    """Export ``model`` (an ONNX model, or a Relax module) compiled by ``kind`` (tvm_pool / tvm)
    to ``path``; an error string when it fails, for the report: TVM's and tvm_pool's refusals,
    and the cross compiler's (a failed link is TVM's RuntimeError, a missing or unrunnable
    compiler an OSError)."""
    import tvm  # pylint: disable=import-outside-toplevel

    import tvm_pool  # pylint: disable=import-outside-toplevel
    from tvm_pool.targets import export_compiler  # pylint: disable=import-outside-toplevel

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if isinstance(model, tvm.IRModule):
                ex = (tvm_pool.compile if kind == "tvm_pool" else tvm.compile)(model, target=target)
            elif kind == "tvm_pool":
                ex = tvm_pool.compile(tvm_pool.from_onnx(model), target)
            else:
                from tvm.relax.frontend.onnx import from_onnx  # pylint: disable=import-outside-toplevel

                ex = tvm.compile(from_onnx(model), target=target)
        ex.export_library(str(path), fcompile=export_compiler(target))
    except TVM_ERRORS + (TvmPoolError, OSError) as err:
        return f"{type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}"
    return None


def _matches(got: list, want: list) -> bool:
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        w = np.asarray(w)
        if g.shape != w.shape:
            return False
        if w.dtype.kind in "iu":
            if not np.array_equal(g, w):
                return False
        elif not np.allclose(g.astype(np.float32), w.astype(np.float32), rtol=1e-3, atol=1e-3, equal_nan=True):
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Channel-last entries
# ---------------------------------------------------------------------------------------------

LAYOUT_NAMES = {1: "NWC", 2: "NHWC", 3: "NDHWC"}
LAYOUTS = ("channel_first", "channel_last")


def to_channel_last(a: np.ndarray) -> np.ndarray:
    """A channel-first array ``[N, C, *spatial]`` in channel-last order ``[N, *spatial, C]``."""
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def channel_last_module(w, stock: bool):
    """The Relax module of workload ``w`` with a channel-last input: TVM's own pooling op with
    ``layout=NWC/NHWC/NDHWC`` (what a channel-last model's importer emits and tvm_pool
    legalizes), or tvm_pool's compute where TVM has no op (MaxPool's indices, the global pools);
    for stock TVM (``stock``) the global pools as its adaptive average / a whole-plane max pool,
    and None where it has nothing (indices). The bias of a fused workload is per channel."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    from tvm_pool import compute  # pylint: disable=import-outside-toplevel

    if w.road != "onnx" or (stock and w.indices):
        return None
    rank = len(w.shape) - 2
    layout = LAYOUT_NAMES[rank]
    shape = [w.shape[0], *w.shape[2:], w.shape[1]]
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, w.dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            data = bb.emit(relax.op.nn.relu(x)) if w.fused else x
            pooled = _channel_last_pool(bb, w, data, layout, rank, stock, compute)
            if w.fused:
                bias = relax.const(fused_bias(w).reshape(-1), w.dtype)
                pooled = bb.emit(relax.op.add(pooled, bias))
            out = bb.emit_output(pooled)
        bb.emit_func_output(out)
    return bb.get()


def _channel_last_pool(bb, w, data, layout, rank, stock, compute):
    from tvm import relax  # pylint: disable=import-outside-toplevel

    a = w.attrs
    spatial = w.shape[2:]
    if w.op.startswith("Global"):
        kind = "avg" if w.op == "GlobalAveragePool" else "max"
        if not stock:
            return bb.emit_te(compute.global_pool, data, kind, layout=layout, primfunc_name_hint=f"global_{kind}")
        if kind == "avg":
            return bb.emit(getattr(relax.op.nn, f"adaptive_avg_pool{rank}d")(data, [1] * rank, layout=layout))
        return bb.emit(getattr(relax.op.nn, f"max_pool{rank}d")(data, spatial, layout=layout))
    kernel, strides = a["kernel_shape"], a.get("strides", [1] * rank)
    pads, ceil = a.get("pads", [0] * 2 * rank), bool(a.get("ceil_mode", 0))
    if w.indices:
        return bb.emit_te(compute.max_pool, data, kernel, strides, None, pads, ceil_mode=ceil, return_indices=True,
                          layout=layout, primfunc_name_hint="max_pool_indices")
    if w.op == "MaxPool":
        return bb.emit(getattr(relax.op.nn, f"max_pool{rank}d")(
            data, kernel, strides, pads, a.get("dilations", [1] * rank), ceil, layout=layout))
    return bb.emit(getattr(relax.op.nn, f"avg_pool{rank}d")(
        data, kernel, strides, pads, a.get("dilations", [1] * rank), ceil, bool(a.get("count_include_pad", 0)),
        layout=layout))


def _layout_rows(w, layout: str, model, x, want):
    """(row fields, input, wanted outputs, {kind: module}) of workload ``w`` in ``layout``."""
    if layout == "channel_first":
        return {"workload": w.name}, x, want, {"tvm_pool": model, "tvm": model}
    x, want = to_channel_last(x), [to_channel_last(np.asarray(v)) for v in want]
    modules = {kind: channel_last_module(w, stock=kind == "tvm") for kind in ("tvm_pool", "tvm")}
    return {"workload": f"{w.name}_{LAYOUT_NAMES[len(w.shape) - 2].lower()}"}, x, want, modules


def measure(names=None, quick: bool = False, workdir: Path | None = None, layouts=LAYOUTS) -> list[dict]:
    from tvm_pool import emulation  # pylint: disable=import-outside-toplevel
    from tvm_pool.targets import resolve_target  # pylint: disable=import-outside-toplevel

    import onnxruntime as ort  # pylint: disable=import-outside-toplevel

    device = emulation.build()
    target = resolve_target("arm")
    work = Path(workdir or tempfile.mkdtemp(prefix="tvm_pool_arm_"))
    rows, jobs = [], []
    for w in workloads(quick):
        if names and w.name not in names:
            continue
        model, x0 = build_model(w), make_input(w)
        moved = x0.nbytes + out_bytes(model)
        want0 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x0})
        for layout in layouts:
            fields, x, want, modules = _layout_rows(w, layout, model, x0, want0)
            if modules["tvm_pool"] is None:
                continue
            row = {**fields, "base": w.name, "layout": layout, "source": w.source, "dtype": w.dtype, "shape": list(x.shape),
                   "bytes_moved": moved, "lower_bound": moved / NEON_BYTES, "calls_counted": calls_for(x.nbytes),
                   "want": want}
            for kind in ("tvm_pool", "tvm"):
                row[kind] = None
                if modules[kind] is None:
                    row[f"{kind}_error"] = "no such op in stock TVM"
                    continue
                so = work / f"{row['workload']}.{kind}.so"
                err = _compile(kind, modules[kind], target, so)
                if err:
                    row[f"{kind}_error"] = err
                    continue
                jobs.append({"name": f"{row['workload']}/{kind}", "module": so, "inputs": [x],
                             "count_calls": row["calls_counted"], "row": row, "kind": kind})
            rows.append(row)
    start = time.time()
    results = emulation.run_artifacts(device, [{k: v for k, v in j.items() if k not in ("row", "kind")} for j in jobs],
                                      work / "run", count=True, timeout=3600)
    print(f"[arm_instructions] {len(jobs)} artifacts counted in {time.time() - start:.0f} s on the emulated device",
          file=sys.stderr)
    for job, res in zip(jobs, results):
        row, kind = job["row"], job["kind"]
        if not res.get("ok"):
            row[f"{kind}_error"] = res.get("error", "failed")[:160]
            continue
        row[kind] = res.get("insns_per_call")
        row[f"{kind}_match"] = _matches(res["outputs"], row["want"])
    for row in rows:
        row.pop("want")
        if row["tvm_pool"] and row["tvm"]:
            row["ratio"] = row["tvm_pool"] / row["tvm"]
        row["vs_lower_bound"] = row["tvm_pool"] / row["lower_bound"] if row["tvm_pool"] else None
    return rows


def _m(v):
    return "n/a" if v is None else f"{v / 1e6:.3f}"


def to_markdown(rows: list[dict], summary: dict) -> str:
    lines = [
        "# aarch64 instructions per call (emulated)",
        "",
        "Executed aarch64 instructions per call (millions), counted with a qemu TCG plugin on the emulated",
        "device (`tvm_pool.emulation`, qemu-aarch64, one thread), `--target arm` (cortex-a72, NEON).",
        "Lower bound: bytes moved / 16 (one 128-bit NEON load or store per 16 bytes).",
        "**Emulated instruction counts are not hardware time; ARM timings on a real board are still to be taken.**",
        "",
        "Operation floor: the fewest NEON instructions the row's form needs (loads and stores of the data and",
        "of what a pass leaves for the next, 32 bytes an instruction; one max, add or select per vector;",
        "counted in `bench/arm_floor.py`, loop control left out). Rows above 1.5x their floor are explained",
        "below the table.",
        "",
        "| workload | dtype | tvm_pool M | stock TVM M | lower bound M | operation floor M (form) | tvm_pool / stock | "
        "tvm_pool / bound | tvm_pool / floor | per output (tvm_pool) | outputs match ORT |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        stock = _m(r["tvm"]) if r["tvm"] else f"n/a ({r.get('tvm_error', '')[:60]})"
        ratio = f"{r['ratio']:.2f}x" if r.get("ratio") else "n/a"
        bound = f"{r['vs_lower_bound']:.1f}x" if r.get("vs_lower_bound") else "n/a"
        floor = f"{_m(r['floor'])} ({r['floor_form']})" if r.get("floor") else "n/a"
        vs_floor = f"{r['vs_floor']:.2f}x" if r.get("vs_floor") else "n/a"
        outs = r.get("outputs")
        per_out = f"{r['tvm_pool'] / outs:.2f}" if r["tvm_pool"] and outs else "n/a"
        match = "yes" if r.get("tvm_pool_match") else "NO"
        lines.append(f"| {r['workload']} | {r['dtype']} | {_m(r['tvm_pool'])} | {stock} | {_m(r['lower_bound'])} | {floor} | "
                     f"{ratio} | {bound} | {vs_floor} | {per_out} | {match} |")
    lines += _floor_gaps(rows)
    if summary["geomean_ratio"] is None:  # no workload stock TVM builds (e.g. --only maxpool_indices)
        vs_stock = "Geometric mean of tvm_pool / stock TVM: n/a (stock TVM builds none of these workloads)"
    else:
        vs_stock = (f"Geometric mean of tvm_pool / stock TVM: **{summary['geomean_ratio']:.3f}x** "
                    f"(over {summary['n_ratio']} workloads stock TVM builds; below stock on {summary['below_stock']} of them)")
    lines += ["", f"{vs_stock}; tvm_pool over the lower bound: {summary['geomean_vs_bound']:.2f}x (geometric mean)."]
    lines += _channel_last_markdown(rows, summary)
    lines += ["", f"Machine: {summary['machine']}; {summary['qemu']}."]
    return "\n".join(lines) + "\n"


def add_floors(rows: list[dict]) -> None:
    """Each row's operation floor (``arm_floor.floor``), its form, tvm_pool over it, and for a
    row above :data:`arm_floor.EXPLAIN_ABOVE` the explanation of its gap."""
    from .arm_floor import EXPLAIN_ABOVE, GAPS, floor  # pylint: disable=import-outside-toplevel

    by_name = {w.name: w for w in workloads(False)}
    for r in rows:
        f = floor(by_name[r["base"]], r.get("layout", "channel_first"))
        r["floor"], r["floor_form"] = f.total, f.form
        r["vs_floor"] = r["tvm_pool"] / f.total if r.get("tvm_pool") else None
        if r["vs_floor"] and r["vs_floor"] > EXPLAIN_ABOVE:
            r["floor_gap"] = GAPS.get(r["workload"], "not analysed yet: on the list")


def _floor_gaps(rows: list[dict]) -> list[str]:
    from .arm_floor import EXPLAIN_ABOVE  # pylint: disable=import-outside-toplevel

    counted = [r for r in rows if r.get("vs_floor")]
    if not counted:
        return []
    above = [r for r in counted if r.get("floor_gap")]
    lines = ["", f"Within {EXPLAIN_ABOVE}x of the operation floor: {len(counted) - len(above)} of {len(counted)} rows."]
    if above:
        lines += ["", f"Rows above {EXPLAIN_ABOVE}x their floor, and why:", ""]
        lines += [f"- {r['workload']} ({r['vs_floor']:.2f}x): {r['floor_gap']}" for r in above]
    return lines


def channel_last_summary(rows: list[dict]) -> dict:
    """Channel-last against channel-first (tvm_pool both, same workload), and against stock TVM
    on the same channel-last module: geometric means over the workloads that have both."""
    first = {r["base"]: r for r in rows if r.get("layout") == "channel_first"}
    pairs = [(r, first.get(r["base"])) for r in rows if r.get("layout") == "channel_last"]
    vs_first = [r["tvm_pool"] / f["tvm_pool"] for r, f in pairs if f and r["tvm_pool"] and f["tvm_pool"]]
    vs_stock = [r["ratio"] for r, _ in pairs if r.get("ratio")]
    return {"geomean_vs_channel_first": geomean(vs_first) if vs_first else None, "n_vs_channel_first": len(vs_first),
            "geomean_vs_stock": geomean(vs_stock) if vs_stock else None, "n_vs_stock": len(vs_stock)}


def _channel_last_markdown(rows: list[dict], summary: dict) -> list[str]:
    cl = summary.get("channel_last") or {}
    if not cl.get("n_vs_channel_first"):
        return []
    first = {r["base"]: r for r in rows if r.get("layout") == "channel_first"}
    lines = ["", "## Channel-last against channel-first (tvm_pool both)", "",
             "| workload | channel-first M | channel-last M | channel-last / channel-first |", "|---|---|---|---|"]
    for r in rows:
        f = first.get(r.get("base")) if r.get("layout") == "channel_last" else None
        if f and r["tvm_pool"] and f["tvm_pool"]:
            lines.append(f"| {r['base']} | {_m(f['tvm_pool'])} | {_m(r['tvm_pool'])} | {r['tvm_pool'] / f['tvm_pool']:.2f}x |")
    lines += ["", f"Geometric mean of channel-last / channel-first: **{cl['geomean_vs_channel_first']:.3f}x** "
              f"(over {cl['n_vs_channel_first']} workloads)" + (
                  f"; channel-last tvm_pool / stock TVM on the same channel-last module: {cl['geomean_vs_stock']:.3f}x "
                  f"(over {cl['n_vs_stock']})." if cl.get("n_vs_stock") else ".")]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the benchmark's quick subset")
    parser.add_argument("--only", nargs="*", help="workload names")
    parser.add_argument("--layout", choices=("channel_first", "channel_last", "both"), default="both",
                        help="the workloads' input layout (channel_last: NWC/NHWC/NDHWC Relax modules)")
    parser.add_argument("--out-dir", default=RESULTS_DIR)
    parser.add_argument("--report-only", metavar="JSON",
                        help="no counting: the floors of a results file's rows (bench/arm_floor.py) added, its .md written again")
    args = parser.parse_args(argv)
    import subprocess  # pylint: disable=import-outside-toplevel

    from tvm_pool import emulation  # pylint: disable=import-outside-toplevel

    if args.report_only:
        return _report_only(Path(args.report_only))
    rows = measure(args.only, args.quick, layouts=LAYOUTS if args.layout == "both" else (args.layout,))
    for r in rows:
        w = next(w for w in workloads(False) if w.name == r["base"])
        model = build_model(w)
        r["outputs"] = int(np.prod([d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]))
    add_floors(rows)
    first = [r for r in rows if r["layout"] == "channel_first"] or rows
    ratios = [r["ratio"] for r in first if r.get("ratio")]
    qemu = subprocess.run([emulation.QEMU, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    summary = {
        "geomean_ratio": geomean(ratios), "n_ratio": len(ratios), "below_stock": sum(1 for v in ratios if v < 1),
        "geomean_vs_bound": geomean([r["vs_lower_bound"] for r in first if r["vs_lower_bound"]]),
        "channel_last": channel_last_summary(rows),
        "machine": f"{platform.machine()} host, {os.cpu_count()} cores", "qemu": qemu,
    }
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "arm.json"), "w") as fh:
        json.dump({"summary": summary, "rows": rows}, fh, indent=1)
    md = to_markdown(rows, summary)
    with open(os.path.join(args.out_dir, "arm.md"), "w") as fh:
        fh.write(md)
    print(md)
    return 0


def _report_only(path: Path) -> int:
    """``path`` (an arm.json) with its rows' floors added, and its markdown written next to it."""
    data = json.loads(path.read_text())
    add_floors(data["rows"])
    path.write_text(json.dumps(data, indent=1))
    md = to_markdown(data["rows"], data["summary"])
    path.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
