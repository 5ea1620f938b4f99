"""What a tuning run reports: its results to the caller, its progress lines, and its entry in the
log's ``target.json``."""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass

import tvm

from ..targets import describe_target
from .logs import META_FILE, rules_stamp


@dataclass
class TaskResult:
    name: str
    kind: str  # "pool" (exhaustive) or "search" (evolutionary)
    trials: int = 0
    best_ms: float | None = None
    default_ms: float | None = None  # pooling: the hand-written schedule's time
    recorded: int = 0  # pooling: candidates written to the log (see pool_records_to_keep)
    best_label: str = ""


@dataclass
class TuneResult:
    log_dir: str
    target: dict
    tasks: list
    seconds: float
    trials: int
    emulated: str | None = None  # measured on the emulated device (RpcDevice.emulated): not hardware time
    stopped: str | None = None  # the search stopped early: "time budget" or "interrupted" (tuning.stop)


def fmt_secs(secs: float) -> str:
    """A duration in a progress line: "42s", "3m07s"."""
    secs = int(round(max(secs, 0)))
    return f"{secs // 60}m{secs % 60:02d}s" if secs >= 60 else f"{secs}s"


def fmt_ms(value) -> str:
    """A time in milliseconds in a progress line ("n/a" for none)."""
    return "n/a" if value is None else f"{value:.4g} ms"


@dataclass
class Run:
    """One tuning run, as ``target.json`` lists it."""

    source: str  # the model tuned
    trials: int  # the search budget asked for
    measured: int  # candidates measured, pooling included
    seconds: float
    remote: bool  # measured through the RPC tracker
    threads: int | None = None  # TVM threads the candidates ran with
    emulated: str | None = None  # the emulated device's description
    stopped: str | None = None  # "time budget" or "interrupted"


def write_meta(log_dir: str, target, run: Run) -> None:
    """Update ``target.json`` in ``log_dir``: the target tuned for, and ``run`` added to its runs
    (an unreadable file is started afresh)."""
    path = os.path.join(log_dir, META_FILE)
    meta = {}
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                meta = json.load(f)
        except (OSError, ValueError):  # the logs' reader warns about it; this run rewrites it
            meta = {}
    if not isinstance(meta, dict):
        meta = {}
    described = describe_target(target)
    meta.update(family=described["family"], target=described["target"], features=described["features"])
    meta["tvm"] = str(tvm.__version__)
    meta["rules"] = rules_stamp()  # the schedule rules its pooling records were measured with
    meta.setdefault("runs", []).append(
        {
            "model": run.source,
            "trials": run.trials,
            "measurements": run.measured,
            "seconds": round(run.seconds, 1),
            "rpc": run.remote,
            # TVM threads the candidates ran with: a record's choice (a pool on one thread or on
            # all of them) holds for that count
            **({"threads": run.threads} if run.threads else {}),
            **({"emulated": run.emulated} if run.emulated else {}),
            **({"stopped": run.stopped} if run.stopped else {}),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    )
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
