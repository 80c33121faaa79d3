"""A span ring that something else wrote into: the reader never crashes, never turns garbage
into spans, and counts and says what it lost (records in spans_lost, names and extras in a
note), during a real job read by a real sidecar, and on rings scribbled at random."""

from __future__ import annotations

import contextlib
import mmap
import os
import random
import re
import signal
import tempfile
import threading
import time
import tracemalloc

import psutil
import pytest
from helpers import wait_until

from workerscope import monitor, span
from workerscope import spanring as sr
from workerscope.worker import recorder


def _sidecar():
    """This process's sidecar (the monitor's child running workerscope.sidecar)."""
    (proc,) = [p for p in psutil.Process().children()
               if "workerscope.sidecar" in " ".join(p.cmdline())]
    return proc


def _scribble(path, offset, data):
    """Write `data` into the ring file at `offset`, as another process would."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def _slots(writer, first, last):
    """(file offset, seq) of the record slots of seqs first..last."""
    return [(8 * (writer.rec + ((s - 1) & writer.mask) * sr.RECORD_WORDS), s)
            for s in range(first, last + 1)]


def test_a_scribbled_ring_loses_its_garbage_counted_and_said(clean_env):
    """With the sidecar stopped, 20 records are overwritten with random bytes, 20 keep their
    seq but get random words, a new name's entry and 5 spans' attrs are overwritten: the
    timeline has none of the 40 (spans_lost is 40), the 10 spans of the damaged name under a
    'damaged' name, the 5 without the lost attrs, every other span whole and sane, the spans
    recorded after the damage named, and a note for each kind of damage (no 'ring full')."""
    rnd = random.Random(7)
    tid = threading.get_native_id()
    with monitor(interval=0.05) as m:
        writer = recorder.active
        q = writer.q
        for _ in range(10):
            with span("a"):
                pass
        for _ in range(20):  # interned before the stop: their names are readable
            with span("b1"):
                pass
            with span("b2"):
                pass
        side = _sidecar()
        side.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: side.status() == psutil.STATUS_STOPPED, what="the sidecar to stop",
                       timeout=30, step=0.005)
            c0 = q[sr.H_COUNTER]
            for _ in range(20):
                with span("b1"):
                    pass
            c1 = q[sr.H_COUNTER]
            for _ in range(20):
                with span("b2"):
                    pass
            c2 = q[sr.H_COUNTER]
            names0 = q[sr.H_NAMES_HEAD]
            for _ in range(10):
                with span("b3"):  # a new name: its entry is overwritten below
                    pass
            names1 = q[sr.H_NAMES_HEAD]
            extras0 = q[sr.H_EXTRAS_HEAD]
            for i in range(5):
                with span("b4", n=i):
                    pass
            extras1 = q[sr.H_EXTRAS_HEAD]
            for at, _ in _slots(writer, c0 + 1, c1):
                _scribble(writer.path, at, rnd.randbytes(sr.RECORD_BYTES))
            for at, seq in _slots(writer, c1 + 1, c2):
                words = [seq, *(rnd.getrandbits(64) - (1 << 63) for _ in range(5))]
                _scribble(writer.path, at, b"".join(w.to_bytes(8, "little", signed=True)
                                                    for w in words))
            _scribble(writer.path, writer.names_at + names0, rnd.randbytes(names1 - names0))
            _scribble(writer.path, writer.extras_at + extras0, rnd.randbytes(extras1 - extras0))
        finally:
            side.send_signal(signal.SIGCONT)
        for _ in range(10):
            with span("c"):  # a name after the damaged one: still read
                pass
    t = m.timeline
    (w,) = t.workers.values()
    (job,) = t.jobs
    names = [s.name for s in t.spans if s.kind != "job"]
    assert names.count("a") == 10 and names.count("c") == 10
    assert names.count("b1") == 20 and names.count("b2") == 20, "only the 20 before the stop"
    assert w.spans_lost == 40
    b3 = [s for s in t.spans if "damaged" in s.name]
    assert len(b3) == 10 and all("names" in s.name for s in b3)
    b4 = [s for s in t.spans if s.name == "b4"]
    assert len(b4) == 5 and not any("n" in (s.attrs or {}) for s in b4)
    assert set(names) <= {"a", "b1", "b2", "b4", "c", b3[0].name}
    for s in t.spans:
        assert job.start_ns <= s.start_ns <= s.end_ns <= job.end_ns, s
        assert s.kind == "job" or s.tid == tid, s
    notes = " | ".join(w.notes)
    assert "span ring full" not in notes
    damaged = [n for n in w.notes if f"span ring of pid {os.getpid()}" in n]
    assert len(damaged) == 3, w.notes
    assert any("records" in n and "spans_lost" in n for n in damaged)
    assert any("names" in n for n in damaged) and any("attributes" in n for n in damaged)


# -- the reader alone, on rings scribbled at random --------------------------------------------
def _ring(directory):
    """A ring file with spans of three names and their threads, a reader of it, and the
    (known names, the writer)."""
    w = recorder.Writer(directory, 256)
    nids = [w.intern(n) for n in ("x", "y", "z")]
    w.thread(1234, "T")
    for i in range(150):
        seq = w.begin(nids[i % 3], 0, 1234, 1, 0) & sr.SEQ_MASK
        if i % 5:
            w.finish(seq, recorder.now_ns(), 1234)
        if i % 7 == 0:
            w.extra(w.gen << sr.GEN_SHIFT | seq, {"attrs": {"i": i}})
    fd = os.open(w.path, os.O_RDWR)
    try:
        mm = mmap.mmap(fd, 0)
    finally:
        os.close(fd)
    return w, mm


def test_random_scribbles_never_crash_the_reader_nor_make_absurd_spans(clean_env):
    """300 rings, each written into at random places of its records, names and extras with
    random bytes (or zeros, or ones): reading them never raises, and every span it gives has a
    known or placeholder name, the writer's tid, a start and end within its process's life."""
    rnd = random.Random(11)
    parts = sr.layout(256)
    areas = [(parts["records"], parts["names"]), (parts["names"], parts["extras"]),
             (parts["extras"], parts["size"])]
    with tempfile.TemporaryDirectory() as d:
        # No start before this process's (monotonic, with a second to spare)
        born = time.monotonic_ns() - int((time.time() - psutil.Process().create_time() + 1) * 1e9)
        for round_ in range(300):
            w, mm = _ring(d)
            reader = sr.RingReader(mm, os.getpid())
            jobs = sr.Jobs()
            jobs.start(1, os.getpid(), None, 0)
            try:
                if round_ % 2:
                    reader.read(jobs, now_ns=time.monotonic_ns())  # some read before the damage
                for _ in range(rnd.randrange(1, 6)):
                    lo, hi = areas[rnd.randrange(3)]
                    at = rnd.randrange(lo, hi)
                    n = min(rnd.randrange(1, 400), hi - at)
                    fill = rnd.choice([rnd.randbytes(n), bytes(n), b"\xff" * n])
                    mm[at:at + n] = fill
                got = reader.read(jobs, now_ns=time.monotonic_ns())
                got += reader.read(jobs, final=True, now_ns=time.monotonic_ns())
                now = time.monotonic_ns()
                for r in got:
                    assert r.name in ("x", "y", "z") or r.name.startswith("<name not recorded"), r
                    assert r.tid == 1234, r
                    assert born <= r.start_ns <= r.end_ns <= now, r
                    assert r.attrs is None or set(r.attrs) <= {"i"}, r
                assert len(got) + reader.lost <= 150
            finally:
                reader.close()
                mm.close()
                recorder.release(w)
                os.unlink(w.path)


def test_an_overwritten_open_span_slot_is_not_an_end(clean_env):
    """A span open when the reader saw it, whose slot is then overwritten with its seq kept
    and an absurd end, is dropped and counted, not ended at that time."""
    with _reading(256) as (w, mm, reader, jobs):
        seq = w.begin(w.intern("open"), 0, 1234, 1, 0) & sr.SEQ_MASK
        assert reader.read(jobs, now_ns=time.monotonic_ns()) == []
        at = 8 * (w.rec + (seq - 1) * sr.RECORD_WORDS)
        mm[at + 8 * sr.END: at + 8 * sr.END + 8] = (1 << 61).to_bytes(8, "little")
        assert reader.read(jobs, now_ns=time.monotonic_ns()) == []
        assert reader.read(jobs, final=True, now_ns=time.monotonic_ns()) == []
        assert reader.lost == 1


@contextlib.contextmanager
def _reading(capacity):
    """(a writer of a new ring file of `capacity` records, the file mapped, a reader of it, a
    jobs table with one job of this process), all released after."""
    with tempfile.TemporaryDirectory() as d:
        w = recorder.Writer(d, capacity)
        fd = os.open(w.path, os.O_RDWR)
        mm = mmap.mmap(fd, 0)
        os.close(fd)
        reader = sr.RingReader(mm, os.getpid())
        jobs = sr.Jobs()
        jobs.start(1, os.getpid(), None, 0)
        try:
            yield w, mm, reader, jobs
        finally:
            reader.close()
            mm.close()
            recorder.release(w)


def _deep_records(w, n, depth, tid0):
    """n ended spans of one name, each on a thread of its own (tids from tid0) at `depth`:
    what no writer writes in one burst, a ring written into by something else."""
    nid = w.intern("deep")
    for i in range(n):
        seq = w.begin(nid, 0, tid0 + i, depth, 0) & sr.SEQ_MASK
        w.finish(seq, recorder.now_ns(), tid0 + i)


@pytest.fixture(params=["c", "python"])
def each_scan(request, monkeypatch):
    """The reader's passes in C (skipped where not built), then in Python."""
    if request.param == "python":
        monkeypatch.setattr(sr, "SCAN", sr.PythonScan)
    elif sr.SCAN is sr.PythonScan:
        pytest.skip("the C passes are not built")


