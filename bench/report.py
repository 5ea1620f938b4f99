"""The CPU benchmark's report: ``bench.json`` (every figure, for other tools), ``bench.md`` (the
table docs/bench_x86.md quotes) and ``bench.png`` (each peer's time over the copy limit), written
under ``bench/results`` unless told otherwise. The channel-last workloads have their own:
``channel_last.{json,md,png}`` (every peer, tvm_pool's speedups over LiteRT and the best peer,
and its time over its channel-first twin's, against issue 20's targets).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from . import channel_last
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


# --------------------------------------------------------------------------------------------
# channel-last workloads
# --------------------------------------------------------------------------------------------

CL_COLUMNS = ["workload", "shape", "dtype", *channel_last.PEERS, "best peer", "vs LiteRT", "vs best peer",
              "channel-first ms", "channel-last / channel-first", "copy limit ms", "% of copy", "compile s"]
_TARGET_TEXT = {
    "geomean_vs_channel_first": "tvm_pool channel-last / channel-first, geometric mean",
    "max_vs_channel_first": "tvm_pool channel-last / channel-first, worst workload",
    "geomean_speedup_litert": "tvm_pool speedup over LiteRT (XNNPACK), geometric mean",
    "min_speedup_litert": "tvm_pool speedup over LiteRT (XNNPACK), lowest workload",
}
_TARGET_SHORT = {"geomean_vs_channel_first": "CL/CF mean", "max_vs_channel_first": "CL/CF worst",
                 "geomean_speedup_litert": "vs LiteRT mean", "min_speedup_litert": "vs LiteRT worst"}
# The row field behind each target, and which end is the worst.
_TARGET_ROWS = {"max_vs_channel_first": ("vs_channel_first", max), "min_speedup_litert": ("speedup_litert", min)}


def channel_last_markdown(results: list[dict]) -> str:
    """One table per thread count of the channel-last workloads: every peer's median ms (or
    "n/a [k]", the reason as footnote k), the best peer, tvm_pool's speedups over LiteRT and
    the best peer, its channel-first twin's time and the ratio, the copy limit; above it the
    targets and whether they are met."""
    lines = ["# tvm_pool channel-last pooling benchmark", ""]
    for res in results:
        cl = res.get("channel_last")
        if not cl:
            continue
        t = res["threads"]
        notes: list[str] = []
        lines += [f"## {t} thread{'s' if t > 1 else ''}", "",
                  f"median of {res['repeat']} runs in {res.get('rounds', 1)} rounds (peers, tvm_pool's channel-first "
                  f"twin and the copy take turns); machine {res['machine']}", "",
                  *_target_lines(cl), "",
                  "| " + " | ".join(CL_COLUMNS) + " |", "|" + "---|" * len(CL_COLUMNS)]
        lines += ["| " + " | ".join(_cl_cells(r, notes)) + " |" for r in cl["rows"]]
        lines += [""] + [f"[{i}] {note}  " for i, note in enumerate(notes, 1)] + [""]
    return "\n".join(lines)


def _target_lines(cl: dict) -> list[str]:
    lines = [f"- tvm_pool speedup over the best peer, geometric mean: **{fmt(cl['geomean_speedup'], 'x')}**"]
    for key, (relation, bound) in channel_last.TARGETS.items():
        met = cl["targets_met"][key]
        verdict = "not measured" if met is None else ("met" if met else "**not met**")
        where = ""
        if key in _TARGET_ROWS and cl[key] is not None:
            where = f" ({_extreme_workload(cl['rows'], *_TARGET_ROWS[key])})"
        lines.append(f"- {_TARGET_TEXT[key]}: **{fmt(cl[key], 'x')}**{where}; target {relation} {bound:.2f}x: {verdict}")
    if cl.get("max_first_call_vs_channel_first") is not None:
        worst = _extreme_workload(cl["rows"], "first_call_vs_channel_first", max)
        lines.append("- the first call of each turn (the cache as the runner before left it; not a target): "
                     f"channel-last / channel-first {fmt(cl['geomean_first_call_vs_channel_first'], 'x')} "
                     f"geometric mean, worst {fmt(cl['max_first_call_vs_channel_first'], 'x')} ({worst})")
    return lines


def _extreme_workload(rows, field: str, pick) -> str:
    """The name of the workload whose ``field`` ``pick`` (max or min) chooses among the rows
    that have it."""
    return pick((r for r in rows if field in r), key=lambda r: r[field])["workload"]


def _cl_cells(r: dict, notes: list[str]) -> list[str]:
    def na(peer):
        reason = r["na"].get(peer, "")
        if reason not in notes:
            notes.append(reason)
        return f"n/a [{notes.index(reason) + 1}]"

    times = [f"{r['ms'][p]:.3f}" if p in r["ms"] else na(p) for p in channel_last.PEERS]
    cf = f"{r['channel_first_ms']:.3f}" if "channel_first_ms" in r else na(channel_last.CHANNEL_FIRST)
    shape = "x".join(str(n) for n in r["shape"]) + f" {r['layout']}"
    return [r["workload"], shape, r["dtype"], *times, r.get("best_peer", "-"), fmt(r.get("speedup_litert"), "x"),
            fmt(r.get("speedup"), "x"), cf, fmt(r.get("vs_channel_first"), "x"), f"{r['copy_ms']:.3f}",
            fmt(r.get("pct_copy"), "%", 0), fmt(r.get("compile_s"), "", 2)]


def plot_channel_last(results: list[dict], path: str) -> None:
    """Per thread count: every peer's and the channel-first twin's time over the copy limit
    (log scale), and tvm_pool's ratios (speedups over LiteRT and the best peer, channel-last /
    channel-first) with the targets as lines. Needs matplotlib (ImportError without)."""
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    cls = [res for res in results if res.get("channel_last")]
    fig, axes = plt.subplots(len(cls), 2, figsize=(18, 4.5 * len(cls)), squeeze=False)
    for (left, right), res in zip(axes, cls):
        rows = res["channel_last"]["rows"]
        _plot_cl_times(left, rows, res["threads"])
        _plot_cl_ratios(right, rows, res["threads"])
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _bars(ax, rows, series: dict):
    xs = np.arange(len(rows))
    width = 0.8 / len(series)
    for i, (label, vals) in enumerate(series.items()):
        ax.bar(xs + i * width, vals, width, label=label)
    ax.set_yscale("log")
    ax.set_xticks(xs + 0.4 - width / 2)
    ax.set_xticklabels([r["workload"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _plot_cl_times(ax, rows, threads):
    series = {p: [r["ms"][p] / r["copy_ms"] if p in r["ms"] else np.nan for r in rows] for p in channel_last.PEERS}
    series["tvm_pool channel-first"] = [r.get("channel_first_ms", np.nan) / r["copy_ms"] for r in rows]
    _bars(ax, rows, series)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_ylabel("time / copy limit (log, lower is better)")
    ax.set_title(f"channel-last, {threads} thread(s): time per peer")


def _plot_cl_ratios(ax, rows, threads):
    series = {"speedup over LiteRT": [r.get("speedup_litert", np.nan) for r in rows],
              "speedup over best peer": [r.get("speedup", np.nan) for r in rows],
              "channel-last / channel-first": [r.get("vs_channel_first", np.nan) for r in rows]}
    for (key, (relation, bound)), style in zip(channel_last.TARGETS.items(), (":", "--", "-.", "-")):
        ax.axhline(bound, color="gray", lw=0.8, ls=style, label=f"target: {_TARGET_SHORT[key]} {relation} {bound}")
    _bars(ax, rows, series)
    ax.set_ylabel("ratio (log)")
    ax.set_title(f"channel-last, {threads} thread(s): tvm_pool's ratios")


def write(results: list[dict], output_dir: str) -> str:
    """Writes bench.json, bench.md and (with matplotlib) bench.png under ``output_dir`` when
    the run timed any of the main workloads, and channel_last.{json,md,png} when it timed any
    channel-last one; returns the markdown."""
    os.makedirs(output_dir, exist_ok=True)
    with_cl = any(res.get("channel_last") for res in results)
    parts = []
    if any(res["rows"] for res in results) or not with_cl:
        parts.append(_write_set(output_dir, "bench", results, to_markdown(results), plot))
    if with_cl:
        cl_results = [{k: v for k, v in res.items() if k not in ("rows", "geomean_speedup")} for res in results]
        parts.append(_write_set(output_dir, "channel_last", cl_results, channel_last_markdown(results),
                                plot_channel_last))
    return "\n".join(parts)


def _write_set(output_dir: str, stem: str, data, md: str, chart) -> str:
    with open(os.path.join(output_dir, f"{stem}.json"), "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
    with open(os.path.join(output_dir, f"{stem}.md"), "w", encoding="utf-8") as fh:
        fh.write(md)
    try:
        chart(data, os.path.join(output_dir, f"{stem}.png"))
    except ImportError:
        print("matplotlib not installed: no chart", file=sys.stderr)
    return md


# --------------------------------------------------------------------------------------------
# GPU: the kernel-bound table
# --------------------------------------------------------------------------------------------

KERNEL_BOUND_SERIES = (("tvm_pool", "tvm_pool"), ("tvm", "stock TVM"), ("torch_graph", "PyTorch (CUDA graph)"),
                       ("torch", "PyTorch eager"))


def plot_kernel_bound(kernel_bound: dict, title: str, path: str) -> None:
    """The GPU benchmark's kernel-bound rows: each peer's share of the copy limit (copy time over
    its time; 100% = as fast as a device-to-device copy of the same bytes, the dashed line; the
    80% target dotted), one bar group per workload. Needs matplotlib (ImportError without)."""
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    rows = kernel_bound["rows"]
    fig, ax = plt.subplots(figsize=(14, 5))
    series = {label: [100.0 * r["copy_ms"] / r["ms"][p] if p in r["ms"] else np.nan for r in rows]
              for p, label in KERNEL_BOUND_SERIES}
    _bars(ax, rows, series)
    ax.set_yscale("linear")
    ax.axhline(100.0, color="k", lw=0.8, ls="--")
    ax.axhline(80.0, color="k", lw=0.8, ls=":")
    ax.set_ylabel("% of the copy limit (higher is better)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
