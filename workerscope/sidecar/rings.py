"""The sidecar's side of the span rings: one ring file per process of the worker's tree,
`<pid>.ring` in the private directory the worker named in its hello (the worker's own, and
one for each process it forked while recording).

The sidecar drains them on its tick and when a job ends (service.py). A process that has
exited is read one last time, its open spans ending at that moment, cut short; after the
worker's death every ring is read that way, then the directory is removed.

A ring file is checked for its size (fstat) before each read: one truncated under the mapping
(by another process) would kill the sidecar by SIGBUS at its first touch of a page past the
new end. Such a ring is read no more: what it held unread is counted lost and said.

After each drain's frames are sent, each ring's header gets the reader's position
(spanring.H_READ). A sidecar killed loses what was written past it: the worker's next sidecar
is handed the dead one's directory in its hello (dead_rings), counts those records in
spans_lost, says so in a note, and removes the directory (count_dead).
"""

from __future__ import annotations

import logging
import mmap
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from .. import protocol, spanring, units
from . import stacks

log = logging.getLogger("workerscope.sidecar")
# Ended jobs are kept this long for the spans of other threads that began in them.
KEEP_JOBS_NS = 60 * 1_000_000_000
EVERY_JOB = -1  # a frame for every open job (frames() says which job each frame is for)
# A ring made within this long after the directory's last change may share its mtime.
LISTING_MARGIN_NS = 100_000_000


class _Ring:
    __slots__ = ("cut", "inode", "mm", "path", "pid", "reader", "said")

    def __init__(self, pid: int, inode: int, path: str, mm: mmap.mmap,
                 reader: spanring.RingReader) -> None:
        self.pid = pid
        self.inode = inode
        self.path = path
        self.mm = mm
        self.reader = reader
        self.cut: int | None = None  # the size its file was truncated to: read no more
        self.said = 0  # the peak backlog its last size note gave (Rings._size_note)

    def whole(self) -> bool:
        """Whether the file still has the size it was mapped at (the mapping's fstat): else
        every page past its end is a SIGBUS, and the ring is read no more."""
        if self.cut is None:
            try:
                size = self.mm.size()
            except (OSError, ValueError):
                size = 0
            if size < len(self.mm):
                self.cut = size
        return self.cut is None


MAX_OPEN_NAME = 200  # characters of a span's name in a heartbeat


class Batch(NamedTuple):
    """Completed records of one process, and the threads it named since the last drain."""

    pid: int
    records: list[protocol.SpanRecord]
    threads: list[tuple[int, str]]


# What a ring directory handed over in a hello is named (worker/link.py makes them).
DEAD_DIR_PREFIX = "workerscope-"


def count_dead(dead: object) -> tuple[int, list[str]]:
    """The span records the dead sidecars' rings hold unread (their readers' positions are in
    the headers), and a note for each ring that held some; each directory then removed.
    dead: the hello's dead_rings, [[directory, dead sidecar's pid], ...] (malformed entries
    are skipped)."""
    lost, notes = 0, []
    for entry in dead if isinstance(dead, list) else []:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], int)
                and os.path.basename(entry[0]).startswith(DEAD_DIR_PREFIX)):
            continue
        where, sidecar = entry
        try:
            names = sorted(os.listdir(where))
        except OSError:
            continue
        for name in names:
            if name.endswith(".ring") and name[:-5].isdigit():
                found = _unread_in(os.path.join(where, name))
                if found is None:
                    continue
                records, ends = found
                lost += records
                if records or ends:
                    notes.append(
                        f"a sidecar (pid {sidecar}) died before it read {records} span record(s) "
                        f"of pid {name[:-5]} (spans_lost counts them)"
                        + (f", and {ends} span(s) it saw begin never ended in what it sent"
                           if ends else "")
                        + ": they are lost")
        shutil.rmtree(where, ignore_errors=True)
    return lost, notes


def _unread_in(path: str) -> tuple[int, int] | None:
    """spanring.unread() of the ring file at `path`, its header only mapped (and only if the
    file holds one: a page past a file's end is a SIGBUS)."""
    size = spanring.HEADER_WORDS * 8
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_size < size:
                return None
            mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None
    try:
        return spanring.unread(mm)
    finally:
        mm.close()


PACE_RECORDS = 4096  # a drain of fewer says little of the reader's pace


