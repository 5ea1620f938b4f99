"""Reading tuning logs, tolerantly, and the database ``compile`` applies (:func:`load_logs`).

A log directory is a MetaSchedule JSON database (``database_workload.json`` /
``database_tuning_record.json``, each possibly gzipped as ``<name>.gz``: the shipped logs are,
a tenth of the size) plus ``target.json`` (:func:`tvm_pool.targets.describe_target`
and one entry per tuning run). TVM's database lookup ignores the target, so the log's target
is checked here (:func:`mismatch`). Corrupt lines, records and schedules are skipped with a
:class:`TuningLogWarning`: nothing in a log can fail a build.

This is the part of tuning that :mod:`tvm_pool.lowering` imports; it imports nothing that
lowers or tunes.
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
import os
import shutil
import warnings
from dataclasses import dataclass, field

import tvm

from ..targets import describe_target, resolve_target, target_family, target_features, target_json

logger = logging.getLogger(__name__)

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
META_FILE = "target.json"
GZIP_SUFFIX = ".gz"

# What TVM raises where a step may legitimately fail (a corrupt record, a schedule that does not
# replay, a candidate that does not build): its errors are RuntimeError subclasses (InternalError,
# ScheduleError), TypeError for an argument of the wrong type, ValueError for a bad value.
TVM_ERRORS = (RuntimeError, TypeError, ValueError)

# Whether the shipped logs' pooling records are applied (a log the user passes is applied in
# full either way). They are, when this process runs as many TVM threads as the log was tuned
# with: a pool's best schedule depends on the thread count (rows and planes in parallel won by
# 9% on two threads and lost by 5% on one, AVX2 Relu -> MaxPool -> Add). Re-tuned on a quiet
# machine, each knob kept only when clearly faster than the hand-written schedule, then re-timed
# against it on every benchmark workload (`python -m tvm_pool.bench.tune_shipped --what verify`,
# bench/results/tuned_pools_*.md): none slower beyond the noise of timing one module twice. An
# earlier log, measured with one TVM thread while other jobs ran, made two pools 2x slower at two
# threads. False keeps the hand-written pooling schedules with the shipped logs. They apply only
# under the rules they were measured with, too (rules_stamp).
SHIPPED_POOLING_RECORDS = True


# Schedules of kernels no pooling record replays (the Winograd transforms of
# tvm_pool.winograd, untuned elementwise kernels): changing them leaves the shipped pooling
# records valid.
_NOT_POOLING_RULES = ("injective.py", "winograd.py")


@functools.lru_cache(maxsize=None)
def rules_stamp() -> str:
    """A digest of tvm_pool's schedule rules (the source of ``tvm_pool.schedules``), which
    ``target.json`` records for every tuning run. A pooling record replays the schedule the rules
    made when it was measured, step by step; once the rules change, it replays their old
    schedule, however much better the new hand-written one is (VGG's 2x2 s2 max over
    1x512x28x28, 2 threads: 0.22 ms with the shipped record, 0.05 ms hand-written after the
    short-rows rule). So a shipped log's pooling records apply only under the rules they were
    measured with: re-tune and verify them (``python -m tvm_pool.bench.tune_shipped``) after
    changing the rules."""
    import hashlib  # pylint: disable=import-outside-toplevel

    from .. import schedules  # pylint: disable=import-outside-toplevel

    digest = hashlib.sha256()
    folder = os.path.dirname(schedules.__file__)
    for name in sorted(n for n in os.listdir(folder) if n.endswith(".py") and n not in _NOT_POOLING_RULES):
        with open(os.path.join(folder, name), "rb") as source:
            digest.update(name.encode() + b"\0" + source.read())
    return digest.hexdigest()[:16]


class TuningLogWarning(UserWarning):
    """A tuning log that is not used, or is used only in part."""


def _warn(message: str) -> None:
    warnings.warn(message, TuningLogWarning, stacklevel=3)


def short_error(err) -> str:
    """The last line of an error's text (TVM's carry a C++ backtrace first), at most 120 chars."""
    text = str(err).strip().splitlines()
    return (text[-1] if text else type(err).__name__)[:120]


def mean_secs(run_secs) -> float:
    """The mean of a record's run times (inf for none)."""
    values = [float(v) for v in (run_secs or [])]
    return sum(values) / len(values) if values else float("inf")


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
    from .. import tuning_logs  # pylint: disable=import-outside-toplevel

    return os.path.join(os.path.dirname(tuning_logs.__file__), target_family(target))


