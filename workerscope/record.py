"""The record: every frame a driver accepted, appended to a file as it arrives.

A driver that follows a job for hours keeps what it received on disk, not in memory: the
Subscriber appends each frame it folds in, through a writer thread, to an append-only file,
and builds timelines from that file. A driver killed at any moment leaves a record that
`load()` reads up to the last whole entry.

Layout: an 8-byte header (RECORD_MAGIC), then entries, each a 1-byte tag, a 4-byte
little-endian length and that many bytes:
  F  a driver frame, exactly as protocol.encode_frame made it (as it came off the wire)
  D  the driver's own facts at that moment (a msgpack map, see Facts): clock offsets, frames
     lost and dropped per worker, each worker's state, its last frame's time, and notes
Frames are in the order the driver folded them; facts entries come about once a second and
at close, and the last one read is the one applied.

A torn tail (the driver died mid-write) ends the read there and is said in every worker's
notes, never fatal; an empty file or one that is not a record is a WorkerscopeError.
"""

from __future__ import annotations

import collections
import logging
import os
import stat
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, NamedTuple

from . import protocol
from .builder import TimelineBuilder
from .errors import FileFormatError, ProtocolError, WorkerscopeError
from .protocol import Status
from .timeline import Timeline, open_no_foreign_link
from .timeline import load as load_timeline

_STATUS_VALUES = frozenset(s.value for s in Status)

log = logging.getLogger("workerscope.record")

RECORD_MAGIC = b"WSCREC\x00\x01"  # "WSCREC", a NUL, the layout's version
FRAME = b"F"
FACTS = b"D"
_ENTRY = struct.Struct("<cI")
FLUSH_S = 0.25  # the writer writes what is queued at least this often
QUEUE_BYTES = 64 * 1024 * 1024  # frames waiting for the writer; past this, dropped and counted
_READ_CHUNK = 1024 * 1024
_BATCH = 512  # entries a writev: two buffers each, within IOV_MAX (1,024)
# load()'s default memory for samples (~200,000 of a sidecar's, ~1.3 KB each); a record that
# holds more has them folded into time bins (builder.SampleBins).
MAX_SAMPLE_BYTES = 256 * 2**20
_MAX_ENTRY = 64 * 1024 * 1024  # far above any frame (1 MiB) or facts entry: a bad length


class Entry(NamedTuple):
    tag: bytes
    data: bytes


