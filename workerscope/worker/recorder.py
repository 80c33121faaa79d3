"""Span records in the worker: the ring file each process writes its spans to (layout in
workerscope/spanring.py), and the pure-Python writer.

A span is one record, written when it begins and completed in place when it ends, in memory
the sidecar maps: nothing crosses the pipe, and a SIGKILL loses nothing already recorded (the
sidecar reads the ring after the death and ends what was open there, cut short).

Two writers share the layout. The C fast path (_fastspan.c, built when a compiler was there at
install) records sync @timed calls and span() blocks; the pure-Python one here is the fallback,
or the only one with WORKERSCOPE_PURE_PYTHON=1. Either way, async spans, marks and the slow
paths (names, thread names, attributes, exceptions) go through this module.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import mmap
import os
import stat
import struct
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from .. import spanring
from ..config import process_variable
from ..spanring import (
    END,
    ERR_BIT,
    EXTRA_HEAD,
    F_CPU,
    F_END,
    GEN_SHIFT,
    H_COUNTER,
    H_EXTRAS_DROPPED,
    H_EXTRAS_HEAD,
    H_EXTRAS_TAIL,
    H_NAMES_DROPPED,
    H_NAMES_HEAD,
    RECORD_WORDS,
    SEQ_MASK,
    WRAP,
)
from . import stacks

# Span ends that found their ring already unmapped (the link closed under a running span).
ends_unwritten = 0
_ids = itertools.count(1)
next_id: Callable[[], int] = _ids.__next__  # job ids (light and heavy)
now_ns: Callable[[], int] = time.monotonic_ns

MAX_ERROR = 1000  # characters of "Type: message"
MAX_TRACEBACK = 2048  # characters of the traceback kept in a span's attrs
_INSTRUMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "instruments.py")
_gens = itertools.count(1)
_pack_words = struct.Struct("=5q").pack_into  # a record's words after its seq

log = logging.getLogger("workerscope")


def ring_slots(records: int, span_cpu: bool) -> int:
    """Ring records for the ring_records setting: with span_cpu a span takes two (its end is
    a record of its own), so the ring holds as many spans either way."""
    return records * 2 if span_cpu else records


def _load_fast() -> Any:
    if process_variable("WORKERSCOPE_PURE_PYTHON") not in ("", "0"):
        return None
    try:
        from . import _fastspan
    except ImportError:
        return None
    if _fastspan.LAYOUT != spanring.VERSION or not hasattr(_fastspan, "set_span_cpu"):
        return None  # a build of other sources than these
    return _fastspan


# The C fast path, or None (not built, or WORKERSCOPE_PURE_PYTHON=1).
fast: Any = _load_fast()


class Writer:
    """This process's span ring: a file `<pid>.ring` in a directory its sidecar reads, or,
    with no directory, anonymous memory that only this process reads (light mode)."""

    def __init__(self, directory: str | None, capacity: int = spanring.DEFAULT_CAPACITY,
                 span_cpu: bool = False) -> None:
        pid = os.getpid()
        self.path = None if directory is None else os.path.join(directory, f"{pid}.ring")
        self.cap = spanring.capacity_for(capacity)
        parts = spanring.layout(self.cap)
        if self.path is None:
            # No file and no descriptor held (an mmap of a file keeps a copy of its fd open).
            self.mm = mmap.mmap(-1, parts["size"])
            spanring.init_header(self.mm, self.cap, pid)
        else:
            self.mm = _ring_file(self.path, parts["size"])
            spanring.init_header(self.mm, self.cap, pid)
            os.replace(f"{self.path}.new", self.path)  # the sidecar sees only whole rings
        self.q = memoryview(self.mm).cast("q")
        self.pid = pid
        self.gen = next(_gens)
        self.mask, self.half = self.cap - 1, self.cap // 2
        self.rec = spanring.HEADER_WORDS
        self.names_at, self.names_size = parts["names"], parts["names_size"]
        self.extras_at, self.extras_size = parts["extras"], parts["extras_size"]
        self.lock = threading.Lock()  # the slow paths: names and extras
        self.span_names: dict[Any, int] = {}
        self._next_name = 1
        # Thread names written (once per tid and name) and the room left to them.
        self._thread_names: dict[int, str] = {}
        self._thread_room = self.names_size // spanring.THREAD_SHARE
        self.seqs = itertools.count(1).__next__  # the pure-Python writer's seqs
        self.closed = False
        self.span_cpu = span_cpu

    @property
    def span_cpu(self) -> bool:
        """The span_cpu setting: each sync span's thread CPU read at its begin and end (the
        C path's flag follows it while this ring is active)."""
        return self._span_cpu

    @span_cpu.setter
    def span_cpu(self, on: bool) -> None:
        self._span_cpu = on
        # What the pure-Python wrapper needs on every call, in one attribute.
        self.hot = (self.q, self.mm, self.seqs, self.mask, self.half, self.gen, _pack_words,
                    spanring.F_CPU << 32 if on else 0)
        if fast is not None and _current is self:
            fast.set_span_cpu(on)

    # -- names and extras (slow paths, under the lock) ---------------------------------------
    def intern(self, name: Any, attrs: dict[str, Any] | None = None) -> int:
        """A new name id for `name` and its static attrs (0 if the names table is full)."""
        with self.lock:
            nid = self._next_name
            if self._append([spanring.NAME, nid, str(name), attrs or None]):
                self._next_name += 1
                return nid
            return 0

    def name_id(self, name: Any) -> int:
        """The id of a span() or mark() name, interned once per ring."""
        nid = self.span_names.get(name)
        if nid is None:
            nid = self.span_names[name] = self.intern(name)
        return nid

    def thread(self, tid: int, name: str) -> None:
        """Name a thread in the ring, once per tid and name, within the thread names' share
        of the names area (spanring.THREAD_SHARE): past it a name is counted, not written,
        so a process of thousands of threads leaves its span names their room."""
        with self.lock:
            if self._thread_names.get(tid) == name:
                return  # the C path and the pure-Python one each name a thread they meet
            # With the thread's ident (what faulthandler's dump calls it): a dump of stacks
            # names each thread from this (sidecar/stacks.py).
            used = self._append([spanring.THREAD, tid, name, threading.get_ident()],
                                self._thread_room)
            if used:
                self._thread_room -= used
                self._thread_names[tid] = name

    def _append(self, entry: list[Any], room: int | None = None) -> int:
        """Write a names entry (in at most `room` bytes); the bytes it took, 0 if none."""
        if self.closed:
            return 0
        try:
            body = spanring.encode(entry)
        except Exception:  # noqa: BLE001 - a name or attrs msgpack can't take: never the job's problem
            body = spanring.encode([entry[0], entry[1], repr(entry[2])[:200]])
        q, at = self.q, self.q[H_NAMES_HEAD]
        n = spanring.ENTRY_HEAD.size + len(body)
        need = (n + 7) & ~7
        if at + n > self.names_size or (room is not None and need > room):
            q[spanring.H_THREADS_DROPPED if entry[0] == spanring.THREAD else H_NAMES_DROPPED] += 1
            return 0
        base = self.names_at + at
        self.mm[base + spanring.ENTRY_HEAD.size: base + n] = body
        spanring.ENTRY_HEAD.pack_into(self.mm, base, len(body), 0)
        q[H_NAMES_HEAD] = at + need  # last: the reader reads up to here
        return need

    def extra(self, token: int, value: dict[str, Any]) -> None:
        """Variable-length data of the record `token`, read with it (dropped and counted if
        the extras area has no room until the sidecar catches up)."""
        if token >> GEN_SHIFT != self.gen or self.closed:
            return
        try:
            body = spanring.encode(value)
        except Exception:  # noqa: BLE001 - attributes msgpack can't take: never the job's problem
            # The same shape, as text: attrs stay a map (the reader takes nothing else there).
            body = spanring.encode({k: {"repr": repr(v)[:200]} if k == "attrs" else str(v)
                                    for k, v in value.items()})
        with self.lock:
            q = self.q
            n = EXTRA_HEAD.size + len(body)
            need = (n + 7) & ~7
            head, size = q[H_EXTRAS_HEAD], self.extras_size
            pos = head % size
            skip = size - pos if size - pos < need else 0
            if n > spanring.MAX_EXTRA or head + skip + need - q[H_EXTRAS_TAIL] > size:
                q[H_EXTRAS_DROPPED] += 1
                return
            if skip:
                if skip >= EXTRA_HEAD.size:
                    EXTRA_HEAD.pack_into(self.mm, self.extras_at + pos, WRAP, 0, 0)
                head, pos = head + skip, 0
            base = self.extras_at + pos
            self.mm[base + EXTRA_HEAD.size: base + n] = body
            EXTRA_HEAD.pack_into(self.mm, base, len(body), 0, token & SEQ_MASK)
            q[H_EXTRAS_HEAD] = head + need  # last

    def error(self, token: int, exc: BaseException | None) -> None:
        text, tb = describe(exc)
        self.extra(token, {"error": text, "traceback": tb} if tb else {"error": text})

    # -- the pure-Python writer --------------------------------------------------------------
    def begin(self, nid: int, flags: int, tid: int, depth: int, ctx: int) -> int:
        """Write a begun record; its token."""
        q = self.q
        seq = self.seqs()
        q[H_COUNTER] = seq
        b = self.rec + ((seq - 1) & self.mask) * RECORD_WORDS
        q[b + 1] = nid | flags << 32
        q[b + 2] = tid | depth << 32
        q[b + 3] = now_ns()
        q[b + 4] = 0
        q[b + 5] = ctx
        q[b] = seq
        return self.gen << GEN_SHIFT | seq

    def finish(self, seq: int, end: int, tid: int, cpu: int = -1) -> None:
        """Complete record `seq`: in place while it is ours and young, else an F_END record;
        always an F_END | F_CPU record with the thread CPU (ns) it used, where measured."""
        q = self.q
        b = self.rec + ((seq - 1) & self.mask) * RECORD_WORDS
        if cpu < 0 and q[b] == seq and q[H_COUNTER] - seq < self.half:
            q[b + END] = end
            return
        s2 = self.seqs()
        q[H_COUNTER] = s2
        e = self.rec + ((s2 - 1) & self.mask) * RECORD_WORDS
        q[e + 1] = (F_END | (F_CPU if cpu >= 0 else 0)) << 32
        q[e + 2] = tid
        q[e + 3] = seq
        q[e + 4] = end
        q[e + 5] = max(cpu, 0)
        q[e] = s2

    def close(self) -> None:
        """Unmap (the file stays for the sidecar, which removes it); the stacks handler
        installed for this ring's folder goes too."""
        with self.lock:
            self.closed = True
            self.q.release()
            self.mm.close()
        if self.path is not None:
            stacks.uninstall(os.path.dirname(self.path))