def test_records_deep_on_new_threads_cannot_grow_the_reader_past_its_stack_bound(
        clean_env, each_scan):
    """300 records, each the deepest a thread can be (MAX_DEPTH) on a thread of its own: the
    reader keeps its threads' stacks within STACK_BYTES (each would pad to 65,536 levels, 0.5
    MiB; 300 of them held 161 MiB), every span still comes out, named, and the records it could not
    stack are counted. The stacks of threads with nothing open are let go by the next read."""
    with _reading(1024) as (w, _mm, reader, jobs):
        _deep_records(w, 300, sr.MAX_DEPTH, 5000)
        tracemalloc.start()
        got = reader.read(jobs, now_ns=time.monotonic_ns())
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < sr.STACK_BYTES + (4 << 20), f"{peak / 2**20:.0f} MiB"
        assert [r.name for r in got] == ["deep"] * 300
        assert {r.tid for r in got} == set(range(5000, 5300))
        # As many as the room held were stacked; the rest counted.
        stacked = sr.STACK_ROOM // (sr.MAX_DEPTH + sr.STACK_NEW_LEVELS)
        assert reader.stacks_cut == 300 - stacked
        # Nothing is open: at the next read's end (what ended in this one may have children
        # not read yet), it lets go of every stack.
        assert reader.read(jobs, now_ns=time.monotonic_ns()) == []
        assert reader._stacks == {} and reader._stack_room == sr.STACK_ROOM


