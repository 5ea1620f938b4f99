"""How the benchmark times: medians of repeated calls, peers taking turns, the copy limit, and
the thread settings every peer shares.

Times are medians (a shared machine has outliers, and the median ignores them); the copy limit
is a same-size memory copy (bytes read + bytes written) timed in the same run, the speed a
memory-bound pool cannot beat.
"""

from __future__ import annotations

import gc
import os
import statistics
import time

from tvm_pool.thread_pool import BIND_THREADS_VARIABLE

from .summary import short_reason

ROUNDS = 5  # peers take turns, ROUNDS times per workload (see take_turns)


def settle() -> None:
    """Let the previous peer's worker threads stop spinning before the next measurement:
    runtimes spin-wait between calls, and a spinning pool on a 2-core machine halves whatever
    is timed next (seen as everything taking ~8 ms)."""
    gc.collect()
    time.sleep(0.2)


def sample_times(fn, repeat: int, warmup: int = 3, sync=None, clock=time.perf_counter) -> list:
    """Seconds of each of ``repeat`` calls of ``fn``, after ``warmup`` untimed ones. ``sync``
    (a device's): called after each call and inside its time, so that a GPU call counts until
    it has finished, not until it was queued. ``clock``: a test's fake clock."""
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        if sync is not None:
            sync()
        times.append(clock() - start)
    return times


def median_ms(samples) -> float:
    """The median of ``samples`` (seconds), in milliseconds."""
    return float(statistics.median(samples)) * 1e3


def take_turns(runners: dict, errors: dict, repeat: int, na: dict) -> dict:
    """Seconds of every call of every runner: ROUNDS rounds, each timing every runner for
    repeat/ROUNDS calls in turn.

    Memory bandwidth on a shared machine drifts over seconds; timing the peers one after the
    other would hand that drift to whichever peer ran at a bad moment (seen as 2x swings on the
    out-of-cache workloads). A runner that raises one of its ``errors[name]`` is dropped, with
    the reason in ``na[name]``, and the others go on.
    """
    samples = {name: [] for name in runners}
    per_round = max(repeat // ROUNDS, 1)
    live = dict(runners)
    for rnd in range(ROUNDS):
        for name, run in list(live.items()):
            settle()
            try:
                samples[name] += sample_times(run, per_round, warmup=3 if rnd == 0 else 1)
            except errors[name] as err:
                na[name] = f"failed: {short_reason(err)}"
                del live[name], samples[name]
    return samples


def copy_size(nbytes_read: int, nbytes_written: int) -> int:
    """Bytes of the copy limit's source (and of its destination): a copy of n bytes reads n and
    writes n, as many as the workload reads and writes together (at least a cache line)."""
    return max((nbytes_read + nbytes_written) // 2, 64)


def copy_runner(nbytes_read: int, nbytes_written: int, threads: int):
    """A copy reading and writing as many bytes as the workload (torch copy_, same threads):
    the memory-bandwidth limit timed alongside the peers. Each call returns the destination."""
    import torch  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(threads)
    n = copy_size(nbytes_read, nbytes_written)
    src = torch.empty(n, dtype=torch.uint8).fill_(1)
    dst = torch.empty(n, dtype=torch.uint8)
    return lambda: dst.copy_(src)


def child_env(threads: int, environ=None) -> dict:
    """The environment of the process timing ``threads`` threads: the same thread count for
    every peer, and idle OpenMP workers (torch) sleeping instead of spinning.

    TVM's thread pool runs as a user gets it: its default spin count, and its workers unpinned,
    which importing tvm_pool sets for the whole process (tvm_pool/thread_pool.py; stock TVM's
    peer shares the process, but its pools run on one thread anyway)."""
    env = dict(os.environ if environ is None else environ, TVM_NUM_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    env.setdefault(BIND_THREADS_VARIABLE, "0")
    return env
