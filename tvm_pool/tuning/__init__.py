"""Tuning: MetaSchedule over every task of a model, per-target logs, and applying them.

``tune(mod, target, trials=..., log_dir=..., rpc=...)`` extracts the tasks ``compile`` will see
(tvm_pool's legalization, then TVM's fusion: :func:`tvm_pool.lowering.fuse`) and tunes them all:

* **pooling tasks** (a PrimFunc the target family's pooling rule takes): every point of the
  family's design space (:func:`tvm_pool.schedules.meta_schedule.pool_candidates`, the
  hand-written schedule first) is built and measured, the search is exhaustive. These trials
  are not counted in ``trials``.
* **every other task** (convolutions, matmuls, whatever FuseOps makes): MetaSchedule's
  evolutionary search with its cost model, ``trials`` measurements in all, shared by the
  gradient task scheduler. tvm_pool's schedules are registered as MetaSchedule custom rules
  first, so pooling blocks inside these tasks get tvm_pool's design space, not TVM's defaults.

The result is a MetaSchedule JSON database (``database_workload.json`` /
``database_tuning_record.json``, readable by TVM's own ``JSONDatabase``) plus ``target.json``:
the target it was tuned on, its family (``x86-avx512``, ``x86-avx2``, ``aarch64-neon``,
``riscv64``, ``cuda-sm_90``, ...) and ISA features, and one entry per tuning run.

``load_logs(target, dirs, shipped=True)`` is what ``tvm_pool.compile(..., tuning_logs=[...])``
uses. TVM's database lookup ignores the target, so tvm_pool checks it: a log tuned for another
target family, or on a target with ISA features this target lacks, gives a
:class:`TuningLogWarning` and is not used. Corrupt or truncated lines give a warning naming
the file and are skipped; the file's other records are used; a record whose schedule does not
replay on its workload is dropped. Nothing in a log can fail a build.

One module per concern:

- :mod:`.logs`         reading, checking and loading logs (what ``lowering`` imports)
- :mod:`.lookup`       which record each PrimFunc of a model gets (``tvm-pool inspect``)
- :mod:`.measure`      the in-process builder and runner
- :mod:`.remote`       the RPC tracker, its devices under a key, and the check before a run
- :mod:`.farm`         building on the host's cores, measuring on every device under the key
- :mod:`.workers`      worker threads whose jobs have a deadline (a device that stops answering)
- :mod:`.plan`         planning a run: target, device, tasks and their design spaces
- :mod:`.pooling`      the exhaustive search of pooling tasks
- :mod:`.foreign`      other CPUs' records of the searched tasks, measured here first
- :mod:`.evolutionary` MetaSchedule's search of the other tasks
- :mod:`.intrin`       only the CPU tensor intrinsics for a CPU target (TVM 0.27)
- :mod:`.meta`         what a run reports, and its entry in ``target.json``
- :mod:`.search`       :func:`tune`, from plan to log

``SHIPPED_POOLING_RECORDS`` (whether the shipped logs' pooling records apply) is a setting of
:mod:`.logs`: ``tvm_pool.tuning.logs.SHIPPED_POOLING_RECORDS = False``.
"""

from ..targets import describe_target, target_family, target_features
from .evolutionary import SEARCH
from .logs import (
    META_FILE,
    RECORD_FILE,
    WORKLOAD_FILE,
    LogRecords,
    TuningLogWarning,
    is_pooling,
    load_logs,
    mismatch,
    read_log,
    read_meta,
    runtime_threads,
    shipped_log_dir,
    tuned_threads,
)
from .lookup import records_for, tuning_record_for
from .measure import EVALUATOR
from .remote import RpcDevice, rpc_config, rpc_device, rpc_workers
from .meta import TaskResult, TuneResult
from .pooling import POOL_MIN_GAIN, POOL_ROUNDS, pool_records_to_keep
from .search import tune

__all__ = [
    "EVALUATOR", "META_FILE", "POOL_MIN_GAIN", "POOL_ROUNDS", "RECORD_FILE", "SEARCH", "WORKLOAD_FILE",
    "LogRecords", "RpcDevice", "TaskResult", "TuneResult", "TuningLogWarning",
    "describe_target", "is_pooling", "load_logs", "mismatch", "pool_records_to_keep", "read_log", "read_meta",
    "records_for", "rpc_config", "rpc_device", "rpc_workers", "runtime_threads", "shipped_log_dir", "target_family",
    "target_features", "tune", "tuned_threads", "tuning_record_for",
]
