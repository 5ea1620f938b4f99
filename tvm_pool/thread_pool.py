"""How tvm_pool wants TVM's CPU thread pool set up, applied when tvm_pool is imported.

TVM's thread pool pins each worker thread to one core (worker i to the i-th core) but leaves
the calling thread, which runs task 0 of every parallel loop, free to run on any core. When the
OS happens to place the calling thread on a worker's core, both halves of every parallel loop
share one core: on a 2-core machine a parallel pool then runs at half speed or worse, and which
case a process gets depends on where its main thread woke up. Measured here (znver4, 2 threads,
96x54x54 3x3 s3 MaxPool, median of 50 calls): 0.025 ms pinned in about half of the processes,
0.011-0.014 ms in every process with the workers unpinned. Stock TVM's serial pooling never
notices; tvm_pool's parallel schedules do, so tvm_pool turns the pinning off by default.

``TVM_BIND_THREADS`` is read when a thread's pool is created (its first parallel call), so this
must run before the first parallel TVM call of the process; a value the user set is kept.
Deployed modules run without tvm_pool: the deploy examples set the same variable.
"""

from __future__ import annotations

import os

BIND_THREADS_VARIABLE = "TVM_BIND_THREADS"


def unpin_worker_threads() -> None:
    """Let the OS place TVM's worker threads (unless the user chose otherwise)."""
    os.environ.setdefault(BIND_THREADS_VARIABLE, "0")
