"""Worker threads that never hang: each job runs in a thread of its own, and one that has not
finished within the limit is answered for and left behind (a daemon thread blocked on a device
that stopped answering), while its worker goes on with the next job."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future, InvalidStateError


class Workers:
    """``count`` threads taking jobs in order; ``submit(job, failed)`` gives a Future that holds
    ``job()``'s value, or ``failed(True)``'s when ``job`` ran past ``limit`` seconds and
    ``failed(False)``'s when it raised (jobs report the failures they expect as values). A
    ``limit`` of None waits for every job."""

    def __init__(self, count: int, limit: float | None, name: str = "tvm_pool-worker"):
        self.limit, self.name = limit, name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self.grow(count)

    @property
    def count(self) -> int:
        return len(self._threads)

    def grow(self, count: int) -> None:
        """At least ``count`` workers."""
        while len(self._threads) < count:
            thread = threading.Thread(target=self._serve, name=f"{self.name}-{len(self._threads)}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def submit(self, job, failed) -> Future:
        future: Future = Future()
        self._jobs.put((job, failed, future))
        return future

    def close(self) -> None:
        """Cancel the jobs not started; each worker ends after its job (one left behind stays
        blocked)."""
        while True:
            try:
                item = self._jobs.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[2].cancel()
        for _ in self._threads:
            self._jobs.put(None)

    def _serve(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, failed, future = item
            thread = threading.Thread(target=_run, args=(job, future), name=f"{self.name}-job", daemon=True)
            thread.start()
            thread.join(self.limit)
            if not future.done():  # still running (left behind), or it raised
                _settle(future, failed(thread.is_alive()))


def _run(job, future: Future) -> None:
    _settle(future, job())


def _settle(future: Future, value) -> None:
    """Set ``future`` to ``value`` unless it was set already (the job and its timeout race)."""
    try:
        future.set_result(value)
    except InvalidStateError:
        pass
