"""Sidecar CPU cost per sample of a worker's process tree, against a naive psutil loop and a
raw /proc floor, for trees of 1, 8 and 64 processes.

    python benchmarks/bench_sampler.py

Each tree is real: a Python root process with `sleep 600` children (a tree of 1 is the root
alone). The root kills and reaps its children when its stdin closes, so nothing outlives this
script even if it is killed; the finally blocks close it, wait for it, and check that no child
of this script is left.

Cases, each over SAMPLES samples of the same tree, best of REPEATS, CPU time of this process
(time.process_time: user + system, so the kernel's work on /proc counts):
  raw /proc reads     the floor: os.open/os.read/os.close of /proc/PID/stat, statm and io of
                      the tree's pids, known in advance; no discovery, no parsing
  ProcessTree ...     workerscope's sampler (sidecar/tree.py): discover() then read(now), the
                      tree and its psutil.Process objects kept across samples, as the sidecar
                      does; also discover() alone. read() takes USS/PSS (smaps_rollup) at most
                      once per uss_every_ns (1 s): back-to-back samples skip it almost always,
                      while a sidecar ticking at the default 1 s interval pays it every tick,
                      so it is measured both ways; the last ProcessTree row adds
                      HostSampler().read(): the sidecar's whole reading per tick at an
                      interval >= 1 s, minus encoding and sending the frame
  naive psutil        what psrecord does each tick: psutil.Process(root).children(recursive=
                      True), so a new Process object per pid per sample, then cpu_times(),
                      memory_info() and io_counters() of each
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from typing import Callable

import psutil

from workerscope.sidecar.host import HostSampler
from workerscope.sidecar.tree import ProcessTree

SIZES = (1, 8, 64)
SAMPLES = 200
REPEATS = 3

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

    def __enter__(self) -> "Tree":
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


def tree_discover(root: int) -> Callable[[], None]:
    tree = ProcessTree(root, exclude=frozenset({os.getpid()}))

    def sample() -> None:
        tree.discover()

    return sample


def tree_sampler(root: int, uss_every_ns: int | None = None,
                 with_host: bool = False) -> Callable[[], None]:
    kwargs = {} if uss_every_ns is None else {"uss_every_ns": uss_every_ns}
    tree = ProcessTree(root, exclude=frozenset({os.getpid()}), **kwargs)
    host = HostSampler() if with_host else None

    def sample() -> None:
        tree.discover()
        tree.read(time.monotonic_ns())
        if host is not None:
            host.read()

    return sample


def naive_psutil(root: int) -> Callable[[], None]:
    def sample() -> None:
        parent = psutil.Process(root)
        for proc in [parent] + parent.children(recursive=True):
            try:
                proc.cpu_times()
                proc.memory_info()
                proc.io_counters()
            except psutil.Error:
                pass  # a process that left between listing and reading, as psrecord does

    return sample


def cpu_us_per_sample(sample: Callable[[], None]) -> float:
    sample()  # warm: the first reading creates the psutil objects a kept tree reuses
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.process_time()
        for _ in range(SAMPLES):
            sample()
        best = min(best, (time.process_time() - t0) / SAMPLES * 1e6)
    return best


def check_tree_sees(tree: Tree) -> None:
    """The benchmark means something only if ProcessTree finds the whole tree."""
    pt = ProcessTree(tree.root.pid, exclude=frozenset({os.getpid()}))
    pt.discover()
    pt.discover()
    _, procs = pt.read(time.monotonic_ns())
    if len(procs) != tree.size:
        raise RuntimeError(f"ProcessTree read {len(procs)} of {tree.size} processes")


def main() -> int:
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, psutil {psutil.__version__}, "
          f"{len(psutil.pids())} processes on the host; {SAMPLES} samples, best of {REPEATS}, "
          f"CPU time of the sampling process")
    print()
    print(f"{'procs':>5}  {'case':<44} {'us/sample':>10} {'us/proc':>9} {'x floor':>8}")
    print("-" * 81)
    try:
        for size in SIZES:
            with Tree(size) as tree:
                check_tree_sees(tree)
                root = tree.root.pid
                cases = [
                    ("raw /proc reads: stat, statm, io (floor)", raw_floor(tree.pids)),
                    ("ProcessTree.discover() only", tree_discover(root)),
                    ("ProcessTree discover + read, uss <= 1/s", tree_sampler(root)),
                    ("ProcessTree discover + read, uss each time", tree_sampler(root, 0)),
                    ("  + HostSampler.read(): one tick at >= 1 s", tree_sampler(root, 0, True)),
                    ("naive psutil (psrecord-style)", naive_psutil(root)),
                ]
                floor = None
                for label, sample in cases:
                    us = cpu_us_per_sample(sample)
                    floor = floor or us
                    print(f"{size:>5}  {label:<44} {us:10.1f} {us / size:9.1f} {us / floor:7.1f}x")
            print()
    finally:
        left = psutil.Process().children(recursive=True)
        if left:
            print(f"LEFT BEHIND: {[p.pid for p in left]}", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
