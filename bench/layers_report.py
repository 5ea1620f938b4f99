"""The layers benchmark's report (``tvm-pool bench --layers``, ``bench/layers.py``):
``layers.json`` (every figure), ``layers.md`` (per thread count, the summary and one table of
every case, worst speedup first) and ``layers.png`` (the speedups in the same order, and
tvm_pool's and the best peer's times over the copy limit), under ``bench/results`` unless told
otherwise.
"""

from __future__ import annotations

import json
import os

import numpy as np

from .peers import PEERS
from .report import _write_set  # pylint: disable=protected-access
from .summary import fmt, geomean

# Speedups over the best peer the summary counts the cases below of.
THRESHOLDS = (1.0, 1.2)
WORST = 10  # cases the summary names
MODELS_SHOWN = 3  # models named in a table cell; the rest counted ("+12")


def summary(rows: list[dict]) -> dict:
    """The geometric mean of tvm_pool's speedups over the best peer per batch
    (``geomean_by_batch``, keys the batch as a string) and overall (``geomean``), how many
    cases have a speedup (``n_speedup``, of ``n_cases``), how many are below each of
    THRESHOLDS (``below``: ``{"1.0": n, "1.2": n}``; ``below_layers``: the layers with a case
    below, of ``n_layers`` with a speedup), the WORST worst cases (``worst``:
    ``[[case, speedup]]``) and the cases without a speedup with the reason (``no_speedup``)."""
    timed = [r for r in rows if r.get("speedup")]
    batches = sorted({r["batch"] for r in rows})
    no_speedup = []
    for r in rows:
        if not r.get("speedup"):
            reason = r["na"].get("tvm_pool") if "tvm_pool" not in r["ms"] else "no other peer ran"
            no_speedup.append([r["workload"], reason])
    worst = sorted(timed, key=lambda r: r["speedup"])[:WORST]
    return {"n_cases": len(rows), "n_speedup": len(timed),
            "geomean": geomean([r["speedup"] for r in timed]),
            "geomean_by_batch": {str(b): geomean([r["speedup"] for r in timed if r["batch"] == b]) for b in batches},
            "below": {f"{t:.1f}": sum(r["speedup"] < t for r in timed) for t in THRESHOLDS},
            "below_layers": {f"{t:.1f}": len({r["layer"] for r in timed if r["speedup"] < t}) for t in THRESHOLDS},
            "n_layers": len({r["layer"] for r in timed}),
            "worst": [[r["workload"], r["speedup"]] for r in worst], "no_speedup": no_speedup}


def sorted_rows(rows: list[dict]) -> list[dict]:
    """The cases by speedup, worst first; those without a speedup last, in their order."""
    timed = sorted((r for r in rows if r.get("speedup")), key=lambda r: r["speedup"])
    return timed + [r for r in rows if not r.get("speedup")]


def models_cell(models: list[str], shown: int = MODELS_SHOWN) -> str:
    """The first ``shown`` model names and how many more (``resnet18, resnet34, resnet50 +12``)."""
    more = len(models) - shown
    return ", ".join(models[:shown]) + (f" +{more}" if more > 0 else "")


COLUMNS = ["#", "layer", "batch", "models", *PEERS, "best peer", "speedup", "copy limit ms", "% of copy"]


