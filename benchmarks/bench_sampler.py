"""Sidecar CPU cost per tick for a worker's process tree, against the raw /proc floor and a
naive psutil loop, for trees of 1, 8, 64 and 256 processes; and the host sampler's tick.

    python benchmarks/bench_sampler.py

Each tree is real: a Python root process with `sleep 600` children (a tree of 1 is the root
alone). The root kills and reaps its children when its stdin closes, so nothing outlives this
script even if it is killed; the finally blocks close it, wait for it, and check that no child
of this script is left.

Cases, each over SAMPLES samples of the same tree (fewer for 256), best of REPEATS, CPU time
of this process (time.process_time: user + system, so the kernel's work on /proc counts):
  raw open/read/close   the floor: os.open/os.read/os.close of /proc/PID/stat, statm and io of
                        the tree's pids, known in advance; no discovery, no parsing
  steady tick           workerscope's sampler between its slow ticks, walking the tree each
                        time: ProcessTree.discover() then read(now), the tree kept across
                        samples, its files held open and re-read with pread (stat, io, children),
                        every member read as if it had run since the last tick
  ... cheap discovery   the same as the sidecar runs it: discover(cheap=True), see below
  ... quiet members     the sidecar's regular tick on this sleeping tree: a single-threaded
                        member that has not run since its last reading (its schedstat is the
                        same) costs one small pread, its stat and io are not read again
  slow tick             the same with every tier read (read(full=True)): status (VmHWM,
                        context switches), the fd count and the thread lists, as once a
                        second and at each job's edges
  USS tick              a slow tick that also reads smaps_rollup (USS/PSS), as every 10 s
  naive psutil          what psrecord does each tick: psutil.Process(root).children(recursive=
                        True), so a new Process object per pid per sample, then cpu_times(),
                        memory_info() and io_counters() of each
The summary fits cost = a + b * processes over the four trees (least squares) for the floor
and the steady tick: b is the marginal cost of one more process in a tick. Then
HostSampler.read() alone (per-core CPU, memory, cgroup, disk, network, load): one host tick;
and a regular tick between its once-a-second reads (CPU and memory only).
"cheap discovery" is the sidecar's regular tick: it walks the children files only when a
process was created in the pid namespace since the last walk (or a member exited, or a second
passed), so on a quiet host it reads none; on a busy one (other processes starting) it walks.
Targets (issue 11): marginal steady tick <= 1.0x the floor's; host tick <= 150 us.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable

import psutil

from workerscope.sidecar.host import HostSampler
from workerscope.sidecar.tree import ProcessTree

SIZES = (1, 8, 64, 256)
SAMPLES = 200
REPEATS = 3
HOUR = 3600 * 10**9

# The tree's root: starts n `sleep 600` children, says ready, then waits for its stdin to
# close (the benchmark is done, or died) and kills and reaps its children.
ROOT = r"""
import subprocess, sys
kids = [subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        for _ in range(int(sys.argv[1]))]
print("ready", flush=True)
sys.stdin.read()
for k in kids:
    k.kill()
for k in kids:
    k.wait()
"""


class Tree:
    """A real process tree of `size` processes, rooted at a child of this script."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.root = subprocess.Popen([sys.executable, "-c", ROOT, str(size - 1)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def __enter__(self) -> Tree:
        try:
            assert self.root.stdout is not None
            if self.root.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the tree root did not start (exit {self.root.poll()})")
            self.pids = [self.root.pid] + [p.pid for p in
                                           psutil.Process(self.root.pid).children(recursive=True)]
            if len(self.pids) != self.size:
                raise RuntimeError(f"expected {self.size} processes, found {len(self.pids)}")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        assert self.root.stdin is not None
        try:
            self.root.stdin.close()  # the root kills and reaps its children
            self.root.wait(timeout=10)
        except subprocess.TimeoutExpired:
            for kid in psutil.Process(self.root.pid).children(recursive=True):
                kid.kill()
            self.root.kill()
            self.root.wait()
        finally:
            if self.root.stdout is not None:
                self.root.stdout.close()


# -- the cases: each returns a function that takes one sample ---------------------------------
def raw_floor(pids: list[int]) -> Callable[[], None]:
    paths = [f"/proc/{pid}/{name}" for pid in pids for name in ("stat", "statm", "io")]
    o, r, c, flags = os.open, os.read, os.close, os.O_RDONLY

    def sample() -> None:
        for path in paths:
            fd = o(path, flags)
            try:
                r(fd, 4096)
            finally:
                c(fd)

    return sample


def tree_tick(tree: ProcessTree, full: bool = False, uss: bool = False,
              cheap: bool = False, quiet: bool = False) -> Callable[[], None]:
    def sample() -> None:
        tree.skip_quiet = quiet
        if uss:
            tree._uss_t = None  # due now
        tree.discover(cheap=cheap)
        tree.read(time.monotonic_ns(), full=full)

    return sample


def sampling_second(tree: ProcessTree, host: HostSampler, waits: bool) -> Callable[[], None]:
    """What the sidecar reads in a second at interval 0.1 s: 9 regular ticks and a slow one
    (as each second, and at a job's edges) of the tree, the root's threads and the host,
    with the straggler evidence (run delay, major faults, block IO delay, throttling,
    pressure, clocks) read or not."""
    def sample() -> None:
        tree.read_waits = host.evidence = waits
        tree.skip_quiet = True
        for k in range(10):
            now = time.monotonic_ns()
            tree.discover(cheap=True)
            tree.read(now, full=k == 9)
            tree.read_threads(now)
            host.read(now, full=k == 9)

    return sample


