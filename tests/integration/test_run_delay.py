"""Run delay (time runnable, waiting for a CPU) in the thread samples, against a real hog on
the same core: the evidence of a CPU-starved straggler (export/causes.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from workerscope.sidecar.tree import ProcessTree


def test_a_thread_waiting_for_a_cpu_shows_run_delay():
    """A thread of this process spinning on one core that a hog process shares: it waits for
    the core about as long as it runs, and its thread samples say so."""
    core = max(os.sched_getaffinity(0))
    hog = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})"
                            "\nwhile True: pass\n"])
    tree = ProcessTree(os.getpid())
    tree.discover()
    stop = threading.Event()
    tids: list[int] = []

    def spin() -> None:
        os.sched_setaffinity(0, {core})
        tids.append(threading.get_native_id())
        while not stop.is_set():
            pass

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        while not tids:
            time.sleep(0.01)
        tid = tids[0]
        tree.watch_thread(os.getpid(), tid)
        tree.read(time.monotonic_ns(), full=True)
        first = {row[1]: row[2] for row in tree.read_threads(time.monotonic_ns())}[tid]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until it has run 0.3 s of CPU
            tree.read(time.monotonic_ns(), full=True)
            now = {row[1]: row[2] for row in tree.read_threads(time.monotonic_ns())}[tid]
            ran = now["cpu_user_s"] + now["cpu_system_s"] - first["cpu_user_s"] - first["cpu_system_s"]
            if ran >= 0.3:
                break
            time.sleep(0.05)
        waited = now["run_delay_s"] - first["run_delay_s"]
    finally:
        stop.set()
        thread.join()
        hog.kill()
        hog.wait()
        tree.close()
    assert waited >= 0.5 * ran, (ran, waited)  # the hog had the core about half the time
