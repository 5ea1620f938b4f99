"""aarch64 instructions per call on the emulated device: tvm_pool vs stock TVM vs a lower bound.

    python -m tvm_pool.bench.arm_instructions [--quick] [--only NAME ...]

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
from .workloads import build_model, make_input, out_bytes, workloads

# Calls counted per workload: enough that the marks' own cost is noise, few enough that the
# largest workload (batch 32) stays a few seconds of emulation.
_MAX_CALLS, _MIN_CALLS, _BYTES_BUDGET = 300, 5, 400e6
NEON_BYTES = 16


def calls_for(in_bytes: int) -> int:
    return int(max(_MIN_CALLS, min(_MAX_CALLS, _BYTES_BUDGET // max(in_bytes, 1))))


def _compile(kind: str, model, target, path: Path) -> str | None:
    """Export ``model`` compiled by ``kind`` (tvm_pool / tvm) to ``path``; an error string when it
    fails, for the report: TVM's and tvm_pool's refusals, and the cross compiler's (a failed
    link is TVM's RuntimeError, a missing or unrunnable compiler an OSError)."""
    import tvm  # pylint: disable=import-outside-toplevel

    import tvm_pool  # pylint: disable=import-outside-toplevel
    from tvm_pool.targets import export_compiler  # pylint: disable=import-outside-toplevel

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if kind == "tvm_pool":
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


def measure(names=None, quick: bool = False, workdir: Path | None = None) -> list[dict]:
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
        model, x = build_model(w), make_input(w)
        moved = x.nbytes + out_bytes(model)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        row = {"workload": w.name, "source": w.source, "dtype": w.dtype, "shape": w.shape, "bytes_moved": moved,
               "lower_bound": moved / NEON_BYTES, "calls_counted": calls_for(x.nbytes), "want": want}
        for kind in ("tvm_pool", "tvm"):
            so = work / f"{w.name}.{kind}.so"
            err = _compile(kind, model, target, so)
            row[kind] = None
            if err:
                row[f"{kind}_error"] = err
                continue
            jobs.append({"name": f"{w.name}/{kind}", "module": so, "inputs": [x], "count_calls": row["calls_counted"],
                         "row": row, "kind": kind})
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
        "| workload | dtype | tvm_pool M | stock TVM M | lower bound M | tvm_pool / stock | tvm_pool / bound | per output (tvm_pool) | outputs match ORT |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        stock = _m(r["tvm"]) if r["tvm"] else f"n/a ({r.get('tvm_error', '')[:60]})"
        ratio = f"{r['ratio']:.2f}x" if r.get("ratio") else "n/a"
        bound = f"{r['vs_lower_bound']:.1f}x" if r.get("vs_lower_bound") else "n/a"
        outs = r.get("outputs")
        per_out = f"{r['tvm_pool'] / outs:.2f}" if r["tvm_pool"] and outs else "n/a"
        match = "yes" if r.get("tvm_pool_match") else "NO"
        lines.append(f"| {r['workload']} | {r['dtype']} | {_m(r['tvm_pool'])} | {stock} | {_m(r['lower_bound'])} | {ratio} | "
                     f"{bound} | {per_out} | {match} |")
    lines += [
        "",
        f"Geometric mean of tvm_pool / stock TVM: **{summary['geomean_ratio']:.3f}x** "
        f"(over {summary['n_ratio']} workloads stock TVM builds; below stock on {summary['below_stock']} of them); "
        f"tvm_pool over the lower bound: {summary['geomean_vs_bound']:.2f}x (geometric mean).",
        "",
        f"Machine: {summary['machine']}; {summary['qemu']}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the benchmark's quick subset")
    parser.add_argument("--only", nargs="*", help="workload names")
    parser.add_argument("--out-dir", default=RESULTS_DIR)
    args = parser.parse_args(argv)
    import subprocess  # pylint: disable=import-outside-toplevel

    from tvm_pool import emulation  # pylint: disable=import-outside-toplevel

    rows = measure(args.only, args.quick)
    for r in rows:
        w = next(w for w in workloads(False) if w.name == r["workload"])
        model = build_model(w)
        r["outputs"] = int(np.prod([d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]))
    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    qemu = subprocess.run([emulation.QEMU, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    summary = {
        "geomean_ratio": geomean(ratios), "n_ratio": len(ratios), "below_stock": sum(1 for v in ratios if v < 1),
        "geomean_vs_bound": geomean([r["vs_lower_bound"] for r in rows]),
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


if __name__ == "__main__":
    sys.exit(main())