def _ring_file(path: str, size: int) -> mmap.mmap:
    """`path`.new, allocated whole and mapped."""
    tmp = f"{path}.new"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        # The whole file now: a full /dev/shm fails here (ENOSPC), not later, as a SIGBUS
        # in the middle of the job.
        os.posix_fallocate(fd, 0, size)
        return mmap.mmap(fd, size)
    except OSError:
        os.unlink(tmp)
        raise
    finally:
        os.close(fd)


def describe(exc: BaseException | None) -> tuple[str, str]:
    """("Type: message", a short traceback) of an exception, both bounded."""
    if exc is None:
        return "error", ""
    name = type(exc).__qualname__
    try:
        msg = str(exc)
    except Exception:  # noqa: BLE001 - a __str__ that raises must not hide the error
        msg = "<unprintable>"
    text = f"{name}: {msg}" if msg else name
    if len(text) > MAX_ERROR:
        text = text[:MAX_ERROR - 3] + "..."
    # Frame lines only, no source: no file reads on the error path. The instruments' own
    # wrappers are left out (the C path has none to show).
    lines = [f'  File "{f.f_code.co_filename}", line {lineno}, in {f.f_code.co_name}\n'
             for f, lineno in traceback.walk_tb(exc.__traceback__)
             if f.f_code.co_filename != _INSTRUMENTS]
    kept: list[str] = []
    size = 0
    for line in reversed(lines):  # the innermost frames matter most
        if size + len(line) > MAX_TRACEBACK - 80:
            kept.append(f"  ... {len(lines) - len(kept)} more frame(s)\n")
            break
        kept.append(line)
        size += len(line)
    tb = "Traceback (most recent call last):\n" + "".join(reversed(kept)) + text
    return text, tb[:MAX_TRACEBACK]


