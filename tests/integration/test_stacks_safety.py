"""Stacks never hurt the job they look at: no process is signalled without its handler, a
handler from C is never replaced, the dump files do not grow, the memory trigger fires once a
crossing, a dump too big for a frame still arrives, a crash between jobs is still told, and
no worker can answer for another. Real processes, a real Subscriber."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

import pytest
from helpers import python_script

from workerscope import Subscriber, protocol

PARKED = """
import os, sys, time
from workerscope import monitor

with monitor(interval=0.1, endpoint={endpoint!r}, name="parked"):
{body}
    print("ready", flush=True)
    sys.stdin.readline()
"""


def _start(endpoint: str, body: str, **kw) -> subprocess.Popen[str]:
    code = PARKED.format(endpoint=endpoint, body="\n".join("    " + line
                                                           for line in body.splitlines()))
    return subprocess.Popen(python_script(code), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, **kw)


def _ready(worker: subprocess.Popen[str]) -> str:
    assert worker.stdout is not None
    line = worker.stdout.readline()
    assert line.startswith("ready"), line
    return line


def _end(worker: subprocess.Popen[str]) -> None:
    if worker.poll() is None:
        assert worker.stdin is not None
        worker.stdin.write("\n")
        worker.stdin.close()
        worker.wait(timeout=60)
    if worker.stdout is not None:
        worker.stdout.close()


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_a_child_that_execs_is_not_signalled(clean_env):
    """A forked child gets its ring and its stacks handler at the fork; once it execs another
    program the handler is gone, its file is not: it is listed, not signalled (the signal's
    default action would end it)."""
    with Subscriber() as sub:
        worker = _start(sub.endpoint, """
pid = os.fork()
if pid == 0:
    os.execv("/bin/sleep", ["sleep", "60"])
