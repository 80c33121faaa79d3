"""Light mode: counters read at a job's start and end, no extra process, a flat stats dict.

Everything comes from getrusage and a few small /proc reads (no psutil objects, no threads),
the files held open and read again with pread (_OwnFiles): about 0.1 ms a job, under what
opening and reading the same files costs. With an endpoint, the stats
go to the driver as the job's end frame, through one non-blocking socket per worker process.

Spans too: the process's first light job makes a span ring of its own (the layout the sidecar
reads, spanring.py), kept for the jobs after it; each job reads what completed in it at its
end, and sends it to the driver before its end frame. A ring that fills overwrites its oldest
records, counted as spans_lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
import threading
import time
from typing import Any

from .. import procfs, protocol, spanring
from ..builder import build
from ..config import Config, public_endpoint
from ..protocol import SpanRecord, Status
from ..timeline import Timeline
from . import recorder
from .exits import at_exit, started_by_multiprocessing


class _OwnFiles:
    """The /proc files a light job reads, opened once per process and read again with pread at
    offset 0 (the kernel writes them anew): an open and a close were half a job's cost. Held
    for the process's life (five descriptors, close-on-exec); a forked child opens its own,
    since its parent's /proc/self files are the parent's. A file that cannot be opened is
    read as absent."""

    PATHS = (("cores", "/proc/stat"), ("io", "/proc/self/io"),
             ("net", "/proc/self/net/dev"), ("status", "/proc/self/status"))

    def __init__(self) -> None:
        self.fds: dict[str, int] = {}
        for name, path in self.PATHS:
            try:
                self.fds[name] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
        try:
            self.clear_refs: int | None = os.open("/proc/self/clear_refs",
                                                  os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            self.clear_refs = None

    def read(self, name: str) -> bytes | None:
        fd = self.fds.get(name)
        if fd is None:
            return None
        try:
            return procfs.pread_all(fd)
        except OSError:
            return None

    def reset_peak(self) -> bool:
        """procfs.reset_peak of this process, on the descriptor held."""
        if self.clear_refs is None:
            return False
        try:
            os.write(self.clear_refs, b"5")  # 5 touches nothing but the peak (see proc(5))
            return True
        except OSError:
            return False

    def status(self) -> dict[str, int]:
        data = self.read("status")
        return procfs.parse_status(data, _MEMORY_FIELDS) if data else {}

    def close(self) -> None:
        for fd in [*self.fds.values(), self.clear_refs]:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fds, self.clear_refs = {}, None


_files: _OwnFiles | None = None


def _own_files() -> _OwnFiles:
    global _files
    files = _files
    if files is None:
        with _lock:
            if _files is None:
                _files = _OwnFiles()
            files = _files
    return files


def _cores(data: bytes | None) -> list[tuple[int, int]] | None:
    """(busy, total) jiffies per core from a /proc/stat text."""
    if data is None:
        return None
    out = []
    for line in data.split(b"\n"):
        if line.startswith(b"cpu") and line[3:4].isdigit():
            v = [int(x) for x in line.split(None, 9)[1:9]]
            idle = v[3] + (v[4] if len(v) > 4 else 0) + (v[7] if len(v) > 7 else 0)
            out.append((sum(v) - idle, sum(v)))
    return out


_MEMORY_FIELDS = {b"VmRSS": "rss_bytes", b"VmHWM": "peak_rss_bytes"}


class Reading:
    __slots__ = ("children", "cores", "io", "net", "own", "wall")

    def __init__(self, files: _OwnFiles) -> None:
        # getrusage has microsecond resolution where os.times() counts 10 ms ticks: a 2 ms
        # job would read 0 % or 500 %.
        self.own = resource.getrusage(resource.RUSAGE_SELF)
        self.children = resource.getrusage(resource.RUSAGE_CHILDREN)
        io = files.read("io")
        self.io = procfs.io_fields(io) if io is not None else {}
        net = files.read("net")
        self.net = procfs.parse_net_dev(net) if net is not None else None
        self.cores = _cores(files.read("cores"))
        self.wall = time.perf_counter()


def stats(start: Reading, end: Reading, peak_reset: bool,
          status: dict[str, int]) -> dict[str, float]:
    """The job's flat stats. Keys absent where a value could not be read."""
    wall = end.wall - start.wall
    out: dict[str, float] = {
        "wall_s": wall,
        "cpu_user_s": end.own.ru_utime - start.own.ru_utime,
        "cpu_system_s": end.own.ru_stime - start.own.ru_stime,
        "children_cpu_user_s": end.children.ru_utime - start.children.ru_utime,
        "children_cpu_system_s": end.children.ru_stime - start.children.ru_stime,
    }
    total = sum(out[k] for k in ("cpu_user_s", "cpu_system_s", "children_cpu_user_s",
                                 "children_cpu_system_s"))
    if wall > 0:
        out["cpu_percent"] = total / wall * 100.0
    if start.cores and end.cores and len(start.cores) == len(end.cores):
        pcts = []
        for k, ((b0, n0), (b1, n1)) in enumerate(zip(start.cores, end.cores, strict=True)):
            if n1 > n0:  # a job shorter than a clock tick has no per-core figure
                pct = 100.0 * (b1 - b0) / (n1 - n0)
                out[f"host_cpu_percent_core{k}"] = pct
                pcts.append(pct)
        if pcts:
            out["host_cpu_percent"] = sum(pcts) / len(pcts)
    for key in ("read_bytes", "write_bytes", "read_chars", "write_chars"):
        if key in start.io and key in end.io:
            out[key] = end.io[key] - start.io[key]
    if start.net and end.net:
        out["host_net_sent_bytes"] = end.net["net_sent_bytes"] - start.net["net_sent_bytes"]
        out["host_net_recv_bytes"] = end.net["net_recv_bytes"] - start.net["net_recv_bytes"]
    if "rss_bytes" in status:
        out["rss_bytes"] = status["rss_bytes"]
    if "peak_rss_bytes" in status and peak_reset:
        out["peak_rss_bytes"] = status["peak_rss_bytes"]
    if end.children.ru_maxrss > start.children.ru_maxrss:
        # ru_maxrss of reaped children is a lifetime maximum (KiB): only a rise is this job's.
        out["children_peak_rss_bytes"] = end.children.ru_maxrss * 1024
    return out


