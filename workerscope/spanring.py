"""The span ring: one memory-mapped file per worker process, written by the worker (a record
when a span begins, its end patched in when it ends) and read by its sidecar, during the job
and once more after the worker is gone. So a killed worker loses nothing it recorded.

This module is the layout both sides share, and the reader: ring records -> protocol
SpanRecord tuples with their parents and jobs. The writers are worker/recorder.py and its C
fast path, worker/_fastspan.c; the reader's passes over the records run in C too where
built, _ringscan.c, else in PythonScan here (both C files' LAYOUT must equal VERSION here).

File, native byte order, int64 words, every part 8-byte aligned:

    header   HEADER_WORDS words (H_* below)
    records  `capacity` records of RECORD_WORDS, a ring: seq s lives in slot (s - 1) % capacity
    names    append-only entries [u32 length, u32 0, msgpack [NAME, id, name, attrs]] or
             [..., [THREAD, tid, thread name, ident]] (ident: threading.get_ident(), what
             a faulthandler dump calls the thread); H_NAMES_HEAD bytes are in use; thread names
             take at most 1/THREAD_SHARE of it (the others counted in H_THREADS_DROPPED)
    extras   a byte ring of entries [u32 length, u32 0, u64 seq, msgpack map]: attrs given at
             run time ({"attrs": {...}}), an exception ({"error": ..., "traceback": ...});
             H_EXTRAS_HEAD and H_EXTRAS_TAIL count bytes written and consumed (by the reader:
             the writer never overwrites what was not read, it counts what did not fit)

A record: [seq, name id | flags << 32, tid | depth << 32, start ns, end ns, ctx].
- seq (from 1) is stored last: a slot whose seq is not the one expected is not written yet,
  or was overwritten (the ring filled; the reader counts what it lost).
- end is 0 while the span is open (ERR_BIT set: it raised). A writer patches it in place only
  while the slot is its own and at most capacity/2 records old; else it appends an F_END
  record (start = the begun record's seq). So a reader that re-reads open slots at least
  every capacity/2 records never misses an end.
- depth counts the synchronous spans open on the thread, this one included. An F_ASYNC
  record (an async span, or span() inside a running event loop) and an F_MARK take no level:
  depth is the thread's depth at their start. ctx is the seq of the F_ASYNC span enclosing
  it in its asyncio task (0: none).
Parents follow from that: a span's parent is the enclosing async span if that began at this
span's level on the same thread (or on another: a thread pool's work), else the span one
level up on its thread, else its job.

The reader trusts none of it: a record, names entry or extras entry no writer could have
written (another process or a bug wrote into the file) is dropped and counted, never read as
a span or a name (RingReader.damaged, names_damaged, extras_damaged).
"""

from __future__ import annotations

import importlib
import os
import struct
import time
from typing import Any

from . import procfs, protocol
from .config import MOST_RING_RECORDS, process_variable
from .errors import ProtocolError
from .units import fmt_bytes

MAGIC = int.from_bytes(b"WSCRING\x01", "little")
# 2: a header of 24 words, the reader's position in it (H_READ); 3: THREAD entries carry
# the thread's ident (what a faulthandler dump calls it)
VERSION = 3

HEADER_WORDS = 24
(H_MAGIC, H_VERSION, H_CAPACITY, H_COUNTER, H_PID, H_RECORDS, H_NAMES, H_NAMES_SIZE,
 H_NAMES_HEAD, H_NAMES_DROPPED, H_EXTRAS, H_EXTRAS_SIZE, H_EXTRAS_HEAD, H_EXTRAS_TAIL,
 H_EXTRAS_DROPPED) = range(15)
# Thread names the writer left out, past their share of the names area (THREAD_SHARE): the
# header's spare word, so 0 in a ring of a writer that never capped them.
H_THREADS_DROPPED = 15
# Written by the reader only (its sidecar, after each drain's frames are sent), never by the
# writer: the seq up to which it read the records, and how many of the spans it read begin
# were still open then. A sidecar killed after that leaves them for the next one to count
# (unread()): what was written past H_READ, and the ends of the H_READ_OPEN spans, were never
# sent. Words 18-23 are spare (0).
H_READ = 16
H_READ_OPEN = 17

RECORD_WORDS = 6
RECORD_BYTES = RECORD_WORDS * 8
SEQ, WHAT, TID, START, END, CTX = range(RECORD_WORDS)

F_MARK = 1
F_ASYNC = 2
F_END = 4
# On a begun sync span: its end comes as an F_END record (not patched in), which carries the
# thread CPU (ns) the span used in its ctx word (the span_cpu setting).
F_CPU = 8
ERR_BIT = 1 << 62
LOW32 = 0xFFFF_FFFF
# A token (what the writers hand around for a record) is ring generation << GEN_SHIFT | seq.
GEN_SHIFT = 40
SEQ_MASK = (1 << GEN_SHIFT) - 1
# Span ids: (process index in the worker + 1) << ID_SHIFT | seq; below 2**53 (JavaScript's
# exact integers) for the first 8191 processes, and apart from job ids (small numbers).
ID_SHIFT = 40

NAME = 0
THREAD = 1
ENTRY_HEAD = struct.Struct("=II")  # names: length, 0
EXTRA_HEAD = struct.Struct("=IIQ")  # extras: length, 0, seq
WRAP = 0xFFFF_FFFF  # an extras length that says: the next entry is at the area's start
MAX_EXTRA = 8192  # bytes of one extras entry; a larger one is dropped (and counted)
# Thread names take at most 1/THREAD_SHARE of the names area, so thousands of threads leave
# span names their room (recorder.Writer.thread counts the others in H_THREADS_DROPPED).
THREAD_SHARE = 4
MIN_NAME_ENTRY = 16  # bytes of the smallest names entry: ids never pass names head / this

