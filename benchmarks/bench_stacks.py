"""bench_stacks: what stacks on demand cost, and how soon they come.

    .venv/bin/python benchmarks/bench_stacks.py [--requests N] [--rounds N]

Prints three tables:
- Request to stacks: Subscriber.stacks(worker) timed from the call to its answer, for a worker
  of 1, 8 and 64 threads, and for a tree of 16 processes (the worker and 15 forked children,
  each recording, each dumping its own threads), N requests each (default 20); the size of
  the mark frame that carried the dump (encoded as the sidecar sent it); and the median
  against the floor, the sidecar's quiet window plus one poll (QUIET_S + POLL_S).
- The installed handler's cost when never asked: @timed noop() with a monitor active, and a
  warm heavy profiled() job of nothing, in a process where the stacks handler is installed
  (the default) and in one where it is not (WORKERSCOPE_STACKS_SIGNAL names no signal), the
  two alternated round by round in the same run; best of 5 within a round, each round's
  figures printed.

The floor of the latency is the sidecar's: it reads a dump once its file has stopped growing
for sidecar/stacks.QUIET_S, looking every POLL_S.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

for _var in [v for v in os.environ if v.startswith("WORKERSCOPE_")]:
    del os.environ[_var]

import workerscope  # noqa: E402
from workerscope import Subscriber, protocol  # noqa: E402
from workerscope.sidecar import stacks as sidecar_stacks  # noqa: E402

WORKER = """
import os, sys, threading, time
from workerscope import monitor

threads, procs, endpoint = {threads}, {procs}, {endpoint!r}

def parked(ev):
    ev.wait()

ev = threading.Event()
with monitor(interval=0.2, endpoint=endpoint, name="bench"):
    for _ in range(threads - 1):
        threading.Thread(target=parked, args=(ev,), daemon=True).start()
    kids = []
    for _ in range(procs - 1):
        pid = os.fork()
        if pid == 0:  # a forked child records into a ring of its own, made at the fork
            os.read(0, 1)  # one byte each: a buffered readline would take the others' too
            os._exit(0)
        kids.append(pid)
    print("ready", flush=True)
    os.read(0, 1)
    ev.set()
for k in kids:
    os.waitpid(k, 0)
"""

COST = """
import json, time
from workerscope import monitor, profiled, timed

N, JOBS = 200_000, 300

@timed
def noop():
    pass

def nothing():
    pass

def per_call():
    t = time.perf_counter_ns()
    for _ in range(N):
        noop()
    return (time.perf_counter_ns() - t) / N

with monitor(interval=1.0):
    timed_ns = min(per_call() for _ in range(5))
run = profiled(nothing, mode="heavy", interval=1.0)
run()  # the sidecar starts here, once

def per_job():
    t = time.perf_counter_ns()
    for _ in range(JOBS):
        run()
    return (time.perf_counter_ns() - t) / JOBS / 1000

job_us = min(per_job() for _ in range(5))
from workerscope.worker import stacks
print(json.dumps({"timed_ns": timed_ns, "job_us": job_us, "installed": stacks.installed()}))
"""


class Dumps:
    """A Subscriber that also keeps the encoded size of each stacks mark frame."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.lock = threading.Lock()
        self.sub = Subscriber(on_frame=self.on_frame)

    def on_frame(self, frame: protocol.Frame) -> None:
        if frame.kind == protocol.MARK and any(
                isinstance(r, (list, tuple)) and len(r) > 4 and r[4] == protocol.STACKS_MARK
                for r in frame.body.get("records") or ()):
            size = len(protocol.encode_frame(frame.kind, frame.worker, frame.seq, frame.body))
            with self.lock:
                self.sizes.append(size)