# How long a light worker waits at exit for the driver to take its last frames.
EXIT_WAIT = 0.5
# ... and, where its connection's handshake is not done yet, this long for it.
CONNECT_WAIT = 3.0
log = logging.getLogger("workerscope")


def _hello(config: Config) -> tuple[str, dict[str, Any]]:
    """This process's light worker id and hello."""
    host = socket.gethostname()
    return (protocol.worker_id(host, os.getpid(), "light", config.node),
            {"host": host, "node": config.node, "pid": os.getpid(),
             "anchor": protocol.clock_anchor(), "boot_id": procfs.boot_id(), "mode": "light"})


class _Sender:
    """One non-blocking socket per worker process for light-mode stats, shared by its threads
    (under a lock: a ZeroMQ socket must never be used by two threads at once)."""

    def __init__(self, config: Config) -> None:
        from ..transport import Outbox  # pyzmq: only for those who asked for an endpoint

        self.config = config
        self.worker, self.hello = _hello(config)
        self.lock = threading.Lock()
        self.outbox = Outbox(config.endpoint or "")
        self.seq = -1
        self.send(protocol.HELLO, self.hello)

    @property
    def bye_wait(self) -> str:
        """How the wait for the bye's acknowledgement ended (transport.Outbox.bye_wait)."""
        return self.outbox.bye_wait

    def send(self, kind: str, body: dict[str, Any]) -> None:
        with self.lock:
            self.seq += 1
            self.outbox.send(protocol.encode_frame(kind, self.worker, self.seq, body))

    def close(self) -> None:
        self.send(protocol.BYE, {"t": time.monotonic_ns(), "status": Status.EXITED,
                                 "dropped": self.outbox.dropped})
        with self.lock:
            try:
                # The driver says nothing to a light worker before its bye: the wait is
                # skipped when no driver was ever heard from and a connection failed.
                wait = min(self.config.bye_timeout, EXIT_WAIT)
                if not self.outbox.nobody_listened and not self.outbox.heard:
                    # Still connecting (a short-lived process: a Lithops call's): its frames
                    # go once the handshake is done, which a loaded machine can take a while
                    # to finish. A failed connection ends this wait at once.
                    wait = max(wait, CONNECT_WAIT)
                self.outbox.wait_ack(self.seq, wait)
            finally:
                self.outbox.close()
        from ..transport import not_delivered

        said = not_delivered(self.bye_wait, self.config.endpoint or "",
                             f"the light-mode stats of this process ({self.seq + 1} frame(s))")
        if said:
            log.warning("workerscope: %s", said)


_senders: dict[tuple[str | None, str | None], _Sender | None] = {}
_lock = threading.Lock()


