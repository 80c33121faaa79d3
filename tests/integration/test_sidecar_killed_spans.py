"""A sidecar killed (SIGKILL) loses what it had not read of the span ring: the records
written after its last drain. The worker's next sidecar counts them, and says so."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import tempfile
import threading
import time

import psutil
from helpers import python_script

from workerscope import Subscriber, protocol
from workerscope.sidecar.rings import _unread_in

KILLED_JOB = """
    import json, os, sys, time
    from workerscope import profiled, span

    def wait(path):
        while not os.path.exists(path):
            time.sleep(0.01)

    def say(path, text):
        with open(path + ".new", "w") as f:
            f.write(text)
        os.replace(path + ".new", path)

    def first(at):
        for _ in range(5):
            with span("before"):
                pass
        say(at + "ready1", "")
        wait(at + "go1")  # the sidecar is stopped meanwhile
        for _ in range(7):
            with span("after"):
                pass
        say(at + "ready2", "")
        wait(at + "go2")  # and killed

    def second():
        for _ in range(3):
            with span("second"):
                pass

    endpoint, at = sys.argv[1], sys.argv[2]
    profiled(first, mode="heavy", interval=0.05, endpoint=endpoint)(at)
    profiled(second, mode="heavy", interval=0.05, endpoint=endpoint)()
"""


def _wait(pred, proc, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not pred():
        assert proc.poll() is None, f"the worker exited early, waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _all_marked_read(pid):
    """Whether the sidecar has marked as read every record of the worker's ring (a sidecar
    after it then counts only what follows)."""
    paths = [path for where in ("/dev/shm", tempfile.gettempdir())
             for path in glob.glob(f"{where}/workerscope-{pid}-*/{pid}.ring")]
    return bool(paths) and all(_unread_in(path) == (0, 0) for path in paths)


def _gone(pid):
    """Dead, every thread of it: a zombie (the worker's child, not ours to reap) whose leader
    alone is left. Its leader turns zombie while its other threads still exit, with the pipe
    still open: a write then still succeeds."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2][1:2]
        return state in (b"Z", b"X") and len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return True


def test_spans_a_killed_sidecar_never_read_are_counted(clean_env, tmp_path):
    """A heavy job's sidecar is stopped once its 5 spans reached the driver, 7 spans more are
    recorded, then it is SIGKILLed; the job goes on, and the next job's new sidecar counts
    exactly those 7 records in spans_lost, with a note that a sidecar died without reading
    them. The 5 and the next job's 3 spans arrive."""
    at = str(tmp_path) + os.sep
    names: list[str] = []
    lock = threading.Lock()

    def on_frame(frame):
        if frame.kind == protocol.SPANS:
            with lock:
                names.extend(r[4] for r in frame.body.get("records", ()))

    def count(name):
        with lock:
            return names.count(name)

    with Subscriber(on_frame=on_frame) as sub:
        worker = subprocess.Popen([*python_script(KILLED_JOB), sub.endpoint, at])
        try:
            _wait(lambda: os.path.exists(at + "ready1"), worker, "the first spans")
            (sidecar,) = psutil.Process(worker.pid).children()
            _wait(lambda: count("before") == 5, worker, "the first spans at the driver")
            _wait(lambda: _all_marked_read(worker.pid), worker, "the mark of what was read")
            sidecar.send_signal(signal.SIGSTOP)
            open(at + "go1", "w").close()
            _wait(lambda: os.path.exists(at + "ready2"), worker, "the spans after the stop")
            sidecar.send_signal(signal.SIGKILL)
            _wait(lambda: _gone(sidecar.pid), worker, "the sidecar's death")
            open(at + "go2", "w").close()
            assert worker.wait(60) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        ok = sub.wait(jobs=1, byes=1, timeout=30)  # the second job (the first never ends there)
        t = sub.timeline()
    assert ok, (sub.states(), t.jobs, t.workers)
    spans = [s.name for s in t.spans if s.kind == "span"]
    assert spans.count("before") == 5 and spans.count("second") == 3
    assert spans.count("after") == 0  # never read by any sidecar
    (new,) = [w for w in t.workers.values() if w.sidecar_pid != sidecar.pid]
    assert new.spans_lost == 7
    said = [n for n in new.notes if f"sidecar (pid {sidecar.pid}) died" in n]
    assert said and "7 span record(s)" in said[0], new.notes