def runtime_threads() -> int:
    """TVM's thread count in this process (what a module compiled here runs with)."""
    return int(tvm.get_global_func("runtime.NumThreads")())


def tuned_threads(log_meta: dict) -> set:
    """The TVM thread counts a log's runs were measured with (``target.json``; empty for a log
    that predates the field)."""
    return {run["threads"] for run in log_meta.get("runs", []) if isinstance(run, dict) and "threads" in run}


def is_pooling(mod) -> bool:
    """Whether a tuning workload is a pooling PrimFunc (it has a tvm_pool or TOPI pool block)."""
    from ..schedules import analysis  # pylint: disable=import-outside-toplevel

    return analysis.has_pool_blocks(mod)  # a walk, not a Schedule of each workload (0.7 s over the shipped logs)


def workload_name(mod) -> str:
    """The name of a workload's (first) function."""
    for gv, _ in mod.functions_items():
        return gv.name_hint
    return "?"


def tvm_ffi_key(mod) -> int:
    """The structural hash a workload is looked up by (what MetaSchedule's databases use)."""
    import tvm_ffi  # pylint: disable=import-outside-toplevel

    return int(tvm_ffi.structural_hash(mod))


# --------------------------------------------------------------------------------------------
# Reading one log directory
# --------------------------------------------------------------------------------------------


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


def log_file(log_dir: str, name: str) -> str:
    """The path of a log's database file ``name``: ``name`` itself, or its gzipped copy
    ``name.gz`` where only that exists (the shipped logs)."""
    path = os.path.join(log_dir, name)
    return path + GZIP_SUFFIX if not os.path.exists(path) and os.path.exists(path + GZIP_SUFFIX) else path


def expand_gzipped(log_dir: str) -> None:
    """Decompress the gzipped database files of ``log_dir`` that have no plain twin, in place
    (MetaSchedule's JSONDatabase reads and appends plain files: a log tuned further must be
    plain first)."""
    for name in (WORKLOAD_FILE, RECORD_FILE):
        path = os.path.join(log_dir, name)
        if os.path.exists(path + GZIP_SUFFIX) and not os.path.exists(path):
            with gzip.open(path + GZIP_SUFFIX, "rb") as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst)


def _json_lines(path: str):
    """(line number, parsed JSON or None, error) for every non-empty line (of the decompressed
    text for a ``.gz`` file)."""
    opener = gzip.open if path.endswith(GZIP_SUFFIX) else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
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
    records: list = field(default_factory=list)  # [(workload, [(secs, raw JSON, "file:line"), ...])]
    bad_lines: list = field(default_factory=list)  # ["file:line (why)"]


def read_log(log_dir: str) -> LogRecords:
    """Read a log directory line by line: good lines are kept, bad ones are listed. Records stay
    JSON (best first per workload) until used: parsing all of them (TVM's TuningRecord.from_json,
    35 ms each here) made every compile with a shipped log 10 s slower."""
    out = LogRecords(log_dir, read_meta(log_dir))
    wl_path, rec_path = log_file(log_dir, WORKLOAD_FILE), log_file(log_dir, RECORD_FILE)
    workloads = _read_workloads(wl_path, out.bad_lines)
    by_workload: dict[int, list] = {}
    for lineno, obj, err in _json_lines(rec_path):
        if err is None:
            try:
                index = int(obj[0])
                if not 0 <= index < len(workloads) or workloads[index] is None:
                    raise ValueError(f"workload {index} missing or corrupt")
                secs = mean_secs(obj[1][1])  # [trace, run_secs, target, args_info]
            except (LookupError, TypeError, ValueError) as parse_err:  # JSON of another shape
                err = parse_err
        if err is not None:
            out.bad_lines.append(f"{rec_path}:{lineno} ({short_error(err)})")
            continue
        if secs < 1e9:  # MetaSchedule stores 1e10 for candidates that failed to build or run
            by_workload.setdefault(index, []).append((secs, obj[1], f"{rec_path}:{lineno}"))
    for index, recs in by_workload.items():
        recs.sort(key=lambda r: r[0])
        out.records.append((workloads[index], recs))
    return out


