"""The span ring: one memory-mapped file per worker process, written by the worker (a record
when a span begins, its end patched in when it ends) and read by its sidecar, during the job
and once more after the worker is gone. So a killed worker loses nothing it recorded.

This module is the layout both sides share, and the reader: ring records -> protocol
SpanRecord tuples with their parents and jobs. The writers are worker/recorder.py and its C
fast path, worker/_fastspan.c (whose LAYOUT must equal VERSION here).

File, native byte order, int64 words, every part 8-byte aligned:

    header   HEADER_WORDS words (H_* below)
    records  `capacity` records of RECORD_WORDS, a ring: seq s lives in slot (s - 1) % capacity
    names    append-only entries [u32 length, u32 0, msgpack [NAME, id, name, attrs]] or
             [..., [THREAD, tid, thread name]]; H_NAMES_HEAD bytes are in use
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
"""

from __future__ import annotations

import struct
from typing import Any

from . import protocol
from .errors import ProtocolError

MAGIC = int.from_bytes(b"WSCRING\x01", "little")
VERSION = 1

HEADER_WORDS = 16
(H_MAGIC, H_VERSION, H_CAPACITY, H_COUNTER, H_PID, H_RECORDS, H_NAMES, H_NAMES_SIZE,
 H_NAMES_HEAD, H_NAMES_DROPPED, H_EXTRAS, H_EXTRAS_SIZE, H_EXTRAS_HEAD, H_EXTRAS_TAIL,
 H_EXTRAS_DROPPED) = range(15)

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

DEFAULT_CAPACITY = 1 << 16
NAMES_BYTES = 128 << 10
EXTRAS_BYTES = 512 << 10
# A slot still unwritten this long while later ones are (its writer was interrupted between
# taking the seq and storing it) is given up as lost.
STUCK_NS = 1_000_000_000
FOREVER = 1 << 62
_UNNAMED = ("<name not recorded: the ring's names table is full>", None)
_MISS = (1, 0, None)  # a job-cache entry no start falls in


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