# What a writer can put in a record. A record past these, or whose seq its slot never held,
# was written by something else (another process, a bug): it is dropped and counted
# (RingReader.damaged, in its lost too), never read as a span.
FLAGS = F_MARK | F_ASYNC | F_END | F_CPU
END_WHAT = (F_END | F_CPU) << 32  # an F_END record's name word has no bits but these
MAX_TID = 1 << 22  # Linux's PID_MAX_LIMIT
MAX_DEPTH = 1 << 16  # spans open on one thread (a reader's stack of a thread is that long)
# What a reader's stacks of its threads (the span open at each level) may hold, in bytes: a
# level costs a list slot and the id it holds, a thread's stack the dict entry, key and list
# that hold it. A record that would grow the stacks past it is read, and it is not put on its
# thread's stack (RingReader.stacks_cut counts these): a span begun inside it shows under
# the job; a new thread's stack past it lasts the read only. Once half is in use, what is
# held above each thread's last open span is let go, at the end of a read that follows all
# the records begun by the last one's end (a span that ended may have children unread).
STACK_BYTES = 16 << 20
STACK_LEVEL_BYTES = 40
STACK_NEW_LEVELS = 4  # what a new thread's stack costs, in levels (_ringscan.c's twin)
STACK_ROOM = STACK_BYTES // STACK_LEVEL_BYTES

DEFAULT_CAPACITY = 1 << 16
NAMES_BYTES = 128 << 10
EXTRAS_BYTES = 512 << 10
# A slot still unwritten this long while later ones are (its writer was interrupted between
# taking the seq and storing it) is given up as lost.
STUCK_NS = 1_000_000_000
FOREVER = 1 << 62
_UNNAMED = ("<name not recorded: the ring's names table is full>", None)
_OVERWRITTEN = ("<name not recorded: the span ring's names area was damaged>", None)
_EXTRA_KEYS = {"attrs": dict, "error": str, "traceback": str}  # what an extras entry holds
_MISS = (1, 0, None)  # a job-cache entry no start falls in


def ring_size_note(pid: int, peak: int, capacity: int, overwritten: int,
                   pace: float | None) -> str:
    """How big a ring would have held what one that filled was asked to: its process, the
    most records that waited at one read (`peak`), its capacity, what was overwritten, and
    the most records a second its reader took in (None: not measured). The size is given
    at twice the peak (a larger ring takes longer to read, so more waits meanwhile); with
    span_cpu a span takes two records and the setting counts spans, so it is then twice
    what is needed."""
    want = capacity_for(2 * peak)
    fit = (f"a ring_records of at least {want:,} (WORKERSCOPE_RING_RECORDS={want}; "
           f"{fmt_bytes(want * RECORD_BYTES)} of memory for each process) would have "
           "held what waited then" if want <= MOST_RING_RECORDS else
           f"no ring_records setting holds it (the most is {MOST_RING_RECORDS:,})")
    read = ("" if pace is None else
            f"; its reader took in at most {pace:,.0f} records a second here, and spans "
            "recorded faster than that for longer than the ring lasts are lost whatever its "
            "size: fewer, longer spans (@timed on the callers) keep them")
    return (f"span ring of pid {pid}: at its fullest {peak:,} records waited to be read in a "
            f"ring of {capacity:,}, and {overwritten:,} were overwritten; {fit}{read}")


def _align(n: int) -> int:
    return (n + 7) & ~7


def capacity_for(records: int) -> int:
    """The ring capacity for a setting: a power of two, at least 64."""
    return 1 << max(6, (int(records) - 1).bit_length())


def layout(capacity: int, names: int = NAMES_BYTES, extras: int = EXTRAS_BYTES) -> dict[str, int]:
    """Byte offsets and sizes of the parts of a ring file of `capacity` records."""
    records = HEADER_WORDS * 8
    at_names = records + capacity * RECORD_BYTES
    at_extras = at_names + _align(names)
    return {"records": records, "names": at_names, "names_size": _align(names),
            "extras": at_extras, "extras_size": _align(extras),
            "size": at_extras + _align(extras)}


def init_header(buf: Any, capacity: int, pid: int, names: int = NAMES_BYTES,
                extras: int = EXTRAS_BYTES) -> None:
    """Write a fresh header into a zeroed mapping of layout(capacity)['size'] bytes."""
    parts = layout(capacity, names, extras)
    q = memoryview(buf).cast("q")
    try:
        for index, value in ((H_VERSION, VERSION), (H_CAPACITY, capacity), (H_PID, pid),
                             (H_RECORDS, parts["records"]), (H_NAMES, parts["names"]),
                             (H_NAMES_SIZE, parts["names_size"]), (H_EXTRAS, parts["extras"]),
                             (H_EXTRAS_SIZE, parts["extras_size"])):
            q[index] = value
        q[H_MAGIC] = MAGIC  # last: a reader takes a ring without it for one being made
    finally:
        q.release()