@dataclass
class Facts:
    """What only the driver knows, kept in the record beside the frames. Times are the
    driver's wall clock (ns)."""

    clocks: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # offset, error
    lost: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    last_wall: dict[str, int] = field(default_factory=dict)  # each worker's last frame
    notes: dict[str, list[str]] = field(default_factory=dict)  # the driver's, per worker
    closed_wall: int | None = None  # when the driver closed; None while it runs
    # When the driver first found each dead worker gone: the end of what it left open, for a
    # worker that sends nothing between its job's edges (light mode) and so has no last frame
    # near its death.
    gone_wall: dict[str, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        return protocol.encode_blob({
            "clocks": {w: list(c) for w, c in self.clocks.items()}, "lost": self.lost,
            "dropped": self.dropped, "states": self.states, "last_wall": self.last_wall,
            "notes": self.notes, "closed_wall": self.closed_wall, "gone_wall": self.gone_wall})

    @classmethod
    def decode(cls, data: bytes) -> Facts:
        """ProtocolError if the entry is not facts as encode() writes them."""
        raw = protocol.decode_blob(data, limit=None)
        try:
            if not isinstance(raw, dict):
                raise TypeError("facts are a map")
            closed = raw.get("closed_wall")
            return cls(
                clocks={_str(w): (_int(o), None if e is None else _int(e))
                        for w, (o, e) in _map(raw.get("clocks")).items()},
                lost={_str(w): _int(n) for w, n in _map(raw.get("lost")).items()},
                dropped={_str(w): _int(n) for w, n in _map(raw.get("dropped")).items()},
                states={_str(w): _str(s) for w, s in _map(raw.get("states")).items()},
                last_wall={_str(w): _int(t) for w, t in _map(raw.get("last_wall")).items()},
                notes={_str(w): [_str(n) for n in ns] for w, ns in _map(raw.get("notes")).items()},
                closed_wall=None if closed is None else _int(closed),
                gone_wall={_str(w): _int(t) for w, t in _map(raw.get("gone_wall")).items()})
        except (TypeError, ValueError) as err:
            raise ProtocolError(f"malformed driver facts in a record: {err}") from err


def _map(value: Any) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError("expected a map")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


# -- writing -----------------------------------------------------------------------------------
class RecordWriter:
    """Appends entries to a record file from a thread of its own: append() only queues (the
    receive thread never waits on the disk), the writer writes what is queued every FLUSH_S
    at most, so a driver killed loses at most that much. The file is replaced if it exists.

    Past queue_bytes waiting (a disk slower than the frames), frames are dropped and counted
    in `dropped`; a failed write (a full disk) is counted in `failed` and said once."""

    def __init__(self, path: str | os.PathLike[str], queue_bytes: int = QUEUE_BYTES,
                 flush_s: float = FLUSH_S, mode: int = 0o644, resume: bool = False) -> None:
        self.path = os.fspath(path)
        self.queue_bytes = queue_bytes
        self.flush_s = flush_s
        self.frames = 0  # frames written
        self.bytes = len(RECORD_MAGIC)  # the file's length: whole entries only
        self.dropped = 0  # frames not queued: the queue was full
        self.failed = 0  # entries a write failed for
        self.last_error: str | None = None
        self.closed = False
        flags = os.O_WRONLY | os.O_CREAT | (0 if resume else os.O_TRUNC)
        try:
            # Never through another user's symlink (a record often lies in a shared folder).
            fd = open_no_foreign_link(self.path, flags, mode)
            if resume:  # a record this program wrote and closed: go on after its last entry
                self.bytes = os.lseek(fd, 0, os.SEEK_END)
        except OSError as err:
            raise WorkerscopeError(f"cannot write the record {self.path!r}: "
                                   f"{err.strerror or err}") from err
        self._fd = fd
        if not resume:
            self._write([RECORD_MAGIC], len(RECORD_MAGIC))
        self._queue: collections.deque[tuple[bytes, bytes]] = collections.deque()
        self._queued = 0  # bytes in _queue
        self._asked = 0  # entries queued, ever
        self._done = 0  # entries written (or failed), ever
        self._flush_to = 0  # what a flush() waits for: entries queued before it
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="workerscope-record",
                                        daemon=True)
        self._thread.start()

    def append(self, data: bytes, tag: bytes = FRAME) -> bool:
        """Queue one entry; False (and counted) if the queue is full."""
        with self._cond:
            if self._stop:
                return False
            if self._queued + len(data) > self.queue_bytes and tag == FRAME:
                self.dropped += 1
                return False
            self._queue.append((tag, data))
            self._queued += len(data)
            self._asked += 1
            if self._queued > _READ_CHUNK:
                self._cond.notify_all()
            return True

    def flush(self, timeout: float | None = 10.0) -> int:
        """Wait until everything queued before this call is in the file; the file's length
        in whole entries then (what a reader may read)."""
        with self._cond:
            target = self._flush_to = self._asked
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._done >= target or self._stop, timeout)
            return self.bytes

    def close(self) -> None:
        """Write what is queued and close the file; flush() then returns its length."""
        if self.closed:
            return
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join()
        self._drain()  # what came after the thread's last round
        os.close(self._fd)
        self.closed = True

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stop or self._queued > _READ_CHUNK
                                    or self._flush_to > self._done, self.flush_s)
                if self._stop:
                    return
            self._drain()  # what filled a chunk, a flush() waits for, or flush_s passed

    def _drain(self) -> None:
        with self._cond:
            entries = list(self._queue)
            self._queue.clear()
            self._queued = 0
        if not entries:
            return
        for start in range(0, len(entries), _BATCH):
            batch = entries[start:start + _BATCH]
            # Gathered by the kernel (writev): no copy of the frames into one large chunk.
            parts = [p for tag, data in batch for p in (_ENTRY.pack(tag, len(data)), data)]
            size = sum(map(len, parts))
            ok = self._write(parts, size)
            with self._cond:
                if ok:
                    self.bytes += size
                    self.frames += sum(tag == FRAME for tag, _ in batch)
                else:
                    self.failed += len(batch)
                self._done += len(batch)
                self._cond.notify_all()

    def _write(self, parts: list[bytes], size: int) -> bool:
        try:
            written = os.writev(self._fd, parts)
            if written < size:  # a short write (rare on a file): the rest, piece by piece
                rest = memoryview(b"".join(parts))[written:]
                while rest:
                    rest = rest[os.write(self._fd, rest):]
        except OSError as err:
            # A part-written chunk would tear the file in the middle: cut it back off.
            try:
                os.ftruncate(self._fd, self.bytes)
                os.lseek(self._fd, self.bytes, os.SEEK_SET)
            except OSError as cut:  # the file is as it is; a reader stops at the torn entry
                log.warning("could not cut the record %r back to its last whole entry (%s): "
                            "a reader stops there", self.path, cut.strerror or cut)
            first = self.failed == 0 and self.last_error is None
            self.last_error = f"writing the record {self.path!r}: {err.strerror or err}"
            if first:
                log.warning("%s (entries not written are counted from now on)", self.last_error)
            return False
        return True


