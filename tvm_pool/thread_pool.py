"""How tvm_pool wants TVM's CPU thread pool set up, applied when tvm_pool is imported.

Two of TVM's defaults cost tvm_pool's parallel schedules half their speed:

1. **Pinning.** TVM's thread pool pins each worker thread to one core (worker i to the i-th
   core) but leaves the calling thread, which runs task 0 of every parallel loop, free to run on
   any core. When the OS happens to place the calling thread on a worker's core, both halves of
   every parallel loop share one core: on a 2-core machine a parallel pool then runs at half
   speed or worse, and which case a process gets depends on where its main thread woke up.
   Measured here (znver4, 2 threads, 96x54x54 3x3 s3 MaxPool, median of 50 calls): 0.025 ms
   pinned in about half of the processes, 0.011-0.014 ms in every process with the workers
   unpinned. So tvm_pool sets ``TVM_BIND_THREADS=0``.
2. **Thread count.** Without ``TVM_NUM_THREADS`` or ``OMP_NUM_THREADS``, TVM on x86 runs half
   as many threads as there are logical CPUs, assuming every core has two hyper-threads
   (``MaxConcurrency`` in TVM's threading_backend.cc). On a machine without SMT (this one: 2
   cores, 1 thread per core, like most cloud VMs with whole cores) that is half the cores: one
   thread here, where VGG's 2x2 max pool takes 0.25 ms against 0.11 ms on two. So tvm_pool sets
   ``TVM_NUM_THREADS`` to the number of physical cores this process may run on, which is what
   TVM's halving means to compute.

Both variables are read when a thread's pool is created (its first parallel call), so this must
run before the first parallel TVM call of the process; a value the user set is kept. Deployed
modules run without tvm_pool: the deploy examples apply the same settings.
"""

from __future__ import annotations

import os
import platform

BIND_THREADS_VARIABLE = "TVM_BIND_THREADS"
NUM_THREADS_VARIABLE = "TVM_NUM_THREADS"
# TVM reads OMP_NUM_THREADS when TVM_NUM_THREADS is unset: either one is the user's choice.
_USER_THREAD_COUNT_VARIABLES = (NUM_THREADS_VARIABLE, "OMP_NUM_THREADS")
# Architectures on which TVM halves the logical CPU count (the `#if` in MaxConcurrency).
_HALVING_MACHINES = ("x86_64", "amd64")


def allowed_cpus() -> list[int]:
    """The logical CPUs this process may run on (its affinity; every CPU where there is none)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def physical_cores() -> int:
    """Physical cores among the CPUs this process may run on: hyper-threads of one core count
    once (Linux sysfs topology); the CPU count where the topology cannot be read."""
    cpus = allowed_cpus()
    cores = set()
    for cpu in cpus:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topology}/physical_package_id", encoding="ascii") as package, \
                    open(f"{topology}/core_id", encoding="ascii") as core:
                cores.add((package.read().strip(), core.read().strip()))
        except OSError:
            return max(1, len(cpus))
    return max(1, len(cores))


def unpin_worker_threads() -> None:
    """Let the OS place TVM's worker threads (unless the user chose otherwise)."""
    os.environ.setdefault(BIND_THREADS_VARIABLE, "0")


def use_every_physical_core() -> None:
    """One TVM thread per physical core where TVM would otherwise take half of the logical
    CPUs (x86), unless the user set a thread count."""
    if platform.machine().lower() not in _HALVING_MACHINES:
        return
    if any(name in os.environ for name in _USER_THREAD_COUNT_VARIABLES):
        return
    os.environ[NUM_THREADS_VARIABLE] = str(physical_cores())


def configure() -> None:
    """Apply tvm_pool's thread-pool settings (see the module docstring)."""
    unpin_worker_threads()
    use_every_physical_core()
