"""ProcessTree reads at the floor: held /proc files re-read with pread (a steady tick opens
nothing), tiers (status, fds and threads at most once a second and at job edges, USS
rarely), fds closed when a member leaves, fresh ones for a reused pid, discovery without the
children files, and CPU per watched thread."""

from __future__ import annotations

import builtins
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from workerscope.sidecar import tree as tree_module
from workerscope.sidecar.tree import ProcessTree

# A root that starts N `sleep` children, prints their pids, and kills and reaps them when its
# stdin closes.
ROOT = """
import subprocess, sys
kids = [subprocess.Popen(["sleep", "600"]) for _ in range(int(sys.argv[1]))]
print(" ".join(str(k.pid) for k in kids), flush=True)
sys.stdin.read()
for k in kids:
    k.kill()
    k.wait()
"""
HOUR = 3600 * 10**9


@pytest.fixture
def small_tree():
    """A root with 3 sleeping children: (root pid, child pids)."""
    root = subprocess.Popen([sys.executable, "-c", ROOT, "3"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        kids = [int(p) for p in root.stdout.readline().split()]
        yield root.pid, kids
    finally:
        root.stdin.close()
        root.wait()
        root.stdout.close()


def _held(pid: int) -> set[str]:
    """The /proc files of pid this process holds open."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"/proc/{pid}/"):
            out.add(target)
    return out


def test_a_steady_tick_opens_and_closes_nothing(small_tree, monkeypatch):
    """After the first tick, discover() + read() of a steady tree between slow ticks make no
    open() and no close(): every file is held and re-read with pread."""
    root, kids = small_tree
    tree = ProcessTree(root, slow_every_ns=HOUR, uss_every_ns=HOUR)
    try:
        tree.discover()
        tree.read(time.monotonic_ns())
        calls = []
        for name in ("open", "close", "listdir", "stat"):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, lambda *a, _r=real, _n=name, **k: (calls.append(_n),
                                                                              _r(*a, **k))[1])
        monkeypatch.setattr(builtins, "open", lambda *a, **k: calls.append("builtins.open"))
        for _ in range(5):
            new, gone = tree.discover()
            values, procs = tree.read(time.monotonic_ns())
        monkeypatch.undo()
        assert not new and not gone and {pid for pid, _ in procs} == {root, *kids}
        assert calls == []
        assert "cpu_user_s" in values and "read_bytes" in values and "rss_bytes" in values
    finally:
        tree.close()


def test_slow_tier_once_a_second_and_at_job_edges(small_tree):
    """status values (VmHWM, context switches) and fd counts come with the first reading, then
    only once per slow_every_ns or when asked for (a job's edge); USS with the first reading
    and then per uss_every_ns. CPU, RSS, IO and the peak come every time."""
    root, _ = small_tree
    tree = ProcessTree(root, slow_every_ns=HOUR, uss_every_ns=HOUR)
    try:
        tree.discover()
        first, _ = tree.read(time.monotonic_ns())
        steady, procs = tree.read(time.monotonic_ns())
        edge, _ = tree.read(time.monotonic_ns(), full=True)
    finally:
        tree.close()
    slow = {"ctx_switches_voluntary", "ctx_switches_involuntary", "num_fds"}
    assert slow <= set(first) and slow <= set(edge)
    assert not slow & set(steady)
    assert "uss_bytes" in first and "uss_bytes" not in steady and "uss_bytes" not in edge
    every = {"cpu_user_s", "cpu_system_s", "rss_bytes", "num_threads", "read_bytes",
             "write_bytes", "read_chars", "write_chars", "peak_rss_bytes", "num_procs"}
    assert every <= set(steady)
    assert all({"rss_bytes", "peak_rss_bytes", "read_bytes"} <= set(v) for _, v in procs)


def test_a_reaped_child_has_its_files_closed():
    """A child that exits and is reaped leaves the tree, and its held files are closed."""
    kid = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                           stdin=subprocess.PIPE)
    tree = ProcessTree(os.getpid())
    try:
        tree.discover()
        tree.read(time.monotonic_ns())
        held = _held(kid.pid)
        assert any(p.endswith("/stat") for p in held) and any(p.endswith("/io") for p in held)
        kid.stdin.close()
        kid.wait()
        _, gone = tree.discover()
        assert kid.pid in gone and kid.pid not in tree.members
        assert not _held(kid.pid)
    finally:
        tree.close()


def test_without_the_children_files_a_proc_scan_finds_the_tree(small_tree, monkeypatch):
    """On a kernel without /proc/PID/task/TID/children, a scan of /proc finds the same tree."""
    root, kids = small_tree
    monkeypatch.setattr(tree_module, "_HAVE_CHILDREN_FILE", False)
    tree = ProcessTree(root)
    try:
        new, _ = tree.discover()
        assert {pid for pid, _, _ in new} == {root, *kids}
        assert {ppid for pid, ppid, _ in new if pid in kids} == {root}
        _, procs = tree.read(time.monotonic_ns())
        assert {pid for pid, _ in procs} == {root, *kids}
    finally:
        tree.close()


def test_with_no_fds_to_spare_reads_open_each_time(small_tree):
    """With holding off (the fd budget spent), the same values come from open/read/close."""
    root, kids = small_tree
    tree = ProcessTree(root, hold=False)
    try:
        tree.discover()
        values, procs = tree.read(time.monotonic_ns())
        assert not _held(root) and not _held(kids[0])
        assert {pid for pid, _ in procs} == {root, *kids}
        assert {"cpu_user_s", "rss_bytes", "read_bytes", "peak_rss_bytes"} <= set(values)
    finally:
        tree.close()


def test_a_watched_thread_has_its_own_cpu():
    """A watched thread that burns CPU reads its own CPU time (not the process's); a thread
    that ended is dropped."""
    done = threading.Event()
    burned = threading.Event()
    tid = []

    def burn() -> None:
        tid.append(threading.get_native_id())
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass
        burned.set()
        done.wait(10)

    th = threading.Thread(target=burn)
    th.start()
    tree = ProcessTree(os.getpid())
    try:
        while not tid:
            time.sleep(0.01)
        tree.discover()
        tree.read(time.monotonic_ns())
        tree.watch_thread(os.getpid(), tid[0])
        tree.watch_thread(os.getpid(), threading.get_native_id())
        assert burned.wait(60), "the thread never got its 0.3 s of CPU"
        rows = {r[1]: r[2] for r in tree.read_threads(time.monotonic_ns())}
        assert rows[tid[0]]["cpu_user_s"] + rows[tid[0]]["cpu_system_s"] >= 0.25
        main = rows[threading.get_native_id()]
        main_cpu = main["cpu_user_s"] + main["cpu_system_s"]
        # This thread's own CPU (clock ticks: 10 ms steps), not the whole process's.
        assert main_cpu <= time.thread_time() + 0.05
        assert time.process_time() - main_cpu >= 0.25, "the burning thread's CPU is not in it"
        done.set()
        th.join()  # Python's thread is done; the kernel's ends a moment later
        deadline = time.monotonic() + 5
        while tid[0] in rows and time.monotonic() < deadline:
            time.sleep(0.01)
            rows = {r[1]: r[2] for r in tree.read_threads(time.monotonic_ns())}
        assert tid[0] not in rows and threading.get_native_id() in rows
        assert (os.getpid(), tid[0]) not in tree.threads
    finally:
        done.set()
        th.join()
        tree.close()


REUSE = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
from workerscope.sidecar.tree import ProcessTree

def child(code):
    pid = os.fork()
    if pid == 0:
        if code == "sleep":
            os.execvp("sleep", ["sleep", "600"])
        os.execvp(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)"])
    return pid

tree = ProcessTree(os.getpid())
a = child("sleep")
time.sleep(0.2)
tree.discover(); tree.read(time.monotonic_ns())
old = tree.members[a]
os.kill(a, 9); os.waitpid(a, 0)
time.sleep(0.05)  # a new start time
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(a - 1))
b = child("python")
assert b == a, (a, b)
time.sleep(0.5)
tree.discover()
_, procs = tree.read(time.monotonic_ns())
tree.discover()
_, procs = tree.read(time.monotonic_ns())
new = tree.members[b]
names = {pid: v for pid, v in procs}
print(new is not old, new.start != old.start, names[b]["rss_bytes"] > 5 * 2**20)
os.kill(b, 9); os.waitpid(b, 0)
tree.close()
"""


def test_a_reused_pid_is_a_new_member_with_fresh_files():
    """A child that dies and whose pid is given to a new process: the held files of the old
    one fail, and the new one is a new member (new start time) read through fresh files.
    Run in a pid namespace of its own, where nothing else takes the pid."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed")
    src = os.path.dirname(os.path.dirname(os.path.abspath(tree_module.__file__)))
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                        textwrap.dedent(REUSE), os.path.dirname(src)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0 and ("Operation not permitted" in r.stderr
                              or "unshare failed" in r.stderr):
        pytest.skip(f"no pid namespace here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    # a new member, with the new process's start time and its (python's, not sleep's) RSS
    assert r.stdout.split() == ["True", "True", "True"], r.stdout


def test_a_thread_born_between_two_readings_says_when_it_started():
    """A watched thread first read after it started since the previous reading comes with
    its start (monotonic ns, between the two readings); one that was there before does not."""
    tree = ProcessTree(os.getpid(), interval_ns=10**9)
    done = threading.Event()
    tid = []
    try:
        tree.discover()
        tree.read(time.monotonic_ns())
        tree.watch_thread(os.getpid(), threading.get_native_id())
        before = time.monotonic_ns()
        old = tree.read_threads(before)
        assert [len(r) for r in old] == [3]
        th = threading.Thread(target=lambda: (tid.append(threading.get_native_id()), done.wait(10)))
        th.start()
        while not tid:
            time.sleep(0.001)
        tree.watch_thread(os.getpid(), tid[0])
        after = time.monotonic_ns()
        rows = {r[1]: r for r in tree.read_threads(after)}
        assert len(rows[threading.get_native_id()]) == 3
        assert before - 10**7 < rows[tid[0]][3] <= after
    finally:
        done.set()
        if tid:
            th.join()
        tree.close()


def test_cheap_discovery_still_sees_a_new_child_and_an_exit():
    """discover(cheap=True) skips the walk only while nothing can have changed: a child
    forked since the last walk is found, and one that exited is gone, at the next call."""
    tree = ProcessTree(os.getpid(), slow_every_ns=HOUR)
    try:
        tree.discover()
        tree.read(time.monotonic_ns())
        kid = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
        new, _ = tree.discover(cheap=True)
        assert kid.pid in {pid for pid, _, _ in new}
        kid.stdin.close()
        kid.wait()
        tree.read(time.monotonic_ns())
        _, gone = tree.discover(cheap=True)
        assert kid.pid in gone and kid.pid not in tree.members
    finally:
        tree.close()


# A single-threaded worker that blocks on stdin; each line wakes it to write that many bytes
# to a file and add that many MiB to its heap, then it says "done" and blocks again.
WAKER = """
import os, sys
held = []
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)
print("ready", flush=True)
for line in sys.stdin:
    n = int(line)
    os.write(fd, b"x" * n)
    held.append(bytearray(n << 20))
    for i in range(0, len(held[-1]), 4096):
        held[-1][i] = 1
    print("done", flush=True)
"""


def _wait_blocked(pid: int, timeout: float = 30.0) -> None:
    """Until the process sleeps and has not run since the last look: "ready" is printed a
    moment before it blocks on stdin, and a loaded machine may run it that moment later, while
    a tick reads it (seen running, a member is read whole: the test once failed so)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            ran = f.read().split()[0]
        if state == b"S" and ran == last:
            return
        last = ran
        time.sleep(0.02)
    raise AssertionError(f"process {pid} never blocked")


def test_a_quiet_member_is_not_reread_until_it_runs(tmp_path, monkeypatch):
    """Between slow tiers, a single-threaded member that has not run since its last reading
    (schedstat unchanged) costs one small pread, not stat and io; its values carry over. The
    tick after it wakes and works reads it whole: the bytes it wrote and the memory it took
    are there at once, not a second later."""
    proc = subprocess.Popen([sys.executable, "-c", WAKER, str(tmp_path / "out")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tree = ProcessTree(proc.pid, slow_every_ns=HOUR, uss_every_ns=HOUR,
                       all_threads_of=proc.pid)

    def tick():
        now = time.monotonic_ns()
        _, procs = tree.read(now)
        return dict(procs)[proc.pid], {tid: v for _, tid, v, *_ in tree.read_threads(now)}

    try:
        assert proc.stdout.readline().strip() == "ready"
        _wait_blocked(proc.pid)
        tree.discover()
        tick()  # holds schedstat from here on
        full, full_thread = tick()  # read whole, its schedstat kept
        m = tree.members[proc.pid]
        stat_fd, io_fd = m.stat_fd, m.io_fd
        thread_fd = tree.threads[(proc.pid, proc.pid)].fd
        reads = []
        real = os.pread
        monkeypatch.setattr(os, "pread", lambda fd, *a: (reads.append(fd), real(fd, *a))[1])
        quiet = [tick() for _ in range(3)]
        assert stat_fd not in reads and io_fd not in reads and thread_fd not in reads
        assert m.sched_fd in reads
        for _, threads in quiet:
            assert threads[proc.pid]["cpu_user_s"] == full_thread[proc.pid]["cpu_user_s"]
        quiet = [values for values, _ in quiet]
        for values in quiet:
            for key in ("cpu_user_s", "cpu_system_s", "rss_bytes", "write_chars", "read_bytes",
                        "num_threads", "peak_rss_bytes"):
                assert values[key] == full[key], key
        reads.clear()
        proc.stdin.write("64\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        woke, _ = tick()
        monkeypatch.undo()
        assert stat_fd in reads and io_fd in reads and thread_fd in reads
        assert woke["write_chars"] - quiet[-1]["write_chars"] >= 64
        assert woke["rss_bytes"] - quiet[-1]["rss_bytes"] >= 60 << 20
        assert woke["peak_rss_bytes"] >= woke["rss_bytes"]
    finally:
        tree.close()
        proc.stdin.close()
        proc.wait()
        proc.stdout.close()


def test_a_member_with_threads_is_read_every_tick(monkeypatch):
    """schedstat is one thread's: a process with more threads is read whole each tick."""
    code = ("import threading, sys; threading.Thread(target=sys.stdin.read, daemon=True).start();"
            " print('ready', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    tree = ProcessTree(proc.pid, slow_every_ns=HOUR, uss_every_ns=HOUR)
    try:
        assert proc.stdout.readline().strip() == "ready"
        tree.discover()
        for _ in range(2):
            tree.read(time.monotonic_ns())
        m = tree.members[proc.pid]
        assert m.nthreads == 2
        reads = []
        real = os.pread
        monkeypatch.setattr(os, "pread", lambda fd, *a: (reads.append(fd), real(fd, *a))[1])
        tree.read(time.monotonic_ns())
        monkeypatch.undo()
        assert m.stat_fd in reads and m.io_fd in reads
    finally:
        tree.close()
        proc.stdin.close()
        proc.wait()
        proc.stdout.close()


def test_a_quiet_member_keeps_its_peak_after_a_job_s_reset(tmp_path):
    """reset_peaks() (a job's start) zeroes the high-water marks: a member skipped as quiet
    right after still shows a peak of at least its RSS, as one read whole does."""
    proc = subprocess.Popen([sys.executable, "-c", WAKER, str(tmp_path / "out")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tree = ProcessTree(proc.pid, slow_every_ns=HOUR, uss_every_ns=HOUR)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.stdin.write("32\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        tree.discover()
        deadline = time.monotonic() + 30
        while not tree.members[proc.pid].quiet:  # until it is asleep, and read so
            assert time.monotonic() < deadline, "the worker never went quiet"
            tree.read(time.monotonic_ns())
        tree.reset_peaks()
        values = dict(tree.read(time.monotonic_ns())[1])[proc.pid]
        assert tree.members[proc.pid].quiet
        assert values["peak_rss_bytes"] >= values["rss_bytes"] > 32 << 20
    finally:
        tree.close()
        proc.stdin.close()
        proc.wait()
        proc.stdout.close()


def test_a_running_member_is_never_skipped(monkeypatch):
    """schedstat's run time moves only at the scheduler's ticks while a process runs: one
    seen running (state R) is read whole at the next tick, whatever its schedstat says."""
    code = "import sys; print('ready', flush=True)\nwhile True: pass"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    tree = ProcessTree(proc.pid, slow_every_ns=HOUR, uss_every_ns=HOUR)
    try:
        assert proc.stdout.readline().strip() == "ready"
        tree.discover()
        tree.read(time.monotonic_ns())
        m = tree.members[proc.pid]
        for _ in range(200):
            tree.read(time.monotonic_ns())
            # The same schedstat as at the last reading (the scheduler's tick has not come).
            m.ran = os.pread(m.sched_fd, 128, 0) if m.sched_fd >= 0 else m.ran
            if m.sched_fd >= 0:
                tree.read(time.monotonic_ns())
                assert not m.quiet
    finally:
        tree.close()
        proc.kill()
        proc.wait()
        proc.stdout.close()