print("child", pid, flush=True)
""")
        try:
            assert worker.stdout is not None
            child = int(worker.stdout.readline().split()[1])
            _ready(worker)
            deadline = time.monotonic() + 30
            while not _cmdline(child).startswith(b"sleep"):  # until it has exec'd
                assert time.monotonic() < deadline, "the child never exec'd"
                time.sleep(0.01)
            assert sub.wait(started=1, timeout=30)
            (wid,) = sub.received
            deadline = time.monotonic() + 30
            while True:  # until the sidecar's tree holds the child (found at a tick)
                dump = sub.stacks(wid, timeout=10)
                assert dump is not None
                procs = {p["pid"]: p for p in dump["processes"]}
                if child in procs or time.monotonic() > deadline:
                    break
            assert "not installed now" in procs[child].get("error", ""), procs
            assert "sleep 60" in procs[child].get("command", "")
            # The answer comes after every signal was sent, and a signal's default action
            # ends a process as it is delivered: had one been sent, the child would be gone.
            with open(f"/proc/{child}/stat") as f:
                assert f.read().split(") ")[1][0] in "SR", "the child was ended"
        finally:
            os.kill(child, 9)
            _end(worker)


def test_a_handler_installed_from_c_is_left_alone(clean_env):
    """SIGUSR2 handled from C before workerscope starts (ctypes: Python's own table does not
    know it): asked to use it, workerscope installs nothing, a request says why, and the
    job's handler still runs."""
    with Subscriber() as sub:
        worker = subprocess.Popen(python_script(f"""
            import ctypes, os, signal, sys, time
            from workerscope import monitor

            got = []
            HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)(lambda sig: got.append(sig))
            ctypes.CDLL(None).signal(signal.SIGUSR2, HANDLER)
            with monitor(interval=0.1, endpoint={sub.endpoint!r}, name="c-handler"):
                print("ready", flush=True)
                sys.stdin.readline()
                os.kill(os.getpid(), signal.SIGUSR2)
                deadline = time.monotonic() + 30  # the handler runs in whichever thread takes it
                while not got and time.monotonic() < deadline:
                    time.sleep(0.001)
            print(len(got), flush=True)
        """), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "WORKERSCOPE_STACKS_SIGNAL": "SIGUSR2"})
        try:
            _ready(worker)
            assert sub.wait(started=1, timeout=30)
            (wid,) = sub.received
            dump = sub.stacks(wid, timeout=10)
            assert dump is not None
            (proc,) = dump["processes"]
            assert "installed from C code" in proc.get("error", ""), proc
            assert not proc.get("threads")
            out, _ = worker.communicate("go\n", timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    assert worker.returncode == 0
    assert out.split() == ["1"], out  # the job's own handler ran, once: ours never did


def test_the_dump_file_does_not_grow_with_requests(clean_env):
    """Twenty requests: each is read and the file emptied, so a long run's requests never
    pile up in /dev/shm (which counts against the job's memory)."""
    with Subscriber() as sub:
        worker = _start(sub.endpoint, "")
        try:
            _ready(worker)
            assert sub.wait(started=1, timeout=30)
            (wid,) = sub.received
            sizes = []
            for _ in range(20):
                dump = sub.stacks(wid, timeout=10)
                assert dump is not None and dump["processes"][0]["threads"], dump
                (path,) = glob.glob(f"/dev/shm/workerscope-*/{worker.pid}.stacks") or glob.glob(
                    f"/tmp/workerscope-*/{worker.pid}.stacks")
                sizes.append(os.stat(path).st_size)
            assert max(sizes) == 0, sizes
        finally:
            _end(worker)


def test_a_dump_too_big_for_a_frame_still_arrives(clean_env):
    """100 threads 95 calls deep in a file of a 300-character path: faulthandler writes ~3 MB;
    the mark arrives, within a frame, every thread's innermost frame kept, and says what was
    cut."""
    with Subscriber() as sub:
        worker = _start(sub.endpoint, """
import threading
src = "import time\\ndef deep(n):\\n    if n == 0:\\n        time.sleep(600)\\n    deep(n - 1)\\n"
scope = {}
exec(compile(src, "/" + "d" * 300 + "/deep.py", "exec"), scope)
for _ in range(99):
    threading.Thread(target=scope["deep"], args=(95,), daemon=True).start()
""")
        try:
            _ready(worker)
            assert sub.wait(started=1, timeout=30)
            (wid,) = sub.received
            dump = sub.stacks(wid, timeout=10)
        finally:
            worker.kill()
            worker.wait()
            _end(worker)
        t = sub.timeline()
    assert dump is not None and "error" not in dump, dump
    (proc,) = dump["processes"]
    deep = [th for th in proc["threads"] if th["frames"][0]["function"] == "deep"]
    assert len(deep) + proc.get("threads_cut", 0) == 99, (len(deep), proc.get("threads_cut"))
    assert "cut to fit a frame" in dump["cut"]
    assert len(protocol.encode_frame("mark", wid, 0, {"records": [dump]})) < 1 << 20
    assert [m for m in t.marks if m.name == "stacks"], "the mark is in the record too"


def test_a_crash_between_jobs_is_told(clean_env):
    """A warm worker (a heavy profiled job done, its sidecar waiting for the next) dies of
    SIGSEGV outside any job: the crash's stack is in the timeline all the same."""
    with Subscriber() as sub:
        r = subprocess.run(python_script(f"""
            import ctypes
            from workerscope import profiled

            def job():
                return 1

            def crashes_between_jobs():
                ctypes.string_at(0)

            profiled(job, mode="heavy", interval=0.1, endpoint={sub.endpoint!r})()
            crashes_between_jobs()
        """), capture_output=True, text=True, timeout=120)
        assert r.returncode == -11, r.stderr
        assert sub.wait(jobs=1, byes=1, timeout=30)
        t = sub.timeline()
    (mark,) = [m for m in t.marks if m.name == "stacks"]
    assert mark.attrs is not None and mark.attrs["reason"] == "crash"
    frames = [f["function"] for p in mark.attrs["processes"] for th in p["threads"]
              for f in th["frames"]]
    assert "crashes_between_jobs" in frames


def test_only_the_worker_asked_can_answer(clean_env):
    """A dump that names a request another worker was asked for is not handed over (ids are
    sequential: any key holder could guess them)."""
    with Subscriber() as sub:
        worker = _start(sub.endpoint, "")
        other = _start(sub.endpoint, "")
        try:
            _ready(worker)
            _ready(other)
            assert sub.wait(started=2, timeout=30)
            wids = sorted(sub.received)
            state, rx = sub._state, sub._rx
            with state.cond:
                state.stacks_waited[10**9] = wids[0]
            forged = protocol.Frame(protocol.MARK, wids[1], 99, {"records": [
                [protocol.RECORD_MARK, None, 0, None, protocol.STACKS_MARK, 0, 0, 1,
                 {"request": 10**9, "processes": [], "worker": wids[0]}, None]]})
            with state.cond:
                rx._mark(forged)
                assert 10**9 not in state.stacks_got
                state.stacks_waited.pop(10**9)
            answer = sub.stacks(wids[0], timeout=10)
            assert answer is not None and answer["worker"] == wids[0]
        finally:
            _end(worker)
            _end(other)


@pytest.mark.parametrize("pid", [os.getpid()])
def test_the_command_line_tool_lists_a_process_without_workerscope(pid, clean_env):
    """`workerscope stacks PID` of a process that does not record: its command and state,
    no signal sent."""
    r = subprocess.run([sys.executable, "-m", "workerscope", "stacks", str(pid)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"process {pid}:" in r.stdout and "no workerscope" in r.stdout