def _read_workloads(path: str, bad_lines: list) -> list:
    """The workloads of ``database_workload.json``, in order (None for a corrupt line, which is
    listed in ``bad_lines``)."""
    from tvm.s_tir.meta_schedule.database import Workload  # pylint: disable=import-outside-toplevel

    workloads: list = []
    for lineno, obj, err in _json_lines(path):
        workload = None
        if err is None:
            try:
                workload = Workload.from_json(obj)
            except TVM_ERRORS as parse_err:
                err = parse_err
        if workload is None:
            bad_lines.append(f"{path}:{lineno} ({short_error(err)})")
        workloads.append(workload)
    return workloads


def _parse_record(raw, workload):
    """A TuningRecord from its JSON (raise on a corrupt one)."""
    from tvm.s_tir.meta_schedule.database import TuningRecord  # pylint: disable=import-outside-toplevel

    return TuningRecord.from_json(raw, workload)


def _replays(record, where: str) -> bool:
    """Whether ``record``'s schedule replays on its workload (the reason at debug level when not)."""
    from tvm import s_tir  # pylint: disable=import-outside-toplevel

    try:
        sch = s_tir.Schedule(record.workload.mod)
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        return True
    except TVM_ERRORS as err:
        logger.debug("%s: the schedule does not replay: %s", where, short_error(err))
        return False


def _log_target_meta(logs: LogRecords) -> dict | None:
    """The log's ``target.json``, else a description of its records' target (a log written by
    MetaSchedule alone), else None."""
    if logs.meta is not None and logs.meta.get("family"):
        return logs.meta
    for _, records in logs.records:
        for _, raw, where in records:
            try:
                if raw[2] is not None:
                    return describe_target(tvm.target.Target(raw[2]))
            except (LookupError, *TVM_ERRORS) as err:
                logger.debug("%s: no target read from the record: %s", where, short_error(err))
    return None


# --------------------------------------------------------------------------------------------
# The database compile applies
# --------------------------------------------------------------------------------------------

_CACHE: dict = {}  # (log dir, its files' stamps) -> LogRecords
_LOADED: dict = {}  # load_logs' arguments and this process's state -> ((database, sources), warnings)


def load_logs(target, dirs=None, *, shipped: bool = True):
    """A MetaSchedule database with the best usable record per workload from ``dirs`` (and the
    shipped logs of ``target``'s family when ``shipped``); None when there is none."""
    return load_with_sources(target, dirs, shipped)[0]


