"""The embedded demo job that `workerscope demo` runs: a small pool of workers doing CPU,
memory and IO work under @timed functions, all followed live by one Subscriber."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from .driver.subscriber import Subscriber
from .timeline import Timeline
from .worker.instruments import mark, span, timed
from .worker.jobs import profiled


@timed
def burn_cpu(seconds: float) -> int:
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


@timed
def hold_memory(mb: int, seconds: float) -> int:
    block = bytearray(mb * 1024 * 1024)
    for i in range(0, len(block), 4096):  # touch every page so it is really resident
        block[i] = 1
    time.sleep(seconds)
    return len(block)


@timed("write_file")
def write_file(mb: int) -> int:
    fd, path = tempfile.mkstemp(prefix="workerscope-demo-")
    try:
        chunk = os.urandom(1024 * 1024)
        with os.fdopen(fd, "wb") as f:
            for _ in range(mb):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
    finally:
        os.unlink(path)
    return mb


@timed
def helper_process(seconds: float) -> int:
    """A child process: the worker's tree grows, and its CPU is counted in the tree."""
    code = f"import time\nt=time.perf_counter()+{seconds}\nwhile time.perf_counter()<t: pass"
    return subprocess.run([sys.executable, "-c", code], check=True).returncode


def task(i: int) -> dict[str, Any]:
    mark("task_start", item=i)
    burn_cpu(0.3 + 0.1 * (i % 3))
    hold_memory(40 + 20 * (i % 3), 0.3)
    with span("io", item=i):
        write_file(8)
    if i % 2 == 0:
        helper_process(0.4)
    return {"item": i, "pid": os.getpid()}


def run_demo(out_dir: str = "workerscope-demo", workers: int = 3, tasks: int = 6,
             interval: float = 0.1) -> tuple[Timeline, list[str]]:
    """Run the demo; returns the merged timeline and the files written."""
    os.makedirs(out_dir, exist_ok=True)
    with Subscriber() as sub:
        job = profiled(task, mode="heavy", endpoint=sub.endpoint, interval=interval)
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            results = list(pool.map(job, range(tasks)))
        sub.wait(jobs=tasks, byes=workers, timeout=30)
        timeline = sub.timeline()
    assert len(results) == tasks
    paths = [timeline.save(os.path.join(out_dir, name))
             for name in ("demo.wsc", "demo.json", "demo.html")]
    return timeline, paths


def jobs_seconds(timeline: Timeline) -> float:
    """Seconds from the first job's start to the last job's end: what the jobs took, without
    the process pool's start-up before them (spawning interpreters that import workerscope)."""
    if not timeline.jobs:
        return 0.0
    first = min(j.start_ns for j in timeline.jobs)
    last = max(j.end_ns or j.start_ns for j in timeline.jobs)
    return (last - first) / 1e9
