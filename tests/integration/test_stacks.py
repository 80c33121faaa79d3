"""What a worker is doing right now (issue 22): every thread's Python stack on demand, from the
worker's own faulthandler, signalled by its sidecar: no ptrace, no root, and a thread stuck in
C code holding the GIL shows its stack too. Real processes, a real Subscriber."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import python_script

from workerscope import Subscriber, load

STUCK = """
import re, sys, threading, time
from workerscope import monitor

PATTERN = r"(a+)+$"
re.compile(PATTERN)  # in re's cache: re.match goes straight into C

def in_c_with_the_gil():
    re.match(PATTERN, "a" * 40 + "b")  # catastrophic backtracking: minutes in C

def asleep():
    time.sleep(600)

def deep(n):
    if n == 0:
        time.sleep(600)
    deep(n - 1)

with monitor(interval=0.1, endpoint={endpoint!r}, name="stuck"):
    for target, args in ((asleep, ()), (deep, (50,))):
        threading.Thread(target=target, args=args, daemon=True).start()
    print("ready", flush=True)
    in_c_with_the_gil()
"""


def _functions(dump: dict) -> set[str]:
    return {t["frames"][0]["function"] for p in dump["processes"] for t in p.get("threads", ())
            if t["frames"]}


OTHER_UID = 54_321  # an unprivileged user the test runs the worker as (from root)


def _usable_by_others(path: str) -> bool:
    """Whether another user may read (and run) this file or folder: every folder above it
    searchable by others, and it readable by them."""
    real = os.path.realpath(path)
    folders = [real[:i] or "/" for i in range(len(real)) if real[i] == "/"]
    return (all(os.stat(p).st_mode & 0o001 for p in folders)
            and bool(os.stat(real).st_mode & 0o004))


def _interpreter_for_others() -> tuple[str, str] | None:
    """(a Python of this version another user can run, the PYTHONPATH that gives it
    workerscope and its dependencies from here), or None. This interpreter where it is
    usable; else the system's of the same version (a pyenv or conda Python often lives in
    a private home)."""
    import msgpack
    import psutil
    import zmq

    import workerscope

    here = [os.path.dirname(os.path.dirname(m.__file__)) for m in (workerscope, zmq, psutil,
                                                                   msgpack)]
    if not all(_usable_by_others(p) for p in here):
        return None
    path = os.pathsep.join(dict.fromkeys(here))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if os.path.exists(candidate) and _usable_by_others(candidate):
            return candidate, path
    return None


def _as_unprivileged() -> None:
    os.setgid(OTHER_UID)
    os.setuid(OTHER_UID)


@pytest.mark.parametrize("user", ["this", "unprivileged"])
def test_stacks_of_a_worker_stuck_in_c_with_the_gil(clean_env, user, tmp_path):
    """Three threads: one in C holding the GIL, one asleep, one 50 calls deep. As this user,
    and as an unprivileged one (no root, no ptrace rights: the sidecar is the worker's child)."""
    argv = python_script(STUCK.format(endpoint="{endpoint}"))
    env = None
    if user == "unprivileged":
        if os.geteuid() != 0:
            pytest.skip("needs root to run the worker as another user (setuid)")
        found = _interpreter_for_others()
        if found is None:
            pytest.skip("no Python of this version that another user may run, with "
                        "workerscope and its dependencies where that user can read them")
        interpreter, path = found
        argv[0] = interpreter
        tmp_path.chmod(0o777)  # a home and a temporary folder of its own
        env = {**os.environ, "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
               "PYTHONPATH": path}
    with Subscriber() as sub:
        argv[-1] = argv[-1].replace("{endpoint}", sub.endpoint)
        worker = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env,
                                  preexec_fn=_as_unprivileged if user != "this" else None)
        try:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
            assert sub.wait(started=1, timeout=30)
            (wid,) = sub.received
            # "ready" comes a moment before the threads are where they park: ask until they
            # are, each answer within 1 s of its request on an idle machine (5 s allowed
            # here for a loaded one; the benchmark measures it).
            deadline = time.monotonic() + 30
            while True:
                asked = time.monotonic()
                dump = sub.stacks(wid, timeout=10)
                took = time.monotonic() - asked
                assert dump is not None and "error" not in dump, dump
                assert took < 5, took
                deep = [t for p in dump["processes"] for t in p.get("threads", ())
                        if t["frames"] and t["frames"][0]["function"] == "deep"]
                if ({"match", "asleep", "deep"} <= _functions(dump) and deep
                        and len(deep[0]["frames"]) >= 40):
                    break
                assert time.monotonic() < deadline, dump
            t = sub.timeline()
        finally:
            worker.kill()
            worker.wait()
            if worker.stdout is not None:
                worker.stdout.close()
    marks = [m for m in t.marks if m.name == "stacks"]
    assert marks and marks[-1].attrs is not None
    assert {"match", "asleep", "deep"} <= _functions(marks[-1].attrs)
    assert marks[-1].attrs["request"] == dump["request"]


