"""Overhead per call of `workerscope.profiled(fn, mode=...)` for a no-op fn, against a bare call.

    python benchmarks/bench_profiled.py

Two tables:

* First call in a fresh process: a new interpreter per run (FRESH_RUNS runs per case) imports
  workerscope, wraps the no-op and calls it once; heavy mode's first call starts the sidecar
  process and waits for its handshake. The import and the close of the sidecar
  (close_all(wait=True), which waits for it to exit) are timed apart from the call.
* Warm calls in this process, best of a few repeats, against a bare call of the same no-op.
  Heavy calls without `out` do not wait for the sidecar: they write job_start and job_end to
  its pipe. The sidecar takes a sample at each, so a burst of jobs longer than the pipe's
  buffer runs at the sidecar's pace; both a short burst (with a pause between repeats for the
  sidecar to catch up) and a long run of back-to-back calls are measured. `with monitor():`
  waits for the job's timeline to come back. The sidecar's CPU time per call is read with
  psutil from the sidecar process itself.
* The cost of the audit hook that counts the environment's changes (so an off call reads no
  variable) on the process's other audited events, in a new interpreter before and after it
  is added.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

# A WORKERSCOPE_* variable in the caller's environment would change what is measured.
for _var in [v for v in os.environ if v.startswith("WORKERSCOPE_")]:
    del os.environ[_var]

import psutil  # noqa: E402

import workerscope  # noqa: E402
from workerscope.worker.link import close_all  # noqa: E402

FRESH_RUNS = 5
REPEATS = 5

# Runs in a new interpreter: argv[1] is bare, light or heavy. Prints one JSON line.
FRESH = r"""
import json, sys, time
t0 = time.perf_counter()
import psutil
import workerscope
from workerscope.worker.link import close_all
t1 = time.perf_counter()

def noop():
    return None

mode = sys.argv[1]
fn = noop if mode == "bare" else workerscope.profiled(noop, mode=mode)
t2 = time.perf_counter()
fn()
t3 = time.perf_counter()
close_all(wait=True)
t4 = time.perf_counter()
left = [p.pid for p in psutil.Process().children(recursive=True)]
print(json.dumps({"import": t1 - t0, "first": t3 - t2, "close": t4 - t3, "left": left}))
"""


# Runs in a new interpreter: audited events (sys._getframe, open) before and after the
# environment watch's audit hook is added, best ns per call. Prints one JSON line.
HOOK = r"""
import json, sys, time
from workerscope.worker import envwatch

def best(fn, n, r=7):
    b = float("inf")
    for _ in range(r):
        t = time.perf_counter_ns()
        for _ in range(n):
            fn()
        b = min(b, (time.perf_counter_ns() - t) / n)
    return b

def frame():
    sys._getframe()

def devnull():
    open("/dev/null", "rb").close()

before = {"sys._getframe()": best(frame, 200_000), "open('/dev/null').close()": best(devnull, 20_000)}
assert envwatch.start(), "the audit hook was not added"
after = {"sys._getframe()": best(frame, 200_000), "open('/dev/null').close()": best(devnull, 20_000)}
print(json.dumps({"before": before, "after": after}))
"""


def noop() -> None:
    return None


# What a light job reads at its start and at its end, for the floors below: getrusage of the
# process and of its reaped children, /proc/stat, /proc/self/io, /proc/self/net/dev and
# /proc/self/status, and at the start a write to /proc/self/clear_refs (the peak's reset).
_LIGHT_FILES = ("/proc/stat", "/proc/self/io", "/proc/self/net/dev", "/proc/self/status")


def _open_reads(reset: bool) -> None:
    resource.getrusage(resource.RUSAGE_SELF)
    resource.getrusage(resource.RUSAGE_CHILDREN)
    if reset:
        with open("/proc/self/clear_refs", "wb") as f:
            f.write(b"5")
    for path in _LIGHT_FILES:
        with open(path, "rb") as f:
            f.read()


def raw_reads(fn: Callable[[], Any]) -> Callable[[], Any]:
    """The floor a light job is held to: the same files opened and read (and clear_refs
    written) at fn's start and end, as a minimal hand-written tool would, nothing parsed."""
    def call() -> Any:
        _open_reads(True)
        out = fn()
        _open_reads(False)
        return out
    return call


