"""Light mode: start/end counters, no extra process, each job's own numbers."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys

import psutil
import pytest
from helpers import burn, burn_code

from workerscope import Subscriber, profiled

MB = 1024 * 1024


def _rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def hold(mb):
    """Touch mb MB, then free them. An anonymous mapping of its own: malloc could hand back
    pages this long-lived process already has resident, and RSS would not grow."""
    with mmap.mmap(-1, mb * MB) as block:
        block[::4096] = b"\x01" * (len(block) // 4096)
        return len(block)


@pytest.mark.accuracy
def test_warm_worker_reports_each_jobs_own_peak(clean_env):
    """Five jobs of different peak memory in one process: each reports its own peak."""
    wrapped = profiled(hold, mode="light")
    for mb in (200, 50, 150, 20, 100):
        before = _rss()
        assert wrapped(mb) == mb * MB
        grew = wrapped.last_stats["peak_rss_bytes"] - before
        assert abs(grew - mb * MB) <= 0.1 * mb * MB + 4 * MB, (mb, grew / MB)


@pytest.mark.accuracy
def test_cpu_of_job_and_its_children(clean_env):
    """CPU of the worker (0.4 s burned) and of children it reaped during the job (0.3 s) are
    both counted, each on its own."""
    def work():
        burn(0.4)
        subprocess.run([sys.executable, "-c", burn_code(0.3)], check=True)

    wrapped = profiled(work, mode="light")
    wrapped()
    s = wrapped.last_stats
    assert 0.39 <= s["cpu_user_s"] + s["cpu_system_s"] <= 0.6
    assert s["children_cpu_user_s"] + s["children_cpu_system_s"] >= 0.29
    assert s["wall_s"] >= 0.7
    assert "host_cpu_percent_core0" in s and 0 <= s["host_cpu_percent"] <= 100


@pytest.mark.accuracy
def test_io_bytes_of_the_job(clean_env, tmp_path):
    """50 MB written and fsynced inside the job shows as write_bytes within 5 %."""
    def write():
        with open(tmp_path / "f", "wb") as f:
            for _ in range(50):
                f.write(os.urandom(MB))
            f.flush()
            os.fsync(f.fileno())

    wrapped = profiled(write, mode="light")
    wrapped()
    assert abs(wrapped.last_stats["write_bytes"] - 50 * MB) <= 2.5 * MB
    assert wrapped.last_stats["write_chars"] >= 50 * MB


def test_no_extra_process(clean_env):
    """Light mode starts no sidecar or any other process."""
    before = psutil.Process().children()
    wrapped = profiled(hold, mode="light")
    wrapped(1)
    assert psutil.Process().children() == before


def test_stats_reach_the_driver_and_errors_are_kept(clean_env):
    """With an endpoint, each job's stats reach the Subscriber; a failing job says so."""
    def maybe_fail(x):
        if x < 0:
            raise ValueError("negative")
        return hold(x)

    with Subscriber() as sub:
        wrapped = profiled(maybe_fail, mode="light", endpoint=sub.endpoint)
        assert wrapped(10) == 10 * MB
        with pytest.raises(ValueError):
            wrapped(-1)
        assert wrapped.last_stats["wall_s"] >= 0
        assert sub.wait(jobs=2, timeout=10)
        t = sub.timeline()
    ok, bad = t.jobs
    assert ok.status == "ok" and ok.stats["peak_rss_bytes"] > 10 * MB
    assert bad.status == "error" and bad.error == "ValueError: negative" and "wall_s" in bad.stats
    (w,) = t.workers.values()
    assert w.lost == 0 and w.id.endswith(":light")


@pytest.mark.accuracy
def test_forked_child_reads_its_own_counters(clean_env, tmp_path):
    """Light jobs hold /proc/self files open: a child forked after one reads its own, not its
    parent's (20 MB written and 100 MB held in the child's job show as the child's)."""
    wrapped = profiled(hold, mode="light")
    wrapped(1)  # the parent's files are open now

    def child_job():
        with open(tmp_path / "f", "wb") as f:
            for _ in range(20):
                f.write(b"\0" * MB)
        return hold(100)

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its stats to the parent, then out without the parent's atexit
        code = 1
        try:
            os.close(read)
            child = profiled(child_job, mode="light")
            before = _rss()
            child()
            s = child.last_stats
            os.write(write, json.dumps({"grew": s["peak_rss_bytes"] - before,
                                        "write_chars": s["write_chars"]}).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        got = json.loads(f.read())
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert got["write_chars"] >= 20 * MB, got
    assert abs(got["grew"] - 100 * MB) <= 14 * MB, got