# -- the active ring -------------------------------------------------------------------------------
# The ring spans go to, or None when no monitor is active in this process: @timed checks this
# (or the C path its own flag) and does nothing else when it is None.
active: Writer | None = None
_current: Writer | None = None  # the ring the C path points at (active or not)
# The enclosing async span's token, in asyncio tasks (and threads that copy their context).
async_ctx: contextvars.ContextVar[int] = contextvars.ContextVar("workerscope_async_span")
async_open = 0  # async spans open in this process: sync spans read async_ctx only when > 0
_tl = threading.local()


def activate(writer: Writer) -> None:
    global active, _current
    if writer.path is not None and _current is not writer:
        # A sidecar reads this ring: it may ask for stacks too. The thread that begins
        # recording is named in the ring at once (a dump names its threads from there).
        stacks.install(os.path.dirname(writer.path))
        writer.thread(threading.get_native_id(), threading.current_thread().name)
    if fast is not None and _current is not writer:
        fast.set_ring(writer.mm, writer.gen, writer.rec * 8, writer.cap)
    _current = active = writer
    if fast is not None:
        fast.set_span_cpu(writer.span_cpu)
        fast.set_active(True)


def deactivate() -> None:
    global active
    active = None
    if fast is not None:
        fast.set_active(False)


# The jobs open in this process, in the order they began, with the ring each records into
# (None: a job that brings no ring of its own). Spans go to the ring of the latest one that
# has one, so a nested job with a ring of its own gives the outer job's back when it ends.
_jobs_lock = threading.Lock()
_open_jobs: list[tuple[int, Writer | None]] = []