def to_markdown(results: list[dict]) -> str:
    """Per thread count: the summary lines, then every case sorted by speedup (worst first),
    a peer that did not run as "n/a [k]" with its reason as footnote k."""
    lines = ["# tvm_pool on the pooling layers of torchvision's classification models", ""]
    if results:
        lines += [_traced_line(results[0]), ""]
    for res in results:
        t = res["threads"]
        notes: list[str] = []
        lines += [f"## {t} thread{'s' if t > 1 else ''}", "",
                  f"median of {res['repeat']} runs in {res.get('rounds', 1)} rounds (peers take turns); "
                  f"machine {res['machine']}", "", *_summary_lines(res), "",
                  "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        for i, r in enumerate(sorted_rows(res["rows"]), 1):
            lines.append("| " + " | ".join(_cells(i, r, notes)) + " |")
        lines += [""] + [f"[{i}] {note}  " for i, note in enumerate(notes, 1)] + [""]
    return "\n".join(lines)


def _traced_line(res: dict) -> str:
    tr = res.get("traced") or {}
    sizes = ", ".join(f"{m} {s}x{s}" for m, s in (tr.get("image_sizes") or {}).items())
    no_pool = tr.get("no_pooling") or []
    return (f"{tr.get('layers', '?')} unique pooling layers traced from {tr.get('models', '?')} classification models "
            f"of torchvision {tr.get('torchvision', '?')} ({len(no_pool)} without pooling calls: "
            f"{', '.join(no_pool) or '-'}), batch-1 inputs of {tr.get('image_size', '?')}x{tr.get('image_size', '?')}"
            f"{' (' + sizes + ')' if sizes else ''}; this run timed {res.get('layers', '?')} of them, each at batch "
            f"{' and '.join(str(b) for b in sorted({r['batch'] for r in res['rows']})) or '-'}. \"speedup\": the best "
            "peer's time over tvm_pool's; \"% of copy\": the copy limit's time over tvm_pool's. A torch-road case "
            "(no ONNX model) is timed for tvm_pool, stock TVM and PyTorch only.")


def _summary_lines(res: dict) -> list[str]:
    s = res["summary"]
    by_batch = ", ".join(f"batch {b} **{fmt(g, 'x')}**" for b, g in s["geomean_by_batch"].items())
    below = ", ".join(f"**{n}** below {t}x" for t, n in s["below"].items())
    below_layers = ", ".join(f"{n} below {t}x" for t, n in s.get("below_layers", {}).items())
    lines = [f"- geometric mean speedup of tvm_pool over the best peer: {by_batch}, overall **{fmt(s['geomean'], 'x')}** "
             f"({s['n_speedup']} of {s['n_cases']} cases)",
             f"- cases: {below} (of {s['n_speedup']}); layers with a case below: {below_layers or '-'} "
             f"(of {s.get('n_layers', '-')})",
             "- worst: " + (", ".join(f"{name} {v:.2f}x" for name, v in s["worst"]) or "-")]
    for name, reason in s["no_speedup"]:
        lines.append(f"- no speedup for {name}: {reason}")
    torch_road = sorted({(r["layer"], r.get("road_reason", "")) for r in res["rows"] if r.get("road") == "torch"})
    for name, reason in torch_road:
        lines.append(f"- torch road (torch.export; no ONNX peers): {name}: {reason}")
    for name, reason in res.get("skipped", []):
        lines.append(f"- not timed: {name}: {reason}")
    for r in res["rows"]:
        if r.get("rerun"):  # a case timed again in a run of its own (every peer in it), e.g. after a stall
            lines.append(f"- timed again in a run of its own: {r['workload']}: {r['rerun']}")
    return lines


def _cells(i: int, r: dict, notes: list[str]) -> list[str]:
    def na(peer):
        reason = r["na"].get(peer, "")
        if reason not in notes:
            notes.append(reason)
        return f"n/a [{notes.index(reason) + 1}]"

    times = [f"{r['ms'][p]:.3f}" if p in r["ms"] else na(p) for p in PEERS]
    return [str(i), r["layer"], str(r["batch"]), models_cell(r["models"]), *times, r.get("best_peer", "-"),
            fmt(r.get("speedup"), "x"), f"{r['copy_ms']:.3f}", fmt(r.get("pct_copy"), "%", 0)]


def plot(results: list[dict], path: str) -> None:
    """Per thread count: tvm_pool's speedup over the best peer for every case, worst first
    (log scale, batch 1 and 8 in their own colours, 1.0x and 1.2x as lines), and below it
    tvm_pool's and the best peer's times over the copy limit in the same order. Needs
    matplotlib (ImportError without)."""
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    from matplotlib.patches import Patch  # pylint: disable=import-outside-toplevel

    n = max((len(res["rows"]) for res in results), default=1)
    fig, axes = plt.subplots(2 * len(results), 1, figsize=(max(12, 0.09 * n + 3), 9 * len(results)), squeeze=False)
    for k, res in enumerate(results):
        rows = [r for r in sorted_rows(res["rows"]) if r.get("speedup")]
        xs = np.arange(len(rows))
        top, bottom = axes[2 * k, 0], axes[2 * k + 1, 0]
        batches = sorted({r["batch"] for r in rows})
        colours = {b: f"C{i}" for i, b in enumerate(batches)}
        top.bar(xs, [r["speedup"] for r in rows], 0.8, color=[colours[r["batch"]] for r in rows])
        handles = [Patch(color=colours[b], label=f"batch {b}") for b in batches]
        for t, style in zip(THRESHOLDS, ("-", "--")):
            handles.append(top.axhline(t, color="k", lw=0.8, ls=style, label=f"{t:.1f}x"))
        top.set_yscale("log")
        top.set_ylabel("tvm_pool speedup over the best peer (log)")
        s = res["summary"]
        top.set_title(f"{res['threads']} thread(s): {len(rows)} cases, worst first; geomean "
                      + ", ".join(f"batch {b} {fmt(g, 'x')}" for b, g in s["geomean_by_batch"].items())
                      + f", overall {fmt(s['geomean'], 'x')}; " + ", ".join(f"{m} below {t}x" for t, m in s["below"].items()))
        top.legend(handles=handles, fontsize=8)
        bottom.plot(xs, [r["ms"]["tvm_pool"] / r["copy_ms"] for r in rows], "o", ms=3, label="tvm_pool")
        bottom.plot(xs, [r["best_peer_ms"] / r["copy_ms"] for r in rows], "x", ms=3, label="best peer")
        bottom.axhline(1.0, color="k", lw=0.8, ls="--")
        bottom.set_yscale("log")
        bottom.set_ylabel("time / copy limit (log, lower is better)")
        bottom.legend(fontsize=8)
        for ax in (top, bottom):
            ax.set_xlim(-1, max(len(rows), 1))
            ax.set_xticks(xs)
            ax.set_xticklabels([r["workload"] for r in rows], rotation=90, fontsize=4 if len(rows) > 60 else 7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: list[dict], output_dir: str) -> str:
    """Writes layers.json, layers.md and (with matplotlib) layers.png under ``output_dir``;
    returns the markdown. Each thread count's summary is made again from its rows; the figures
    are on disk before the table is drawn: an hour's run is not lost to a bug in the report."""
    os.makedirs(output_dir, exist_ok=True)
    for res in results:  # from the rows, as this version of the report counts
        res["summary"] = summary(res["rows"])
    with open(os.path.join(output_dir, "layers.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    return _write_set(output_dir, "layers", results, to_markdown(results), plot)