def _sender(config: Config) -> _Sender | None:
    """The process's sender for this endpoint; None (and a warning, once) if it can't be made:
    a bad endpoint must not stop the job."""
    key = (config.endpoint, config.node)
    with _lock:
        if key not in _senders:
            started_by_multiprocessing()  # a fork child's os._exit runs no atexit handler
            try:
                _senders[key] = _Sender(config)
            except Exception as err:  # noqa: BLE001 - zmq.ZMQError and kin: monitoring must not break the job
                log.warning("workerscope: light-mode stats not sent to %s: %s",
                            public_endpoint(config.endpoint or ""), err)
                _senders[key] = None
        return _senders[key]


def _close_senders() -> None:
    for s in list(_senders.values()):
        if s is not None:
            s.close()
    _senders.clear()


def _forget_after_fork() -> None:
    # The parent's sockets and zmq context must not be used in a forked child, and its peak
    # is not the child's.
    global _lock, _lifetime_peak, _ring, _files
    _lifetime_peak = 0
    if _files is not None:  # the parent's /proc/self, inherited
        _files.close()
        _files = None
    _senders.clear()
    _lock = threading.Lock()
    # The parent's ring is the parent's to read and remove (recorder.py has unmapped it).
    _ring = None


at_exit(_close_senders)
os.register_at_fork(after_in_child=_forget_after_fork)


class _Ring:
    """This process's span ring for light jobs: anonymous memory (no file, no descriptor),
    read by the worker itself."""

    def __init__(self, capacity: int) -> None:
        self.writer = recorder.Writer(None, capacity)
        self.reader = spanring.RingReader(self.writer.mm, os.getpid())
        self.jobs = spanring.Jobs()
        self.lock = threading.Lock()  # one reader at a time: jobs of several threads end
        self.lost_said = 0  # the count of lost records the driver was last told

    def start(self, job: int, tid: int) -> None:
        with self.lock:
            self.jobs.start(job, os.getpid(), tid, time.monotonic_ns())

    def read(self, job: int, tid: int) -> tuple[list[SpanRecord], list[tuple[int, str]], int]:
        """At `job`'s end: every record completed since the last read (this job's, and those
        of other threads' jobs that completed meanwhile), the threads named meanwhile, and how
        many records the ring lost in all."""
        with self.lock:
            now = time.monotonic_ns()
            self.jobs.end(job, now)
            records = self.reader.read(self.jobs)
            threads, self.reader.threads = self.reader.threads, []
            # Every record begun so far has been given its job (a span still open keeps the
            # one it got): ended jobs are needed no more, and a long table costs every read.
            self.jobs.prune(now)
            return records, threads, self.reader.lost

    def close(self) -> None:
        self.reader.close()
        recorder.release(self.writer)


_ring: _Ring | None = None
_ring_failed = False


def _own_ring(capacity: int) -> _Ring | None:
    """The process's light ring of this capacity (made on first use); None if none can be."""
    global _ring, _ring_failed
    with _lock:
        cap = spanring.capacity_for(capacity)
        if _ring is not None and _ring.writer.cap != cap:
            _ring.close()
            _ring = None
        if _ring is None and not _ring_failed:
            try:
                _ring = _Ring(cap)
            except OSError as err:
                _ring_failed = True
                log.warning("workerscope: no span ring for light jobs (%s): their spans are not "
                            "recorded", err)
        return _ring


def _close_ring() -> None:
    global _ring
    if _ring is not None:
        _ring.close()
        _ring = None


at_exit(_close_ring)


# The highest VmHWM this process had before any reset of ours: its lifetime peak.
_lifetime_peak = 0


def keep_lifetime_peak() -> None:
    """Note the process's peak so far, before a reset of the high-water mark (a light job's,
    or a heavy job's sidecar's) hides it from every tool, ru_maxrss too."""
    global _lifetime_peak
    _lifetime_peak = max(_lifetime_peak, _hwm())


def _hwm() -> int:
    return _own_files().status().get("peak_rss_bytes", 0)