def test_a_prune_keeps_the_parents_of_spans_still_open(clean_env, each_scan):
    """With the stacks past half their room (records deep on threads of their own), the
    reader lets go of what no open span needs, and a span begun afterwards inside one still
    open, on a thread that nested 3 deep, still has that open span as its parent."""
    with _reading(1024) as (w, _mm, reader, jobs):
        outer, mid = w.intern("outer"), w.intern("mid")
        o = w.begin(outer, 0, 77, 1, 0) & sr.SEQ_MASK
        m = w.begin(mid, 0, 77, 2, 0) & sr.SEQ_MASK
        w.finish(m, recorder.now_ns(), 77)  # mid ended: outer stays open
        _deep_records(w, 4, sr.MAX_DEPTH, 6000)  # 4 x 64k levels: past half the room
        got = reader.read(jobs, now_ns=time.monotonic_ns())
        assert sorted(r.name for r in got) == ["deep"] * 4 + ["mid"]
        assert reader.read(jobs, now_ns=time.monotonic_ns()) == []  # the prune is at its end
        assert list(reader._stacks) == [77]  # the others held nothing open
        assert reader._stacks[77] == [None, reader.id_base | o]  # mid's level let go
        inner = w.begin(w.intern("inner"), 0, 77, 2, 0) & sr.SEQ_MASK
        w.finish(inner, recorder.now_ns(), 77)
        w.finish(o, recorder.now_ns(), 77)
        got = reader.read(jobs, final=True, now_ns=time.monotonic_ns())
        by = {r.name: r for r in got}
        assert by["inner"].parent == by["outer"].id == reader.id_base | o
        assert reader.stacks_cut == 0