# -- reading -----------------------------------------------------------------------------------
class RecordReader:
    """The entries of a record, streamed: `for entry in reader`. After the loop, `torn` is
    the number of bytes at the end that did not make a whole entry (a driver killed
    mid-write), 0 for a whole record."""

    def __init__(self, path: str | os.PathLike[str], limit: int | None = None) -> None:
        self.path = os.fspath(path)
        self.limit = limit  # read no further than this many bytes (what a writer flushed)
        self.torn = 0
        self.frames = 0

    def __iter__(self) -> Iterator[Entry]:
        with _open_regular(self.path) as f:
            head = f.read(len(RECORD_MAGIC))
            if not head:
                raise FileFormatError(f"{self.path!r} is empty: the driver that was recording "
                                       "it stopped before writing anything")
            if head != RECORD_MAGIC:
                raise FileFormatError(f"{self.path!r} is not a workerscope record")
            pos = len(head)
            buf = b""
            while True:
                want = _READ_CHUNK if self.limit is None else min(_READ_CHUNK, self.limit - pos)
                more = f.read(want) if want > 0 else b""
                pos += len(more)
                buf += more
                start = 0
                while len(buf) - start >= _ENTRY.size:
                    tag, size = _ENTRY.unpack_from(buf, start)
                    if tag not in (FRAME, FACTS) or size > _MAX_ENTRY:
                        self.torn = len(buf) - start + self._rest(f, pos)
                        return
                    end = start + _ENTRY.size + size
                    if end > len(buf):
                        break
                    if tag == FRAME:
                        self.frames += 1
                    yield Entry(tag, buf[start + _ENTRY.size:end])
                    start = end
                buf = buf[start:]
                if not more:
                    self.torn = len(buf)
                    return

    def _rest(self, f: BinaryIO, pos: int) -> int:
        size = os.fstat(f.fileno()).st_size
        return max(0, (size if self.limit is None else min(size, self.limit)) - pos)


def _open_regular(path: str) -> BinaryIO:
    try:
        # Before opening: opening a FIFO blocks until a writer comes, a device reads for ever.
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise WorkerscopeError(f"{path!r} is not a regular file")
        return open(path, "rb")
    except OSError as err:
        raise WorkerscopeError(f"cannot read {path!r}: {err.strerror or err}") from err


def is_record(path: str | os.PathLike[str]) -> bool:
    """Whether the file begins as a record does (an empty file counts: a record's start)."""
    with _open_regular(os.fspath(path)) as f:
        head = f.read(len(RECORD_MAGIC))
    return head == RECORD_MAGIC or not head


def read_record(path: str | os.PathLike[str], limit: int | None = None,
                facts: Facts | None = None, max_sample_bytes: int | None = None) -> Timeline:
    """The Timeline of a record: its frames folded in order, then the driver's facts (its
    last facts entry, or `facts` when given: a live driver's, newer than any in the file).
    Frames that do not fold are skipped and counted in their worker's notes.
    max_sample_bytes: past that much memory of samples (estimated: builder.sample_bytes),
    every series is folded into time bins of one width (builder.SampleBins: cumulative
    counters keep their last value, rates their mean, memory its max), so a record of any
    length loads in bounded memory; each worker's notes say so. None keeps every sample."""
    reader = RecordReader(path, limit)
    builder = TimelineBuilder(max_sample_bytes=max_sample_bytes)
    last: Facts | None = None
    bad: dict[str, int] = {}  # worker -> frames of it that did not fold
    unreadable = 0  # entries that are no frame or no facts at all
    for entry in reader:
        try:
            if entry.tag == FACTS:
                last = Facts.decode(entry.data)
                continue
            frame = protocol.decode_frame(entry.data)
        except ProtocolError:
            unreadable += 1
            continue
        try:
            builder.add(frame)
        except ProtocolError:
            bad[frame.worker] = bad.get(frame.worker, 0) + 1
    t = _apply(builder, facts or last or Facts(), live=facts is not None)
    notes = [f"{unreadable} entr(ies) of the record could not be read"] if unreadable else []
    if reader.torn:
        notes.append(f"the record {reader.path!r} ends in a torn entry ({reader.torn} bytes, "
                     "not read): the driver stopped while writing it")
        log.warning("%s ends in a torn entry of %d bytes (not read): the driver that wrote it "
                    "stopped mid-write", reader.path, reader.torn)
    for wid, w in t.workers.items():
        own = [f"{bad[wid]} malformed frame(s) of this worker in the record were skipped"
               ] if bad.get(wid) else []
        w.notes = [*w.notes, *own, *notes]
    binned = None if builder.bins is None else builder.bins.note()
    if binned:
        log.warning("%s: %s; max_sample_bytes=None reads every sample", reader.path, binned)
    return t


