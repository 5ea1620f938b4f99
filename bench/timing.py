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
# Each turn's untimed warm-up: at least WARMUP_CALLS calls and WARMUP_S seconds (see take_turns).
WARMUP_CALLS = 10
WARMUP_S = 0.02


# Every peer reads the same input array, 64-byte aligned so that TVM can take it without a copy
# (tvm_input). A TVM tensor made by copying lives in TVM's own allocation, which gets no huge
# pages, where numpy's large arrays do (madvise, THP in "madvise" mode here) and PyTorch,
# onnxruntime and OpenVINO read those arrays themselves: one thread read 4 KB pages 20-40%
# slower than huge ones (global average over 8x240x56x56, 1 thread, ms: 0.73 / 0.53 copied into
# TVM's memory, 0.44 / 0.39 the numpy array's own, PyTorch 0.44 on it).
INPUT_ALIGNMENT = 64


def is_aligned(x) -> bool:
    """Is ``x`` C-contiguous, its data starting on an INPUT_ALIGNMENT-byte boundary (what
    DLPack into TVM asks)?"""
    return bool(x.flags.c_contiguous) and x.ctypes.data % INPUT_ALIGNMENT == 0


def aligned(x):
    """``x`` as a C-contiguous array whose data start on an INPUT_ALIGNMENT-byte boundary (a
    copy when ``x``'s do not)."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    if is_aligned(x):
        return x
    buf = np.empty(x.nbytes + INPUT_ALIGNMENT, dtype=np.uint8)
    start = -buf.ctypes.data % INPUT_ALIGNMENT
    out = buf[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
    out[...] = x
    return out


def tvm_input(x):
    """A TVM tensor over ``x``'s own memory (DLPack, no copy) when ``x`` is aligned, as every
    other peer reads it; else a copy."""
    import tvm  # pylint: disable=import-outside-toplevel

    if is_aligned(x):
        return tvm.runtime.from_dlpack(x)
    return tvm.runtime.tensor(x)


def settle() -> None:
    """Let the previous peer's worker threads stop spinning before the next measurement:
    runtimes spin-wait between calls, and a spinning pool on a 2-core machine halves whatever
    is timed next (seen as everything taking ~8 ms)."""
    gc.collect()
    time.sleep(0.2)


def sample_times(fn, repeat: int, warmup: int = 3, sync=None, clock=time.perf_counter, warmup_s: float = 0.0) -> list:
    """Seconds of each of ``repeat`` calls of ``fn``, after ``warmup`` untimed ones (and more
    until ``warmup_s`` seconds have passed). ``sync`` (a device's): called after each call and
    inside its time, so that a GPU call counts until it has finished, not until it was queued.
    ``clock``: a test's fake clock."""
    start = clock()
    calls = 0
    while calls < warmup or clock() - start < warmup_s:
        fn()
        calls += 1
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


def take_turns(runners: dict, errors: dict, repeat: int, na: dict, first_calls: dict | None = None) -> dict:
    """Seconds of every call of every runner: ROUNDS rounds, each timing every runner for
    repeat/ROUNDS calls in turn.

    Memory bandwidth on a shared machine drifts over seconds; timing the peers one after the
    other would hand that drift to whichever peer ran at a bad moment (seen as 2x swings on the
    out-of-cache workloads). A runner that raises one of its ``errors[name]`` is dropped, with
    the reason in ``na[name]``, and the others go on.

    Every turn starts with a warm-up (WARMUP_CALLS calls, and at least WARMUP_S seconds), so
    that each runner is timed as it runs when called again and again, not while it takes the
    cache back from the runner before it: a working set of a few MB (the 12.8 MB NDHWC 3-D max)
    needs 6 to 8 calls after another runner's (or the copy's) turn before its time settles
    (1.1 ms for the first call, 0.3 ms from the eighth, at 2 threads), and with one warm-up call
    the median of a 10-call turn sat on that slope, so a runner's figure depended on which runner
    came before it (the same module measured 1.6-1.7x its twin when it followed the copy, 0.6-1.1x
    otherwise). ``first_calls`` (a dict, filled when given): the seconds of each turn's first
    call by runner, the time with the cache as the runner before left it.
    """
    samples = {name: [] for name in runners}
    per_round = max(repeat // ROUNDS, 1)
    live = dict(runners)
    for _ in range(ROUNDS):
        for name, run in list(live.items()):
            settle()
            try:
                first = sample_times(run, 1, warmup=0)
                samples[name] += sample_times(run, per_round, warmup=WARMUP_CALLS - 1, warmup_s=WARMUP_S)
            except errors[name] as err:
                na[name] = f"failed: {short_reason(err)}"
                del live[name], samples[name]
                continue
            if first_calls is not None:
                first_calls.setdefault(name, []).extend(first)
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
