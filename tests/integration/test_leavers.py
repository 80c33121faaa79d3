"""Processes that leave the tree by double-forking (issue 13, problem 8): said in the notes,
and still counted while their process group or session is the job's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from helpers import burn_code, python_script, wait_until

from workerscope import load
from workerscope.sidecar.tree import ProcessTree

# The job: a child that forks a grandchild and exits, so the grandchild is reparented away from
# the tree (a daemon's double fork). The grandchild burns CPU (`burn`), writes its pid to
# `pid_file` (its stdio on /dev/null), with setsid "1" calls setsid() once `go` exists, then
# waits until `end` exists.
# The middle process exits at once, or once `go` exists when that is given; the job reaps it,
# waits for the pid file, and for `exit_file` when that is given.
DOUBLE_FORK = """
import os, sys, time
pid_file, go, end, exit_file, burn, setsid = sys.argv[1:7]

def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.01)

middle = os.fork()
if middle == 0:
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)  # as daemons do: the job's pipes can close
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        exec(burn)
        with open(pid_file + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(pid_file + ".tmp", pid_file)
        if setsid == "1":
            wait_for(go)
            os.setsid()
            open(go + ".done", "w").close()
        wait_for(end)
        os._exit(0)
    if go != "-":
        wait_for(go)
    os._exit(0)
os.waitpid(middle, 0)
wait_for(pid_file)
if exit_file != "-":
    wait_for(exit_file)
"""


def ppid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return int(data[data.rindex(b")") + 2:].split()[1])


def end_daemon(pid: int | None, end) -> None:
    """Let the grandchild exit (it is not our child: its reaper reaps it) and wait for that."""
    end.touch()
    if pid is None:
        return
    try:
        wait_until(lambda: ppid_of(pid) is None, f"pid {pid} to exit", timeout=30)
    except AssertionError:
        os.kill(pid, signal.SIGKILL)
        raise


def read_pid(path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def test_a_daemon_in_the_jobs_session_is_followed(clean_env, tmp_path):
    """`run` on a job whose grandchild double-forks away (same session and process group):
    the grandchild is still sampled, its CPU in the tree's, and the notes say it left and is
    followed."""
    pid_file, end, out = tmp_path / "pid", tmp_path / "end", tmp_path / "t.wsc"
    daemon = None
    try:
        r = subprocess.run([sys.executable, "-m", "workerscope", "run", "--interval", "0.1", "-o",
                            str(out), "--", sys.executable, "-c", DOUBLE_FORK, str(pid_file), "-",
                            str(end), "-", burn_code(0.4), "0"],
                           capture_output=True, text=True, timeout=120,
                           process_group=0)  # as a shell with job control starts it
        daemon = read_pid(pid_file)
        assert r.returncode == 0, r.stderr
        assert daemon is not None
        assert ppid_of(daemon) is not None, "the daemon is still running"
    finally:
        end_daemon(daemon, end)
    t = load(out)
    assert any(s.scope == "proc" and s.pid == daemon for s in t.samples)
    tree = [s.values for s in t.samples if s.scope == "tree"]
    assert tree[-1]["cpu_user_s"] + tree[-1]["cpu_system_s"] >= 0.4, tree[-1]
    (worker,) = t.workers.values()
    notes = [n for n in worker.notes if f"pid {daemon} " in n]
    assert len(notes) == 1 and "left the tree" in notes[0], worker.notes
    assert "followed" in notes[0] and "same process group" in notes[0], notes


def start_job(tmp_path, setsid: bool) -> tuple[subprocess.Popen[bytes], int]:
    """The double-forking job, its middle process waiting for `go`, in a process group of
    its own; returns it and the grandchild's pid."""
    pid_file = tmp_path / "pid"
    job = subprocess.Popen([
        *python_script(DOUBLE_FORK), str(pid_file), str(tmp_path / "go"), str(tmp_path / "end"),
        str(tmp_path / "exit"),
        burn_code(0.0), "1" if setsid else "0"], process_group=0)
    wait_until(lambda: read_pid(pid_file) is not None, "the grandchild")
    pid = read_pid(pid_file)
    assert pid is not None
    return job, pid


def stop_job(tree: ProcessTree, job: subprocess.Popen[bytes], daemon: int, tmp_path) -> None:
    tree.close()
    (tmp_path / "exit").touch()
    job.wait()
    end_daemon(daemon, tmp_path / "end")


def test_a_daemon_that_calls_setsid_is_noted_and_no_longer_counted(tmp_path):
    """A grandchild that was a member, then calls setsid() and is reparented away when its
    parent exits, leaves the tree: gone, its CPU kept in the totals, and said once."""
    job, daemon = start_job(tmp_path, setsid=True)
    tree = ProcessTree(job.pid)
    try:
        tree.discover()
        assert daemon in tree.members
        before, _ = tree.read(time.monotonic_ns())
        (tmp_path / "go").touch()
        wait_until(lambda: (tmp_path / "go.done").exists()
                   and ppid_of(daemon) not in (None, *tree.members), "setsid and the reparenting")
        _, gone = tree.discover(full=True)
        after, _ = tree.read(time.monotonic_ns())
        assert daemon in gone and daemon not in tree.members
        cpu = after["cpu_user_s"] + after["cpu_system_s"]
        assert cpu >= before["cpu_user_s"] + before["cpu_system_s"]
        notes = tree.take_notes()
        assert len(notes) == 1 and f"pid {daemon} (python" in notes[0], notes
        assert "left the tree" in notes[0] and "no longer counted" in notes[0]
        tree.discover(full=True)
        assert tree.take_notes() == []  # said once
    finally:
        stop_job(tree, job, daemon, tmp_path)


def test_a_member_reparented_in_the_jobs_group_is_followed(tmp_path):
    """A grandchild seen under its parent, reparented when that parent exits but still in
    the job's process group: still a member, read like the others, and said once."""
    job, daemon = start_job(tmp_path, setsid=False)
    tree = ProcessTree(job.pid)
    try:
        tree.discover()
        assert daemon in tree.members
        (tmp_path / "go").touch()
        wait_until(lambda: ppid_of(daemon) not in (None, *tree.members), "the reparenting")
        _, gone = tree.discover()
        _, procs = tree.read(time.monotonic_ns())
        assert daemon not in gone and daemon in {pid for pid, _ in procs}
        (note,) = tree.take_notes()
        assert f"pid {daemon} " in note and "followed: same process group" in note
        tree.discover(full=True)
        assert tree.take_notes() == []  # said once
    finally:
        stop_job(tree, job, daemon, tmp_path)


def test_a_process_that_left_before_any_walk_is_followed_and_said_once(tmp_path):
    """A grandchild reparented away before the tree was ever walked is found among its
    reaper's new children (it started after the root, in its process group), followed, and
    said once, however many walks follow."""
    job, daemon = start_job(tmp_path, setsid=False)
    (tmp_path / "go").touch()

    def reparented() -> bool:
        parent = ppid_of(daemon)  # no longer the middle process, a child of the job
        return parent is not None and parent != job.pid and ppid_of(parent) != job.pid

    wait_until(reparented, "the reparenting")
    tree = ProcessTree(job.pid)
    try:
        new, _ = tree.discover(full=True)
        assert daemon in {pid for pid, _, _ in new} and daemon in tree.members
        (note,) = tree.take_notes()
        assert f"pid {daemon} " in note and "before a sample saw it" in note
        assert "followed: same process group" in note
        for _ in range(3):
            tree.discover(full=True)
        assert tree.take_notes() == [] and daemon in tree.members
    finally:
        stop_job(tree, job, daemon, tmp_path)


def test_a_stranger_in_a_shared_session_is_not_taken(tmp_path):
    """A daemon that never was in the tree, reparented to init, in the same process group and
    session as the job only because they share them with everything else started from here
    (a shell without job control, a CI runner): not the job's, not adopted. It once made the
    CPU of unrelated daemons count in a job's tree."""
    root = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    pid_file = tmp_path / "pid"
    stranger = subprocess.Popen([
        *python_script(DOUBLE_FORK), str(pid_file), "-", str(tmp_path / "end"), "-", burn_code(0.0), "0"])
    daemon = None
    tree = ProcessTree(root.pid)
    try:
        wait_until(lambda: read_pid(pid_file) is not None, "the stranger's daemon")
        daemon = read_pid(pid_file)
        stranger.wait()
        assert os.getpgid(daemon) == os.getpgid(root.pid)
        new, _ = tree.discover(full=True)
        assert daemon not in tree.members and daemon not in {pid for pid, _, _ in new}
        assert tree.take_notes() == []
    finally:
        tree.close()
        root.kill()
        root.wait()
        end_daemon(daemon, tmp_path / "end")
