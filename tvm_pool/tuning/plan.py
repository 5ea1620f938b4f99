"""Planning a tuning run: the target, the device that measures, and the tasks.

Everything that can fail in one line (a missing cross toolchain, a target this machine cannot
run without a device, a tracker that does not answer) fails here, before anything is written
or slow. The tasks are those ``compile`` will see (:func:`tvm_pool.lowering.fuse`); a task whose
function the target family's pooling rule takes gets its design space
(:func:`tvm_pool.schedules.meta_schedule.pool_candidates`), searched exhaustively, every other
task MetaSchedule's evolutionary search.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from .. import lowering
from ..errors import TvmPoolError
from ..targets import (
    export_compiler,
    foreign_triple,
    missing_cross_compiler,
    num_cores,
    resolve_target,
    target_family,
    with_num_cores,
)
from .logs import log_written, runtime_threads
from .remote import rpc_config, rpc_device, rpc_workers


@dataclass
class Plan:
    """A tuning run, planned."""

    target: object  # the Target tuned for, with num-cores
    log_dir: str
    fcompile: object  # export_library's fcompile: None for this machine, a cross g++ for another CPU
    rpc: object  # the RPC tracker measuring, or None: this process measures
    threads: int  # TVM threads the candidates run with
    emulated: str | None  # the emulated device's description (its timings are not hardware time)
    tasks: list  # every task extracted
    pool_tasks: list  # [(task, [(label, schedule), ...])]: the pooling design spaces
    search_tasks: list  # [task]: searched by MetaSchedule
    start: float  # when task extraction began: the run's clock
    budget_s: float | None = None  # the search stops this long after start
    devices: int = 0  # servers under the RPC key when the run began
    workers: int = 0  # candidates measured at once on them (one session per device at a time)
    conv_layout: str = "NCHW"  # the 2-D convolutions' layout in the tasks (lowering.CONV_LAYOUTS)

    @property
    def deadline(self) -> float | None:
        return self.start + self.budget_s if self.budget_s else None

    def summary(self, source: str, trials: int) -> str:
        """The run's first progress line."""
        target = self.target
        return (
            f"tuning {source or 'model'} for {target_family(target)} ({target.attrs.get('mcpu', target.kind.name)}): "
            f"{len(self.tasks)} tasks{' (convolutions in NHWC)' if self.conv_layout == 'NHWC' else ''}, "
            f"{len(self.pool_tasks)} pooling (exhaustive, "
            f"{sum(len(c) for _, c in self.pool_tasks)} candidates), {len(self.search_tasks)} searched with {trials} trials"
            + (f", {self.measuring()}" if self.rpc else "")
            + (f" under {self.emulated}" if self.emulated else "")
        )

    def measuring(self) -> str:
        """Where candidates are measured: "measuring on 3 devices (key 'farm')"."""
        count = f"{self.devices} device{'s' if self.devices != 1 else ''}"
        workers = "" if self.workers == self.devices else (
            f", {self.workers} at a time" if self.workers < self.devices else f", {self.workers} workers")
        return f"measuring on {count} (key {rpc_config(self.rpc).tracker_key!r}{workers})"


def plan(mod, target, *, trials: int, log_dir: str | None, rpc, budget_s: float | None = None) -> Plan:
    """Check what can be checked, create ``log_dir`` (default ``./tuning_logs/<family>``), and
    extract the tasks of the Relax module ``mod``."""
    from .. import schedules  # pylint: disable=import-outside-toplevel

    target = resolve_target(target)
    if trials < 0:
        raise TvmPoolError(f"--trials must be >= 0, got {trials}")
    if not rpc and foreign_triple(target):
        # Before the cross toolchain: no install makes this machine measure another CPU, so this is
        # the news a user needs first; a missing toolchain is named in the same line.
        raise TvmPoolError(
            f"target {foreign_triple(target)} is not this machine's CPU: its candidates cannot be measured here; "
            "measure them on the device through TVM's RPC tracker (tvm-pool tune --rpc-tracker HOST:PORT --rpc-key KEY)"
            + _toolchain_note(target)
        )
    fcompile = export_compiler(target)  # a missing cross toolchain
    device = rpc_device(rpc) if rpc else None
    workers = rpc_workers(rpc, device.count) if device else 0
    target = with_num_cores(target, device.threads if device else num_cores())
    log_dir = log_dir or os.path.join("tuning_logs", target_family(target))
    os.makedirs(log_dir, exist_ok=True)
    schedules.register_meta_schedule_rules()
    start = time.time()
    layout = _conv_layout(mod, target, log_dir)
    tasks, pool_tasks, search_tasks = _tasks(mod, target, layout)
    return Plan(
        target=target, log_dir=log_dir, fcompile=fcompile, rpc=rpc,
        threads=device.threads if device else runtime_threads(), emulated=device.emulated if device else None,
        tasks=tasks, pool_tasks=pool_tasks, search_tasks=search_tasks, start=start, budget_s=budget_s,
        devices=device.count if device else 0, workers=workers, conv_layout=layout,
    )


def _conv_layout(mod, target, log_dir: str) -> str:
    """The convolutions' layout to tune: the one ``compile`` takes with the log being extended
    alone (a new log: channel-last on x86, :func:`tvm_pool.lowering.choose_conv_layout`), so a
    second run extends the first's tasks and compile then applies them."""
    return lowering.choose_conv_layout(mod, target, [log_dir] if log_written(log_dir) else None, shipped=False,
                                       prefer="NHWC")


def _toolchain_note(target) -> str:
    """What else tuning for ``target`` needs here when its cross toolchain is missing, else ""."""
    compiler = missing_cross_compiler(target)
    if compiler is None:
        return ""
    return f"; building its candidates also needs the cross compiler {compiler}, not found (apt-get install g++-{foreign_triple(target)})"


def _tasks(mod, target, layout: str = "NCHW") -> tuple[list, list, list]:
    """(every task, the pooling tasks with their design spaces, the tasks to search); tasks
    already scheduled (a library kernel's) are neither."""
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir import meta_schedule as ms

    from ..schedules import meta_schedule as ms_rules
    from ..schedules import winograd as winograd_rule

    # pylint: enable=import-outside-toplevel
    # every eligible convolution as a Winograd product: the search measures them, compile
    # takes the ones with records
    tasks = list(ms.relax_integration.extract_tasks(lowering.fuse(mod, target, layout, "always"), target))
    pool_tasks, search_tasks = [], []
    for task in tasks:
        if task.mod.attrs is not None and task.mod.attrs.get("tirx.is_scheduled", False):
            continue
        if winograd_rule.takes(task.dispatched[0]):  # the transforms: hand-scheduled, not searched
            continue
        cands = ms_rules.pool_candidates(task.dispatched[0], target)  # [] when the function has no pool
        if cands:
            pool_tasks.append((task, cands))
        else:
            search_tasks.append(task)
    return tasks, pool_tasks, search_tasks