CRASH = """
import ctypes
from workerscope import monitor

def crashes_here():
    ctypes.string_at(0)  # SIGSEGV

with monitor(interval=0.1, endpoint={endpoint!r}, name="crash"):
    crashes_here()
"""


def test_a_segfault_leaves_its_python_stack_in_the_timeline(clean_env):
    with Subscriber() as sub:
        r = subprocess.run(python_script(CRASH.format(endpoint=sub.endpoint)),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == -11, (r.returncode, r.stderr)
        assert sub.wait(jobs=1, byes=1, timeout=30)
        t = sub.timeline()
    (job,) = t.jobs
    assert job.status == "killed" and "SIGSEGV" in (job.error or ""), job
    (mark,) = [m for m in t.marks if m.name == "stacks"]
    assert mark.job == job.id and mark.attrs is not None and mark.attrs["reason"] == "crash"
    (proc,) = mark.attrs["processes"]
    assert "Segmentation fault" in proc["error"]
    frames = [f["function"] for th in proc["threads"] for f in th["frames"]]
    assert "crashes_here" in frames, proc


STRAGGLER = """
import time
from workerscope import profiled

def slow_step():
    time.sleep(3)

def job(i):
    if i == 3:
        slow_step()
    else:
        time.sleep(0.1)

run = profiled(job, mode="heavy", interval=0.1, endpoint={endpoint!r})
for i in range(4):
    run(i)
"""


def test_a_straggler_gets_its_stacks_taken_unasked(clean_env):
    with Subscriber() as sub:
        r = subprocess.run(python_script(STRAGGLER.format(endpoint=sub.endpoint)),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert sub.wait(jobs=4, byes=1, timeout=30)
        t = sub.timeline()
    slow = max(t.jobs, key=lambda j: (j.end_ns or 0) - j.start_ns)
    marks = [m for m in t.marks if m.name == "stacks"]
    assert len(marks) == 1, marks
    (mark,) = marks
    assert mark.job == slow.id and mark.attrs is not None
    assert mark.attrs["reason"].startswith("straggler"), mark.attrs["reason"]
    assert slow.start_ns < mark.t_ns < (slow.end_ns or 0)
    assert "slow_step" in _functions(mark.attrs) | {
        f["function"] for p in mark.attrs["processes"] for th in p.get("threads", ())
        for f in th["frames"]}


OWN_HANDLER = """
import os, signal, sys, time
from workerscope import monitor

got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append("usr1"))
signal.signal(signal.SIGUSR2, lambda *a: got.append("usr2"))

def waiting():
    while len(got) < 2:
        time.sleep(0.01)

with monitor(interval=0.1, endpoint={endpoint!r}, name="own"):
    print("ready", flush=True)
    waiting()
print(",".join(got), flush=True)
"""


def test_the_job_s_own_signal_handlers_still_run(clean_env):
    """Stacks asked for with SIGUSR2, which the job handles itself: faulthandler dumps, then
    chains to the job's handler; the job's SIGUSR1 handler is left alone."""
    with Subscriber() as sub:
        worker = subprocess.Popen(python_script(OWN_HANDLER.format(endpoint=sub.endpoint)),
                                  stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "WORKERSCOPE_STACKS_SIGNAL": "SIGUSR2"})
        try:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
            assert sub.wait(started=1, timeout=30)
            (wid,) = sub.received
            dump = sub.stacks(wid, timeout=10)
            assert dump is not None and "waiting" in _functions(dump), dump
            os.kill(worker.pid, signal.SIGUSR1)
            out, _ = worker.communicate(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    assert worker.returncode == 0
    assert out.strip() == "usr2,usr1"


def _run(*args: str, **kw) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "workerscope", "run", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


CRASHES_HERE = """
import ctypes
from workerscope import timed  # under `run`, a process records from this import on

@timed
def crashes_here():
    ctypes.string_at(0)  # SIGSEGV

crashes_here()
"""


def _crash_frames(t) -> list[str]:
    (mark,) = [m for m in t.marks if m.name == "stacks"]
    assert mark.attrs is not None and mark.attrs["reason"] == "crash", mark.attrs
    return [f["function"] for p in mark.attrs["processes"] for th in p["threads"]
            for f in th["frames"]]


def test_run_of_a_command_that_segfaults_reports_its_python_stack(clean_env, tmp_path):
    """`workerscope run` of a Python command that dies of SIGSEGV: its job is killed by it,
    and the report (.wsc and .html) holds the Python stack of the crash."""
    out = tmp_path / "t.wsc"
    proc = _run("--interval", "0.1", "-o", str(out), "--", sys.executable, "-c", CRASHES_HERE)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGSEGV, err
    t = load(str(out))
    (job,) = t.jobs
    assert job.status == "error" and "killed by SIGSEGV" in (job.error or ""), job
    assert "crashes_here" in _crash_frames(t)
    html = tmp_path / "t.html"
    r = subprocess.run([sys.executable, "-m", "workerscope", "report", str(out), "--html",
                        str(html)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "crashes_here" in html.read_text()


def test_a_crash_in_the_tree_is_in_the_partial_record_after_kill_9_of_run(clean_env, tmp_path):
    """A process of the command's tree dies of SIGSEGV while the command goes on: its stack
    reaches the record at once, so a kill -9 of `run` leaves it in the partial record."""
    out = tmp_path / "t.wsc"
    partial = tmp_path / "t.partial.wsc"
    started = tmp_path / "started"
    parent = (f"import pathlib, subprocess, sys, time\n"
              f"subprocess.run([sys.executable, '-c', {CRASHES_HERE!r}])\n"
              f"pathlib.Path({str(started)!r}).touch()\n"
              f"time.sleep(120)\n")
    proc = _run("--interval", "0.05", "-o", str(out), "--", sys.executable, "-c", parent)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "the crash's stacks never reached the record"
            assert proc.poll() is None, proc.communicate()
            if started.exists() and partial.exists() and any(
                    m.name == "stacks" for m in load(str(partial)).marks):
                break
            time.sleep(0.05)
    finally:
        proc.kill()
        subprocess.run(["pkill", "-9", "-f", str(started)], check=False)
        proc.communicate(timeout=60)
    t = load(str(partial))
    assert "crashes_here" in _crash_frames(t)


PARKED_IN_A_SPAN = """
import sys
from workerscope import monitor, span

def parked_here():
    sys.stdin.readline()

with monitor(interval=0.1, endpoint={endpoint!r}, name="parked"):
    with span("waiting for input"):
        print("ready", flush=True)
        parked_here()
"""


def test_the_s_key_of_listen_live_shows_the_running_workers_stacks(clean_env):
    """`listen --live` on a terminal (a real pty): pressing s shows what each running worker
    is doing, its threads named with the span they are in; the terminal's mode is restored
    when listen ends."""
    import pty
    import select
    import termios

    primary, secondary = pty.openpty()
    before = termios.tcgetattr(secondary)
    listen = subprocess.Popen([sys.executable, "-m", "workerscope", "listen", "--live"],
                              stdin=secondary, stdout=secondary, stderr=subprocess.PIPE)
    screen = b""

    def read_until(needle: bytes, timeout: float = 30) -> None:
        nonlocal screen
        deadline = time.monotonic() + timeout
        while needle not in screen:
            left = deadline - time.monotonic()
            assert left > 0, screen[-2000:].decode(errors="replace")
            if select.select([primary], [], [], left)[0]:
                screen += os.read(primary, 65536)

    worker = None
    try:
        read_until(b"listening on ")
        read_until(b"\n", 10)
        line = screen[screen.index(b"listening on "):].split(b"\n")[0]
        endpoint = line.split()[-1].decode().strip()
        worker = subprocess.Popen(python_script(PARKED_IN_A_SPAN.format(endpoint=endpoint)),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        read_until(b"running", 30)  # the worker shows as running in the view
        read_until(b"press s", 10)
        # Pressed again until the answer names it: on a loaded machine the driver's states
        # may not say "running" yet at the first press.
        deadline = time.monotonic() + 60
        while b"parked_here" not in screen:
            assert time.monotonic() < deadline, screen[-2000:].decode(errors="replace")
            screen = b""
            os.write(primary, b"s")
            try:
                read_until(b"parked_here", 5)
            except AssertionError:
                continue
        assert b"MainThread" in screen and b"in span waiting for input" in screen, screen
    finally:
        if worker is not None:
            worker.kill()
            worker.wait()
            if worker.stdout is not None:
                worker.stdout.close()
        listen.send_signal(signal.SIGINT)
        listen.wait(timeout=60)
        if listen.stderr is not None:
            listen.stderr.close()
        restored = termios.tcgetattr(secondary)
        os.close(primary)
        os.close(secondary)
    assert restored == before  # cbreak mode undone
