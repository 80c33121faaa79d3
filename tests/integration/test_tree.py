"""ProcessTree on real process trees: discovery, vanishing members, totals that never fall."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest
from helpers import burn_code, python_script

from workerscope.sidecar.tree import ProcessTree


def test_grandchildren_found_and_self_excluded():
    """Children and grandchildren are members; the excluded pid (the sidecar) is not."""
    parent = subprocess.Popen(python_script("""
        import subprocess, sys
        kid = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
        print(kid.pid, flush=True)
        sys.stdin.read()
        kid.stdin.close(); kid.wait()
    """), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        grandkid = int(parent.stdout.readline())
        tree = ProcessTree(os.getpid(), exclude=frozenset({parent.pid}))
        tree.discover()
        assert parent.pid not in tree.members and grandkid not in tree.members
        tree = ProcessTree(os.getpid())
        new, gone = tree.discover()
        assert {parent.pid, grandkid, os.getpid()} <= set(tree.members)
        assert (grandkid, parent.pid) in {(pid, ppid) for pid, ppid, _ in new}
    finally:
        parent.stdin.close()
        parent.wait()
    new, gone = tree.discover()
    assert parent.pid in gone and grandkid in gone


@pytest.mark.accuracy
def test_cpu_of_exited_children_still_counted():
    """Children that burn 0.2 s of CPU each and exit between two readings still add it all
    to tree CPU time."""
    tree = ProcessTree(os.getpid())
    tree.discover()
    before, _ = tree.read(time.monotonic_ns())
    for _ in range(3):
        subprocess.run([sys.executable, "-c", burn_code(0.2)], check=True)
    tree.discover()
    after, _ = tree.read(time.monotonic_ns())
    gained = (after["cpu_user_s"] + after["cpu_system_s"]) - (
        before["cpu_user_s"] + before["cpu_system_s"])
    assert gained >= 0.6, gained


def test_member_vanishing_mid_read_is_normal():
    """A member that exits between discovery and reading is dropped, not raised."""
    kid = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                           stdin=subprocess.PIPE)
    tree = ProcessTree(os.getpid())
    tree.discover()
    assert kid.pid in tree.members
    kid.stdin.close()
    kid.wait()
    tree_values, procs = tree.read(time.monotonic_ns())
    assert kid.pid not in {pid for pid, _ in procs}
    assert tree_values["num_procs"] >= 1


def test_a_member_that_execs_is_named_again(tmp_path):
    """A child first seen under its parent's name (forked, not yet exec'd) is renamed once it
    execs: read() lists it in `renamed` with its new name."""
    go = tmp_path / "go"
    parent = subprocess.Popen(python_script(f"""
        import os, sys, time
        kid = os.fork()
        if kid == 0:
            while not os.path.exists({str(go)!r}):
                time.sleep(0.01)
            os.execvp("sleep", ["sleep", "600"])
        print(kid, flush=True)
        sys.stdin.read()
        os.kill(kid, 9)
        os.waitpid(kid, 0)
    """), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tree = ProcessTree(parent.pid)
    try:
        kid = int(parent.stdout.readline())
        tree.discover()
        assert tree.members[kid].name.startswith("python")
        go.touch()
        deadline = time.monotonic() + 60
        while pathlib.Path(f"/proc/{kid}/comm").read_text().strip() != "sleep":
            assert time.monotonic() < deadline, "the child never exec'd"
            time.sleep(0.01)
        tree.read(time.monotonic_ns())
        assert tree.renamed == [(kid, parent.pid, "sleep")] and tree.members[kid].name == "sleep"
    finally:
        tree.close()
        parent.stdin.close()
        parent.wait()
        parent.stdout.close()