def test_a_sidecar_says_what_it_could_not_stack(clean_env):
    """A real sidecar reading 300 records each MAX_DEPTH deep on a thread of its own keeps all
    300 spans, and the timeline says how many it could not stack and what that costs."""
    with monitor(interval=0.05) as m:
        _deep_records(recorder.active, 300, sr.MAX_DEPTH, 7000)
    t = m.timeline
    (w,) = t.workers.values()
    deep = [s for s in t.spans if s.name == "deep"]
    assert len(deep) == 300 and {s.tid for s in deep} == set(range(7000, 7300))
    # One drain of all 300 stacks 6 and counts the rest; drains that split them stack 6 each.
    most = 300 - sr.STACK_ROOM // (sr.MAX_DEPTH + sr.STACK_NEW_LEVELS)
    (note,) = [n for n in w.notes if "stacks" in n]
    said = re.search(rf"pid {os.getpid()}: (\d+) span\(s\) came with no room", note)
    assert said and 0 < int(said[1]) <= most, note
    assert "16 MiB" in note and "under the job" in note
    assert w.spans_lost == 0


def test_a_prune_keeps_a_parent_whose_child_is_not_read_yet(clean_env, each_scan):
    """A read stopped short of the counter (the sidecar's `upto`) sees a parent that ended
    after a child it has not read yet; a prune at that read's end must keep the parent's
    level, or the child, read next, shows under the job."""
    with _reading(1024) as (w, _mm, reader, jobs):
        _deep_records(w, 4, sr.MAX_DEPTH, 6000)  # past half the room: a prune at this read's end
        p = w.begin(w.intern("parent"), 0, 77, 1, 0) & sr.SEQ_MASK
        c = w.begin(w.intern("child"), 0, 77, 2, 0) & sr.SEQ_MASK
        w.finish(c, recorder.now_ns(), 77)
        w.finish(p, recorder.now_ns(), 77)
        got = reader.read(jobs, upto=p, now_ns=time.monotonic_ns())
        assert "child" not in {r.name for r in got}
        got += reader.read(jobs, now_ns=time.monotonic_ns())
        by = {r.name: r for r in got}
        assert by["child"].parent == by["parent"].id
        # Once all is read, the next prune lets go of them.
        _deep_records(w, 4, sr.MAX_DEPTH, 8000)
        reader.read(jobs, now_ns=time.monotonic_ns())
        reader.read(jobs, now_ns=time.monotonic_ns())
        assert reader._stacks == {}


def test_records_on_new_threads_cannot_grow_the_stacks_past_their_bound_within_a_read(
        clean_env, each_scan, monkeypatch):
    """262,144 records in one read, each on a thread of its own: the stacks kept for them
    never pass STACK_ROOM's worth of new threads' stacks (each read before held all 262,144,
    ~3 times STACK_BYTES), and every span still comes out."""
    held = []

    def prune(self, ended, real=sr.RingReader._prune_stacks):
        held.append(len(self._stacks))
        real(self, ended)

    monkeypatch.setattr(sr.RingReader, "_prune_stacks", prune)
    n = 1 << 18
    with _reading(n) as (w, _mm, reader, jobs):
        nid = w.intern("x")
        for i in range(n):
            seq = w.begin(nid, 0, 1 + i, 0, 0) & sr.SEQ_MASK
            w.finish(seq, recorder.now_ns(), 1 + i)
        got = reader.read(jobs, now_ns=time.monotonic_ns())
        assert len(got) == n
        assert held and held[0] <= sr.STACK_ROOM // sr.STACK_NEW_LEVELS, held