def naive_psutil(root: int) -> Callable[[], None]:
    def sample() -> None:
        parent = psutil.Process(root)
        for proc in [parent, *parent.children(recursive=True)]:
            try:
                proc.cpu_times()
                proc.memory_info()
                proc.io_counters()
            except psutil.Error:
                pass  # a process that left between listing and reading, as psrecord does

    return sample


def cpu_us_per_sample(sample: Callable[[], object], samples: int) -> float:
    sample()  # warm: the first reading opens the files (or makes the objects) a tick reuses
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.process_time()
        for _ in range(samples):
            sample()
        best = min(best, (time.process_time() - t0) / samples * 1e6)
    return best


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(a, b) of cost = a + b * n, least squares."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - b * mx, b


def main() -> int:
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, psutil {psutil.__version__}, "
          f"{len(psutil.pids())} processes on the host; {SAMPLES} samples (50 at 256), best of "
          f"{REPEATS}, CPU time of the sampling process")
    print()
    print(f"{'procs':>5}  {'case':<44} {'us/sample':>10} {'us/proc':>9} {'x floor':>8}")
    print("-" * 81)
    floor_pts: list[tuple[int, float]] = []
    tick_pts: list[tuple[int, float]] = []
    quiet_pts: list[tuple[int, float]] = []
    evidence: list[tuple[int, float, float]] = []
    try:
        for size in SIZES:
            samples = SAMPLES if size < 256 else 50
            with Tree(size) as t:
                root = t.root.pid
                tree = ProcessTree(root, exclude=frozenset({os.getpid()}), slow_every_ns=HOUR,
                                   uss_every_ns=HOUR)
                tree.discover()
                _, procs = tree.read(time.monotonic_ns())
                if len(procs) != size:  # the benchmark means something only if all are read
                    raise RuntimeError(f"ProcessTree read {len(procs)} of {size} processes")
                cases = [
                    ("raw open/read/close: stat, statm, io (floor)", raw_floor(t.pids)),
                    ("steady tick: discover + read (pread)", tree_tick(tree)),
                    ("  the same, cheap discovery", tree_tick(tree, cheap=True)),
                    ("  the same, quiet members (the sidecar's)",
                     tree_tick(tree, cheap=True, quiet=True)),
                    ("slow tick: + status, fds, threads", tree_tick(tree, full=True)),
                    ("USS tick: + smaps_rollup", tree_tick(tree, full=True, uss=True)),
                    ("naive psutil (psrecord-style)", naive_psutil(root)),
                ]
                floor = None
                for label, sample in cases:
                    us = cpu_us_per_sample(sample, samples)
                    floor = floor or us
                    print(f"{size:>5}  {label:<44} {us:10.1f} {us / size:9.1f} {us / floor:7.2f}x")
                    if label.startswith("raw"):
                        floor_pts.append((size, us))
                    elif label.startswith("steady"):
                        tick_pts.append((size, us))
                    elif "quiet" in label:
                        quiet_pts.append((size, us))
                # The straggler evidence, on and off in turns (best of each), a second at a time.
                second = ProcessTree(root, exclude=frozenset({os.getpid()}), slow_every_ns=HOUR,
                                     uss_every_ns=HOUR)
                second.discover()
                second.watch_thread(root, root)
                host = HostSampler(root)
                off = on = float("inf")
                for _ in range(3):
                    off = min(off, cpu_us_per_sample(sampling_second(second, host, False),
                                                     max(samples // 10, 5)))
                    on = min(on, cpu_us_per_sample(sampling_second(second, host, True),
                                                   max(samples // 10, 5)))
                print(f"{size:>5}  {'a second at 0.1 s, no straggler evidence':<44} {off:10.1f} "
                      f"{off / size:9.1f}")
                print(f"{size:>5}  {'  the same, with it (as the sidecar runs)':<44} {on:10.1f} "
                      f"{on / size:9.1f} {on / off:7.2f}x")
                evidence.append((size, off, on))
                second.close()
                host.close()
                tree.close()
            print()
    finally:
        left = psutil.Process().children(recursive=True)
        if left:
            print(f"LEFT BEHIND: {[p.pid for p in left]}", file=sys.stderr)
    fa, fb = fit(floor_pts)
    ta, tb = fit(tick_pts)
    qa, qb = fit(quiet_pts)
    host = HostSampler()
    host_us = cpu_us_per_sample(host.read, 2000)
    host.read(time.monotonic_ns())
    host_tick_us = cpu_us_per_sample(lambda: host.read(time.monotonic_ns(), full=False), 2000)
    host.close()
    print("Marginal cost of one more process in a tick (cost = a + b * processes, least squares "
          "over 1, 8, 64, 256):")
    print(f"  floor (open/read/close stat+statm+io)  b = {fb:6.2f} us/proc   (a = {fa:6.1f} us)")
    print(f"  steady tick (pread, discovery incl.)    b = {tb:6.2f} us/proc   (a = {ta:6.1f} us)"
          f"   {tb / fb:.2f}x the floor (target <= 1.0x)")
    print(f"  the same, members quiet (the sidecar's) b = {qb:6.2f} us/proc   (a = {qa:6.1f} us)"
          f"   {qb / fb:.2f}x the floor")
    print(f"Host sampler tick (HostSampler.read(), {os.cpu_count()} cores): {host_us:.1f} us "
          f"(target <= 150 us); between its once-a-second reads (CPU and memory only): "
          f"{host_tick_us:.1f} us")
    worst = max(on / off for _, off, on in evidence)
    print("The straggler evidence (run delay, major faults, block IO delay, cgroup throttling, "
          "pressure, clocks), a second of sampling at 0.1 s with it against without: "
          + ", ".join(f"{n} procs {on / off:.3f}x" for n, off, on in evidence)
          + f"; at most {worst - 1:+.1%} (target <= +10%)")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
