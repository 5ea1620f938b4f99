"""Tuning: MetaSchedule over every task of a model, per-target logs, and applying them.

``tune(mod, target, trials=..., log_dir=..., rpc=...)`` extracts the tasks ``compile`` will see
(tvm_pool's legalization, then TVM's fusion: :func:`tvm_pool.lowering.fuse`) and tunes them all:

* **pooling tasks** (a PrimFunc tvm_pool's schedule rule takes): every point of the pooling design
  space (:func:`tvm_pool.schedules.meta_schedule.pool_candidates`, the hand-written schedule
  first) is built and measured, the search is exhaustive. These trials are not counted in
  ``trials``.
* **every other task** (convolutions, matmuls, whatever FuseOps makes): MetaSchedule's
  evolutionary search with its cost model, ``trials`` measurements in all, shared by the
  gradient task scheduler. tvm_pool's schedules are registered as MetaSchedule custom rules
  first, so pooling blocks inside these tasks get tvm_pool's design space, not TVM's defaults.

The result is a MetaSchedule JSON database (``database_workload.json`` /
``database_tuning_record.json``, readable by TVM's own ``JSONDatabase``) plus ``target.json``:
the target it was tuned on, its family (``x86-avx512``, ``x86-avx2``, ``aarch64-neon``,
``cuda-sm_90``, ...) and ISA features, and one entry per tuning run.

``load_logs(target, dirs, shipped=True)`` is what ``tvm_pool.compile(..., tuning_logs=[...])``
uses. TVM's database lookup ignores the target, so tvm_pool checks it: a log tuned for another
target family, or on a target with ISA features this target lacks, gives a
:class:`TuningLogWarning` and is not used. Corrupt or truncated lines give a warning naming
the file and are skipped; the file's other records are used; a record whose schedule does not
replay on its workload is dropped. Nothing in a log can fail a build.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field

import tvm

from .errors import TvmPoolError
from .targets import export_compiler, foreign_triple, num_cores, resolve_target

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
META_FILE = "target.json"

# ISA features recorded per architecture (LLVM's names, asked with target_has_features).
_FEATURES = {
    "x86": (
        "sse4.2", "avx", "avx2", "fma", "f16c", "bmi2",
        "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512vnni", "avx512bf16",
        "avx512fp16", "avxvnni", "amx-tile",
    ),
    "aarch64": ("neon", "fullfp16", "dotprod", "i8mm", "bf16", "sve", "sve2"),
}


class TuningLogWarning(UserWarning):
    """A tuning log that is not used, or is used only in part."""


# --------------------------------------------------------------------------------------------
# Target families
# --------------------------------------------------------------------------------------------


def _arch(target: tvm.target.Target) -> str:
    if target.kind.name == "cuda":
        return "cuda"
    if target.kind.name != "llvm":
        return str(target.kind.name)
    from .schedules import x86  # pylint: disable=import-outside-toplevel

    return "x86" if x86.is_x86(target) else "aarch64"


def target_features(target: tvm.target.Target) -> list[str]:
    """The ISA features of ``target`` among those a log records (LLVM's names)."""
    arch = _arch(target)
    if arch == "cuda":
        return [str(target.attrs.get("arch", "") or "")]
    has = tvm.target.codegen.target_has_features
    found = []
    for feature in _FEATURES.get(arch, ()):
        try:
            if has(feature, target):
                found.append(feature)
        except Exception:  # pylint: disable=broad-except
            pass
    return found


def target_family(target) -> str:
    """``x86-avx512``, ``x86-avx2``, ``x86-sse``, ``aarch64-sve``, ``aarch64-neon``,
    ``cuda-sm_90``: one directory of shipped logs per family."""
    target = resolve_target(target)
    arch = _arch(target)
    if arch == "cuda":
        return f"cuda-{target.attrs.get('arch', 'unknown')}"
    features = set(target_features(target))
    if arch == "x86":
        return "x86-avx512" if "avx512f" in features else ("x86-avx2" if "avx2" in features else "x86-sse")
    if arch == "aarch64":
        return "aarch64-sve" if "sve" in features else "aarch64-neon"
    return arch


def _target_json(target: tvm.target.Target) -> dict:
    def plain(value):
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        if isinstance(value, tvm.target.Target):
            return _target_json(value)
        if hasattr(value, "items"):
            return {str(k): plain(v) for k, v in value.items()}
        if hasattr(value, "__iter__"):
            return [plain(v) for v in value]
        return str(value)

    return plain(target.export())


def describe_target(target) -> dict:
    target = resolve_target(target)
    return {"family": target_family(target), "target": _target_json(target), "features": target_features(target)}


def mismatch(log_meta: dict, target: tvm.target.Target) -> str | None:
    """Why a log tuned as ``log_meta`` (``target.json``) must not be applied to ``target``."""
    family = target_family(target)
    log_family = str(log_meta.get("family", ""))
    if log_family.split("-")[0] != family.split("-")[0]:
        return f"tuned for {log_family or 'an unknown target'}, not {family}"
    if family.startswith("cuda"):
        return None if log_family == family else f"tuned for {log_family}, not {family}"
    missing = sorted(set(log_meta.get("features", [])) - set(target_features(target)))
    if missing:
        return f"tuned for {log_family} with ISA features this target lacks: {', '.join(missing)}"
    return None


def shipped_log_dir(target) -> str:
    """Where the package keeps the logs for ``target``'s family (may not exist)."""
    from . import tuning_logs  # pylint: disable=import-outside-toplevel

    return os.path.join(os.path.dirname(tuning_logs.__file__), target_family(target))


# --------------------------------------------------------------------------------------------
# Loading logs (tolerant)
# --------------------------------------------------------------------------------------------


def _warn(message: str) -> None:
    warnings.warn(message, TuningLogWarning, stacklevel=3)


def read_meta(log_dir: str) -> dict | None:
    """``target.json`` of a log directory (None when missing or unreadable, with a warning)."""
    path = os.path.join(log_dir, META_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
        return meta
    except (OSError, ValueError) as err:
        _warn(f"tuning log {path}: unreadable ({err}); the target is taken from the records")
        return None


def _json_lines(path: str):
    """(line number, parsed JSON or None, error) for every non-empty line."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line), None
            except ValueError as err:
                yield lineno, None, err


@dataclass
class LogRecords:
    """The usable records of one log directory: per workload, its records best first."""

    log_dir: str
    meta: dict | None
    records: list = field(default_factory=list)  # [(workload, [TuningRecord, ...])]
    bad_lines: list = field(default_factory=list)  # ["file:line (why)"]


def _mean(run_secs) -> float:
    values = [float(v) for v in (run_secs or [])]
    return sum(values) / len(values) if values else float("inf")


def pool_records_to_keep(measured):
    """Of the measured pooling candidates ``[(label, schedule, run_secs, ms), ...]``, those whose
    records go in the log: the hand-written schedule, and each knob that beat it by at least
    ``POOL_MIN_GAIN`` (a gain within the noise of a measurement did not hold up when re-timed,
    and the database applies whatever record is fastest)."""
    default_ms = _hand_written_ms(measured)
    return [item for item in measured
            if item[0].startswith("hand-written") or default_ms is None or item[3] <= default_ms * (1 - POOL_MIN_GAIN)]


def _hand_written_ms(measured):
    """The hand-written candidate's time among ``[(label, schedule, run_secs, ms), ...]`` (None
    when it did not run)."""
    return next((ms for label, _, _, ms in measured if label.startswith("hand-written")), None)


def _median(values) -> float:
    ordered = sorted(values)
    return (ordered[(len(ordered) - 1) // 2] + ordered[len(ordered) // 2]) / 2


def read_log(log_dir: str) -> LogRecords:
    """Read a log directory line by line: good lines are kept, bad ones are listed. Records stay
    JSON (best first per workload) until used: parsing all of them (TVM's TuningRecord.from_json,
    35 ms each here) made every compile with a shipped log 10 s slower."""
    from tvm.s_tir.meta_schedule.database import Workload  # pylint: disable=import-outside-toplevel

    out = LogRecords(log_dir, read_meta(log_dir))
    wl_path, rec_path = os.path.join(log_dir, WORKLOAD_FILE), os.path.join(log_dir, RECORD_FILE)
    workloads: list = []
    for lineno, obj, err in _json_lines(wl_path):
        workload = None
        if err is None:
            try:
                workload = Workload.from_json(obj)
            except Exception as parse_err:  # pylint: disable=broad-except
                err = parse_err
        if workload is None:
            out.bad_lines.append(f"{wl_path}:{lineno} ({_short(err)})")
        workloads.append(workload)
    by_workload: dict[int, list] = {}
    for lineno, obj, err in _json_lines(rec_path):
        if err is None:
            try:
                index = int(obj[0])
                if not 0 <= index < len(workloads) or workloads[index] is None:
                    raise ValueError(f"workload {index} missing or corrupt")
                secs = _mean(obj[1][1])  # [trace, run_secs, target, args_info]
            except Exception as parse_err:  # pylint: disable=broad-except
                err = parse_err
        if err is not None:
            out.bad_lines.append(f"{rec_path}:{lineno} ({_short(err)})")
            continue
        if secs < 1e9:  # MetaSchedule stores 1e10 for candidates that failed to build or run
            by_workload.setdefault(index, []).append((secs, obj[1], f"{rec_path}:{lineno}"))
    for index, recs in by_workload.items():
        recs.sort(key=lambda r: r[0])
        out.records.append((workloads[index], recs))
    return out


def _parse_record(raw, workload):
    """A TuningRecord from its JSON (raise on a corrupt one)."""
    from tvm.s_tir.meta_schedule.database import TuningRecord  # pylint: disable=import-outside-toplevel

    return TuningRecord.from_json(raw, workload)


def _short(err) -> str:
    text = str(err).strip().splitlines()
    return (text[-1] if text else type(err).__name__)[:120]


def _replays(record) -> bool:
    from tvm import s_tir  # pylint: disable=import-outside-toplevel

    try:
        sch = s_tir.Schedule(record.workload.mod)
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        return True
    except Exception:  # pylint: disable=broad-except
        return False


def _log_target_meta(logs: LogRecords) -> dict | None:
    if logs.meta is not None and logs.meta.get("family"):
        return logs.meta
    for _, records in logs.records:  # a log written by MetaSchedule alone: its records' target
        for _, raw, _ in records:
            try:
                if raw[2] is not None:
                    return describe_target(tvm.target.Target(raw[2]))
            except Exception:  # pylint: disable=broad-except
                continue
    return None


_CACHE: dict = {}


def load_logs(target, dirs=None, *, shipped: bool = True):
    """A MetaSchedule database with the best usable record per workload from ``dirs`` (and the
    shipped logs of ``target``'s family when ``shipped``); None when there is none."""
    return _load(target, dirs, shipped)[0]


_LOADED: dict = {}


def _load(target, dirs, shipped):
    """(database, {workload key: log dir}), cached per process on the logs' files and the
    target's family and features; the warnings are given again on every call."""
    target = resolve_target(target)
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]
    candidates = [(os.fspath(d), True) for d in (dirs or [])]
    if shipped:
        candidates.append((shipped_log_dir(target), False))
    key = (
        tuple((os.path.abspath(d), explicit, _stamp(d)) for d, explicit in candidates),
        target_family(target),
        tuple(target_features(target)),
        SHIPPED_POOLING_RECORDS,
        runtime_threads(),
    )
    if key not in _LOADED:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loaded = _load_uncached(target, candidates)
        _LOADED[key] = (loaded, [str(w.message) for w in caught if issubclass(w.category, TuningLogWarning)])
    loaded, messages = _LOADED[key]
    for message in messages:
        _warn(message)
    return loaded


def _stamp(log_dir: str) -> tuple:
    paths = [os.path.join(log_dir, f) for f in (WORKLOAD_FILE, RECORD_FILE, META_FILE)]
    return tuple((os.stat(p).st_mtime_ns, os.stat(p).st_size) if os.path.exists(p) else None for p in paths)


def _load_uncached(target, candidates):
    from tvm.s_tir.meta_schedule.database import MemoryDatabase, TuningRecord  # pylint: disable=import-outside-toplevel

    best: dict = {}  # structural key -> (secs, record)
    for log_dir, explicit in candidates:
        if not os.path.isdir(log_dir):
            if explicit:
                _warn(f"tuning log {log_dir}: not a directory; not used")
            continue
        if not any(os.path.exists(os.path.join(log_dir, f)) for f in (WORKLOAD_FILE, RECORD_FILE)):
            if explicit:
                _warn(f"tuning log {log_dir}: no {WORKLOAD_FILE} / {RECORD_FILE}; not used")
            continue
        try:
            logs = _read_cached(log_dir)
        except OSError as err:
            _warn(f"tuning log {log_dir}: unreadable ({err}); not used")
            continue
        if logs.bad_lines:
            shown = "; ".join(logs.bad_lines[:3]) + (f"; ... {len(logs.bad_lines) - 3} more" if len(logs.bad_lines) > 3 else "")
            _warn(f"tuning log {log_dir}: {len(logs.bad_lines)} corrupt line(s) skipped, its other records are used: {shown}")
        meta = _log_target_meta(logs)
        if meta is None:
            if logs.records:
                _warn(f"tuning log {log_dir}: no {META_FILE} and no target in its records; not used")
            continue
        why = mismatch(meta, target)
        if why is not None:
            _warn(f"tuning log {log_dir}: {why}; not used")
            continue
        pooling_applies = explicit or (SHIPPED_POOLING_RECORDS and tuned_threads(meta) == {runtime_threads()})
        for workload, records in logs.records:
            if not pooling_applies and _is_pooling(workload.mod):
                continue
            key = tvm_ffi_key(workload.mod)
            if key in best and best[key][0] <= records[0][0]:
                continue
            good = None
            for secs, raw, where in records:
                try:
                    record = _parse_record(raw, workload)
                except Exception as err:  # pylint: disable=broad-except
                    _warn(f"tuning log {log_dir}: corrupt record skipped, the others are used: {where} ({_short(err)})")
                    continue
                if _replays(record):
                    good = (secs, record)
                    break
                _warn(f"tuning log {log_dir}: a schedule that does not replay on its workload skipped: {where}")
            if good is None:
                continue
            best[key] = (good[0], good[1], log_dir)
    if not best:
        return None, {}
    database = MemoryDatabase()
    for _, record, _ in best.values():
        workload = database.commit_workload(record.workload.mod)
        database.commit_tuning_record(
            TuningRecord(record.trace, workload, record.run_secs, record.target, record.args_info)
        )
    return database, {key: log_dir for key, (_, _, log_dir) in best.items()}


# Whether the shipped logs' pooling records are applied (a log the user passes is applied in
# full either way). They are, when this process runs as many TVM threads as the log was tuned
# with: a pool's best schedule depends on the thread count (rows and planes in parallel won by
# 9% on two threads and lost by 5% on one, AVX2 Relu -> MaxPool -> Add). Re-tuned on a quiet
# machine, each knob kept only when clearly faster than the hand-written schedule, then re-timed
# against it on every benchmark workload (`python -m tvm_pool.bench.tune_shipped --what verify`,
# bench/results/tuned_pools_*.md): none slower beyond the noise of timing one module twice. An
# earlier log, measured with one TVM thread while other jobs ran, made two pools 2x slower at two
# threads. False keeps the hand-written pooling schedules with the shipped logs.
SHIPPED_POOLING_RECORDS = True


def runtime_threads() -> int:
    """TVM's thread count in this process (what a module compiled here runs with)."""
    return int(tvm.get_global_func("runtime.NumThreads")())


def tuned_threads(log_meta: dict) -> set:
    """The TVM thread counts a log's runs were measured with (``target.json``; empty for a log
    that predates the field)."""
    return {run["threads"] for run in log_meta.get("runs", []) if isinstance(run, dict) and "threads" in run}


def _is_pooling(mod) -> bool:
    """Whether a tuning workload is a pooling PrimFunc (it has a tvm_pool or TOPI pool block)."""
    from tvm import s_tir  # pylint: disable=import-outside-toplevel

    from .schedules import analysis  # pylint: disable=import-outside-toplevel

    try:
        sch = s_tir.Schedule(mod)
        return any(analysis.is_pool_block(sch.get(rv)) for rv in analysis.root_blocks(sch))
    except Exception:  # pylint: disable=broad-except
        return False


def _read_cached(log_dir: str) -> LogRecords:
    key = (os.path.abspath(log_dir), _stamp(log_dir))
    if key not in _CACHE:
        _CACHE[key] = read_log(log_dir)
    return _CACHE[key]


def tvm_ffi_key(mod) -> int:
    import tvm_ffi  # pylint: disable=import-outside-toplevel

    return int(tvm_ffi.structural_hash(mod))


def _task_name(mod) -> str:
    for gv, _ in mod.functions_items():
        return gv.name_hint
    return "?"


def records_for(mod, target, dirs=None, *, shipped: bool = True) -> list[tuple[str, str]]:
    """For each PrimFunc ``compile`` would build from the Relax module ``mod``: (name, which
    tuning record it gets, or why none). ``inspect`` prints these."""
    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    from . import lowering  # pylint: disable=import-outside-toplevel

    target = resolve_target(target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningLogWarning)
        database, sources = _load(target, dirs, shipped)
    fused = lowering.fuse(mod, target)
    out = []
    for task in ms.relax_integration.extract_tasks(fused, target):
        task_mod = task.dispatched[0]
        record = None
        if database is not None and database.has_workload(task_mod):
            top = database.get_top_k(database.commit_workload(task_mod), 1)
            record = top[0] if top else None
        if record is None:
            out.append((task.task_name, "none"))
            continue
        source = sources.get(tvm_ffi_key(task_mod), "?")
        out.append((task.task_name, f"{_mean(record.run_secs) * 1e3:.4g} ms, {len(record.trace.insts)}-step schedule from {source}"))
    return out


# --------------------------------------------------------------------------------------------
# Tuning
# --------------------------------------------------------------------------------------------


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


def _export_so(rt_mod, fcompile) -> str:
    """Builder export: a shared object made with the target's toolchain (``fcompile``, a cross
    g++ for another CPU), so a device needs no compiler, only TVM's runtime."""
    path = os.path.join(tempfile.mkdtemp(prefix="tvm_pool_tune_"), "tvm_tmp_mod.so")
    if fcompile is None:
        rt_mod.export_library(path)
    else:
        rt_mod.export_library(path, fcompile=fcompile)
    return path


def _in_process_builder(fcompile):
    """A builder that builds in this process. MetaSchedule's LocalBuilder starts fresh worker
    processes for every batch, each importing TVM (7-11 s on a loaded 2-core machine), and its
    per-candidate timeout then counts the import: measured here, 6 pooling candidates took
    140 s and all timed out at 30 s. Here one build of such a candidate takes 0.15 s + 0.2 s
    export. (The price: a build that hangs hangs the tuner; TVM's builds of these schedules
    do not.) Tensor intrinsics (int8 dot products) are registered only when a task needs them."""
    # pylint: disable=import-outside-toplevel
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    @derived_object
    class InProcessBuilder(PyBuilder):
        def build(self, build_inputs):  # noqa: D102
            results = []
            for item in build_inputs:
                try:
                    # MetaSchedule's default_build, without its `import tvm.s_tir.tensor_intrin`
                    # (54-180 s on this loaded machine; float schedules use no tensor intrinsics)
                    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(item.mod)
                    rt_mod = tvm.tirx.build(mod, target=item.target)
                    results.append(BuilderResult(_export_so(rt_mod, fcompile), None))
                except Exception as err:  # pylint: disable=broad-except
                    results.append(BuilderResult(None, f"InProcessBuilder: {_short(err)}"))
            return results

    return InProcessBuilder()


def _in_process_runner(evaluator_config, on_batch=None):
    """A runner that loads and times each candidate in this process (see _in_process_builder).
    ``on_batch(n)`` is called after each batch of ``n`` candidates is measured."""
    # pylint: disable=import-outside-toplevel
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerResult
    from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument, default_run_evaluator

    class _Done(PyRunnerFuture):
        def __init__(self, result):
            super().__init__()
            self._result = result

        def done(self):  # noqa: D102
            return True

        def result(self):  # noqa: D102
            return self._result

    done = derived_object(_Done)

    @derived_object
    class InProcessRunner(PyRunner):
        def run(self, runner_inputs):  # noqa: D102
            futures = []
            for item in runner_inputs:
                try:
                    rt_mod = tvm.runtime.load_module(item.artifact_path)
                    device = tvm.runtime.device(str(item.device_type), 0)
                    args = default_alloc_argument(device, [a.as_json() for a in item.args_info], 1)
                    secs = default_run_evaluator(rt_mod, device, evaluator_config, args)
                    futures.append(done(RunnerResult([float(x) for x in secs], None)))
                except Exception as err:  # pylint: disable=broad-except
                    futures.append(done(RunnerResult(None, f"InProcessRunner: {_short(err)}")))
            if on_batch is not None:
                on_batch(len(runner_inputs))
            return futures

    return InProcessRunner()


def rpc_config(rpc):
    """``{"tracker": "HOST:PORT", "key": KEY}`` or ``"HOST:PORT/KEY"`` -> RPCConfig."""
    from tvm.s_tir.meta_schedule.runner import RPCConfig  # pylint: disable=import-outside-toplevel

    if isinstance(rpc, RPCConfig):
        return rpc
    if isinstance(rpc, str):
        tracker, _, key = rpc.partition("/")
        rpc = {"tracker": tracker, "key": key}
    tracker, key = rpc.get("tracker", ""), rpc.get("key", "")
    host, _, port = str(tracker).rpartition(":")
    if not host or not port.isdigit() or not key:
        raise TvmPoolError(f"invalid RPC tracker {tracker!r} / key {key!r}: use HOST:PORT and a key")
    return RPCConfig(
        tracker_host=host,
        tracker_port=int(port),
        tracker_key=str(key),
        session_timeout_sec=int(rpc.get("timeout", 60)),
    )


@dataclass
class RpcDevice:
    """What :func:`rpc_device` learnt from the device behind the tracker."""

    threads: int  # TVM's thread count there: the target's num-cores when it names none
    emulated: str | None = None  # the emulated device's description; None for real hardware


def rpc_device(rpc) -> RpcDevice:
    """Check the tracker and the device before tuning, and ask the device what it is.

    MetaSchedule's runner waits on the tracker for every candidate, so a tracker that does not
    answer, or has no server under the key, fails here in one line (TvmPoolError) instead. One
    session is then opened: an RPC server started by :mod:`tvm_pool.emulation` answers
    ``EMULATED_DEVICE_FUNC`` with a description of the emulation (its timings are not the
    hardware's); a real device has no such function."""
    import socket  # pylint: disable=import-outside-toplevel

    from tvm import rpc as tvm_rpc  # pylint: disable=import-outside-toplevel

    from .emulation import EMULATED_DEVICE_FUNC  # pylint: disable=import-outside-toplevel

    config = rpc_config(rpc)
    where = f"{config.tracker_host}:{config.tracker_port}"
    try:
        # TVM's own connect retries a refused connection for 60 s
        socket.create_connection((config.tracker_host, config.tracker_port), timeout=10).close()
        summary = tvm_rpc.connect_tracker(config.tracker_host, config.tracker_port).summary()
    except Exception as err:  # pylint: disable=broad-except
        raise TvmPoolError(f"RPC tracker {where} does not answer: {_short(err)}") from None
    keys = sorted({str(item.get("key", "")).partition(":")[2] for item in summary.get("server_info", [])})
    if config.tracker_key not in keys:
        raise TvmPoolError(
            f"no RPC server with key {config.tracker_key!r} on the tracker {where} "
            f"(registered: {', '.join(map(repr, keys)) or 'none'})"
        )
    session = config.connect_server()
    device = RpcDevice(threads=int(session.get_function("runtime.NumThreads")()))
    try:
        device.emulated = str(session.get_function(EMULATED_DEVICE_FUNC)())
    except AttributeError:  # real hardware
        pass
    return device


def _with_num_cores(target, cores: int):
    """``target`` with ``num-cores`` (MetaSchedule's CPU rules refuse a target without it, and
    the aliases "arm" and "x86" name none: the device's count is known only when tuning)."""
    if target.kind.name != "llvm" or "num-cores" in target.attrs:
        return target
    return tvm.target.Target({**_target_json(target), "num-cores": int(cores)})


def _rpc_alloc_argument(session, device, args_info, alloc_repeat):
    """RPCRunner's ``f_alloc_argument``. MetaSchedule's default fills the inputs on the device
    with ``tvm.contrib.random.random_fill_for_measure``, which TVM's runtime-only library (all a
    device without a compiler has, e.g. the aarch64 wheel's) lacks: there they are filled here
    by the same function and copied to the device."""
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    name = "tvm.contrib.random.random_fill_for_measure"
    try:
        fill = session.get_function(name)
    except AttributeError:
        fill_here = tvm.get_global_func(name)

        def fill(tensor):
            host = tvm.runtime.empty(tensor.shape, tensor.dtype, tvm.cpu())
            fill_here(host)
            host.copyto(tensor)

    return alloc_argument_common(fill, device, args_info, alloc_repeat)


# Settings for a small machine (2 cores): measured in the README's Tune section.
EVALUATOR = dict(number=5, repeat=3, min_repeat_ms=20, enable_cpu_cache_flush=False)
# Pooling candidates: rounds over all of them, and the gain a knob needs over the hand-written
# schedule to be recorded. Measured on the benchmark's workloads (2 threads, znver4): with one
# round, a knob that timed 18% faster (3x3 s2 ceil max) was 1-3% slower when re-timed; the
# spread between rounds of one candidate is about 2-4%.
POOL_ROUNDS = 3
POOL_MIN_GAIN = 0.05
SEARCH = dict(
    population_size=64,
    init_measured_ratio=0.2,
    init_min_unmeasured=16,
    max_fail_count=5,
    genetic_num_iters=2,
    genetic_mutate_prob=0.85,
    genetic_max_fail_count=5,
    eps_greedy=0.05,
)


def _fmt_secs(secs: float) -> str:
    secs = int(round(max(secs, 0)))
    return f"{secs // 60}m{secs % 60:02d}s" if secs >= 60 else f"{secs}s"


def tune(  # pylint: disable=too-many-arguments,too-many-locals,too-many-statements
    mod: tvm.IRModule,
    target="host",
    *,
    trials: int = 64,
    log_dir: str | None = None,
    rpc=None,
    trials_per_iter: int | None = None,
    seed: int | None = 0,
    source: str = "",
    progress=None,
    time_budget_s: float | None = None,
) -> TuneResult:
    """Tune every task of the Relax module ``mod`` for ``target`` and write the log.

    ``trials``: measurements for the evolutionary search over the non-pooling tasks (pooling
    tasks are searched exhaustively on top). ``log_dir``: where the database goes (default
    ``./tuning_logs/<family>``); an existing log there is extended. ``rpc``: measure on a
    device registered with TVM's RPC tracker, ``{"tracker": "HOST:PORT", "key": KEY}``; the
    builder then cross-compiles with the target's toolchain (required for another CPU's target),
    and :func:`rpc_device` checks the tracker first (``TuneResult.emulated`` says when the device
    is :mod:`tvm_pool.emulation`'s, whose timings are not hardware time). ``progress``: a callable taking
    one line (default: print to stderr). ``time_budget_s``: stop the search after this long
    (the trials measured so far are in the log).
    """
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, RPCRunner, RunnerInput

    from . import lowering, schedules
    from .schedules import meta_schedule as ms_rules
    from .schedules import x86

    # pylint: enable=import-outside-toplevel
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    target = resolve_target(target)
    if trials < 0:
        raise TvmPoolError(f"--trials must be >= 0, got {trials}")
    # Everything that can fail in one line fails before anything is written or slow.
    fcompile = export_compiler(target)  # a missing cross toolchain
    if not rpc and foreign_triple(target):
        raise TvmPoolError(
            f"target {foreign_triple(target)} is not this machine's CPU: its candidates cannot be measured here; "
            "measure them on the device through TVM's RPC tracker (tvm-pool tune --rpc-tracker HOST:PORT --rpc-key KEY)"
        )
    device = rpc_device(rpc) if rpc else None
    emulated = device.emulated if device else None
    measuring_threads = device.threads if device else runtime_threads()
    target = _with_num_cores(target, device.threads if device else num_cores())
    log_dir = log_dir or os.path.join("tuning_logs", target_family(target))
    os.makedirs(log_dir, exist_ok=True)
    schedules.register_meta_schedule_rules()
    start = time.time()
    deadline = start + time_budget_s if time_budget_s else None

    fused = lowering.fuse(mod, target)
    tasks = list(ms.relax_integration.extract_tasks(fused, target))
    pool_tasks, search_tasks = [], []
    for task in tasks:
        if task.mod.attrs is not None and task.mod.attrs.get("tirx.is_scheduled", False):
            continue
        cands = ms_rules.pool_candidates(task.dispatched[0], target) if x86.is_x86(target) else []  # x86 design space
        (pool_tasks if cands else search_tasks).append((task, cands))
    say(
        f"tuning {source or 'model'} for {target_family(target)} ({target.attrs.get('mcpu', target.kind.name)}): "
        f"{len(tasks)} tasks, {len(pool_tasks)} pooling (exhaustive, "
        f"{sum(len(c) for _, c in pool_tasks)} candidates), {len(search_tasks)} searched with {trials} trials"
        + (", measuring through the RPC tracker" if rpc else "")
        + (f" on {device.emulated}" if device and device.emulated else "")
    )

    workers = num_cores()
    builder = _in_process_builder(fcompile)
    evaluator = EvaluatorConfig(**EVALUATOR)
    if rpc:
        runner = RPCRunner(rpc_config=rpc_config(rpc), evaluator_config=evaluator, max_workers=1,
                           f_alloc_argument=_rpc_alloc_argument)
    else:
        runner = _in_process_runner(evaluator, on_batch=lambda n: _count(n))
    database = JSONDatabase(work_dir=log_dir)
    results: list[TaskResult] = []
    # The gradient scheduler hands measured batches to the callbacks (the per-task progress
    # lines) only when it joins a task, after its first round over every task; this line
    # reports the search's measurements as they happen.
    measuring = {"total": 0, "done": 0, "start": None}

    def _count(n):
        if measuring["start"] is None:
            return  # pooling candidates: reported per task below
        measuring["done"] += n
        elapsed = time.time() - measuring["start"]
        left = max(measuring["total"] - measuring["done"], 0)
        say(
            f"[search] {measuring['done']}/{measuring['total']} trials measured, {_fmt_secs(elapsed)} elapsed, "
            f"ETA {_fmt_secs(elapsed / measuring['done'] * left)}"
        )

    device_type = "cuda" if target.kind.name == "cuda" else "cpu"

    # 1. pooling tasks: every design-space point, measured.
    for index, (task, cands) in enumerate(pool_tasks):
        task_mod = task.dispatched[0]
        func = task_mod["main"]
        args_info = ArgInfo.from_prim_func(func)
        built = builder.build([BuilderInput(sch.mod, target) for _, sch in cands])
        inputs, order = [], []
        for (label, sch), res in zip(cands, built):
            if res.error_msg is None:
                inputs.append(RunnerInput(res.artifact_path, device_type, args_info))
                order.append((label, sch))
        # Rounds over every candidate in turn, so a drift of the machine (another job, the clock)
        # hits every candidate alike; a candidate's time is the mean of its per-round medians.
        rounds = [[r.result() for r in runner.run(inputs)] for _ in range(POOL_ROUNDS)] if inputs else []
        workload = database.commit_workload(task_mod)
        result = TaskResult(task.task_name, "pool", trials=len(cands))
        timed = []
        for i, (label, sch) in enumerate(order):
            per_round = [r[i] for r in rounds]
            if any(res.error_msg is not None or not res.run_secs for res in per_round):
                continue
            secs = [_median([float(s) for s in res.run_secs]) for res in per_round]
            timed.append((label, sch, secs, _mean(secs) * 1e3))
        result.default_ms = _hand_written_ms(timed)
        for label, sch, secs, ms_time in pool_records_to_keep(timed):
            database.commit_tuning_record(TuningRecord(sch.trace, workload, secs, target, args_info))
            result.recorded += 1
            if result.best_ms is None or ms_time < result.best_ms:
                result.best_ms, result.best_label = ms_time, label
        for res in built:
            if res.artifact_path:
                _remove_artifact(res.artifact_path)
        results.append(result)
        elapsed = time.time() - start
        say(
            f"[pool {index + 1}/{len(pool_tasks)}] {task.task_name}: {len(cands)}/{len(cands)} candidates, "
            f"best {_ms(result.best_ms)} ({result.best_label.split(' = ')[0]}), hand-written {_ms(result.default_ms)}; "
            f"{_fmt_secs(elapsed)} elapsed, ETA pooling {_fmt_secs(elapsed / (index + 1) * (len(pool_tasks) - index - 1))}"
        )

    # 2. every other task: evolutionary search.
    if search_tasks and trials > 0:
        # The first round gives every task one batch; half the budget, so the cost model and the
        # gradient scheduler choose where the other half goes.
        per_iter = trials_per_iter or max(4, min(64, trials // max(2 * len(search_tasks), 1)))
        measuring.update(total=trials, start=time.time())
        contexts, weights = [], []
        with _cpu_tensor_intrin(target):
            for offset, (task, _) in enumerate(search_tasks):
                contexts.append(
                    ms.TuneContext(
                        mod=task.dispatched[0],
                        target=target,
                        space_generator="post-order-apply",
                        search_strategy=ms.search_strategy.EvolutionarySearch(**SEARCH),
                        task_name=task.task_name,
                        rand_state=-1 if seed is None else seed + offset,
                        num_threads=workers,
                    ).clone()
                )
                weights.append(float(task.weight))
        search_results = {i: TaskResult(t.task_name, "search") for i, (t, _) in enumerate(search_tasks)}
        callback, state = _progress_callback(search_results, trials, say, deadline)
        try:
            ms.tune.tune_tasks(
                tasks=contexts,
                task_weights=weights,
                work_dir=log_dir,
                max_trials_global=trials,
                max_trials_per_task=None,
                num_trials_per_iter=per_iter,
                builder=builder,
                runner=runner,
                database=database,
                cost_model=ms.cost_model.XGBModel(num_tuning_cores=workers, tree_method="auto"),
                measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), callback],
                task_scheduler="gradient",
            )
        except BaseException:  # the time budget or Ctrl-C: what was measured is in the log
            results.extend(search_results.values())
            if not state["stopped"]:
                _write_meta(log_dir, target, source, trials, sum(r.trials for r in results), time.time() - start, bool(rpc), emulated,
                            stopped="interrupted", threads=measuring_threads)
                raise
            say(f"time budget of {_fmt_secs(time_budget_s)} reached: stopped after {state['done']} trials")
        else:
            results.extend(search_results.values())
    elif search_tasks:
        results.extend(TaskResult(t.task_name, "search") for t, _ in search_tasks)

    seconds = time.time() - start
    measured = sum(r.trials for r in results)
    _write_meta(log_dir, target, source, trials, measured, seconds, bool(rpc), emulated,
                stopped="time budget" if deadline and time.time() >= deadline else None, threads=measuring_threads)
    say(f"wrote {log_dir}: {measured} measurements in {_fmt_secs(seconds)}")
    return TuneResult(log_dir, describe_target(target), results, seconds, measured, emulated)


_TENSOR_INTRIN = "tvm.s_tir.tensor_intrin"
# What that package's __init__ imports for LLVM targets, less ROCm's and Hexagon's.
_CPU_TENSOR_INTRIN = ("x86", "arm_cpu", "riscv_cpu")


@contextlib.contextmanager
def _cpu_tensor_intrin(target):
    """Register only the CPU tensor intrinsics while tuning a CPU target.

    TuneContext starts with ``import tvm.s_tir.tensor_intrin``, which parses some 500 TVMScript
    functions for every target: 45-80 s on this loaded 2-core machine, all but ~6 s of it CUDA's
    and ROCm's. For an LLVM target the CPU modules are imported and the package is entered in
    ``sys.modules`` without running its ``__init__``, so TuneContext's import finds it; it is
    taken out afterwards, so that a later import elsewhere still registers the rest."""
    if target.kind.name != "llvm" or _TENSOR_INTRIN in sys.modules:
        yield
        return
    package = importlib.util.module_from_spec(importlib.util.find_spec(_TENSOR_INTRIN))
    sys.modules[_TENSOR_INTRIN] = package
    try:
        for name in _CPU_TENSOR_INTRIN:
            importlib.import_module(f"{_TENSOR_INTRIN}.{name}")
        yield
    finally:
        if sys.modules.get(_TENSOR_INTRIN) is package:
            del sys.modules[_TENSOR_INTRIN]


def _ms(value) -> str:
    return "n/a" if value is None else f"{value:.4g} ms"


def _remove_artifact(path: str) -> None:
    import shutil  # pylint: disable=import-outside-toplevel

    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


class _Stop(Exception):
    """Raised by the progress callback when the time budget is spent."""


def _progress_callback(results: dict, total: int, say, deadline=None):
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback  # pylint: disable=import-outside-toplevel
    from tvm.ir.utils import derived_object  # pylint: disable=import-outside-toplevel

    state = {"done": 0, "start": time.time(), "stopped": False}

    @derived_object
    class _Progress(PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):  # noqa: D102
            result = results[int(task_id)]
            result.trials += len(runner_results)
            state["done"] += len(runner_results)
            for res in runner_results:
                if res.error_msg is None and res.run_secs:
                    ms_time = _mean([float(s) for s in res.run_secs]) * 1e3
                    if result.best_ms is None or ms_time < result.best_ms:
                        result.best_ms = ms_time
            elapsed = time.time() - state["start"]
            done = state["done"]
            eta = elapsed / done * max(total - done, 0) if done else 0.0
            say(
                f"[task {int(task_id) + 1}/{len(results)}] {result.name}: {result.trials} trials, "
                f"best {_ms(result.best_ms)}; {done}/{total} trials, {_fmt_secs(elapsed)} elapsed, ETA {_fmt_secs(eta)}"
            )
            if deadline is not None and time.time() >= deadline:
                state["stopped"] = True
                raise _Stop("time budget spent")

    return _Progress(), state


def _write_meta(log_dir, target, source, trials, measured, seconds, remote, emulated=None, stopped=None,
                threads=None) -> None:
    path = os.path.join(log_dir, META_FILE)
    meta = {}
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                meta = json.load(f)
        except (OSError, ValueError):
            meta = {}
    described = describe_target(target)
    meta.update(family=described["family"], target=described["target"], features=described["features"])
    meta["tvm"] = str(tvm.__version__)
    meta.setdefault("runs", []).append(
        {
            "model": source,
            "trials": trials,
            "measurements": measured,
            "seconds": round(seconds, 1),
            "rpc": remote,
            # TVM threads the candidates ran with: a record's choice (a pool on one thread or on
            # all of them) holds for that count
            **({"threads": threads} if threads else {}),
            **({"emulated": emulated} if emulated else {}),
            **({"stopped": stopped} if stopped else {}),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    )
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