def latency(threads: int, procs: int, requests: int) -> dict[str, Any]:
    dumps = Dumps()
    with dumps.sub as sub:
        code = WORKER.format(threads=threads, procs=procs, endpoint=sub.endpoint)
        worker = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert worker.stdout is not None and worker.stdin is not None
            assert worker.stdout.readline().strip() == "ready"
            assert sub.wait(started=1, timeout=60)
            (wid,) = sub.received
            # Until the sidecar's tree holds every process (it finds forked children at its
            # ticks), and each has named its threads.
            deadline = time.monotonic() + 60
            while True:
                dump = sub.stacks(wid, timeout=10) or {}
                seen = [p for p in dump.get("processes", ()) if p.get("threads")]
                if (len(seen) == procs and sum(len(p["threads"]) for p in seen)
                        == threads + procs - 1) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            got = len(seen), sum(len(p["threads"]) for p in seen)
            with dumps.lock:
                dumps.sizes.clear()
            took = []
            for _ in range(requests):
                t = time.perf_counter()
                answer = sub.stacks(wid, timeout=10)
                took.append(time.perf_counter() - t)
                assert answer is not None and "error" not in answer, answer
            worker.stdin.write("\n" * procs)  # a byte for the worker and each child
            worker.stdin.close()
            worker.wait(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
            if worker.stdout is not None:
                worker.stdout.close()
        sub.wait(jobs=1, byes=1, timeout=30)
        with dumps.lock:
            size = max(dumps.sizes, default=0)
    took.sort()
    return {"threads": threads, "procs": procs, "seen": got, "median_ms": 1e3 * statistics.median(took),
            "p90_ms": 1e3 * took[int(0.9 * (len(took) - 1))], "max_ms": 1e3 * took[-1],
            "frame_bytes": size}


def cost(installed: bool) -> dict[str, Any]:
    env = dict(os.environ)
    if not installed:
        env["WORKERSCOPE_STACKS_SIGNAL"] = "none"  # names no signal: nothing is installed
    r = subprocess.run([sys.executable, "-c", COST], capture_output=True, text=True, env=env,
                       timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"the cost run failed:\n{r.stderr}")
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["installed"] is installed, out
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"workerscope {workerscope.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; {args.requests} requests a row; the sidecar reads a dump "
          f"{sidecar_stacks.QUIET_S * 1e3:g} ms after its file stops growing, looking every "
          f"{sidecar_stacks.POLL_S * 1e3:g} ms")
    print()
    print("request to stacks (Subscriber.stacks, round trip)")
    floor_ms = (sidecar_stacks.QUIET_S + sidecar_stacks.POLL_S) * 1e3
    print(f"{'worker':<28}{'dumped':>14}{'median ms':>11}{'p90 ms':>9}{'max ms':>9}"
          f"{'frame B':>10}{'x floor':>9}")
    for threads, procs in ((1, 1), (8, 1), (64, 1), (1, 16)):
        r = latency(threads, procs, args.requests)
        what = f"{threads} thread(s), {procs} process(es)"
        dumped = f"{r['seen'][0]} p, {r['seen'][1]} t"
        print(f"{what:<28}{dumped:>14}{r['median_ms']:>11.1f}{r['p90_ms']:>9.1f}"
              f"{r['max_ms']:>9.1f}{r['frame_bytes']:>10,}{r['median_ms'] / floor_ms:>8.2f}x")
    print()
    print("never asked: the installed handler's cost (best of 5 in each round)")
    print(f"{'round':<7}{'@timed noop ns, on':>20}{'off':>8}{'job us, on':>13}{'off':>8}")
    on_t, off_t, on_j, off_j = [], [], [], []
    for k in range(args.rounds):
        off = cost(False)
        on = cost(True)
        on_t.append(on["timed_ns"])
        off_t.append(off["timed_ns"])
        on_j.append(on["job_us"])
        off_j.append(off["job_us"])
        print(f"{k + 1:<7}{on['timed_ns']:>20.1f}{off['timed_ns']:>8.1f}{on['job_us']:>13.1f}"
              f"{off['job_us']:>8.1f}")
    print(f"{'best':<7}{min(on_t):>20.1f}{min(off_t):>8.1f}{min(on_j):>13.1f}{min(off_j):>8.1f}")
    print(f"installed / not, at best: @timed {min(on_t) / min(off_t):.3f}x, job "
          f"{min(on_j) / min(off_j):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