def unread(buf: Any) -> tuple[int, int] | None:
    """(records written past its reader's last position, spans it had read begin whose ends
    it never read) of a ring whose reader is gone; None for a mapping that is not a span ring
    of this layout. Words out of range (a damaged header) count every record unread."""
    mv = memoryview(buf)
    try:
        if len(mv) < HEADER_WORDS * 8:
            return None
        q = mv[:HEADER_WORDS * 8].cast("q")
        try:
            if q[H_MAGIC] != MAGIC or q[H_VERSION] != VERSION:
                return None
            counter, read, open_ = q[H_COUNTER], q[H_READ], q[H_READ_OPEN]
        finally:
            q.release()
    finally:
        mv.release()
    if not 0 <= counter <= SEQ_MASK:
        return None
    if not 0 <= read <= counter:
        return counter, 0
    return counter - read, open_ if 0 <= open_ <= read else 0


def encode(obj: Any) -> bytes:
    """An entry's msgpack body (what msgpack can't carry becomes a number or its repr)."""
    return protocol.encode_blob(obj)


def born_ns(pid: int) -> int:
    """A monotonic time (ns) before which process `pid` recorded nothing: its start (which
    /proc counts from boot, suspended time included) less the time suspended since boot, less
    a second to spare; 0 when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            st = procfs.parse_stat(f.read())
    except OSError:
        return 0
    if st is None:
        return 0
    suspended = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
    return max(0, st.starttime * 1_000_000_000 // os.sysconf("SC_CLK_TCK") - suspended
               - 1_000_000_000)


class RingError(ProtocolError):
    """A mapping that is not a span ring of this layout."""


class Jobs:
    """Which job a span belongs to: the job running on its thread (innermost if nested), else
    the only job open in the worker at its start, else none. Times are monotonic ns."""

    def __init__(self) -> None:
        self._jobs: list[list[Any]] = []  # [job, pid, tid, start, end or None]
        self.version = 0  # changes with the table: answers cached before are stale

    def start(self, job: int, pid: int, tid: int | None, t: int) -> None:
        self._jobs.append([job, pid, tid, t, None])
        self.version += 1

    def end(self, job: int, t: int) -> None:
        for j in self._jobs:
            if j[0] == job and j[4] is None:
                j[4] = t
        self.version += 1

    def of(self, pid: int, tid: int, t: int) -> int | None:
        return self.lookup(pid, tid, t)[0]

    def lookup(self, pid: int, tid: int, t: int) -> tuple[int | None, int, int]:
        """(job, lo, hi): the job at time t, the same for every time in [lo, hi)."""
        mine = None
        open_at = []
        lo, hi = -FOREVER, FOREVER
        for j in self._jobs:
            start, end = j[3], j[4]
            if start <= t:
                lo = max(lo, start)
            else:
                hi = min(hi, start)
            if end is not None:
                if end < t:
                    lo = max(lo, end + 1)
                else:
                    hi = min(hi, end + 1)
            if start <= t and (end is None or t <= end):
                open_at.append(j)
                if j[1] == pid and j[2] == tid and (mine is None or start > mine[3]):
                    mine = j
        if mine is not None:
            return int(mine[0]), lo, hi
        return (int(open_at[0][0]) if len(open_at) == 1 else None), lo, hi

    def prune(self, before: int) -> None:
        """Forget jobs that ended before `before`: no span still to read started in them."""
        kept = [j for j in self._jobs if j[4] is None or j[4] >= before]
        if len(kept) != len(self._jobs):
            self._jobs = kept
            self.version += 1


# A span begun but not ended when the reader saw it (RingReader.open, seq -> its OpenSpan): a
# list, not an object, as the reader makes one for every span still open at a read. Its items:
# kind (protocol.RECORD_SPAN or RECORD_MARK), job, span id, parent, name id, start (monotonic
# ns), tid, and whether it is too old for its end to be patched into its slot (OPEN_OLD: its
# end comes as an F_END record instead). A span's forms, from the worker to the views: words
# in a ring slot (this module's layout), an OpenSpan while it runs, a protocol.SpanRecord
# (a tuple; an array on the wire), a timeline.Span.
OPEN_START = 5
OPEN_OLD = 7
OpenSpan = list[Any]
# An end the reader found for an open span: (seq, end word, the CPU an F_CPU end carried).
_End = tuple[int, int, "int | None"]


def _end_of(words: list[int], i: int, flags: int) -> _End:
    """The end an F_END record at words[i] carries: (the seq it ends, its end word, the CPU
    its span used, in its ctx word where F_CPU says it is measured)."""
    return words[i + 3], words[i + 4], words[i + 5] if flags & F_CPU else None


class RingReader:
    """Reads one process's ring: new records, the ends of open spans, names and extras.

    `read()` returns the spans and marks that completed since the last call, as SpanRecord
    tuples; the open ones wait (or, at the last read, end at the given time, cut short)."""

    def __init__(self, buf: Any, pid: int, index: int = 0) -> None:
        self.mv = memoryview(buf)
        size = len(self.mv)
        if size < HEADER_WORDS * 8 or size % 8:
            self.mv.release()  # else the caller cannot close its mapping
            raise RingError(f"a span ring has a {HEADER_WORDS * 8}-byte header, got {size} bytes")
        self.q = self.mv.cast("q")
        q = self.q
        cap = q[H_CAPACITY]
        self.names_at0, self.names_size = q[H_NAMES], q[H_NAMES_SIZE]
        self.extras_at0, self.extras_size = q[H_EXTRAS], q[H_EXTRAS_SIZE]
        if q[H_MAGIC] != MAGIC or q[H_VERSION] != VERSION:
            self.close()
            raise RingError("not a span ring of this layout (magic or version)")
        if (cap < 1 or cap & (cap - 1) or q[H_RECORDS] != HEADER_WORDS * 8
                or self.names_at0 < q[H_RECORDS] + cap * RECORD_BYTES
                or self.extras_at0 < self.names_at0 + self.names_size
                or self.extras_at0 + self.extras_size > size):
            self.close()
            raise RingError("span ring header out of bounds")
        self.cap, self.mask, self.rec = cap, cap - 1, HEADER_WORDS
        self.pid = pid
        self.born = max(1, born_ns(pid))  # no start a writer wrote is earlier
        self.id_base = (index + 1) << ID_SHIFT
        self.next_seq = 1
        self.lost = 0  # records overwritten before they were read, ends never seen
        # Of those, records no writer wrote (something else wrote into the ring), and records
        # left unread when the ring could no longer be read (abandon()).
        self.damaged = 0
        self.abandoned = 0
        # The most records found waiting at one read: a ring of this many would have held
        # every burst so far, at this reader's pace (what a full ring's note sizes it from).
        self.backlog_peak = 0
        self.names_damaged = 0  # names and extras entries no writer wrote
        self.extras_damaged = 0
        self.header_damaged = False  # its magic or counter overwritten: read no more
        self._seen = 0  # the highest counter read
        self._last_nid = 0  # names are numbered from 1 in the order they are written
        self._names_gap = False  # after a damaged names entry: ids may skip
        # seq -> [kind, job, id, parent, name id, start, tid, no_patch]
        self.open: dict[int, OpenSpan] = {}
        self.names: dict[int, tuple[str, dict[str, Any] | None]] = {}
        self.threads: list[tuple[int, str]] = []  # new since the last read
        # Each thread's (tid, name) by its ident, as the writer named them (a dump of
        # stacks names its threads from here); bounded as the names area is.
        self.idents: dict[int, tuple[int, str]] = {}
        self._names_at = 0
        self._extras_at = q[H_EXTRAS_TAIL]
        self._extras: dict[int, dict[str, Any]] = {}
        self._stacks: dict[int, list[int | None]] = {}
        self._stack_room = STACK_ROOM  # levels the stacks may still take
        self._prune_below = STACK_ROOM // 2  # let go of idle threads' stacks past this
        self._prune_again = False  # the last prune kept levels only for what had just ended
        # The counter at the end of the last read: every record a span seen ending by then
        # could be the parent of was begun by then (its seq is at most this).
        self._fence = 0
        self.stacks_cut = 0  # records read with no room on their thread's stack
        self._ctxs: dict[int, tuple[int, int, int]] = {}  # async seq -> (tid, depth, id)
        self._stuck = (0, 0)
        self._job_cache: dict[int, Any] = {}  # tid + 1 -> (lo, hi, job); 0 -> Jobs.version
        self.scan: Any = SCAN  # the passes over the records: C, or PythonScan

    @property
    def counter(self) -> int:
        """The seq of the last record begun so far."""
        c = int(self.q[H_COUNTER])
        if 0 <= c <= SEQ_MASK:
            self._seen = max(self._seen, c)
        return c

    @property
    def dropped(self) -> tuple[int, int]:
        """(names, extras) entries the writer could not fit."""
        return int(self.q[H_NAMES_DROPPED]), int(self.q[H_EXTRAS_DROPPED])

    @property
    def threads_dropped(self) -> int:
        """Thread names the writer left out (past their share of the names area)."""
        return max(0, int(self.q[H_THREADS_DROPPED]))

    def abandon(self, now_ns: int, counter: int | None = None) -> list[protocol.SpanRecord]:
        """The ring can be read no more (its file was truncated): touching nothing of the
        mapping, count the records begun and not read as lost (up to `counter`, when the
        caller could still read it, else the last counter seen), and end the open spans at
        now_ns, cut short."""
        c = counter if counter is not None and self._seen <= counter <= SEQ_MASK else self._seen
        unread = max(0, c - self.next_seq + 1)
        self.next_seq += unread
        self.lost += unread
        self.abandoned += unread
        out: list[protocol.SpanRecord] = []
        self._finish(out, [], True, now_ns)
        return out

    def mark_read(self) -> None:
        """Write this reader's position into the header (H_READ, H_READ_OPEN): what it read is
        sent by now. The reader's words only: the writer never reads or writes them."""
        if not self.header_damaged:
            self.q[H_READ_OPEN] = len(self.open)
            self.q[H_READ] = self.next_seq - 1

    def _damage(self) -> None:
        self.lost += 1
        self.damaged += 1

    def close(self) -> None:
        self.q.release()
        self.mv.release()

    # -- reading -----------------------------------------------------------------------------
    def read(self, jobs: Jobs, upto: int | None = None, final: bool = False,
             now_ns: int = 0) -> list[protocol.SpanRecord]:
        """What completed since the last read. upto: read no record past this seq (a
        counter taken before the caller learnt of every job those records may belong to).
        final: the writer is gone: read all there is; spans still open end at now_ns, cut
        short."""
        c_pre, words, fresh, done = self._collect(upto, final, now_ns)
        out: list[protocol.SpanRecord] = []
        try:
            self._stack_room, cut = self.scan.spans(
                words, fresh, self.names, self._extras, self.open, self._stacks, self._ctxs,
                self._jobs_cache(jobs), jobs.lookup, protocol.SpanRecord, _UNNAMED,
                protocol.RECORD_SPAN, protocol.RECORD_MARK, self.pid, out, done, self.id_base,
                self.cap // 2, c_pre, self._stack_room)
        except BaseException:
            self._stack_room = STACK_ROOM - self._stack_levels()  # what the pass left
            raise
        self.stacks_cut += cut
        self._finish(out, done, final, now_ns)
        # Only once every record begun by the last read's end is read: a span that ended by
        # then may be the parent of one begun before its end and not read till now. What
        # ended in this read is kept for the same reason.
        due = self._stack_room < self._prune_below or self._prune_again
        if due and self.next_seq > self._fence:
            self._prune_stacks({r.id for r in out})
        self._fence = int(self.q[H_COUNTER])
        return out

    def _collect(self, upto: int | None, final: bool,
                 now_ns: int) -> tuple[int, list[int], list[int], list[_End]]:
        """(the counter before, the new records' words, the index of each whole one in them,
        ends patched into open spans), names and extras read too: all read() starts from."""
        c_pre = self.q[H_COUNTER]
        if self.header_damaged or self.q[H_MAGIC] != MAGIC or not 0 <= c_pre <= SEQ_MASK:
            self.header_damaged = True  # nothing in the ring can be placed: read no more
            return self.next_seq - 1, [], [], []
        self._seen = max(self._seen, c_pre)
        words, fresh = self._read_new(c_pre if upto is None or final else min(upto, c_pre),
                                      final, now_ns)
        done = self._reread_open(c_pre)
        self._read_names()
        self._read_extras()
        return c_pre, words, self._sane(words, fresh), done

    def _sane(self, words: list[int], fresh: list[int]) -> list[int]:
        """The records of `fresh` (their indexes in words) that a writer could have written;
        the others are counted damaged. Names are read by now, and a writer writes a name
        before the first record that has it. A begun record whose name is known passes the
        first test (the scan's sane(), on every record); any other, the second."""
        now = time.monotonic_ns()  # after the copy: no start or end a writer wrote is later
        keep: list[int]
        keep, rest = self.scan.sane(words, fresh, self._last_nid, self.born, now)
        if rest:
            for i in rest:
                if self._sane_other(words[i:i + RECORD_WORDS], now):
                    keep.append(i)
                else:
                    self._damage()
            keep.sort()
        return keep

    def _sane_other(self, r: list[int], now: int) -> bool:
        """Whether a writer could have written the record `r` (its words): an F_END record,
        or a begun one whose name id is past the names read (the names area was damaged)."""
        seq, what, td, start, end, ctx = r
        t = end & ~ERR_BIT
        if what >> 32 & F_END:  # start is the seq of the record it ends
            span = self.open.get(start)
            return bool(not what & ~END_WHAT and 0 < td <= MAX_TID and 0 < start < seq
                        and ctx >= 0 and end > 0 and self.born <= t <= now
                        and (span is None or t >= span[OPEN_START]))
        nid = what & LOW32
        ok = bool(not what >> 32 & ~FLAGS and what >= 0 and 0 <= td >> 32 <= MAX_DEPTH
                  and 0 < td & LOW32 <= MAX_TID and 0 <= ctx < seq and self.born <= start <= now
                  and (end == 0 or (end > 0 and start <= t <= now))
                  and self._names_gap and self._last_nid < nid <= self._names_bound())
        if ok:
            self.names.setdefault(nid, _OVERWRITTEN)  # its entry was in the damaged part
        return ok

    def _names_bound(self) -> int:
        """The highest name id the names area could hold now."""
        return min(int(self.q[H_NAMES_HEAD]), self.names_size) // MIN_NAME_ENTRY

    def _jobs_cache(self, jobs: Jobs) -> dict[int, Any]:
        """tid + 1 -> (lo, hi, job) of the last lookups, valid while the jobs are the same."""
        cache = self._job_cache
        if cache.get(0) != jobs.version:
            cache.clear()
            cache[0] = jobs.version
        return cache

    def _finish(self, out: list[protocol.SpanRecord], done: list[_End], final: bool,
                now_ns: int) -> None:
        """Complete into out the open spans whose ends came; at the last read, all the others
        too, cut short at now_ns."""
        for seq, end, cpu in done:
            span = self.open.pop(seq, None)
            if span is not None:
                out.append(self._complete(span, seq, end, False, cpu))
        if final:
            for seq, span in sorted(self.open.items()):
                out.append(self._complete(span, seq, max(now_ns, span[OPEN_START]), True))
            self.open.clear()
        self._prune()

    def _words(self, lo: int, hi: int) -> list[int]:
        """The words of records lo..hi (seqs), copied out in one or two slices."""
        q, rec = self.q, self.rec
        a = (lo - 1) & self.mask
        n = hi - lo + 1
        if a + n <= self.cap:
            return q[rec + a * RECORD_WORDS: rec + (a + n) * RECORD_WORDS].tolist()
        k = self.cap - a
        return (q[rec + a * RECORD_WORDS: rec + self.cap * RECORD_WORDS].tolist()
                + q[rec: rec + (n - k) * RECORD_WORDS].tolist())

    def _read_new(self, hi: int, final: bool, now_ns: int) -> tuple[list[int], list[int]]:
        """The words of the records begun since the last read, and the index in them of
        each one whole (in seq order)."""
        q, cap = self.q, self.cap
        if final:
            # A pure-Python writer's counter may lag its last records a little: read on while
            # slots hold the seqs that follow.
            while hi - self.next_seq < cap - 1:
                nxt = hi + 1
                if q[self.rec + ((nxt - 1) & self.mask) * RECORD_WORDS] != nxt:
                    break
                hi = nxt
        nxt = self.next_seq
        if hi < nxt:
            return [], []
        if hi - nxt >= self.backlog_peak:
            self.backlog_peak = hi - nxt + 1
        if hi - nxt >= cap:
            self.lost += hi - cap + 1 - nxt
            nxt = hi - cap + 1
        words = self._words(nxt, hi)
        # A slot of a seq at or below c_post - cap may have been rewritten while we copied it.
        c_post = q[H_COUNTER]
        out: list[int] = []
        seq, at = nxt, 0
        while True:
            fresh, stop, lost, damaged, waiting = self.scan.slots(words, at, seq, hi, c_post, cap)
            out += fresh
            self.lost += lost + damaged
            self.damaged += damaged
            if not waiting or not (final or self._give_up(stop, now_ns)):
                break
            self.lost += 1  # begun, never stored: its writer died or was interrupted
            at += (stop + 1 - seq) * RECORD_WORDS
            seq = stop + 1
        self.next_seq = stop
        return words, out

    def _give_up(self, seq: int, now_ns: int) -> bool:
        if self._stuck[0] != seq:
            self._stuck = (seq, now_ns)
            return False
        return now_ns - self._stuck[1] > STUCK_NS

    def _reread_open(self, c_pre: int) -> list[_End]:
        """Ends patched into the slots of open spans since the last read."""
        if not self.open:
            return []
        q, rec, mask, cap = self.q, self.rec, self.mask, self.cap
        slots = [(seq, rec + ((seq - 1) & mask) * RECORD_WORDS) for seq in self.open]
        ends = [(seq, q[b], q[b + END]) for seq, b in slots]
        c_post = q[H_COUNTER]
        now = time.monotonic_ns()
        done: list[_End] = []
        for seq, s, end in ends:
            span = self.open[seq]
            foreign = s < seq or (s - seq) & mask  # its slot holds no seq a writer puts there
            if s == seq and end and not foreign:
                foreign = not (end > 0 and span[OPEN_START] <= end & ~ERR_BIT <= now)
            if foreign:
                del self.open[seq]  # its slot was written into: its end is not to be had
                self._damage()
            elif c_post - seq < cap and s == seq:  # still its slot when we read it
                if end:
                    done.append((seq, end, None))
                elif c_pre - seq >= cap // 2:
                    span[OPEN_OLD] = True  # too old to be patched now: its end comes as F_END
            elif not span[OPEN_OLD]:
                # Overwritten, and its end may have been patched in just before: unknowable.
                del self.open[seq]
                self.lost += 1
        return done

    # -- records -> spans --------------------------------------------------------------------
    def _complete(self, span: OpenSpan, seq: int, end: int, cut: bool,
                  cpu: int | None = None) -> protocol.SpanRecord:
        kind, job, sid, parent, nid, start, tid = span[:OPEN_OLD]
        name, attrs = self.names.get(nid) or _UNNAMED
        extra = self._extras.pop(seq, None)
        error = None
        if extra is not None:
            more = extra.get("attrs")
            tb = extra.get("traceback")
            if isinstance(more, dict) or isinstance(tb, str):
                attrs = dict(attrs or {})
                if isinstance(more, dict):
                    attrs.update(more)
                if isinstance(tb, str):
                    attrs["traceback"] = tb
            if isinstance(extra.get("error"), str):
                error = extra["error"]
        if end & ERR_BIT and error is None:
            error = "error (its details did not fit in the span ring)"
        end &= ~ERR_BIT
        if kind == protocol.RECORD_MARK:
            end = start
        return protocol.SpanRecord(kind, job, sid, parent, name, start, max(end, start), tid,
                                   attrs, error, cut, cpu)

    # -- names and extras --------------------------------------------------------------------
    def _read_names(self) -> None:
        """The names entries written since the last read. One no writer wrote (the head
        says where whole entries end) is counted, and the next one that is a writer's is
        looked for on the following 8-byte boundaries: later names are still read."""
        head = min(int(self.q[H_NAMES_HEAD]), self.names_size)
        at = self._names_at
        while at + ENTRY_HEAD.size <= head:
            size = self._name_entry(at, head)
            if not size:
                self.names_damaged += 1
                self._names_gap = True
                at += 8
                while at + ENTRY_HEAD.size <= head and not (size := self._name_entry(at, head)):
                    at += 8
            at += size
        self._names_at = max(at, self._names_at)

    def _name_entry(self, at: int, head: int) -> int:
        """Take the names entry at `at` if a writer could have written it: its size, or 0.
        A writer numbers names from 1 in order (after damage, ids may skip: the skipped
        ones are names lost)."""
        mv, base = self.mv, self.names_at0
        n, pad = ENTRY_HEAD.unpack_from(mv, base + at)
        end = at + ENTRY_HEAD.size + n
        if pad or not n or end > head:
            return 0
        e = self._decode(mv[base + at + ENTRY_HEAD.size: base + end])
        if (not isinstance(e, list) or len(e) not in (3, 4) or type(e[1]) is not int
                or not isinstance(e[2], str)):
            return 0
        if e[0] == THREAD and 0 < e[1] <= MAX_TID and (
                len(e) == 3 or (type(e[3]) is int and 0 < e[3] < 1 << 64)):
            self.threads.append((e[1], e[2]))
            if len(e) == 4:
                self.idents[e[3]] = (e[1], e[2])
            return _align(ENTRY_HEAD.size + n)
        attrs = e[3] if len(e) == 4 else None
        nid = e[1]
        if e[0] != NAME or not (attrs is None or isinstance(attrs, dict)) or not (
                nid == self._last_nid + 1
                or (self._names_gap and self._last_nid < nid <= head // MIN_NAME_ENTRY)):
            return 0
        for lost in range(self._last_nid + 1, nid):
            self.names[lost] = _OVERWRITTEN
        self.names[nid] = (e[2], attrs or None)
        self._last_nid = nid
        self._names_gap = False
        return _align(ENTRY_HEAD.size + n)

    def _read_extras(self) -> None:
        """The extras entries written since the last read. At one no writer wrote, what is
        there up to the head is given up on (entries have no mark to find the next by) and
        counted."""
        q, mv = self.q, self.mv
        head, at = int(q[H_EXTRAS_HEAD]), self._extras_at
        # An entry's record was begun before it: its seq is at most the counter (give or take
        # a ring: a pure-Python writer's counter may lag).
        top = int(q[H_COUNTER]) + self.cap
        size, base = self.extras_size, self.extras_at0
        if not 0 <= head - at <= size:
            self.extras_damaged += 1
            self._extras_at = head  # not what this reader left: skip to the writer's head
            q[H_EXTRAS_TAIL] = head
            return
        while at < head:
            pos = at % size
            if size - pos < EXTRA_HEAD.size:
                at += size - pos
                continue
            n, pad, seq = EXTRA_HEAD.unpack_from(mv, base + pos)
            if n == WRAP and not pad and not seq:
                at += size - pos
                continue
            start = base + pos + EXTRA_HEAD.size
            entry = None
            if (not pad and 0 < n <= MAX_EXTRA and pos + EXTRA_HEAD.size + n <= size
                    and at + EXTRA_HEAD.size + n <= head and 0 < seq <= top):
                entry = self._decode(mv[start:start + n])
            if not isinstance(entry, dict) or not entry or not all(
                    isinstance(v, _EXTRA_KEYS.get(k, type(None))) and k in _EXTRA_KEYS
                    for k, v in entry.items()):
                self.extras_damaged += 1
                at = head
                break
            self._extras[seq] = entry
            at += _align(EXTRA_HEAD.size + n)
        self._extras_at = at
        q[H_EXTRAS_TAIL] = at

    @staticmethod
    def _decode(data: memoryview) -> Any:
        try:
            return protocol.decode_blob(bytes(data))
        except ProtocolError:
            return None

    def _prune(self) -> None:
        if len(self._ctxs) > 10_000:
            for seq in list(self._ctxs)[:5_000]:
                if seq not in self.open:
                    del self._ctxs[seq]
        if len(self._extras) > 10_000:
            oldest = self.next_seq - self.cap
            for seq in [s for s in self._extras if s < oldest and s not in self.open]:
                del self._extras[seq]


    def _prune_stacks(self, ended: set[int]) -> None:
        """Let go of the levels of each thread's stack above its last span still open or
        in `ended` (spans that ended in this read: their children may not be read yet, and the
        next read prunes again), and of the stacks with none; the next prune otherwise waits
        until half the room that is left then is taken too (or 7/8 of all, where little was
        left)."""
        opened = {self.id_base | seq for seq in self.open}
        live = opened | ended
        self._prune_again = False
        for tid, stack in list(self._stacks.items()):
            top = next((i for i in range(len(stack) - 1, 0, -1) if stack[i] in live), 0)
            if top:
                del stack[top + 1:]
                if stack[top] not in opened:  # kept for its children only: again next read
                    self._prune_again = True
            else:
                del self._stacks[tid]
        self._stack_room = STACK_ROOM - self._stack_levels()
        self._prune_below = max(self._stack_room // 2, STACK_ROOM // 8)

    def _stack_levels(self) -> int:
        """The room the stacks take: their levels, a new stack's price for each."""
        return sum(len(stack) - 1 + STACK_NEW_LEVELS for stack in self._stacks.values())


def _ctx_parent(c: tuple[int, int, int] | None, tid: int, level: int,
                parent: int | None) -> int | None:
    """The parent of a record begun in an async context c (its context span's (tid, depth,
    id)): that span where the record is not nested deeper inside it on its own thread, or is
    at the top of another thread; else the parent its thread's stack gives."""
    if c is not None and ((c[0] == tid and level <= c[1]) or (c[0] != tid and level < 1)):
        return c[2]
    return parent


class PythonScan:
    """The reader's three passes over the records copied out of a ring, in Python: the twins
    of _ringscan.c's (the C fast path, used where it is built), the same arguments, the same
    results. Kept inline and in locals: the sidecar passes every record through them,
    hundreds of thousands a second at worst."""

    @staticmethod
    def slots(words: list[int], at: int, seq: int, hi: int, c_post: int,
              cap: int) -> tuple[list[int], int, int, int, bool]:
        """From the slot of seq (at words[at]) to hi's: (the index of each slot that holds
        its seq's record, the first seq not classified, slots overwritten, slots holding what
        no writer writes, whether that first seq's slot is not written yet)."""
        out: list[int] = []
        lost = damaged = 0
        mask, i = cap - 1, at
        while seq <= hi:
            s = words[i]
            if s == seq and c_post - seq < cap:
                out.append(i)
            elif s < 0 or (s - seq) & mask or (not s and seq > cap):
                damaged += 1  # a seq this slot never holds, or zeros over a written slot
            elif s > seq or c_post - seq >= cap:
                lost += 1
            else:
                return out, seq, lost, damaged, True
            seq += 1
            i += RECORD_WORDS
        return out, seq, lost, damaged, False

    @staticmethod
    def sane(words: list[int], fresh: list[int], top: int, born: int,
             now: int) -> tuple[list[int], list[int]]:
        """(the records of fresh that pass RingReader._sane's first test, the others): a begun
        record whose name id is at most top, its times within [born, now]."""
        low, no_err = LOW32, ~ERR_BIT
        what_hi, end_bit, td_hi = (FLAGS + 1) << 32, F_END << 32, MAX_DEPTH << 32 | LOW32
        keep: list[int] = []
        rest: list[int] = []
        for i in fresh:
            what, td, start, end = words[i + 1], words[i + 2], words[i + 3], words[i + 4]
            if (0 <= what < what_hi and not what & end_bit and what & low <= top
                    and 0 <= td <= td_hi and 0 < td & low <= MAX_TID
                    and 0 <= words[i + 5] < words[i] and born <= start <= now
                    and (not end or (end > 0 and start <= end & no_err <= now))):
                keep.append(i)
            else:
                rest.append(i)
        return keep, rest

    @staticmethod
    def spans(words: list[int], fresh: list[int], names: dict[int, Any],
              extras: dict[int, Any], opened: dict[int, OpenSpan],
              stacks: dict[int, list[int | None]], ctxs: dict[int, tuple[int, int, int]],
              cache: dict[int, Any], lookup: Any, record: Any, unnamed: Any, kind_span: int,
              kind_mark: int, pid: int, out: list[Any], done: list[_End], id_base: int,
              half: int, c_pre: int, room: int) -> tuple[int, int]:
        """The records of fresh (indexes in words, in seq order), parents and jobs worked out
        as they begin: each span that completed appended to out as a `record`, each end of an
        open span to done. room: the levels the stacks may still grow by; a new thread's
        costs STACK_NEW_LEVELS, and is not kept past the pass where less is left. (the room
        left, the records not put on their stack for want of it)."""
        append, new, ctx_parent = out.append, tuple.__new__, _ctx_parent
        cut, last_tid = 0, -1
        last_stack: list[int | None] = [None]
        for i in fresh:
            seq, what, start = words[i], words[i + 1], words[i + 3]
            flags = what >> 32
            if flags & F_END:
                if start in opened:
                    done.append(_end_of(words, i, flags))
                continue
            td, ctx = words[i + 2], words[i + 5]
            tid, depth = td & LOW32, td >> 32
            sid = id_base | seq
            sync = not flags & (F_ASYNC | F_MARK)
            level = depth - 1 if sync else depth
            if tid != last_tid:  # (the C pass keeps the last record's thread too)
                found = stacks.get(tid)
                if found is None:
                    found = [None]  # this pass's alone where no room is left for it
                    if room >= STACK_NEW_LEVELS:
                        stacks[tid] = found
                        room -= STACK_NEW_LEVELS
                last_tid, last_stack = tid, found
            stack = last_stack
            parent = stack[level] if 1 <= level < len(stack) else None
            if ctx:  # begun in an async context: its parent may be that context's span
                parent = ctx_parent(ctxs.get(ctx), tid, level, parent)
            hit = cache.get(tid + 1, _MISS)
            if hit[0] <= start < hit[1]:
                job = hit[2]
            else:
                job, lo, hi = lookup(pid, tid, start)
                cache[tid + 1] = (lo, hi, job)
            if parent is None:
                parent = job
            if sync and depth >= 1:
                grow = depth + 1 - len(stack)
                if grow > 0 and grow > room:
                    cut += 1
                else:
                    room -= grow
                    del stack[depth:]
                    while len(stack) < depth:
                        stack.append(None)
                    stack.append(sid)
            if flags & F_ASYNC:
                ctxs[seq] = (tid, depth, sid)
            end = words[i + 4]
            if flags & F_MARK:
                opened[seq] = [kind_mark, job, sid, parent, what & LOW32, start, tid,
                               c_pre - seq >= half]  # an OpenSpan
            elif 0 < end < ERR_BIT and seq not in extras:  # ended, no error, no extras
                name, attrs = names.get(what & LOW32) or unnamed
                append(new(record, (kind_span, job, sid, parent, name, start,
                                    end if end > start else start, tid, attrs, None, False,
                                    None)))
                continue
            else:  # (F_CPU: its end comes as an F_END record, which it is kept open for)
                opened[seq] = [kind_span, job, sid, parent, what & LOW32, start, tid,
                               c_pre - seq >= half]  # an OpenSpan
            if end:
                done.append((seq, end, None))
        return room, cut


def _load_scan() -> Any:
    """The C fast path of the passes (_ringscan.c), or PythonScan: not built, a build of other
    sources than these, or WORKERSCOPE_PURE_PYTHON=1."""
    if process_variable("WORKERSCOPE_PURE_PYTHON") not in ("", "0"):
        return PythonScan
    try:
        _ringscan = importlib.import_module(f"{__package__}._ringscan")
    except ImportError:
        return PythonScan
    # A build of older sources lacks STACK_NEW_LEVELS (its spans() takes no room).
    same = (getattr(_ringscan, "LAYOUT", None) == VERSION
            and getattr(_ringscan, "STACK_NEW_LEVELS", None) == STACK_NEW_LEVELS)
    return _ringscan if same else PythonScan


# What every reader's passes run on: the C fast path, or PythonScan.
SCAN: Any = _load_scan()