class Rings:
    def __init__(self, directory: str, worker_pid: int, dead: object = None) -> None:
        self.dir = directory
        self.worker = worker_pid
        self.jobs = spanring.Jobs()
        self.rings: dict[tuple[int, int], _Ring] = {}  # (pid, inode) -> ring
        self._index = 1  # the worker's own ring is 0: its span ids match the worker's own reads
        self._lost_said = 0
        self._broken: set[tuple[int, int]] = set()
        self._noted: set[str] = set()
        self.errors: list[str] = []
        self._mtime = -1  # the directory's mtime at the last listing
        self._listed = 0  # when it was listed (monotonic ns), and on the wall clock
        self._listed_wall = 0
        # What retired rings lost, and had to say; from the start, what the rings of the
        # worker's dead sidecars held unread.
        self._retired_lost, self._retired_notes = count_dead(dead)
        # Of which damaged, abandoned or a dead sidecar's, not a full ring's.
        self._retired_unread = self._retired_lost
        self.crashed: list[int] = []  # gone processes that left a crash file (take_crashed)
        # The most span records a second a drain took in and handed out as frames (one of at
        # least PACE_RECORDS): what a full ring's note says its reader keeps up with.
        self.pace: float | None = None
        self.scan()

    @property
    def lost(self) -> int:
        """Records overwritten before they were read, over every ring so far."""
        return self._retired_lost + sum(r.reader.lost for r in self.rings.values())

    @property
    def unread(self) -> int:
        """Of the lost records, those lost to damage or truncation, not to a full ring."""
        return self._retired_unread + sum(r.reader.damaged + r.reader.abandoned
                                          for r in self.rings.values())

    @property
    def idle(self) -> bool:
        """No ring to read and nothing to say: a drain would do nothing."""
        return not self.rings and not self.errors and self.lost == self._lost_said

    def _listing_due(self) -> bool:
        """Whether the directory may hold a ring not listed yet: its mtime moved, or the last
        listing came too soon after it to be sure (file times come from a coarse clock), or
        it is a second old. A steady drain then lists nothing."""
        try:
            mtime = os.stat(self.dir).st_mtime_ns
        except OSError:
            return True
        now = time.monotonic_ns()
        due = (mtime != self._mtime or self._listed_wall - mtime < LISTING_MARGIN_NS
               or now - self._listed >= 1_000_000_000)
        if due:
            self._mtime, self._listed, self._listed_wall = mtime, now, time.time_ns()
        return due

    def scan(self) -> dict[tuple[int, int], int]:
        """Open rings made since the last scan; the write counter of each ring now."""
        if not self._listing_due():
            return self._counters()
        try:
            names = os.listdir(self.dir)
        except OSError:
            names = []
        for name in names:
            if not name.endswith(".ring") or not name[:-5].isdigit():
                continue
            path = os.path.join(self.dir, name)
            try:
                inode = os.stat(path).st_ino
            except OSError:
                continue
            key = (int(name[:-5]), inode)
            if key not in self.rings and key not in self._broken:
                self._open(key, path)
        return self._counters()

    def _counters(self) -> dict[tuple[int, int], int]:
        return {key: ring.reader.counter for key, ring in self.rings.items() if ring.whole()}

    def _open(self, key: tuple[int, int], path: str) -> None:
        pid = key[0]
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            try:
                mm = mmap.mmap(fd, 0)
            finally:
                os.close(fd)
        except (OSError, ValueError) as err:
            self._broken.add(key)
            self.errors.append(f"span ring of pid {pid}: {err}")
            return
        index = 0 if pid == self.worker else self._index
        try:
            reader = spanring.RingReader(mm, pid, index)
        except spanring.RingError as err:
            mm.close()
            self._broken.add(key)
            self.errors.append(f"span ring of pid {pid}: {err}")
            return
        if pid != self.worker:
            self._index += 1
        self.rings[key] = _Ring(pid, key[1], path, mm, reader)

    def drain(self, upto: dict[tuple[int, int], int] | None, final: bool,
              now_ns: int) -> list[Batch]:
        """What completed in each ring (up to the counters `upto`, taken before the caller
        learnt of the jobs they may belong to). A ring whose process is gone, and at `final`
        every ring, is read to its end and closed: its open spans end at now_ns, cut short."""
        out = []
        for key, ring in list(self.rings.items()):
            gone = final or (ring.pid != self.worker and not _alive(ring.pid, ring.path, ring.inode))
            limit = None if upto is None else upto.get(key)
            if not ring.whole():
                records, gone = self._abandon(ring, now_ns), True
            else:
                records = ring.reader.read(self.jobs, limit, final=gone, now_ns=now_ns)
            threads, ring.reader.threads = ring.reader.threads, []
            if records or threads:
                out.append(Batch(ring.pid, records, threads))
            if gone:
                self._retire(key)
        self.jobs.prune(now_ns - KEEP_JOBS_NS)
        return out

    def frames(self, upto: dict[tuple[int, int], int] | None, final: bool,
               now_ns: int) -> Iterator[tuple[str, dict[str, Any], int | None]]:
        """drain() as driver frames: (kind, body, the job it belongs to: None for none, or
        EVERY_JOB). One spans or mark frame per process and job, split to stay far below the
        frame size cap; the running count of lost records to every open job when it moves."""
        began, records = time.monotonic_ns(), 0
        for batch in self.drain(upto, final, now_ns):
            records += len(batch.records)
            threads = [list(t) for t in batch.threads]
            for kind, body, job in protocol.span_bodies(batch.pid, batch.records, threads):
                yield kind, dict(body), EVERY_JOB if job is None and not body["records"] else job
        took = time.monotonic_ns() - began  # reading, and the caller's sending of each frame
        if records >= PACE_RECORDS and took > 0:
            self.pace = max(self.pace or 0.0, records * 1e9 / took)
        for ring in self.rings.values():
            if ring.whole():  # sent by now: a sidecar after this one counts only what follows
                ring.reader.mark_read()
        notes = self.notes()
        if notes or self.lost != self._lost_said:
            self._lost_said = self.lost
            yield protocol.SPANS, {"pid": self.worker, "records": [], "spans_lost": self.lost,
                                   "notes": notes}, EVERY_JOB

    def innermost_open(self, jobs: Iterable[int]) -> list[list[Any]]:
        """[[job, name], ...]: the span each of these jobs is in now, the latest begun of the
        spans its rings' readers saw open (as of the last drain), for the live view."""
        wanted = set(jobs)
        latest: dict[int, tuple[int, str]] = {}
        for ring in self.rings.values():
            reader = ring.reader
            for span in reader.open.values():
                job = span[1]
                if span[0] != protocol.RECORD_SPAN or job not in wanted:
                    continue
                start = span[spanring.OPEN_START]
                if job not in latest or start > latest[job][0]:
                    name = (reader.names.get(span[4]) or ("?", None))[0]
                    latest[job] = (start, str(name)[:MAX_OPEN_NAME])
        return [[job, name] for job, (_, name) in sorted(latest.items())]

    def threads_of(self, pid: int) -> dict[int, dict[str, Any]]:
        """Process `pid`'s threads its ring named, by ident (what a faulthandler dump calls
        a thread): {"name", "tid", "span": the innermost span open on it, as of the last
        drain}; for a dump of stacks (sidecar/stacks.py)."""
        out: dict[int, dict[str, Any]] = {}
        for (ring_pid, _), ring in self.rings.items():
            if ring_pid != pid:
                continue
            reader = ring.reader
            inner: dict[int, tuple[int, str]] = {}  # tid -> (start, name) of its latest open span
            for span in reader.open.values():
                tid, start = span[6], span[spanring.OPEN_START]
                if span[0] == protocol.RECORD_SPAN and (tid not in inner or start > inner[tid][0]):
                    inner[tid] = (start, str((reader.names.get(span[4]) or ("?", None))[0]))
            for ident, (tid, name) in reader.idents.items():
                out[ident] = {"name": name[:MAX_OPEN_NAME], "tid": tid}
                if tid in inner:
                    out[ident]["span"] = inner[tid][1][:MAX_OPEN_NAME]
        return out

    def _abandon(self, ring: _Ring, now_ns: int) -> list[protocol.SpanRecord]:
        """A ring whose file was truncated: its open spans cut short now, what it held unread
        counted lost, touching no page past the file's end; said once."""
        size = ring.cut or 0
        # Its header is still in the file (the page of a file's last byte is readable).
        counter = ring.reader.counter if size >= spanring.HEADER_WORDS * 8 else None
        before = ring.reader.lost
        records = ring.reader.abandon(now_ns, counter)
        self._retired_notes.append(
            f"span ring of pid {ring.pid} was truncated to {size} bytes of {len(ring.mm)} by "
            f"another process: it is read no more, its open spans end there, cut short, and "
            f"{'' if counter is not None else 'at least '}{ring.reader.lost - before} "
            "record(s) not read yet are lost (spans_lost counts them); spans it records later "
            "are not seen")
        return records

    def notes(self) -> list[str]:
        """What the rings could not hold, or lost to something else writing into them or
        truncating them, said once each."""
        new = []
        if self.lost > self.unread:
            new.append(protocol.ring_full_note("the sidecar"))
        new.extend(self._retired_notes)
        for ring in self.rings.values():
            new.extend(_ring_notes(ring))
            new.extend(self._size_note(ring, 2))
        new.extend(f"span ring: {e}" for e in self.errors)
        out = [n for n in dict.fromkeys(new) if n not in self._noted]
        self._noted.update(out)
        return out

    def _size_note(self, ring: _Ring, grown: int) -> list[str]:
        """For a ring that filled, how big a ring would have held it: once its peak backlog
        is `grown` times the one last said (2 while it is read: at most a note a doubling;
        1 when it retires: its last figures, if they moved)."""
        r = ring.reader
        overwritten = r.lost - r.damaged - r.abandoned
        if (overwritten <= 0 or r.backlog_peak <= max(r.cap, ring.said)
                or r.backlog_peak < grown * ring.said):
            return []
        ring.said = r.backlog_peak
        return [spanring.ring_size_note(ring.pid, r.backlog_peak, r.cap, overwritten,
                                        self.pace)]

    def _retire(self, key: tuple[int, int]) -> None:
        ring = self.rings.pop(key)
        self._retired_notes.extend(_ring_notes(ring))
        self._retired_notes.extend(self._size_note(ring, 1))
        self._retired_lost += ring.reader.lost
        self._retired_unread += ring.reader.damaged + ring.reader.abandoned
        ring.reader.close()
        ring.mm.close()
        if ring.pid != self.worker:
            try:
                if os.stat(ring.path).st_ino != ring.inode:
                    return  # a new process with that pid has its own (and its own stacks)
                os.unlink(ring.path)
            except OSError:
                # Removed already (and with it, by its process, its stacks' files).
                log.debug("span ring %s gone before its removal", ring.path)
                return
            self._retire_stacks(ring.pid)

    def _retire_stacks(self, pid: int) -> None:
        """A gone process's stacks files (worker/stacks.py) go with its ring; a crash file
        it wrote in is kept for the sidecar to read (take_crashed)."""
        base = os.path.join(self.dir, str(pid))
        for suffix in (stacks.SUFFIX, stacks.REFUSED_SUFFIX):
            try:
                os.unlink(base + suffix)
            except FileNotFoundError:
                continue
            except OSError:
                log.debug("could not remove %s%s", base, suffix)
        try:
            if os.stat(base + stacks.CRASH_SUFFIX).st_size:
                self.crashed.append(pid)
            else:
                os.unlink(base + stacks.CRASH_SUFFIX)
        except OSError:
            log.debug("pid %d had no stacks files (workerscope could not install them)", pid)

    def take_crashed(self) -> list[int]:
        """The processes of the tree that died leaving a crash file, since the last call."""
        crashed, self.crashed = self.crashed, []
        return crashed

    def close(self) -> None:
        """Unmap every ring and remove the directory."""
        for key in list(self.rings):
            self._retire(key)
        shutil.rmtree(self.dir, ignore_errors=True)