def _silent_between_edges(wid: str) -> bool:
    """Whether a worker sends no frame while its job runs (light mode: no sidecar, no
    heartbeats), so that its last frame says nothing of when it died."""
    return protocol.parse_worker_id(wid).sidecar == "light"


def _apply(builder: TimelineBuilder, facts: Facts, live: bool) -> Timeline:
    """Fold in what the driver knew: clocks, loss, states; jobs still open on a worker that
    went silent, died or outlived the driver end as lost (unless `live`: the driver is still
    listening, and the job still running)."""
    gave_up: dict[str, tuple[int, str]] = {}
    for wid, state in facts.states.items():
        if state == Status.DEAD and wid in facts.gone_wall and _silent_between_edges(wid):
            gave_up[wid] = (facts.gone_wall[wid], "its worker died inside it, no bye: a "
                            "light worker sends nothing while a job runs, so it ends where the "
                            "driver found the worker gone (within a second of its death)")
        elif state in (Status.STALE, Status.DEAD):
            gave_up[wid] = (facts.last_wall.get(wid, 0), f"its worker went {state}: silent "
                            "since its last frame, no bye")
        elif state in (Status.RUNNING, Status.IDLE) and builder.has_open_job(wid) and (
                facts.closed_wall is not None or not live):
            if facts.closed_wall is not None:
                gave_up[wid] = (facts.closed_wall, "still open when the driver closed")
            else:
                gave_up[wid] = (facts.last_wall.get(wid, 0), "still open where the record "
                                "ends: the driver stopped without closing it")
    if not live:
        # A record with no driver's word on a worker (a sidecar's own, which `run` leaves
        # when it is killed): a job still open there ends where its samples do, lost.
        for wid in builder.t.workers:
            if wid not in facts.states and wid not in gave_up and builder.has_open_job(wid):
                gave_up[wid] = (builder.last_sample.get(wid, 0), "still open where the "
                                "record ends: whoever wrote it stopped without ending it")
    offsets = {wid: offset for wid, (offset, _) in facts.clocks.items()}
    t = builder.finish(builder.snapshot(last=True), offsets, gave_up)
    for wid, w in t.workers.items():
        w.lost = facts.lost.get(wid, w.lost)
        w.dropped = max(w.dropped, facts.dropped.get(wid, 0))
        if facts.states.get(wid) in _STATUS_VALUES:
            w.status = Status(facts.states[wid])
        if wid in facts.clocks:
            w.clock_offset_ns, w.clock_error_ns = facts.clocks[wid]
        w.notes = [*w.notes, *(n for n in facts.notes.get(wid, ()) if n not in w.notes)]
        if not live and facts.closed_wall is None and w.status in (Status.RUNNING, Status.IDLE):
            # The driver stopped without closing (killed, or still writing the file): what
            # the worker did after its last frame here is not known.
            w.status = Status.LOST
            w.notes.append("the record ends here, without its driver's close (the driver was "
                           "killed, or is still writing it): nothing is known of this worker "
                           "after its last frame")
    return t


def load(path: str | os.PathLike[str],
         max_sample_bytes: int | None = MAX_SAMPLE_BYTES) -> Timeline:
    """Read a saved timeline (.wsc) or a driver's record (`Subscriber(record=...)`,
    `workerscope listen -o`), whichever the file is. A record whose samples would take more
    than `max_sample_bytes` of memory (an hours-long run of many workers; ~1.3 KB a sample)
    has them folded into time bins, so it loads in bounded memory; None reads every one."""
    path = os.fspath(path)
    if is_record(path):
        return read_record(path, max_sample_bytes=max_sample_bytes)
    return load_timeline(path)
