"""The CPU benchmark's report: ``bench.json`` (every figure, for other tools), ``bench.md`` (the
table the README quotes) and ``bench.png`` (each peer's time over the copy limit), written
under ``bench/results`` unless told otherwise.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from .peers import PEERS
from .summary import fmt

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def to_markdown(results: list[dict]) -> str:
    """One table per thread count: every peer's median ms (or "n/a (reason)"), the best peer
    and tvm_pool's speedup over it, the copy limit and tvm_pool's time as a share of it."""
    lines = ["# tvm_pool pooling benchmark", ""]
    for res in results:
        t = res["threads"]
        lines += [f"## {t} thread{'s' if t > 1 else ''}", "",
                  f"median of {res['repeat']} runs in {res.get('rounds', 1)} rounds (peers take turns); "
                  f"machine {res['machine']}; "
                  f"geomean speedup of tvm_pool vs best peer: **{fmt(res['geomean_speedup'], 'x')}**", "",
                  "| workload | dtype | " + " | ".join(PEERS) + " | best peer | speedup | copy limit ms | % of copy | compile s |",
                  "|---|---|" + "---|" * len(PEERS) + "---|---|---|---|---|"]
        for r in res["rows"]:
            cells = [f"{r['ms'][p]:.3f}" if p in r["ms"] else f"n/a ({r['na'].get(p, '')[:60]})" for p in PEERS]
            lines.append(f"| {r['workload']} | {r['dtype']} | " + " | ".join(cells) +
                         f" | {r.get('best_peer', '-')} | {fmt(r.get('speedup'), 'x')} | {r['copy_ms']:.3f} | "
                         f"{fmt(r.get('pct_copy'), '%', 0)} | {fmt(r.get('compile_s'), '', 2)} |")
        lines.append("")
    return "\n".join(lines)


def plot(results: list[dict], path: str) -> None:
    """A bar chart per thread count of every peer's time over the copy limit (log scale; 1.0,
    the dashed line, is the memory-bound optimum). Needs matplotlib (ImportError without)."""
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
                     f"{fmt(res['geomean_speedup'], 'x')}")
        ax.legend(fontsize=8, ncol=len(PEERS))
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write(results: list[dict], output_dir: str) -> str:
    """Writes bench.json, bench.md and (with matplotlib) bench.png under ``output_dir``;
    returns the markdown."""
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, "bench.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    md = to_markdown(results)
    with open(os.path.join(output_dir, "bench.md"), "w", encoding="utf-8") as fh:
        fh.write(md)
    try:
        plot(results, os.path.join(output_dir, "bench.png"))
    except ImportError:
        print("matplotlib not installed: no chart", file=sys.stderr)
    return md
