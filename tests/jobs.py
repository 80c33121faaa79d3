"""Job functions shipped to worker processes (importable by name, so they pickle)."""

from __future__ import annotations

import os
import time

from workerscope import timed


@timed
def load_rows(n):
    return list(range(n))


@timed
def crunch(rows):
    end = time.thread_time() + 0.05  # CPU time: the same work however busy the machine
    while time.thread_time() < end:
        pass
    return sum(rows)


def job(n):
    return {"n": n, "total": crunch(load_rows(n)), "pid": os.getpid()}


def wait_then_sleep(flag_path, seconds):
    """Announce the job is running (create flag_path), then sleep."""
    load_rows(3)
    with open(flag_path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(seconds)
    return "done"


def sleeps_a_second(k):
    """A job of 1 s that says when it started (wall ns, this host's clock) and where."""
    import os
    import time

    started = time.time_ns()
    time.sleep(1.0)
    return {"k": k, "started": started, "pid": os.getpid()}


def spanner_script(spans: int, **profiled_kwargs: object) -> str:
    """A worker script (run as `python -c SCRIPT ENDPOINT`): one heavy job that calls an empty
    @timed function `spans` times, a flood of spans as fast as the worker can make them."""
    kwargs = "".join(f", {k}={v!r}" for k, v in profiled_kwargs.items())
    return (
        "import sys\n"
        "from workerscope import profiled, timed\n"
        "@timed\n"
        "def tick():\n"
        "    pass\n"
        "def job():\n"
        f"    for _ in range({spans}):\n"
        "        tick()\n"
        f"profiled(job, mode='heavy', interval=0.05, endpoint=sys.argv[1]{kwargs})()\n")