def enter_job(job: int, writer: Writer | None) -> None:
    with _jobs_lock:
        _open_jobs.append((job, writer))
        if writer is not None:
            activate(writer)


def leave_job(job: int) -> None:
    with _jobs_lock:
        for i, (j, _) in enumerate(_open_jobs):
            if j == job:
                del _open_jobs[i]
                break
        latest = next((w for _, w in reversed(_open_jobs) if w is not None and not w.closed),
                      None)
        if latest is not None:
            activate(latest)
        elif not _open_jobs:
            deactivate()


def release(writer: Writer) -> None:
    """Stop writing to `writer` for good and unmap it."""
    global _current
    if active is writer:
        deactivate()
    if _current is writer:
        if fast is not None:
            fast.set_ring(None, 0, 0, 0)
        _current = None
    writer.close()


def thread_state(writer: Writer) -> list[int]:
    """[ring generation, tid, depth] of this thread (pure-Python writer), its name recorded
    in `writer` once."""
    try:
        st: list[int] = _tl.s
    except AttributeError:
        st = _tl.s = [0, threading.get_native_id(), 0]
    if st[0] != writer.gen:
        st[0] = writer.gen
        writer.thread(st[1], threading.current_thread().name)
    return st


def current_ctx(gen: int) -> int:
    """The seq of the async span enclosing this code in its task, in ring `gen` (or 0)."""
    token = async_ctx.get(0)
    return token & SEQ_MASK if token >> GEN_SHIFT == gen else 0


# -- records for async spans and marks (either writer) ---------------------------------------------
def begin(writer: Writer, nid: int, flags: int) -> int:
    """Begin an async-style record (F_ASYNC or F_MARK); its token, 0 if not recorded."""
    if fast is not None:
        token: int = fast.begin(nid, flags)
        return token
    st = thread_state(writer)
    ctx = current_ctx(writer.gen) if async_open else 0
    return writer.begin(nid, flags, st[1], st[2], ctx)