def held_reads(fn: Callable[[], Any]) -> Callable[[], Any]:
    """The syscall floor: the same files held open and read with one pread each."""
    fds = [os.open(p, os.O_RDONLY) for p in _LIGHT_FILES]
    refs = os.open("/proc/self/clear_refs", os.O_WRONLY)

    def reads() -> None:
        resource.getrusage(resource.RUSAGE_SELF)
        resource.getrusage(resource.RUSAGE_CHILDREN)
        for fd in fds:
            os.pread(fd, 65536, 0)

    def call() -> Any:
        os.write(refs, b"5")
        reads()
        out = fn()
        reads()
        return out
    return call


def hook_cost(pure: bool) -> dict[str, dict[str, float]]:
    """The C hook, or with pure the Python one (no C fast path, WORKERSCOPE_PURE_PYTHON=1)."""
    env = {**os.environ, "WORKERSCOPE_PURE_PYTHON": "1" if pure else "0"}
    done = subprocess.run([sys.executable, "-c", HOOK], capture_output=True, text=True,
                          timeout=120, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the audit hook run failed:\n{done.stderr}")
    out: dict[str, dict[str, float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


# New interpreters run as an installed package does, with its bytecode cached: an environment
# that sets PYTHONDONTWRITEBYTECODE would have every run compile every module it imports.
FRESH_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

# Whole processes, timed from their start to their exit: a bare interpreter, one importing
# workerscope, and one running a heavy job (the sidecar started, the job's end delivered).
PROCESSES = {
    "python -c pass": "pass",
    "python -c 'import workerscope'": "import workerscope",
    "the same + one heavy job of a no-op": (
        "import workerscope\n"
        "workerscope.profiled(lambda: None, mode='heavy')()\n"),
}


def process_ms() -> dict[str, list[float]]:
    """Each process of PROCESSES timed FRESH_RUNS times, the three interleaved round by round."""
    out: dict[str, list[float]] = {label: [] for label in PROCESSES}
    for _ in range(FRESH_RUNS):
        for label, code in PROCESSES.items():
            t0 = time.perf_counter()
            # wait() with no timeout blocks in waitpid; with one it polls, in steps of up to 50 ms.
            if subprocess.Popen([sys.executable, "-c", code], env=FRESH_ENV).wait() != 0:
                raise RuntimeError(f"{label} failed")
            out[label].append((time.perf_counter() - t0) * 1e3)
    return out


def fresh(mode: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", FRESH, mode], capture_output=True, text=True,
                          timeout=120, env=FRESH_ENV)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"fresh {mode} run failed:\n{done.stderr}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if out["left"]:
        raise RuntimeError(f"fresh {mode} run left processes behind: {out['left']}")
    out["wall"] = wall
    return out


def sidecar() -> psutil.Process | None:
    for proc in psutil.Process().children():
        try:
            if "workerscope.sidecar" in " ".join(proc.cmdline()):
                return proc
        except psutil.Error:
            continue
    return None


def cpu_s(proc: psutil.Process | None) -> float:
    if proc is None:
        return float("nan")
    t = proc.cpu_times()
    return t.user + t.system


def warm(fn: Callable[[], Any], calls: int, repeats: int, pause: float = 0.0,
         side: psutil.Process | None = None) -> tuple[float, float]:
    """Best us per call over `repeats` runs of `calls` calls, and the sidecar's CPU us per call
    over all the runs (nan when no sidecar): its CPU times tick in 10 ms, too coarse for one run."""
    best = float("inf")
    c0 = cpu_s(side)
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / calls / 1e3)
        if pause:
            time.sleep(pause)  # the sidecar catches up before the next run
    # The sidecar samples only while a job is open, so the pauses add nothing to its CPU time.
    return best, (cpu_s(side) - c0) / (calls * repeats) * 1e6


def with_monitor() -> None:
    with workerscope.monitor():
        noop()


def main() -> int:
    print(f"workerscope {workerscope.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs")
    left: list[psutil.Process] = []
    try:
        fresh("heavy")  # writes the bytecode of every module a heavy job imports
        runs = {mode: [fresh(mode) for _ in range(FRESH_RUNS)] for mode in ("bare", "light", "heavy")}
        whole = process_ms()
        hooks = {"C": hook_cost(False), "Python": hook_cost(True)}

        heavy = workerscope.profiled(noop, mode="heavy")
        light = workerscope.profiled(noop, mode="light")
        off = workerscope.profiled(noop, mode="off")
        heavy()  # starts this process's sidecar, which the warm calls below reuse
        side = sidecar()
        if side is None:
            raise RuntimeError("no sidecar process found after a heavy call")
        cases = [
            ("bare noop()", *warm(noop, 100_000, REPEATS), "100000"),
            ('profiled(mode="off")', *warm(off, 100_000, REPEATS), "100000"),
            ("floor: raw reads of light's files (open)", *warm(raw_reads(noop), 5_000, REPEATS),
             "5000"),
            ("floor: the same, held open (pread)", *warm(held_reads(noop), 5_000, REPEATS),
             "5000"),
            ('profiled(mode="light")', *warm(light, 5_000, REPEATS), "5000"),
            ('profiled(mode="heavy"), bursts of 100', *warm(heavy, 100, REPEATS, 1.0, side), "100"),
            ('profiled(mode="heavy"), 2000 back to back', *warm(heavy, 2_000, 3, 1.0, side), "2000"),
            ("with monitor(): noop()", *warm(with_monitor, 200, 3, 0.0, side), "200"),
        ]
        now = sidecar()
        if now is None or now.pid != side.pid:
            raise RuntimeError("the sidecar changed during the warm calls: its CPU column is wrong")
    finally:
        close_all(wait=True)
        left = psutil.Process().children(recursive=True)
        if left:
            print(f"LEFT BEHIND: {[p.pid for p in left]}", file=sys.stderr)

    print()
    print(f"First call in a fresh process, ms ({FRESH_RUNS} runs each)")
    print(f"{'case':<52} {'median':>9} {'min':>9} {'max':>9}")
    print("-" * 82)
    rows = [
        ("import workerscope", [r["import"] for r in runs["heavy"]]),
        ("bare noop(): first call", [r["first"] for r in runs["bare"]]),
        ('profiled(mode="light"): first call', [r["first"] for r in runs["light"]]),
        ('profiled(mode="heavy"): first call, starts sidecar', [r["first"] for r in runs["heavy"]]),
        ("close_all(wait=True) after it: sidecar exits", [r["close"] for r in runs["heavy"]]),
        ("whole heavy run: interpreter, import, call, close", [r["wall"] for r in runs["heavy"]]),
    ]
    for label, secs in rows:
        ms = [s * 1e3 for s in secs]
        print(f"{label:<52} {statistics.median(ms):9.3f} {min(ms):9.3f} {max(ms):9.3f}")

    print()
    print(f"Whole processes, ms ({FRESH_RUNS} runs each)")
    print(f"{'process':<52} {'median':>9} {'min':>9} {'max':>9}")
    print("-" * 82)
    for label, ms in whole.items():
        print(f"{label:<52} {statistics.median(ms):9.3f} {min(ms):9.3f} {max(ms):9.3f}")
    labels = list(PROCESSES)
    cold = min(whole[labels[2]]) / min(whole[labels[1]])
    print(f"a cold heavy job / the import's process, fastest of each: {cold:.2f}x (want <= 2x)")

    bare = cases[0][1]
    print()
    print(f"Warm calls in one process, us per call (best of {REPEATS}; of 3 for the last two)")
    print(f"{'case':<44} {'calls':>7} {'us/call':>9} {'added us':>9} {'sidecar CPU us/call':>20}")
    print("-" * 93)
    for label, us, side_cpu, calls in cases:
        added = "-" if label.startswith("bare") else f"{us - bare:9.2f}"
        side_s = "-" if side_cpu != side_cpu else f"{side_cpu:.0f}"  # nan: no sidecar involved
        print(f"{label:<44} {calls:>7} {us:9.2f} {added:>9} {side_s:>20}")
    by = {label: us for label, us, _, _ in cases}
    light_us = by['profiled(mode="light")']
    print(f"light / its raw reads: {light_us / by[cases[2][0]]:.2f}x (want <= 1.5x); "
          f"/ the same held open: {light_us / by[cases[3][0]]:.2f}x")

    print()
    print("The environment watch's audit hook on the process's other audited events, ns per call")
    print(f"{'hook':<7} {'event':<30} {'no hook':>9} {'hook':>9} {'added ns':>9}")
    print("-" * 68)
    for kind, hook in hooks.items():
        for label, ns in hook["before"].items():
            after = hook["after"][label]
            print(f"{kind:<7} {label:<30} {ns:9.1f} {after:9.1f} {after - ns:9.1f}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
