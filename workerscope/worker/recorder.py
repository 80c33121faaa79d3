"""Span records in the worker: the current-span context, the in-process buffer, its pipe writer.

The hot path is the record tuple appended to a deque (thread-safe without a lock). A flusher
thread ships what accumulated to the sidecar every flush_interval, so spans arrive during the
job, not only at its end, and the job's own threads never write to the pipe except at job
boundaries.
"""

from __future__ import annotations

import collections
import contextvars
import itertools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import protocol
from ..errors import WorkerscopeError

# (job id, span id) of the innermost open span in this thread or task.
current: contextvars.ContextVar[tuple[int | None, int | None]] = contextvars.ContextVar(
    "workerscope_current", default=(None, None)
)
_ids = itertools.count(1)
next_id: Callable[[], int] = _ids.__next__
now_ns: Callable[[], int] = time.monotonic_ns
_local = threading.local()


def thread_id() -> int:
    """The kernel's id of this thread (what Perfetto and /proc show), cached per thread:
    get_native_id() is a system call, ~200 ns on the hot path of every span."""
    try:
        tid: int = _local.tid
        return tid
    except AttributeError:
        tid = _local.tid = threading.get_native_id()
        return tid


# A forked child's only thread is new to the kernel: forget the parent's id.
os.register_at_fork(after_in_child=_local.__dict__.clear)


class Buffer:
    """Span and mark records of one process, waiting to be shipped."""

    def __init__(self) -> None:
        self.records: collections.deque[tuple[Any, ...]] = collections.deque()
        self.thread_names: dict[int, str] = {}
        self.new_threads: collections.deque[tuple[int, str]] = collections.deque()

    def add(self, record: tuple[Any, ...]) -> None:
        tid = record[7]
        if tid not in self.thread_names:
            name = threading.current_thread().name
            self.thread_names[tid] = name
            self.new_threads.append((tid, name))
        self.records.append(record)

    def drain(self, job: int | None = None) -> dict[str, Any] | None:
        """Take everything buffered as one spans message body, or None if empty."""
        n = len(self.records)
        if not n and not self.new_threads:
            return None
        popleft = self.records.popleft
        records = [list(popleft()) for _ in range(n)]
        threads = [list(self.new_threads.popleft()) for _ in range(len(self.new_threads))]
        return {"pid": os.getpid(), "records": records, "threads": threads}


# The buffer spans go to, or None when no monitor is active in this process: @timed checks
# this one global and does nothing else when it is None.
active: Buffer | None = None
# The job that spans of threads without a job context belong to (None when ambiguous).
default_job: int | None = None


class Flusher:
    """Ships a Buffer to a pipe every `interval` seconds from a daemon thread."""

    def __init__(self, buffer: Buffer, send_locked: Callable[[bytes], None], lock: threading.Lock,
                 interval: float) -> None:
        self._buffer = buffer
        self._send = send_locked  # called with `lock` held
        self._lock = lock
        self._interval = interval
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="workerscope-flush", daemon=True)
        self.failed: BaseException | None = None
        # Batches that could not be sent: kept for the timeline the worker builds alone.
        self.unsent: list[dict[str, Any]] = []

    def start(self) -> None:
        self._thread.start()

    def flush(self) -> None:
        """Send what is buffered now, from the calling thread."""
        with self._lock:
            self.flush_locked()

    def flush_locked(self) -> None:
        """flush() for a caller that holds the lock. Draining and writing under one lock keeps
        batches in order, and no two threads ever pop the buffer at once."""
        body = self._buffer.drain()
        if body is not None:
            try:
                self._send(protocol.encode_pipe(protocol.SPANS, body))
            except WorkerscopeError:
                self.unsent.append(body)
                raise

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(self._interval or None)
            self._wake.clear()
            try:
                self.flush()
            except WorkerscopeError as err:  # the sidecar went away; the link knows it is dead
                self.failed = err
                return

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
