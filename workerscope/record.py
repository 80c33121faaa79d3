"""The record: every frame a driver accepted, appended to a file as it arrives.

A driver that follows a job for hours keeps what it received on disk, not in memory: the
Subscriber appends each frame it folds in, through a writer thread, to an append-only file,
and builds timelines from that file. A driver killed at any moment leaves a record that
`load()` reads up to the last whole entry.

Layout: an 8-byte header (RECORD_MAGIC) and a 4-byte seed, then entries, each a 1-byte tag,
a 4-byte little-endian length, a CRC-32 of the tag, the length and the data (begun from the
seed, which no sender sees, so a frame cannot carry an entry a reader would take for one of
the record's own), and that many bytes:
  F  a driver frame, exactly as protocol.encode_frame made it (as it came off the wire)
  D  what the driver's own facts (a msgpack map, see Facts: clock offsets, frames lost and
     dropped per worker, each worker's state, its last frame's time, and notes) changed by
     since the entry before: written once a second when something changed, and at close
  Z  a compressed block that starts a stream (a Zstandard frame, level LEVEL, a window of
     2**WINDOW_LOG bytes): what it decompresses to is entries as above without their
     checksums (a tag and a length each)
  z  a compressed block that goes on with the stream of the block before it
and inside a block, beside F and D:
  S  a spans frame with its records' ids and times delta-coded (each record's id and start
     as the change from the record before's, its end as the span's length: a fleet's
     spans frame of 20 spans compresses to ~115 B, as it came to ~210 B), which the reader
     turns back into the frame exactly as it came; a frame that would not come back byte
     for byte is kept as an F
Each round of the writer (every FLUSH_S at most) is one block, flushed to its end (a block
flush), so everything written is readable at once; a stream gives way to a new one after
STREAM_BYTES of entries, so a damaged block costs the rest of its stream at most. Frames are
in the order the driver folded them; the facts entries, merged in order, are the facts.
Records of the earlier layouts are still read, and one resumed goes on in its own: the fourth
(RECORD_MAGIC_V4: the same, without S entries), the third (RECORD_MAGIC_V3: the same entries,
the blocks a zlib stream, level DEFLATE_LEVEL, with sync flushes; Zstandard makes a fleet's
record ~0.8x the size for ~0.65x the writer's CPU, see benchmarks/RESULTS.md), the second
(RECORD_MAGIC_V2: F and D entries only, none compressed) and the first (RECORD_MAGIC_V1: no
seed, no checksums, every facts entry whole, the last one applied).

A damaged entry (its checksum does not match; its tag or length is not one a writer writes)
is skipped: the reader looks for the next whole entry after it and goes on, and the entries
skipped are counted and said in every worker's notes. A torn tail (the driver died mid-write:
the file ends inside its last entry) ends the read there and is said too; neither is fatal.
An empty file or one that is not a record is a WorkerscopeError, and so is one whose header
is followed by nothing readable.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import gc
import logging
import os
import re
import stat
import struct
import sys
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

from . import protocol
from .builder import NOTE_CHARS, WORKER_NOTES_BYTES, TimelineBuilder
from .errors import FileFormatError, ProtocolError, WorkerscopeError
from .protocol import Status
from .timeline import Timeline, open_no_foreign_link
from .timeline import load as load_timeline
from .units import fmt_bytes

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

_STATUS_VALUES = frozenset(s.value for s in Status)

log = logging.getLogger("workerscope.record")

RECORD_MAGIC = b"WSCREC\x00\x05"  # "WSCREC", a NUL, the layout's version
RECORD_MAGIC_V4 = b"WSCREC\x00\x04"  # no spans frames delta-coded
RECORD_MAGIC_V3 = b"WSCREC\x00\x03"  # the blocks a zlib stream
RECORD_MAGIC_V2 = b"WSCREC\x00\x02"  # entries as they are, none compressed
RECORD_MAGIC_V1 = b"WSCREC\x00\x01"  # entries without checksums; facts entries whole
FRAME = b"F"
FACTS = b"D"
STREAM = b"Z"  # a compressed block that starts a stream
BLOCK = b"z"  # a compressed block that goes on with the stream of the one before
SPANS_DELTA = b"S"  # inside a block of the fifth layout: a spans frame, delta-coded
_TAGS = (FRAME, FACTS)
_TAGS_V3 = (FRAME, FACTS, STREAM, BLOCK)  # the third layout's and after
_INNER_TAGS_V5 = (FRAME, FACTS, SPANS_DELTA)  # in a block of the fifth layout
_MAGICS = {1: RECORD_MAGIC_V1, 2: RECORD_MAGIC_V2, 3: RECORD_MAGIC_V3, 4: RECORD_MAGIC_V4,
           5: RECORD_MAGIC}
_LAYOUTS = {magic: layout for layout, magic in _MAGICS.items()}
_INNER = struct.Struct("<cI")  # an entry inside a block: tag, length (the block has the CRC)
STREAM_BYTES = 8 * 1024 * 1024  # entries' bytes a stream holds before a new one starts
BLOCK_BYTES = 1024 * 1024  # entries' bytes a block holds at most (or one entry)
_INFLATE_CHUNK = 256 * 1024
LEVEL = 1  # Zstandard's: level 3 made a fleet's record 1.09x larger, for 1.26x the CPU (RESULTS)
# A stream's window: 1 MiB. A larger one found nothing more in a fleet's frames (a worker's
# frame before is thousands of frames back); a reader takes up to 2**_WINDOW_LOG_MAX.
WINDOW_LOG = 20
_WINDOW_LOG_MAX = 23
DEFLATE_LEVEL = 1  # zlib's, for a record of the third layout resumed
_SEED = struct.Struct("<I")
_ENTRY_V1 = struct.Struct("<cI")
_ENTRY = struct.Struct("<cII")  # tag, length, CRC-32
_TAG_AT = re.compile(b"[FDZz]")  # where the search for the next whole entry looks
FLUSH_S = 0.25  # the writer writes what is queued at least this often
QUEUE_BYTES = 64 * 1024 * 1024  # frames waiting for the writer; past this, dropped and counted
_READ_CHUNK = 1024 * 1024
_BATCH = 512  # entries a writev: two buffers each, within IOV_MAX (1,024)
# load()'s default memory for samples (~200,000 of a sidecar's, ~1.3 KB each); a record that
# holds more has them folded into time bins (builder.SampleBins).
MAX_SAMPLE_BYTES = 256 * 2**20
_MAX_ENTRY = 64 * 1024 * 1024  # far above any frame (1 MiB) or facts entry: a bad length
# The driver's facts are written in entries of at most this many bytes (one worker's are a
# few KiB at most: see the notes' bounds), however many workers there are.
FACTS_ENTRY_BYTES = 1024 * 1024
# A worker's notes (from its frames: a bye may carry 1 MiB of them, and a worker may say bye
# again and again) are kept in the driver's facts and in a record's timeline up to
# WORKER_NOTES_BYTES each (UTF-8), NOTE_CHARS characters a note (builder.py's, which holds a
# timeline's to the same), and NOTES_BYTES for all workers together; past them, one note says
# so. The driver's own notes come on top.
NOTES_BYTES = 8 * 1024 * 1024


class Entry(NamedTuple):
    tag: bytes
    data: bytes


@dataclass
class Facts:
    """What only the driver knows, kept in the record beside the frames. Times are the
    driver's wall clock (ns). Each worker's notes are those of its frames, bounded
    (NoteBudget); the driver's own notes are made from the counts here (driver_notes)."""

    clocks: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # offset, error
    lost: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    last_wall: dict[str, int] = field(default_factory=dict)  # each worker's last frame
    notes: dict[str, list[str]] = field(default_factory=dict)  # from its frames, bounded
    closed_wall: int | None = None  # when the driver closed; None while it runs
    # When the driver first found each dead worker gone: the end of what it left open, for a
    # worker that sends nothing between its job's edges (light mode) and so has no last frame
    # near its death.
    gone_wall: dict[str, int] = field(default_factory=dict)
    not_kept: dict[str, int] = field(default_factory=dict)  # frames past max_kept_bytes
    max_kept: int | None = None  # the driver's max_kept_bytes
    unwritten: int = 0  # frames of all workers the record's writer could not write
    unwritten_why: str | None = None

    MAPS = ("clocks", "lost", "dropped", "states", "last_wall", "notes", "gone_wall",
             "not_kept")

    def encode(self) -> bytes:
        return protocol.encode_blob({
            "clocks": {w: list(c) for w, c in self.clocks.items()}, "lost": self.lost,
            "dropped": self.dropped, "states": self.states, "last_wall": self.last_wall,
            "notes": self.notes, "closed_wall": self.closed_wall, "gone_wall": self.gone_wall,
            "not_kept": self.not_kept, "max_kept": self.max_kept, "unwritten": self.unwritten,
            "unwritten_why": self.unwritten_why})

    @classmethod
    def decode(cls, data: bytes) -> Facts:
        """ProtocolError if the entry is not facts as encode() writes them."""
        raw = protocol.decode_blob(data, limit=None)
        try:
            if not isinstance(raw, dict):
                raise TypeError("facts are a map")
            closed, kept, why = raw.get("closed_wall"), raw.get("max_kept"), raw.get("unwritten_why")
            return cls(
                clocks={_str(w): (_int(o), None if e is None else _int(e))
                        for w, (o, e) in _map(raw.get("clocks")).items()},
                lost={_str(w): _int(n) for w, n in _map(raw.get("lost")).items()},
                dropped={_str(w): _int(n) for w, n in _map(raw.get("dropped")).items()},
                states={_str(w): _str(s) for w, s in _map(raw.get("states")).items()},
                last_wall={_str(w): _int(t) for w, t in _map(raw.get("last_wall")).items()},
                notes={_str(w): [_str(n) for n in ns] for w, ns in _map(raw.get("notes")).items()},
                closed_wall=None if closed is None else _int(closed),
                gone_wall={_str(w): _int(t) for w, t in _map(raw.get("gone_wall")).items()},
                not_kept={_str(w): _int(n) for w, n in _map(raw.get("not_kept")).items()},
                max_kept=None if kept is None else _int(kept),
                unwritten=_int(raw.get("unwritten", 0)),
                unwritten_why=None if why is None else _str(why))
        except (TypeError, ValueError) as err:
            raise ProtocolError(f"malformed driver facts in a record: {err}") from err

    def since(self, old: Facts) -> Facts | None:
        """What changed from `old` to these facts (a worker's notes: those added since), or
        None if nothing did. Maps only grow in a driver's life: nothing is ever removed."""
        delta = Facts(closed_wall=self.closed_wall, max_kept=self.max_kept,
                      unwritten=self.unwritten, unwritten_why=self.unwritten_why)
        changed = (self.closed_wall, self.max_kept, self.unwritten, self.unwritten_why) != (
            old.closed_wall, old.max_kept, old.unwritten, old.unwritten_why)
        for name in self.MAPS:
            new, was = getattr(self, name), getattr(old, name)
            if name == "notes":
                part = {w: ns[len(was.get(w, ())):] for w, ns in new.items()
                        if len(ns) > len(was.get(w, ()))}
            else:
                part = {w: v for w, v in new.items() if w not in was or was[w] != v}
            setattr(delta, name, part)
            changed = changed or bool(part)
        return delta if changed else None

    def merge(self, delta: Facts) -> None:
        """Take in a facts entry written as `since` makes them."""
        for name in self.MAPS:
            mine, new = getattr(self, name), getattr(delta, name)
            if name == "notes":
                for w, ns in new.items():
                    have = mine.setdefault(w, [])
                    seen = set(have)
                    have.extend(n for n in ns if n not in seen)
            else:
                mine.update(new)
        self.closed_wall, self.max_kept = delta.closed_wall, delta.max_kept
        self.unwritten, self.unwritten_why = delta.unwritten, delta.unwritten_why

    def encode_parts(self, max_bytes: int = FACTS_ENTRY_BYTES) -> list[bytes]:
        """The facts as entries of at most max_bytes each (split by worker: each part is
        facts of its own, which merge() takes in in any order)."""
        data = self.encode()
        if len(data) <= max_bytes:
            return [data]
        workers = sorted({w for name in self.MAPS for w in getattr(self, name)})
        if len(workers) < 2:  # one worker's facts are a few KiB: never here
            log.warning("the driver's facts for %.100r take %d bytes: not recorded",
                        workers, len(data))
            return []
        return [part for half in (workers[:len(workers) // 2], workers[len(workers) // 2:])
                for part in self._only(set(half)).encode_parts(max_bytes)]

    def _only(self, workers: set[str]) -> Facts:
        part = Facts(closed_wall=self.closed_wall, max_kept=self.max_kept,
                     unwritten=self.unwritten, unwritten_why=self.unwritten_why)
        for name in self.MAPS:
            setattr(part, name, {w: v for w, v in getattr(self, name).items() if w in workers})
        return part

    def driver_notes(self, wid: str) -> list[str]:
        """The driver's own notes on a worker: frames it did not record."""
        notes = []
        if self.not_kept.get(wid):
            notes.append(f"{self.not_kept[wid]} frame(s) not kept: the record's cap "
                         f"(max_kept_bytes={self.max_kept}) was reached")
        if self.unwritten:
            notes.append(f"{self.unwritten} frame(s) of all workers could not be written to "
                         f"the record ({self.unwritten_why or 'the disk was slower than the frames'})")
        return notes


class NoteBudget:
    """Notes kept within WORKER_NOTES_BYTES a worker and NOTES_BYTES for all, each note cut at
    NOTE_CHARS: the first notes are kept, and once a worker's (or everyone's) budget is spent
    one note says so and nothing more of that worker's is taken. What was kept stays kept, so
    each call's list begins with the last one's (the record's facts write only what is new).
    `keep` looks only at notes added since its last call for the same list."""

    def __init__(self, per_worker: int = WORKER_NOTES_BYTES, total: int = NOTES_BYTES) -> None:
        self.per_worker = per_worker
        self.total = self.left = total
        self._kept: dict[str, _Kept] = {}

    def keep(self, wid: str, notes: list[str]) -> list[str]:
        """The kept part of a worker's notes (the budget's own list: copy it to keep it)."""
        k = self._kept.get(wid)
        if k is None:
            k = self._kept[wid] = _Kept()
        if notes is not k.source:
            k.source, k.seen = notes, 0
        if not k.full and len(notes) > k.seen:
            self._take(k, notes[k.seen:])
        k.seen = len(notes)
        return k.notes

    def forget(self, wid: str) -> None:
        """Let go of one worker's kept notes (written to the record already), and give their
        bytes back to the whole budget."""
        k = self._kept.pop(wid, None)
        if k is not None:
            self.left += k.bytes

    def _take(self, k: _Kept, notes: Iterable[str]) -> None:
        for whole in notes:
            note = whole if len(whole) <= NOTE_CHARS else whole[:NOTE_CHARS] + " [cut]"
            if note in k.have:
                continue
            size = len(note.encode("utf-8", "surrogatepass"))
            if k.bytes + size > self.per_worker or size > self.left:
                k.notes.append(
                    f"more notes of this worker were not kept: a worker keeps at most "
                    f"{fmt_bytes(self.per_worker)} of notes, all workers "
                    f"{fmt_bytes(self.total)} (record.WORKER_NOTES_BYTES, NOTES_BYTES)")
                k.full = True
                return
            k.notes.append(note)
            k.have.add(note)
            k.bytes += size
            self.left -= size


@dataclass
class _Kept:
    source: list[str] | None = None  # the list last given to keep()
    seen: int = 0  # how much of it was looked at
    notes: list[str] = field(default_factory=list)
    have: set[str] = field(default_factory=set)
    bytes: int = 0
    full: bool = False


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
    in `dropped`; a failed write (a full disk) is counted in `failed` and said once.

    compress: each round's entries go in one compressed block (STREAM, BLOCK) of a Zstandard
    stream flushed at the block's end, so what the round wrote is readable at once and a
    long run costs a few tens of bytes a frame; False writes them as they are (layout 2).
    In the fifth layout, spans frames go in delta-coded (SPANS_DELTA). A record resumed goes
    on in the layout it has (`layout`: 1 to 5)."""

    def __init__(self, path: str | os.PathLike[str], queue_bytes: int = QUEUE_BYTES,
                 flush_s: float = FLUSH_S, mode: int = 0o644, resume: bool = False,
                 compress: bool = True) -> None:
        self.path = os.fspath(path)
        self.queue_bytes = queue_bytes
        self.flush_s = flush_s
        self.frames = 0  # frames written
        self.bytes = len(RECORD_MAGIC) + _SEED.size  # the file's length: whole entries only
        self.dropped = 0  # frames not queued: the queue was full
        self.failed = 0  # entries a write failed for
        self.last_error: str | None = None
        self.closed = False
        flags = (os.O_RDWR if resume else os.O_WRONLY | os.O_TRUNC) | os.O_CREAT
        head = b""
        try:
            # Never through another user's symlink (a record often lies in a shared folder).
            fd = open_no_foreign_link(self.path, flags, mode)
            if resume:  # a record this program wrote and closed: go on after its last entry
                head = os.pread(fd, len(RECORD_MAGIC) + _SEED.size, 0)
                self.bytes = os.lseek(fd, 0, os.SEEK_END)
        except OSError as err:
            raise WorkerscopeError(f"cannot write the record {self.path!r}: "
                                   f"{err.strerror or err}") from err
        self._fd = fd
        # The checksums' seed: random, so a sender cannot make a frame that holds an entry
        # with a good checksum (a reader looking for the entry after a damaged one would take
        # it for one); None: a record of the first layout, resumed in it.
        self._seed: int | None
        layout = _LAYOUTS.get(head[:len(RECORD_MAGIC)])
        if layout == 1:
            self._seed = None
        elif layout is not None and len(head) == len(RECORD_MAGIC) + 4:
            self._seed = _SEED.unpack_from(head, len(RECORD_MAGIC))[0]
        elif head:
            os.close(fd)
            raise WorkerscopeError(f"cannot go on writing {self.path!r}: it is not a record")
        else:
            layout = 5 if compress else 2
            self._seed = _SEED.unpack(os.urandom(_SEED.size))[0]
            self.bytes = 0
            start = _MAGICS[layout] + _SEED.pack(self._seed)
            self._write([start], len(start))
            self.bytes = len(start)
        self.layout: int = layout
        self.compress = layout >= 3
        self.raw_bytes = 0  # what the entries written hold, before compression
        # The stream's compressor (a block's entries in, its bytes out); None: the next block
        # starts a stream.
        self._stream: Callable[[bytes], bytes] | None = None
        self._stream_left = 0  # bytes of entries the stream takes before a new one starts
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
        for batch in (self._blocks(entries) if self.compress else
                      (entries[at:at + _BATCH] for at in range(0, len(entries), _BATCH))):
            if self.compress:
                block = self._block(batch)
                parts = [self._head(block[0], block[1]), block[1]]
            else:  # gathered by the kernel (writev): no copy of the frames into one chunk
                parts = [p for tag, data in batch for p in (self._head(tag, data), data)]
                self.raw_bytes += sum(_INNER.size + len(data) for _, data in batch)
            size = sum(map(len, parts))
            ok = self._write(parts, size)
            if not ok:
                self._stream = None  # the block is not in the file: the next starts afresh
            with self._cond:
                if ok:
                    self.bytes += size
                    self.frames += sum(tag == FRAME for tag, _ in batch)
                else:
                    self.failed += len(batch)
                self._done += len(batch)
                self._cond.notify_all()

    @staticmethod
    def _blocks(entries: list[tuple[bytes, bytes]]) -> Iterator[list[tuple[bytes, bytes]]]:
        """The round's entries in blocks of at most BLOCK_BYTES (or one entry)."""
        block: list[tuple[bytes, bytes]] = []
        size = 0
        for entry in entries:
            if block and size + len(entry[1]) > BLOCK_BYTES:
                yield block
                block, size = [], 0
            block.append(entry)
            size += _INNER.size + len(entry[1])
        if block:
            yield block

    def _block(self, batch: list[tuple[bytes, bytes]]) -> tuple[bytes, bytes]:
        """One block of entries, compressed: (its tag, its bytes). A stream ends its blocks
        with a flush (all of it can be read), and gives way to a new one past STREAM_BYTES,
        so damage costs one stream at most."""
        if self.layout >= 5:
            batch = [_coded(entry) for entry in batch]
        raw = b"".join(p for tag, data in batch for p in (_INNER.pack(tag, len(data)), data))
        tag = BLOCK
        if self._stream is None or self._stream_left <= 0:
            self._stream = _compressor(self.layout)
            self._stream_left = STREAM_BYTES
            tag = STREAM
        self._stream_left -= len(raw)
        self.raw_bytes += len(raw)
        return tag, self._stream(raw)

    def _head(self, tag: bytes, data: bytes) -> bytes:
        if self._seed is None:
            return _ENTRY_V1.pack(tag, len(data))
        return _ENTRY.pack(tag, len(data), _crc(self._seed, tag, len(data), data))

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


# -- spans frames delta-coded ------------------------------------------------------------------
# A spans frame as protocol.encode_frame makes it begins so: an array of 5, the version, "spans".
_SPANS_HEAD = bytes([0x95, protocol.VERSION, 0xA5]) + b"spans"


def _coded(entry: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    """An entry as a block of the fifth layout holds it: a spans frame delta-coded where it
    comes back byte for byte, anything else as it is."""
    tag, data = entry
    if tag == FRAME and data.startswith(_SPANS_HEAD):
        coded = delta_spans(data)
        if coded is not None:
            return SPANS_DELTA, coded
    return entry


def delta_spans(frame: bytes) -> bytes | None:
    """A spans frame with its records' ids and times delta-coded, small numbers where they
    were 8-byte ones (undelta_spans turns it back); None where it would not come back byte
    for byte (not msgpack as protocol.encode_frame packs it, or not a spans frame)."""
    try:
        msg = protocol.unpack(frame, None)
        if protocol.pack(msg) != frame:  # not as frames are packed: it would not come back the same
            return None
        _delta(msg[4]["records"], forward=True)
        coded = protocol.pack(msg)
    except (ProtocolError, ValueError, TypeError, KeyError, IndexError, OverflowError):
        return None
    return coded if len(coded) <= len(frame) else None


def undelta_spans(coded: bytes) -> bytes:
    """The spans frame delta_spans coded, byte for byte; ValueError where `coded` is not
    one it made (a damaged record)."""
    try:
        msg = protocol.unpack(coded, None)  # bounded as the frame it was
        _delta(msg[4]["records"], forward=False)
        return protocol.pack(msg)
    except (ProtocolError, ValueError, TypeError, KeyError, IndexError, OverflowError) as err:
        raise ValueError(f"not a delta-coded spans frame: {err}") from err


def _delta(records: list[Any], forward: bool) -> None:
    """Code (forward) or decode each record's id (its index 2) and start (5) as the change
    from the record before's, its end (6) as the span's length, in place: only records that
    are lists holding integers there, which stay so either way, so both ways pick the same
    records."""
    if not isinstance(records, list):
        raise TypeError("records is not an array")
    last_id = last_start = 0
    for r in records:
        if (type(r) is list and len(r) > 6 and type(r[2]) is int and type(r[5]) is int
                and type(r[6]) is int):
            if forward:
                span_id, start = r[2], r[5]
                r[2], r[5], r[6] = span_id - last_id, start - last_start, r[6] - start
            else:
                span_id, start = r[2] + last_id, r[5] + last_start
                r[2], r[5], r[6] = span_id, start, r[6] + start
            last_id, last_start = span_id, start


def _zstd() -> ModuleType:
    """Zstandard: the standard library's from Python 3.14, its backport before (imported
    when a record first needs it: a sidecar that writes none never pays for it)."""
    try:
        if sys.version_info >= (3, 14):
            from compression import zstd
        else:
            from backports import zstd
    except ImportError as err:  # an install that left out a dependency
        raise WorkerscopeError(f"records are compressed with Zstandard, which this Python "
                               f"lacks ({err}): pip install backports.zstd") from err
    return zstd


def _compressor(layout: int) -> Callable[[bytes], bytes]:
    """A new stream of the layout's: each call compresses one block and flushes it."""
    if layout == 3:
        deflate = zlib.compressobj(DEFLATE_LEVEL)
        return lambda raw: deflate.compress(raw) + deflate.flush(zlib.Z_SYNC_FLUSH)
    zstd = _zstd()
    stream = zstd.ZstdCompressor(options={zstd.CompressionParameter.compression_level: LEVEL,
                                          zstd.CompressionParameter.window_log: WINDOW_LOG})
    return lambda raw: stream.compress(raw, zstd.ZstdCompressor.FLUSH_BLOCK)


class _Unreadable(Exception):
    """A block's bytes do not decompress (damaged, or not of this stream)."""


class _Decompressor:
    """One stream being read: a block's bytes in, what they hold out a bounded chunk at a
    time (a block that decompresses to gigabytes never holds more than a chunk)."""

    def __init__(self, layout: int) -> None:
        self.layout = layout
        if layout == 3:
            self._zlib = zlib.decompressobj()
        else:
            zstd = _zstd()
            self._errors: tuple[type[Exception], ...] = (zstd.ZstdError, EOFError)
            self._zstd = zstd.ZstdDecompressor(
                options={zstd.DecompressionParameter.window_log_max: _WINDOW_LOG_MAX})

    def chunks(self, data: bytes) -> Iterator[bytes]:
        """What data decompresses to, in chunks of at most _INFLATE_CHUNK bytes; raises
        _Unreadable where it does not."""
        if self.layout == 3:
            while True:
                try:
                    chunk = self._zlib.decompress(data, _INFLATE_CHUNK)
                except zlib.error as err:
                    raise _Unreadable from err
                data = self._zlib.unconsumed_tail
                yield chunk
                if not data and len(chunk) < _INFLATE_CHUNK:
                    return
        while True:
            try:
                chunk = self._zstd.decompress(data, _INFLATE_CHUNK)
            except self._errors as err:
                raise _Unreadable from err
            data = b""
            yield chunk
            if self._zstd.eof and self._zstd.unused_data:
                raise _Unreadable  # a stream ended inside a block: not a writer's
            if self._zstd.needs_input:
                return


def _crc(seed: int, tag: bytes, size: int, data: bytes) -> int:
    return zlib.crc32(data, zlib.crc32(_ENTRY_V1.pack(tag, size), seed))


# -- reading -----------------------------------------------------------------------------------
class RecordReader:
    """The entries of a record, streamed: `for entry in reader`. After the loop, `torn` is
    the number of bytes at the end that did not make a whole entry (a driver killed
    mid-write), 0 for a whole record; `damaged` the runs of bytes skipped before a whole
    entry (or the end) was found again, and `skipped` their bytes. `version`: the layout's
    (1 to 5), known once the loop began."""

    def __init__(self, path: str | os.PathLike[str], limit: int | None = None) -> None:
        self.path = os.fspath(path)
        self.limit = limit  # read no further than this many bytes (what a writer flushed)
        self.torn = 0
        self.damaged = 0
        self.skipped = 0
        self.frames = 0
        self.version = 2
        self._seed = 0
        self._inflate: _Decompressor | None = None  # the stream read; None: none, or lost
        self._at = self._end = 0  # the byte read up to, of how many

    def progress(self) -> float:
        """The part of the record read so far, 0 to 1 (by its bytes; in a block, to its end)."""
        return self._at / self._end if self._end else 0.0

    def __iter__(self) -> Iterator[Entry]:
        with _open_regular(self.path) as f:
            head = f.read(len(RECORD_MAGIC) + _SEED.size)
            if not head:
                raise FileFormatError(f"{self.path!r} is empty: the driver that was recording "
                                       "it stopped before writing anything")
            layout = _LAYOUTS.get(head[:len(RECORD_MAGIC)])
            if layout == 1:
                self.version, pos = 1, len(RECORD_MAGIC_V1)
            elif layout is not None and len(head) == len(RECORD_MAGIC) + 4:
                self._seed, pos = _SEED.unpack_from(head, len(RECORD_MAGIC))[0], len(head)
                self.version = layout
            else:
                raise FileFormatError(f"{self.path!r} is not a workerscope record")
            size = os.fstat(f.fileno()).st_size
            window = _Window(f.fileno(), size if self.limit is None else min(size, self.limit))
            yield from self._entries(window, pos)

    def _entries(self, window: _Window, pos: int) -> Iterator[Entry]:
        self._end = window.end
        while pos < window.end:
            entry, after = self._entry_at(window, pos)
            # Read up to where this entry ends: within a block, more than is read (how far
            # into its bytes an inner entry lies is not known), so never less.
            self._at = max(after, pos)
            if entry is not None and entry.tag in (STREAM, BLOCK):
                for inner in self._inflated(entry):
                    if inner.tag == FRAME:
                        self.frames += 1
                    yield inner
                if self._inflate is None:  # its stream's start was lost, or it is bad
                    self.damaged += 1
                    self.skipped += after - pos
                pos = after
                continue
            if entry is not None:
                if entry.tag == FRAME:
                    self.frames += 1
                yield entry
                pos = after
                continue
            self._inflate = None  # a block after a damaged one cannot be inflated
            # No whole entry here: the next one after it, if any, is where reading goes on.
            if after > 0 and self._entry_at(window, after)[0] is not None:
                found: int | None = after  # only its checksum was wrong: its length holds
            else:
                found = None if self.version == 1 else self._next_entry(window, pos + 1)
            if found is None:
                if after < 0:  # it ends past the file: cut off mid-write
                    self.torn = window.end - pos
                else:
                    self.damaged += 1
                    self.skipped += window.end - pos
                return
            self.damaged += 1
            self.skipped += found - pos
            pos = found

    def _entry_at(self, window: _Window, pos: int) -> tuple[Entry | None, int]:
        """The whole entry at pos and where the next begins; else None and where this one
        would end if only its checksum is wrong, -1 if it would end past the file, 0 if its
        tag or length are not a writer's."""
        header = _ENTRY_V1 if self.version == 1 else _ENTRY
        head = window.get(pos, header.size)
        if len(head) < header.size:
            return None, -1
        tag, size = _ENTRY_V1.unpack_from(head)
        if tag not in (_TAGS_V3 if self.version >= 3 else _TAGS) or size > _MAX_ENTRY:
            return None, 0
        end = pos + header.size + size
        if end > window.end:
            return None, -1
        data = window.get(pos + header.size, size)
        if self.version > 1 and _ENTRY.unpack_from(head)[2] != _crc(self._seed, tag, size, data):
            return None, end
        return Entry(tag, data), end

    def _inflated(self, block: Entry) -> Iterator[Entry]:
        """The entries of a compressed block, decompressed a chunk at a time (a block of
        1 MiB never takes 1 MiB more to read). Sets `_inflate` to None where the block cannot
        be read to its end: a BLOCK whose stream's start was lost, bytes that do not
        decompress, or an entry left unfinished (a writer ends each block with a whole one)."""
        if block.tag == STREAM:
            self._inflate = _Decompressor(self.version)
        inflate = self._inflate
        if inflate is None:
            return
        tags = _INNER_TAGS_V5 if self.version >= 5 else _TAGS
        rest = b""
        try:
            for chunk in inflate.chunks(block.data):
                raw = rest + chunk if rest else chunk
                pos = 0
                while pos + _INNER.size <= len(raw):
                    tag, size = _INNER.unpack_from(raw, pos)
                    if tag not in tags or size > _MAX_ENTRY:
                        self._inflate = None
                        return
                    if pos + _INNER.size + size > len(raw):
                        break
                    data = raw[pos + _INNER.size:pos + _INNER.size + size]
                    pos += _INNER.size + size
                    if tag == SPANS_DELTA:
                        try:
                            data, tag = undelta_spans(data), FRAME
                        except ValueError:  # one bad entry in a whole block: skipped, said
                            self.damaged += 1
                            self.skipped += size
                            continue
                    yield Entry(tag, data)
                rest = raw[pos:]
                if len(rest) > _MAX_ENTRY + _INNER.size:
                    self._inflate = None
                    return
        except _Unreadable:
            self._inflate = None
            return
        if rest:
            self._inflate = None

    def _next_entry(self, window: _Window, pos: int) -> int | None:
        """Where the first whole entry (its checksum right) at or after pos begins."""
        while pos < window.end:
            chunk = window.get(pos, _READ_CHUNK)
            for match in _TAG_AT.finditer(chunk):
                if self._entry_at(window, pos + match.start())[0] is not None:
                    return pos + match.start()
            pos = window.next_data(pos + len(chunk))
        return None


class _Window:
    """Reads of a file at any offset below `end`, through one buffer of at least a chunk."""

    def __init__(self, fd: int, end: int) -> None:
        self.fd = fd
        self.end = end
        self._at = 0
        self._buf = b""

    def get(self, pos: int, n: int) -> bytes:
        """Up to n bytes at pos (fewer at the end)."""
        n = max(0, min(n, self.end - pos))
        if pos < self._at or pos + n > self._at + len(self._buf):
            self._buf = os.pread(self.fd, min(max(n, _READ_CHUNK), self.end - pos), pos)
            self._at = pos
        return self._buf[pos - self._at:pos - self._at + n]

    def next_data(self, pos: int) -> int:
        """pos, or past the hole it is in (a sparse file: nothing there to look through)."""
        try:
            return min(self.end, os.lseek(self.fd, pos, os.SEEK_DATA))
        except OSError as err:
            return self.end if err.errno == errno.ENXIO else pos


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
    return head in _LAYOUTS or not head


def read_record(path: str | os.PathLike[str], limit: int | None = None,
                facts: Facts | None = None, max_sample_bytes: int | None = None) -> Timeline:
    """The Timeline of a record: its frames folded in order, then the driver's facts (its
    last facts entry, or `facts` when given: a live driver's, newer than any in the file).
    Frames that do not fold are skipped and counted in their worker's notes.
    max_sample_bytes: past that much memory of samples (estimated: builder.sample_bytes),
    every series is folded into time bins of one width (builder.SampleBins: cumulative
    counters keep their last value, rates their mean, memory its max), so a record of any
    length loads in bounded memory; each worker's notes say so. None keeps every sample."""
    with _cycles_paused():
        return _read_record(path, limit, facts, max_sample_bytes)


@contextlib.contextmanager
def _cycles_paused() -> Iterator[None]:
    """Python's cycle collector paused while a record's events are built: each of its
    full passes walks every object built so far (17 passes in a load of 1.6M spans, a
    fifth of its CPU), and events hold no cycles. On again after, if it was on; what
    other threads leave meanwhile waits for the next pass."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _read_record(path: str | os.PathLike[str], limit: int | None = None,
                 facts: Facts | None = None, max_sample_bytes: int | None = None) -> Timeline:
    reader = RecordReader(path, limit)
    builder = TimelineBuilder(max_sample_bytes=max_sample_bytes, progress=reader.progress)
    written = Facts()  # the facts entries merged (a first layout's: the last one)
    bad: dict[str, int] = {}  # worker -> frames of it that did not fold
    unreadable = 0  # entries that are no frame or no facts at all
    entries = 0
    for entry in reader:
        entries += 1
        try:
            if entry.tag == FACTS:
                decoded = Facts.decode(entry.data)
                if reader.version == 1:
                    written = decoded
                else:
                    written.merge(decoded)
                continue
            frame = protocol.decode_frame(entry.data)
        except ProtocolError:
            unreadable += 1
            continue
        try:
            builder.add(frame)
        except ProtocolError:
            bad[frame.worker] = bad.get(frame.worker, 0) + 1
    if not entries and reader.damaged:
        raise FileFormatError(f"{reader.path!r} holds no readable entry: the {reader.skipped:,} "
                              "bytes after its header are damaged (or a hole)")
    if facts is not None:  # a live driver's: newer, but without the workers it let go of
        written.merge(facts)
    t = _apply(builder, written, live=facts is not None)
    notes = [f"{unreadable} entr(ies) of the record could not be read"] if unreadable else []
    if reader.damaged:
        notes.append(f"{reader.damaged} damaged part(s) of the record {reader.path!r} "
                     f"({reader.skipped:,} bytes) were skipped: the entries after them were read")
        log.warning("%s: %d damaged part(s) of %d bytes skipped (the entries after them were "
                    "read)", reader.path, reader.damaged, reader.skipped)
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
    # The workers' notes (their frames', the facts'), within the budget, before the ones the
    # reading adds: a worker saying bye a thousand times with 1 MiB of notes keeps 8 KiB.
    budget = NoteBudget()
    for wid, w in builder.t.workers.items():
        have = set(w.notes)
        w.notes = list(budget.keep(wid, [*w.notes, *(n for n in facts.notes.get(wid, ())
                                                     if n not in have)]))
    offsets = {wid: offset for wid, (offset, _) in facts.clocks.items()}
    t = builder.finish(builder.snapshot(last=True), offsets, gave_up)
    for wid, w in t.workers.items():
        w.lost = facts.lost.get(wid, w.lost)
        w.dropped = max(w.dropped, facts.dropped.get(wid, 0))
        if facts.states.get(wid) in _STATUS_VALUES:
            w.status = Status(facts.states[wid])
        if wid in facts.clocks:
            w.clock_offset_ns, w.clock_error_ns = facts.clocks[wid]
        w.notes = [*w.notes, *facts.driver_notes(wid)]
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