def encode(obj: Any) -> bytes:
    """An entry's msgpack body (what msgpack can't carry becomes a number or its repr)."""
    return protocol.encode_blob(obj)


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
        self.id_base = (index + 1) << ID_SHIFT
        self.next_seq = 1
        self.lost = 0  # records overwritten before they were read, ends never seen
        # seq -> [kind, job, id, parent, name id, start, tid, no_patch]
        self.open: dict[int, OpenSpan] = {}
        self.names: dict[int, tuple[str, dict[str, Any] | None]] = {}
        self.threads: list[tuple[int, str]] = []  # new since the last read
        self._names_at = 0
        self._extras_at = q[H_EXTRAS_TAIL]
        self._extras: dict[int, dict[str, Any]] = {}
        self._stacks: dict[int, list[int | None]] = {}
        self._ctxs: dict[int, tuple[int, int, int]] = {}  # async seq -> (tid, depth, id)
        self._stuck = (0, 0)
        self._job_cache: dict[int, Any] = {}  # tid + 1 -> (lo, hi, job); 0 -> Jobs.version

    @property
    def counter(self) -> int:
        """The seq of the last record begun so far."""
        return int(self.q[H_COUNTER])

    @property
    def dropped(self) -> tuple[int, int]:
        """(names, extras) entries the writer could not fit."""
        return int(self.q[H_NAMES_DROPPED]), int(self.q[H_EXTRAS_DROPPED])

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
        # The records in seq order, parents and jobs worked out as they begin. Kept inline:
        # the sidecar reads every span here, hundreds of thousands a second at worst.
        out: list[protocol.SpanRecord] = []
        append, record, new = out.append, protocol.SpanRecord, tuple.__new__
        names, extras, opened, stacks, ctxs = (self.names, self._extras, self.open,
                                               self._stacks, self._ctxs)
        id_base, half, pid = self.id_base, self.cap // 2, self.pid
        cache, lookup, ctx_parent = self._jobs_cache(jobs), jobs.lookup, _ctx_parent
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
            stack = stacks.get(tid)
            if stack is None:
                stack = stacks[tid] = [None]
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
                del stack[depth:]
                while len(stack) < depth:
                    stack.append(None)
                stack.append(sid)
            if flags & F_ASYNC:
                ctxs[seq] = (tid, depth, sid)
            end = words[i + 4]
            if flags & F_MARK:
                opened[seq] = [protocol.RECORD_MARK, job, sid, parent, what & LOW32, start, tid,
                               c_pre - seq >= half]  # an OpenSpan
            elif 0 < end < ERR_BIT and seq not in extras:  # ended, no error, no extras
                name, attrs = names.get(what & LOW32) or _UNNAMED
                append(new(record, (protocol.RECORD_SPAN, job, sid, parent, name, start,
                                    end if end > start else start, tid, attrs, None, False)))
                continue
            else:  # (F_CPU: its end comes as an F_END record, which it is kept open for)
                opened[seq] = [protocol.RECORD_SPAN, job, sid, parent, what & LOW32, start, tid,
                               c_pre - seq >= half]  # an OpenSpan
            if end:
                done.append((seq, end, None))
        self._finish(out, done, final, now_ns)
        return out

    def _collect(self, upto: int | None, final: bool,
                 now_ns: int) -> tuple[int, list[int], list[int], list[_End]]:
        """(the counter before, the new records' words, the index of each whole one in them,
        ends patched into open spans), names and extras read too: all read() starts from."""
        c_pre = self.q[H_COUNTER]
        words, fresh = self._read_new(c_pre if upto is None or final else min(upto, c_pre),
                                      final, now_ns)
        done = self._reread_open(c_pre)
        self._read_names()
        self._read_extras()
        return c_pre, words, fresh, done

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
        if hi - nxt >= cap:
            self.lost += hi - cap + 1 - nxt
            nxt = hi - cap + 1
        words = self._words(nxt, hi)
        # A slot of a seq at or below c_post - cap may have been rewritten while we copied it.
        c_post = q[H_COUNTER]
        out = []
        seq, i = nxt, 0
        while seq <= hi:
            s = words[i]
            if s == seq and c_post - seq < cap:
                out.append(i)
            elif s > seq or c_post - seq >= cap:
                self.lost += 1
            elif final or self._give_up(seq, now_ns):
                self.lost += 1  # begun, never stored: its writer died or was interrupted
            else:
                break
            seq += 1
            i += RECORD_WORDS
        self.next_seq = seq
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
        ends = [(seq, q[rec + ((seq - 1) & mask) * RECORD_WORDS + END]) for seq in self.open]
        c_post = q[H_COUNTER]
        done: list[_End] = []
        for seq, end in ends:
            span = self.open[seq]
            if c_post - seq < cap:  # still its slot when we read it
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
        head = min(int(self.q[H_NAMES_HEAD]), self.names_size)
        mv, base = self.mv, self.names_at0
        at = self._names_at
        while at + ENTRY_HEAD.size <= head:
            n, _ = ENTRY_HEAD.unpack_from(mv, base + at)
            if at + ENTRY_HEAD.size + n > head:
                break
            entry = self._decode(mv[base + at + ENTRY_HEAD.size: base + at + ENTRY_HEAD.size + n])
            if isinstance(entry, list) and len(entry) >= 3 and isinstance(entry[1], int):
                if entry[0] == NAME:
                    attrs = entry[3] if len(entry) > 3 and isinstance(entry[3], dict) else None
                    self.names[entry[1]] = (str(entry[2]), attrs or None)
                elif entry[0] == THREAD:
                    self.threads.append((entry[1], str(entry[2])))
            at += _align(ENTRY_HEAD.size + n)
        self._names_at = at

    def _read_extras(self) -> None:
        q, mv = self.q, self.mv
        head, at = int(q[H_EXTRAS_HEAD]), self._extras_at
        size, base = self.extras_size, self.extras_at0
        if not 0 <= head - at <= size:
            self._extras_at = head  # not what this reader left: skip to the writer's head
            q[H_EXTRAS_TAIL] = head
            return
        while at < head:
            pos = at % size
            if size - pos < EXTRA_HEAD.size:
                at += size - pos
                continue
            n, _, seq = EXTRA_HEAD.unpack_from(mv, base + pos)
            if n == WRAP:
                at += size - pos
                continue
            if pos + EXTRA_HEAD.size + n > size:
                at = head  # damaged: give up on what is there
                break
            start = base + pos + EXTRA_HEAD.size
            entry = self._decode(mv[start:start + n])
            if isinstance(entry, dict):
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


def _ctx_parent(c: tuple[int, int, int] | None, tid: int, level: int,
                parent: int | None) -> int | None:
    """The parent of a record begun in an async context c (its context span's (tid, depth,
    id)): that span where the record is not nested deeper inside it on its own thread, or is
    at the top of another thread; else the parent its thread's stack gives."""
    if c is not None and ((c[0] == tid and level <= c[1]) or (c[0] != tid and level < 1)):
        return c[2]
    return parent
