"""Which tuning record each PrimFunc of a model gets (``tvm-pool inspect`` prints it)."""

from __future__ import annotations

from .. import lowering
from ..targets import resolve_target
from .logs import load_with_sources, mean_secs, tvm_ffi_key


def records_for(mod, target, dirs=None, *, shipped: bool = True) -> list[tuple[str, str]]:
    """For each PrimFunc ``compile`` would build from the Relax module ``mod``: (name, which
    tuning record it gets, or "none"). A log that is not used, or only in part, warns
    (:class:`TuningLogWarning`) as it does for ``compile``."""
    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    target = resolve_target(target)
    database, sources = load_with_sources(target, dirs, shipped)
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
        out.append((task.task_name, f"{mean_secs(record.run_secs) * 1e3:.4g} ms, {len(record.trace.insts)}-step schedule from {source}"))
    return out


def tuning_record_for(target, mod, tuning_logs=None, shipped: bool = True) -> str | None:
    """The tuning records the PrimFuncs of the Relax module ``mod`` get, in one line
    ("NAME: TIME ms, N-step schedule from DIR; ..."), None when none is tuned."""
    found = [f"{name}: {rec}" for name, rec in records_for(mod, target, tuning_logs, shipped=shipped) if rec != "none"]
    return "; ".join(found) or None
