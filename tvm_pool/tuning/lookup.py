"""Which tuning record each PrimFunc of a model gets (``tvm-pool inspect`` prints it), and how
much of the model's work has none (``compile``, ``run`` and ``inspect`` say so)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import lowering
from .logs import cpu_model, is_pooling, mean_secs

# What ``tvm-pool tune`` is told to spend per kernel without a record, and what a measurement
# took: `tvm-pool tune --trials 400` on ResNet-18 (about 20 such kernels) took 5 minutes on a
# 2-core x86 machine and brought it from 55-90x to 1.5x onnxruntime's latency (issue 38).
TRIALS_PER_KERNEL = 20
SECONDS_PER_TRIAL = 0.75


def records_for(mod, target, dirs=None, *, shipped: bool = True) -> list[tuple[str, str]]:
    """For each PrimFunc ``compile`` would build from the Relax module ``mod``: (name, which
    tuning record it gets, or "none"). A log that is not used, or only in part, warns
    (:class:`TuningLogWarning`) as it does for ``compile``."""
    return [(task.task_name, "none" if record is None else
             f"{mean_secs(record.run_secs) * 1e3:.4g} ms, {len(record.trace.insts)}-step schedule from {source}")
            for task, record, source in lowering.task_records(mod, target, dirs, shipped)]


def tuning_record_for(target, mod, tuning_logs=None, shipped: bool = True) -> str | None:
    """The tuning records the PrimFuncs of the Relax module ``mod`` get, in one line
    ("NAME: TIME ms, N-step schedule from DIR; ..."), None when none is tuned."""
    found = [f"{name}: {rec}" for name, rec in records_for(mod, target, tuning_logs, shipped=shipped) if rec != "none"]
    return "; ".join(found) or None


@dataclass(frozen=True)
class Coverage:
    """A model's kernels (``compile``'s distinct PrimFuncs, the tasks tuning sees) and how many
    have a tuning record, and their floating-point operations (each kernel's times its uses).
    Pooling kernels are tvm_pool's hand-written schedules whether or not a log holds them, so
    they are counted apart."""

    kernels: int  # the kernels tuning decides (every one but the pooling kernels)
    untuned: int  # those with no record: TVM's default (dlight) code
    flops: float  # the model's floating-point operations, pooling included
    untuned_flops: float
    pooling: int
    transforms: int = 0  # Winograd's input and output transforms: tvm_pool's schedules too
    elsewhere: int = 0  # kernels whose record was measured on another CPU model than the target's
    elsewhere_cpus: tuple = ()  # those CPU models
    cpu: str = ""  # the target's CPU model (its mcpu)

    @property
    def untuned_share(self) -> float:
        return self.untuned_flops / self.flops if self.flops else 0.0

    def minutes(self, kernels: int | None = None) -> int:
        """What ``tvm-pool tune --minutes`` should spend on ``kernels`` kernels (the untuned
        ones by default; on 2 cores: :data:`TRIALS_PER_KERNEL` measurements each,
        :data:`SECONDS_PER_TRIAL` a measurement)."""
        count = self.untuned if kernels is None else kernels
        return max(1, round(TRIALS_PER_KERNEL * count * SECONDS_PER_TRIAL / 60))

    def line(self, model: str) -> str:
        """What ``compile``, ``run`` and ``inspect`` say: one line."""
        own = [f"{self.pooling} pooling kernel(s)"] * bool(self.pooling) + [
            f"{self.transforms} Winograd transform(s)"] * bool(self.transforms)
        pools = f"; its {' and '.join(own)} take tvm_pool's schedules" if own else ""
        elsewhere = ""
        if self.elsewhere:
            # Records measured on another CPU model replay there, but their times do not transfer
            # (ResNet-50 with records from an AMD znver4: 2.65x onnxruntime on an Intel Emerald Rapids).
            where = ", ".join(self.elsewhere_cpus) or "another CPU"
            elsewhere = (f"; {self.elsewhere} of them were tuned on {where}, not on this CPU"
                         f"{f' ({self.cpu})' if self.cpu else ''}, and may run slower here")
        if not self.untuned:
            line = f"tuning: every kernel of {model} has a tuning record ({self.kernels} kernel(s){pools}){elsewhere}"
            if self.elsewhere:
                line += f"; tune them for it: tvm-pool tune {model} --minutes {self.minutes(self.elsewhere)}"
            return line
        return (f"tuning: {self.untuned} of {self.kernels} kernel(s) of {model} have no tuning record "
                f"({self.untuned_share:.0%} of its FLOPs) and run TVM's untuned default code{pools}{elsewhere}; "
                f"tune them: tvm-pool tune {model} --minutes {self.minutes(self.untuned + self.elsewhere)}")


def coverage(mod, target, dirs=None, *, shipped: bool = True) -> Coverage:
    """The :class:`Coverage` of the Relax module ``mod`` compiled for ``target`` with the logs
    of ``dirs`` (and the shipped ones)."""
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir.analysis import estimate_tir_flops

    from ..schedules import winograd as winograd_rule

    # pylint: enable=import-outside-toplevel
    cpu = cpu_model(target)
    kernels = untuned = pooling = transforms = elsewhere = 0
    flops = untuned_flops = 0.0
    elsewhere_cpus: set = set()
    for task, record, _ in lowering.task_records(mod, target, dirs, shipped):
        task_flops = float(estimate_tir_flops(task.dispatched[0])) * int(task.weight)
        flops += task_flops
        if is_pooling(task.dispatched[0]):
            pooling += 1
            continue
        if winograd_rule.takes(task.dispatched[0]):
            transforms += 1
            continue
        kernels += 1
        if record is None:
            untuned += 1
            untuned_flops += task_flops
        elif cpu and (measured_on := cpu_model(record.target)) != cpu:
            elsewhere += 1
            elsewhere_cpus.add(measured_on or "an unnamed CPU")
    return Coverage(kernels, untuned, flops, untuned_flops, pooling, transforms, elsewhere,
                    tuple(sorted(elsewhere_cpus)), cpu)