def finish(writer: Writer, token: int, error: bool) -> None:
    if fast is not None:
        fast.finish(token, error)
    elif token >> GEN_SHIFT == writer.gen and not writer.closed:
        end = now_ns() | (ERR_BIT if error else 0)
        writer.finish(token & SEQ_MASK, end, thread_state(writer)[1])


def opened_async(delta: int) -> None:
    global async_open
    async_open += delta
    if fast is not None:
        fast.async_open(delta)


# -- the C path's way back into Python --------------------------------------------------------------
def _c_intern(name: Any, attrs: dict[str, Any] | None) -> int:
    return _current.intern(name, attrs) if _current is not None else 0


def _c_thread(tid: int) -> None:
    if _current is not None:
        _current.thread(tid, threading.current_thread().name)


def _c_error(token: int, exc: BaseException | None) -> None:
    if _current is not None:
        _current.error(token, exc)


def _c_attrs(token: int, attrs: dict[str, Any]) -> None:
    if _current is not None:
        _current.extra(token, {"attrs": attrs})


def set_async_span(factory: Callable[[Any, dict[str, Any] | None], Any]) -> None:
    """What the C span() returns inside a running event loop (instruments' async span)."""
    if fast is not None:
        import asyncio

        fast.set_hooks(_c_intern, _c_thread, _c_error, _c_attrs, factory, async_ctx,
                       asyncio.events._get_running_loop)


# -- fork ------------------------------------------------------------------------------------------
def _after_fork_in_child() -> None:
    """A forked child must never write into its parent's ring. If the parent was recording,
    the child gets its own ring, `<child pid>.ring` in the same directory, which the sidecar
    finds as the child joins the tree."""
    global active, _current, _jobs_lock
    stacks.forget_after_fork()
    _tl.__dict__.clear()  # the forking thread has a new tid (its depth starts again at 0)
    _open_jobs.clear()  # a forked child runs none of its parent's jobs
    _jobs_lock = threading.Lock()
    was, parent = active, _current
    active = _current = None
    if fast is not None:
        fast.set_ring(None, 0, 0, 0)
    if parent is not None:
        parent.closed = True
        try:
            parent.q.release()
            parent.mm.close()
        except (BufferError, ValueError):
            # A view still held somewhere: the mapping goes when the child exits.
            log.debug("parent's span ring still mapped in a forked child")
    if was is not None and was.path is not None:  # an anonymous ring's reader is the parent
        try:
            activate(Writer(os.path.dirname(was.path), was.cap, was.span_cpu))
        except OSError:
            log.warning("workerscope: no span ring for forked child %d: its spans are not "
                        "recorded", os.getpid())


os.register_at_fork(after_in_child=_after_fork_in_child)


# -- `workerscope run`: recording with no code change ----------------------------------------------
RINGS_VARIABLE = "WORKERSCOPE_RINGS"


def attach_from_environment() -> None:
    """`workerscope run` names its sidecar's ring directory in WORKERSCOPE_RINGS: a Python
    process of the command then records its spans there from its first import of workerscope,
    and the sidecar, which reads the rings of its tree's processes, puts them in the run's job.
    Only a private directory of this user's is taken (0700, as run makes it)."""
    where = process_variable(RINGS_VARIABLE)
    if not where or active is not None:
        return
    try:
        st = os.stat(where)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return
        activate(Writer(where, span_cpu=_span_cpu_of_environment()))
    except OSError:
        return  # no ring: the command runs as it would without us


def _span_cpu_of_environment() -> bool:
    """WORKERSCOPE_SPAN_CPU of a `run` command's process (off if unset or bad: a bad setting
    never stops the command; the run itself said so)."""
    from ..config import resolve
    from ..errors import ConfigError

    try:
        return resolve().span_cpu
    except ConfigError:
        return False