def span_frames(pid: int, records: list[SpanRecord], threads: list[tuple[int, str]],
                lost: int | None, size_note: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Records as the sidecar sends them (protocol.span_bodies), and the ring's running count
    of lost records (when given) in a last frame, with what a full ring says: that it filled,
    and (size_note) how big a ring would have held what it was asked to."""
    named = [list(t) for t in threads]
    out: list[tuple[str, dict[str, Any]]] = [
        (kind, dict(body)) for kind, body, _ in protocol.span_bodies(pid, records, named)]
    if lost is not None:
        body: dict[str, Any] = {"pid": pid, "records": [], "threads": [], "spans_lost": lost}
        if lost:
            body["notes"] = [protocol.ring_full_note("the job's end"),
                             *([size_note] if size_note else [])]
        out.append((protocol.SPANS, body))
    return out


class LightJob:
    """One light-mode job: counters read at start() and end(), sent to the driver if there
    is one, and its spans, read from the process's light ring at end(). `stats` holds the
    job's flat stats after end(), `timeline` its job and spans.

    record_spans=False: the job runs inside a heavy job of this process, whose ring (and
    sidecar) records its spans instead."""

    def __init__(self, config: Config, name: str, record_spans: bool = True) -> None:
        self.config, self.name = config, name
        self.record_spans = record_spans
        self.stats: dict[str, float] | None = None
        self.ring: _Ring | None = None
        self._frames: list[tuple[str, dict[str, Any]]] = []
        self._timeline: Timeline | None = None

    def start(self) -> None:
        self.sender = _sender(self.config) if self.config.endpoint else None
        self.job = recorder.next_id()
        self.tid = threading.get_native_id()
        start = {"job": self.job, "name": self.name, "t": time.monotonic_ns(),
                 "pid": os.getpid(), "tid": self.tid,
                 # a driver that starts after this worker's hello still dates the job right
                 "anchor": protocol.clock_anchor()}
        self._frames = [(protocol.JOB_START, start)]
        if self.sender is not None:
            self.sender.send(protocol.JOB_START, start)
        if self.record_spans:
            self.ring = _own_ring(recorder.ring_slots(self.config.ring_records,
                                                      self.config.span_cpu))
        if self.ring is not None:
            self.ring.writer.span_cpu = self.config.span_cpu
            self.lost_before = self.ring.reader.lost
            self.ring.start(self.job, self.tid)
            recorder.enter_job(self.job, self.ring.writer)
        self.files = _own_files()
        self.peak_reset = False
        if self.config.reset_peak:
            # Without a reset the peak only rises: the one read at the end is the lifetime's.
            keep_lifetime_peak()
            self.peak_reset = self.files.reset_peak()
        self.reading = Reading(self.files)

    def end(self, exc: BaseException | None) -> None:
        status = self.files.status()
        self.stats = stats(self.reading, Reading(self.files), self.peak_reset, status)
        lifetime = max(_lifetime_peak, status.get("peak_rss_bytes", 0))
        if lifetime:
            self.stats["lifetime_peak_rss_bytes"] = lifetime
        if self.ring is not None:
            recorder.leave_job(self.job)
            records, threads, lost = self.ring.read(self.job, self.tid)
            self.stats["spans"] = sum(r.job == self.job and r.kind == protocol.RECORD_SPAN
                                      for r in records)
            lost_here = lost - self.lost_before
            self.stats["spans_lost"] = lost_here
            # The running count goes to the driver when it moves (a frame less per job).
            said = None if lost == self.ring.lost_said else lost
            self.ring.lost_said = lost
            # A light ring is read at a job's end only: it must hold the job's records.
            reader = self.ring.reader
            # Only where it overflowed: a loss of damaged records is no matter of size.
            size = None if lost_here <= 0 or reader.backlog_peak <= reader.cap else spanring.ring_size_note(
                os.getpid(), reader.backlog_peak, reader.cap, lost_here, None)
            frames = span_frames(os.getpid(), records, threads, said, size)
            # Its own timeline keeps this job's records; the driver gets them all.
            self._frames.extend(span_frames(
                os.getpid(), [r for r in records if r.job == self.job], threads, lost_here,
                size))
        else:
            frames = []
        end: dict[str, Any] = {"job": self.job, "t": time.monotonic_ns(),
                               "status": Status.OK if exc is None else Status.ERROR,
                               "error": None, "stats": self.stats}
        if exc is not None:
            end["error"], end["traceback"] = recorder.describe(exc)
        self._frames.append((protocol.JOB_END, end))
        if self.sender is not None:
            for kind, body in frames:
                self.sender.send(kind, body)
            self.sender.send(protocol.JOB_END, end)

    @property
    def timeline(self) -> Timeline:
        """The job, its stats and its spans as a Timeline (built when first asked for)."""
        if self._timeline is None:
            if self.sender is not None:
                worker, hello = self.sender.worker, self.sender.hello
            else:
                worker, hello = _hello(self.config)
            frames = [(protocol.HELLO, hello), *self._frames]
            self._timeline = build(protocol.encode_frame(kind, worker, seq, body)
                                   for seq, (kind, body) in enumerate(frames))
        return self._timeline
