"""Cost per call of `@timed` and `span()`, off and under an active monitor, against baselines.

    python benchmarks/bench_timed.py            # the C fast path, if it was built
    WORKERSCOPE_PURE_PYTHON=1 python benchmarks/bench_timed.py   # the pure-Python writer

Baselines in the same run: an empty loop (its cost is subtracted to give the "net" column), a
bare call of the undecorated function, and a minimal hand-written decorator and context manager
that do what any span recorder must: two perf_counter_ns() calls and a list.append of a tuple.
Each case is timed with perf_counter_ns over N iterations; the best of REPEATS runs is kept.
The garbage collector stays on, as in a real worker.

"monitor active" runs each repeat inside its own `with workerscope.monitor(interval=1.0)`:
each span is a record written into the process's span ring (shared memory) when it begins,
its end patched in when it ends, while the sidecar reads the ring every 50 ms from its own
process; so the sidecar's share of the CPUs is in the figure. The ring is sized to hold the
N spans of a repeat (WORKERSCOPE_RING_RECORDS), so the count of spans that come back checks
that none was lost. The time `monitor()` takes at exit to bring them back as a Timeline (the
sidecar reads what is left in the ring, then the frames come back) is printed apart.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

# A WORKERSCOPE_* variable in the caller's environment would change what is measured
# (WORKERSCOPE_PURE_PYTHON, which picks the writer, is the one kept).
for _var in [v for v in os.environ if v.startswith("WORKERSCOPE_")]:
    if _var != "WORKERSCOPE_PURE_PYTHON":
        del os.environ[_var]

import psutil  # noqa: E402

import workerscope  # noqa: E402
from workerscope.worker import recorder  # noqa: E402
from workerscope.worker.link import close_all  # noqa: E402

N = 200_000
REPEATS = 5
NAME = "x"
# Room in the ring for every span of a repeat, so none is overwritten before it is read.
os.environ["WORKERSCOPE_RING_RECORDS"] = str(1 << (N - 1).bit_length())


def noop() -> None:
    return None


def minimal_decorator(fn: Callable[..., Any], records: list) -> Callable[..., Any]:
    """The floor for a pure-Python span recorder: what @timed must do at least."""
    clock = time.perf_counter_ns

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        result = fn(*args, **kwargs)
        records.append((start, clock()))
        return result

    return wrapper


class MinimalSpan:
    """The floor for a context-manager span: two clock reads and an append."""

    __slots__ = ("records", "start")

    def __init__(self, records: list) -> None:
        self.records = records

    def __enter__(self) -> MinimalSpan:
        self.start = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.records.append((self.start, time.perf_counter_ns()))


# -- loops: one function per shape so every case pays the same loop overhead ----------------
def loop_empty(n: int) -> None:
    for _ in range(n):
        pass


def loop_call(fn: Callable[[], Any], n: int) -> None:
    for _ in range(n):
        fn()


def loop_minimal_span(records: list, n: int) -> None:
    for _ in range(n):
        with MinimalSpan(records):
            pass


def loop_span(n: int) -> None:
    span = workerscope.span
    for _ in range(n):
        with span(NAME):
            pass


def time_once(run: Callable[[int], None]) -> float:
    """ns per iteration of one run of N iterations."""
    t0 = time.perf_counter_ns()
    run(N)
    return (time.perf_counter_ns() - t0) / N


def best_of(run: Callable[[int], None], between: Callable[[], None] = lambda: None) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        best = min(best, time_once(run))
        between()
    return best


def best_of_monitored(run: Callable[[int], None], label: str,
                      span_cpu: bool = False) -> tuple[float, float, int]:
    """Best ns/iteration with a monitor active; also the slowest monitor exit (s) and the
    fewest of the N spans that came back in a timeline (they should all come back).
    span_cpu: with each span's thread CPU read at its edges (the span_cpu setting)."""
    best, slowest_exit, fewest = float("inf"), 0.0, N
    for _ in range(REPEATS):
        with workerscope.monitor(interval=1.0, span_cpu=span_cpu) as m:
            best = min(best, time_once(run))
            t_exit = time.perf_counter()
        slowest_exit = max(slowest_exit, time.perf_counter() - t_exit)
        got = sum(1 for s in m.timeline.spans if s.name == label) if m.timeline else 0
        fewest = min(fewest, got)
    return best, slowest_exit, fewest


def main() -> int:
    records: list = []
    clear = records.clear
    timed_noop = workerscope.timed(noop)
    minimal_noop = minimal_decorator(noop, records)

    try:
        empty = best_of(loop_empty)
        bare = best_of(lambda n: loop_call(noop, n))
        minimal = best_of(lambda n: loop_call(minimal_noop, n), clear)
        timed_off = best_of(lambda n: loop_call(timed_noop, n))
        timed_on, timed_exit, timed_back = best_of_monitored(
            lambda n: loop_call(timed_noop, n), timed_noop.__qualname__)
        minimal_cm = best_of(lambda n: loop_minimal_span(records, n), clear)
        span_off = best_of(loop_span)
        span_on, span_exit, span_back = best_of_monitored(loop_span, NAME)
        # Two ring records a span with span_cpu: a ring that holds them all.
        timed_cpu, _, timed_cpu_back = best_of_monitored(
            lambda n: loop_call(timed_noop, n), timed_noop.__qualname__, span_cpu=True)
        span_cpu, _, span_cpu_back = best_of_monitored(loop_span, NAME, span_cpu=True)
    finally:
        close_all(wait=True)
        left = psutil.Process().children(recursive=True)
        if left:
            print(f"LEFT BEHIND: {[p.pid for p in left]}", file=sys.stderr)

    rows = [
        ("empty loop (overhead, subtracted in 'net')", empty, None),
        ("bare call of noop()", bare, None),
        ("minimal decorator: 2 perf_counter_ns + append", minimal, None),
        ("@timed noop(), no monitor", timed_off, minimal),
        ("@timed noop(), monitor active", timed_on, minimal),
        ("@timed noop(), monitor active, span_cpu", timed_cpu, minimal),
        ("minimal context manager: same work", minimal_cm, None),
        ('with span("x"): pass, no monitor', span_off, minimal_cm),
        ('with span("x"): pass, monitor active', span_on, minimal_cm),
        ('with span("x"): pass, monitor active, span_cpu', span_cpu, minimal_cm),
    ]
    writer = "C fast path" if recorder.fast is not None else "pure-Python writer"
    print(f"workerscope {workerscope.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; {N} iterations, best of {REPEATS}, gc on; {writer}")
    print()
    print(f"{'case':<48} {'ns/iter':>9} {'net ns':>9} {'net / minimal':>14}")
    print("-" * 83)
    for label, ns, base in rows:
        net = ns - empty
        net_s = "-" if label.startswith("empty") else f"{net:9.1f}"
        ratio = "" if base is None else f"{net / (base - empty):13.2f}x"
        print(f"{label:<48} {ns:9.1f} {net_s:>9} {ratio:>14}".rstrip())
    print()
    print(f"monitor exit with {N} spans to bring back: @timed {timed_exit:.2f} s, "
          f"span {span_exit:.2f} s (slowest of {REPEATS})")
    print(f"spans back in the timelines: @timed {timed_back}/{N}, span {span_back}/{N}; "
          f"with span_cpu {timed_cpu_back}/{N}, {span_cpu_back}/{N} (fewest of {REPEATS})")
    back = (timed_back, span_back, timed_cpu_back, span_cpu_back)
    return 0 if all(b == N for b in back) and not left else 1


if __name__ == "__main__":
    sys.exit(main())