def load_with_sources(target, dirs, shipped):
    """(database, {workload key: log dir}), cached per process on the logs' files and the
    target's family and features; the warnings are given again on every call."""
    target = resolve_target(target)
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]
    candidates = [(os.fspath(d), True) for d in (dirs or [])]
    if shipped:
        candidates.append((shipped_log_dir(target), False))
    key = (
        tuple((os.path.abspath(d), explicit, log_stamp(d)) for d, explicit in candidates),
        target_family(target),
        tuple(target_features(target)),
        SHIPPED_POOLING_RECORDS,
        runtime_threads(),
        rules_stamp(),
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


def log_written(log_dir: str) -> bool:
    """Whether ``log_dir`` holds a log's workloads or records (plain or gzipped)."""
    return any(os.path.exists(log_file(log_dir, f)) for f in (WORKLOAD_FILE, RECORD_FILE))


def log_stamp(log_dir: str) -> tuple:
    """When and how large the database files of ``log_dir`` were written (None where missing)."""
    paths = [log_file(log_dir, f) for f in (WORKLOAD_FILE, RECORD_FILE, META_FILE)]
    return tuple((os.stat(p).st_mtime_ns, os.stat(p).st_size) if os.path.exists(p) else None for p in paths)


def _read_cached(log_dir: str) -> LogRecords:
    key = (os.path.abspath(log_dir), log_stamp(log_dir))
    if key not in _CACHE:
        _CACHE[key] = read_log(log_dir)
    return _CACHE[key]


def _usable_log(log_dir: str, explicit: bool, target) -> tuple[LogRecords, dict] | None:
    """The log in ``log_dir`` and its target's description, when it may be applied to
    ``target``; None (with a warning saying why, for a log the user named) when not."""
    if not os.path.isdir(log_dir):
        if explicit:
            _warn(f"tuning log {log_dir}: not a directory; not used")
        return None
    if not log_written(log_dir):
        if explicit:
            _warn(f"tuning log {log_dir}: no {WORKLOAD_FILE} / {RECORD_FILE}; not used")
        return None
    try:
        logs = _read_cached(log_dir)
    except OSError as err:
        _warn(f"tuning log {log_dir}: unreadable ({err}); not used")
        return None
    if logs.bad_lines:
        shown = "; ".join(logs.bad_lines[:3]) + (f"; ... {len(logs.bad_lines) - 3} more" if len(logs.bad_lines) > 3 else "")
        _warn(f"tuning log {log_dir}: {len(logs.bad_lines)} corrupt line(s) skipped, its other records are used: {shown}")
    meta = _log_target_meta(logs)
    if meta is None:
        if logs.records:
            _warn(f"tuning log {log_dir}: no {META_FILE} and no target in its records; not used")
        return None
    why = mismatch(meta, target)
    if why is not None:
        _warn(f"tuning log {log_dir}: {why}; not used")
        return None
    return logs, meta


def _best_replaying(log_dir: str, workload, records):
    """(secs, TuningRecord) of the fastest of a workload's records that parses and replays."""
    for secs, raw, where in records:
        try:
            record = _parse_record(raw, workload)
        except TVM_ERRORS as err:
            _warn(f"tuning log {log_dir}: corrupt record skipped, the others are used: {where} ({short_error(err)})")
            continue
        if _replays(record, where):
            return secs, record
        _warn(f"tuning log {log_dir}: a schedule that does not replay on its workload skipped: {where}")
    return None


def _load_uncached(target, candidates):
    """(database, {workload key: log dir}) over the usable logs of ``candidates``. Each
    workload's records are parsed and replayed when compile asks for it (:func:`_choose`, in
    :func:`_lazy_database`), not here: the shipped logs hold some 500 records of models a build
    rarely has, and parsing and replaying them all took 3.5 of the 5.8 s a compile spent on
    its logs. The log-dir map fills in as workloads are asked for."""
    found = _found(target, candidates)
    if not found:
        return None, {}
    sources: dict = {}
    return _lazy_database(found, sources, cpu_model(target)), sources


def _found(target, candidates) -> dict:
    """structural key -> [(workload, records, log dir), ...] over the usable logs of
    ``candidates`` ([(log dir, named by the user)]), in the logs' order."""
    found: dict = {}
    for log_dir, explicit in candidates:
        usable = _usable_log(log_dir, explicit, target)
        if usable is None:
            continue
        logs, meta = usable
        pooling_applies = explicit or (SHIPPED_POOLING_RECORDS and tuned_threads(meta) == {runtime_threads()}
                                       and meta.get("rules") == rules_stamp())
        for workload, records in logs.records:
            if not pooling_applies and is_pooling(workload.mod):
                continue
            found.setdefault(tvm_ffi_key(workload.mod), []).append((workload, records, log_dir))
    return found


def foreign_records(target, dirs, mods) -> dict:
    """{i: TuningRecord}: for each task function ``mods[i]``, the fastest replaying record of its
    workload that another CPU model measured (in ``dirs`` and ``target``'s shipped logs), where
    there is one. Empty when ``target`` names no CPU model (its ``mcpu``). ``tune`` measures
    these here (:mod:`.foreign`): :func:`_choose` puts this CPU's records first, whatever the
    others' times, so a record tuned here that is slower than another CPU's would otherwise
    replace it."""
    cpu = cpu_model(target)
    if not cpu:
        return {}
    found = _found(target, [(os.fspath(d), True) for d in dirs] + [(shipped_log_dir(target), False)])
    chosen = {}
    for i, mod in enumerate(mods):
        entries = [(workload, others, log_dir) for workload, records, log_dir in found.get(tvm_ffi_key(mod), [])
                   if (others := [r for r in records if record_cpu(r[1]) != cpu])]
        if entries and (best := _choose(entries)) is not None:
            chosen[i] = best[1]
    return chosen


def cpu_model(target) -> str:
    """The CPU model a target compiles for (its ``mcpu``; "" when it names none)."""
    target = target if isinstance(target, dict) else target_json(resolve_target(target))
    return str(target.get("mcpu") or "")


def record_cpu(raw) -> str:
    """The CPU model a record (its JSON) was measured for: its target's ``mcpu``, or ""."""
    return cpu_model(raw[2]) if len(raw) > 2 and isinstance(raw[2], dict) else ""


def _choose(entries, cpu: str = ""):
    """(secs, TuningRecord, log dir) of a workload's fastest replaying record over its logs'
    ``entries`` (log order; a log whose best is not faster than the record chosen so far is not
    parsed), or None. Records measured on the CPU model ``cpu`` come first, whatever the
    others' times: times taken on another CPU do not compare (ResNet-50's shipped records,
    measured on an AMD znver4 where the model took 61-80 ms, gave 110 ms on an Intel Emerald
    Rapids, whose onnxruntime time is the znver4's)."""
    if cpu:
        same = [(workload, mine, log_dir) for workload, records, log_dir in entries
                if (mine := [r for r in records if record_cpu(r[1]) == cpu])]
        if same and (chosen := _choose(same)) is not None:
            return chosen
    chosen = None
    for workload, records, log_dir in entries:
        if chosen is not None and chosen[0] <= records[0][0]:
            continue
        good = _best_replaying(log_dir, workload, records)
        if good is not None:
            chosen = (good[0], good[1], log_dir)
    return chosen


def _lazy_database(found: dict, sources: dict, cpu: str = ""):
    """A read-only MetaSchedule database of the best replaying record of each workload in
    ``found`` (structural key -> its logs' entries), each chosen on first request (those
    measured on the CPU model ``cpu`` first, :func:`_choose`), when its log dir goes into
    ``sources``."""
    from tvm.ir.utils import derived_object  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.database import PyDatabase, TuningRecord, Workload  # pylint: disable=import-outside-toplevel

    @derived_object
    class _LazyDatabase(PyDatabase):
        """Read-only: the records of ``found``, parsed and replayed per workload when asked."""

        def __init__(self):
            super().__init__()
            self.chosen: dict = {}  # structural key -> TuningRecord or None

        def _record(self, key):
            if key not in self.chosen:
                self.chosen[key] = None
                chosen = _choose(found.get(key, []), cpu)
                if chosen is not None:
                    _, record, sources[key] = chosen
                    self.chosen[key] = TuningRecord(record.trace, Workload(record.workload.mod), record.run_secs,
                                                    record.target, record.args_info)
            return self.chosen[key]

        def has_workload(self, mod) -> bool:
            return tvm_ffi_key(mod) in found

        def commit_workload(self, mod):
            return Workload(mod)

        def commit_tuning_record(self, record) -> None:
            raise TypeError("the tuning-log database compile applies is read-only")

        def get_top_k(self, workload, top_k: int) -> list:
            record = self._record(tvm_ffi_key(workload.mod)) if top_k > 0 else None
            return [record] if record is not None else []

        def get_all_tuning_records(self) -> list:
            return [r for r in (self._record(key) for key in found) if r is not None]

        def __len__(self) -> int:
            return len(found)

    return _LazyDatabase()
