"""A span ring file truncated while mapped (by another process): the sidecar, which would die
of SIGBUS touching its pages, checks the file's size before each read, stops reading it, and
says so; the job's timeline still arrives."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import psutil
from helpers import python_script

from workerscope import Subscriber, protocol, spanring
from workerscope.sidecar.rings import Rings
from workerscope.worker import recorder

TRUNCATED_JOB = """
    import os, sys, time
    from workerscope import profiled, span
    from workerscope.worker import recorder

    def job(ready, go):
        for _ in range(10):
            with span("step"):
                pass
        with open(ready + ".new", "w") as f:
            f.write(recorder.active.path)
        os.replace(ready + ".new", ready)
        while not os.path.exists(go):  # the ring is truncated meanwhile: no span touches it
            time.sleep(0.01)

    profiled(job, mode="heavy", interval=0.05, endpoint=sys.argv[1])(sys.argv[2], sys.argv[3])
"""


def _wait_file(path, proc, timeout=60):
    """Wait until `path` exists (or the process `proc` has exited)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None, "the worker exited early"
        assert time.monotonic() < deadline, f"timed out waiting for {path}"
        time.sleep(0.01)


def test_a_truncated_ring_does_not_kill_the_sidecar(clean_env, tmp_path):
    """A heavy job's ring file is truncated to 0 bytes mid-job, once its 10 spans reached the
    driver: its sidecar stays alive, says the ring was truncated (before the job ends), and
    the job's frames still arrive, the job ok with its 10 spans."""
    ready, go = tmp_path / "ready", tmp_path / "go"
    said, steps = threading.Event(), []

    def on_frame(frame):
        if frame.kind == protocol.SPANS:
            steps.extend(r for r in frame.body.get("records", ()) if r[4] == "step")
            if any("truncated" in n for n in frame.body.get("notes", ())):
                said.set()

    with Subscriber(on_frame=on_frame) as sub:
        worker = subprocess.Popen([*python_script(TRUNCATED_JOB), sub.endpoint, str(ready), str(go)])
        try:
            _wait_file(ready, worker)
            (sidecar,) = psutil.Process(worker.pid).children()
            deadline = time.monotonic() + 30
            while len(steps) < 10:
                assert time.monotonic() < deadline, "the spans never reached the driver"
                time.sleep(0.01)
            os.truncate(ready.read_text(), 0)
            assert said.wait(30), "the sidecar never said the ring was truncated"
            assert sidecar.is_running() and sidecar.status() != psutil.STATUS_ZOMBIE
            go.touch()
            assert worker.wait(60) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        assert sub.wait(jobs=1, byes=1, timeout=30)
        t = sub.timeline()
    (job,) = t.jobs
    assert job.status == "ok"
    (w,) = t.workers.values()
    (note,) = [n for n in w.notes if "truncated" in n]
    assert f"pid {worker.pid}" in note and "to 0 bytes" in note
    assert not [n for n in w.notes if "span ring full" in n]
    assert [s.name for s in t.spans].count("step") == 10 and w.spans_lost == 0


def _write(writer, nid, n, close=True):
    """n spans into `writer` (pure-Python writer); the seq of the last."""
    for _ in range(n):
        seq = writer.begin(nid, 0, 4321, 1, 0) & spanring.SEQ_MASK
        if close:
            writer.finish(seq, recorder.now_ns(), 4321)
    return seq


def test_the_sidecar_s_rings_count_what_a_truncation_lost(clean_env, tmp_path):
    """The sidecar's Rings over a real ring file: 5 spans and an open one read, 7 more not,
    then the file truncated to one page: the drain touches nothing past it, ends the open
    span cut short, counts the 7 unread as lost, says so once and forgets the ring; truncated
    to 0 bytes (its header gone), it counts up to the counter it saw last."""
    pid = os.getpid()
    for size, said in ((4096, "and 7 record(s)"), (0, "at least 7 record(s)")):
        directory = tmp_path / str(size)
        directory.mkdir()
        writer = recorder.Writer(str(directory), 256)
        rings = Rings(str(directory), pid)
        rings.jobs.start(1, pid, None, 0)
        try:
            nid = writer.intern("step")
            _write(writer, nid, 5)
            _write(writer, nid, 1, close=False)
            assert len([r for b in rings.drain(None, False, recorder.now_ns()) for r in b.records]) == 5
            _write(writer, nid, 7)
            if size == 0:
                rings.scan()  # the counter it saw last, before the header went
            os.truncate(writer.path, size)
            cut = recorder.now_ns()
            records = [r for b in rings.drain(rings.scan(), False, cut) for r in b.records]
            assert [(r.name, r.cut_short, r.end_ns) for r in records] == [("step", True, cut)]
            assert rings.lost == 7
            (note,) = [n for n in rings.notes() if "truncated" in n]
            assert f"truncated to {size} bytes" in note and said in note
            assert not rings.rings and not rings.notes(), "said once, and read no more"
        finally:
            writer.closed = True  # its pages past the end are gone: never touched again
            writer.q.release()
            writer.mm.close()
            rings.close()
