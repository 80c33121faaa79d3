"""Shared fixtures. Every test must leave no sidecar, child process or socket behind."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading

import psutil
import pytest

from workerscope import Subscriber, protocol
from workerscope.worker import light
from workerscope.worker import link as launcher


def _is_mp_helper(p: psutil.Process) -> bool:
    """multiprocessing's own long-lived helper (resource tracker), shared by all tests."""
    try:
        return "multiprocessing.resource_tracker" in " ".join(p.cmdline())
    except psutil.Error:
        return False


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _orphan_sidecars() -> list[int]:
    """Sidecar processes of ours that no link owns any more (a live link's is not a leak:
    sidecars are kept for the next job by design)."""
    owned = {link.proc.pid for link in launcher._links.values() if link.proc is not None}
    out = []
    for p in psutil.Process().children():
        try:
            if (p.pid not in owned and p.status() != psutil.STATUS_ZOMBIE
                    and "workerscope.sidecar" in " ".join(p.cmdline())):
                out.append(p.pid)
        except psutil.Error:
            continue  # it ended while we looked
    return out


@pytest.fixture(scope="session", autouse=True)
def _mp_resource_tracker():
    """multiprocessing's tracker keeps a pipe open for the session once a spawn pool starts it:
    start it first, so it is not counted as a test's leak."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    try:  # matplotlib keeps its font file open once it has drawn text: open it now
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig = plt.figure()
        fig.text(0.5, 0.5, "warm-up")
        fig.canvas.draw()
        plt.close(fig)
    except ImportError:
        matplotlib = None  # PNG tests skip themselves


@pytest.fixture(autouse=True)
def no_leaks():
    """Fail a test that leaves a sidecar nobody owns, a child process, or an open file or
    socket behind."""
    fds = _fds()
    yield
    orphans = _orphan_sidecars()
    launcher.close_all(wait=True)
    light._close_senders()
    assert not orphans, f"sidecars left running that no link owns: {orphans}"
    gc.collect()  # pools and the like close their pipes when collected
    leaked = {}
    for fd in _fds() - fds:
        try:
            leaked[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed since we listed it
    assert not leaked, f"file descriptors left open: {leaked}"
    me = psutil.Process()
    kids = [p for p in me.children(recursive=True) if not _is_mp_helper(p)]
    _, alive = psutil.wait_procs(kids, timeout=10)
    left = []
    for p in alive:
        try:
            left.append((p.pid, " ".join(p.cmdline())[:120]))
            p.kill()
        except psutil.NoSuchProcess:
            continue  # it ended just now, on its own
    psutil.wait_procs(alive, timeout=5)
    assert not left, f"test left processes running: {left}"


@pytest.fixture
def clean_env(monkeypatch):
    """No WORKERSCOPE_* variable from the caller's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith("WORKERSCOPE_"):
            monkeypatch.delenv(name)
    return monkeypatch


def python_script(code: str) -> list[str]:
    """argv running `code` (dedented) in a fresh interpreter."""
    return [sys.executable, "-c", textwrap.dedent(code)]


def burn_code(seconds: float) -> str:
    return f"import time\nt = time.perf_counter() + {seconds}\nwhile time.perf_counter() < t: pass\n"


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workerscope", *args], capture_output=True,
                          text=True, timeout=timeout)


class SampleCounter:
    """A Subscriber that counts sample frames, so a test can wait for the sampler to tick
    instead of sleeping."""

    def __init__(self) -> None:
        self.count = 0
        self._cond = threading.Condition()
        self.sub = Subscriber(on_frame=self._on_frame)

    def _on_frame(self, frame: protocol.Frame) -> None:
        if frame.kind == protocol.SAMPLE:
            with self._cond:
                self.count += 1
                self._cond.notify_all()

    @property
    def endpoint(self) -> str:
        return self.sub.endpoint

    def wait(self, more: int, timeout: float = 30) -> None:
        with self._cond:
            target = self.count + more
            assert self._cond.wait_for(lambda: self.count >= target, timeout), "no samples came"


@pytest.fixture
def samples():
    """A started SampleCounter; pass .endpoint to monitor() and call .wait(n)."""
    counter = SampleCounter()
    with counter.sub:
        yield counter
        launcher.close_all(wait=True)  # sidecars say bye while the driver still answers
