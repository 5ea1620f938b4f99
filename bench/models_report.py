"""The whole-model benchmark's report (``tvm-pool bench --models``, ``bench/models.py``):
``models.json`` (every figure), ``models.md`` (per thread count: the summary and a table of
every model's latency on every peer, with tvm_pool's tuning coverage) and ``models.png`` (each
peer's latency over onnxruntime's, per model), under ``bench/results`` unless told otherwise.
"""

from __future__ import annotations

import os

import numpy as np

from .models import PEERS, REFERENCE
from .report import _write_set  # pylint: disable=protected-access
from .summary import fmt

LABELS = {"tvm_pool": "tvm_pool (ONNX)", "tvm_pool_export": "tvm_pool (torch.export)", "onnxruntime": "onnxruntime",
          "openvino": "OpenVINO", "torch": "PyTorch eager", "tvm": "stock TVM (untuned)"}


def _coverage_cell(cov: dict) -> str:
    if "error" in cov:
        return "n/a"
    elsewhere = (f", {cov['elsewhere']} on {'/'.join(cov.get('elsewhere_cpus') or ['another CPU'])}"
                 if cov.get("elsewhere") else "")
    if not cov.get("untuned"):
        return f"all {cov['kernels']} tuned{elsewhere}"
    return f"{cov['untuned']}/{cov['kernels']} untuned ({cov['untuned_share']:.0%} of FLOPs){elsewhere}"


def _summary_lines(res: dict) -> list[str]:
    lines = []
    for peer, s in res["summary"].items():
        if s["n"]:
            lines.append(f"- {LABELS[peer]}: **{fmt(s['geomean_vs_reference'], 'x')}** {REFERENCE}'s latency on the "
                         f"geometric mean over {s['n']} model(s), worst {fmt(s['worst'], 'x')}")
    return lines


def to_markdown(results: list[dict]) -> str:
    out = ["# Whole models: tvm_pool against onnxruntime, OpenVINO, PyTorch and stock TVM", "",
           "torchvision's classic CNNs with seeded random weights, batch 1, float32. Every peer's output is checked "
           f"against PyTorch eager's (relative error at most {results[0]['rtol'] if results else ''}) before timing; "
           "latency is the median of the calls of "
           f"{results[0]['rounds'] if results else ''} interleaved turns. tvm_pool compiles as `tvm-pool compile` "
           "does, with the shipped tuning logs; 'coverage' is its kernels without a tuning record (TVM's untuned "
           "default code) and their share of the FLOPs. \"vs ORT\": tvm_pool's latency over onnxruntime's "
           "(below 1.00x: faster).", ""]
    for res in results:
        out += [f"## {res['threads']} thread(s)", ""] + _summary_lines(res) + [""]
        out.append("| model | " + " | ".join(f"{LABELS[p]} ms" for p in PEERS)
                   + " | tvm_pool vs ORT | torch.export vs ORT | coverage (ONNX) | coverage (torch.export) |")
        out.append("|---" * (len(PEERS) + 5) + "|")
        notes = []
        for r in res["rows"]:
            cells = []
            for p in PEERS:
                if p in r["ms"]:
                    cells.append(f"{r['ms'][p]:.2f}")
                else:
                    notes.append(f"{r['model']}, {LABELS[p]}: {r['na'].get(p, 'not run')}")
                    cells.append(f"n/a [{len(notes)}]")
            cells += [fmt(r.get(f"tvm_pool_vs_{REFERENCE}"), "x"), fmt(r.get(f"tvm_pool_export_vs_{REFERENCE}"), "x"),
                      _coverage_cell(r["coverage"].get("tvm_pool", {})),
                      _coverage_cell(r["coverage"].get("tvm_pool_export", {}))]
            out.append(f"| {r['model']} | " + " | ".join(cells) + " |")
        out += [""] + [f"[{i}] {n}" for i, n in enumerate(notes, 1)] + [""]
    return "\n".join(out) + "\n"


def plot(results: list[dict], path: str) -> None:
    """Per thread count, each peer's latency over onnxruntime's per model (log scale; 1.0 and
    1.5 as lines). Needs matplotlib (ImportError without)."""
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    fig, axes = plt.subplots(len(results), 1, figsize=(12, 4.5 * len(results)), squeeze=False)
    peers = [p for p in PEERS if p != REFERENCE]
    width = 0.8 / len(peers)
    for ax, res in zip(axes[:, 0], results):
        rows = [r for r in res["rows"] if REFERENCE in r["ms"]]
        xs = np.arange(len(rows))
        for i, p in enumerate(peers):
            ys = [r["ms"][p] / r["ms"][REFERENCE] if p in r["ms"] else np.nan for r in rows]
            ax.bar(xs + (i - (len(peers) - 1) / 2) * width, ys, width, label=LABELS[p])
        ax.axhline(1.0, color="k", lw=0.8, label=f"{REFERENCE} (1.0)")
        ax.axhline(1.5, color="k", lw=0.8, ls="--", label="1.5x")
        ax.set_yscale("log")
        ax.set_ylabel(f"latency / {REFERENCE}'s (log, lower is better)")
        ax.set_xticks(xs)
        ax.set_xticklabels([r["model"] for r in rows], rotation=30, fontsize=8)
        ax.set_title(f"{res['threads']} thread(s)")
        ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: list[dict], output_dir: str) -> str:
    """Writes models.json, models.md and (with matplotlib) models.png under ``output_dir``;
    returns the markdown."""
    os.makedirs(output_dir, exist_ok=True)
    return _write_set(output_dir, "models", results, to_markdown(results), plot)