def _ring_notes(ring: _Ring) -> list[str]:
    """What one ring's writer could not fit, and what its reader found written into it."""
    reader, pid, out = ring.reader, ring.pid, []
    if ring.whole():  # the counts of what did not fit are in its header
        names, extras = reader.dropped
        if names:
            out.append("span ring: the names table is full; later names show as not recorded")
        if extras:
            out.append("span ring: attributes or exception texts did not fit and were left out")
        if reader.threads_dropped:
            out.append(f"span ring of pid {pid}: names of some threads were not recorded (thread "
                       f"names take at most 1/{spanring.THREAD_SHARE} of the names table, so "
                       "span names keep room); their spans show the thread id only")
    if reader.stacks_cut:
        out.append(f"span ring of pid {pid}: {reader.stacks_cut} span(s) came with no room "
                   f"left on their threads' stacks (the reader holds at most "
                   f"{units.fmt_bytes(spanring.STACK_BYTES)} of them, spans open at each level "
                   "of each thread); spans begun inside them show under the job")
    damage = "something else wrote into the ring file"
    for found, what in (
            (reader.damaged, f"records that no writer wrote were dropped ({damage}; spans_lost "
                             "counts them)"),
            (reader.names_damaged, f"its names area was damaged ({damage}); spans whose names "
                                   "were there show as not recorded"),
            (reader.extras_damaged, f"its extras area was damaged ({damage}); attributes or "
                                    "exception texts of some spans were lost"),
            (reader.header_damaged, f"its header was damaged ({damage}); it is read no more, "
                                    "and what it still held is lost")):
        if found:
            out.append(f"span ring of pid {pid}: {what}")
    return out


def _alive(pid: int, path: str, inode: int) -> bool:
    """Whether the process that writes this ring may still write to it: it exists, is not a
    zombie, and its ring file was not replaced by a new process with the same pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        if os.stat(path).st_ino != inode:
            return False
    except OSError:
        return False
    return data[data.rfind(b")") + 2:][:1] not in (b"Z", b"X")
