"""Waiting for the sidecar's exit is woken by the exit, not by Popen's polling, whose sleeps
double up to 50 ms (a sidecar that took 17 ms to exit kept its worker waiting 32 at exit)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from workerscope.worker import link

# A child that exits once its stdin closes: its exit comes when the test says.
WAITS_FOR_EOF = [sys.executable, "-c", "import sys; sys.stdin.buffer.read()"]


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every time.sleep the subprocess module makes (its poll loop), recorded."""
    made: list[float] = []
    real = subprocess.time.sleep  # type: ignore[attr-defined]

    def sleep(seconds: float) -> None:
        made.append(seconds)
        real(seconds)

    monkeypatch.setattr(subprocess.time, "sleep", sleep)  # type: ignore[attr-defined]
    return made


def _child() -> subprocess.Popen[bytes]:
    return subprocess.Popen(WAITS_FOR_EOF, stdin=subprocess.PIPE)


def test_an_exit_wakes_the_wait_without_polling(sleeps: list[float]) -> None:
    proc = _child()
    assert proc.stdin is not None
    proc.stdin.close()
    assert link.await_exit(proc, 60) == 0
    assert proc.returncode == 0
    assert sleeps == []  # Popen.wait(timeout) sleeps 0.5, 1, 2 ... 50 ms between looks


def test_a_child_that_does_not_exit_times_out(sleeps: list[float]) -> None:
    proc = _child()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            link.await_exit(proc, 0.05)
        assert proc.poll() is None
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    assert sleeps == []


def test_a_child_already_reaped_returns_its_status() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    assert link.await_exit(proc, 60) == 3


def test_close_all_waits_without_polling(sleeps: list[float]) -> None:
    """A real sidecar, closed with wait=True: waited for on its pidfd, and gone after."""
    import workerscope

    workerscope.profiled(lambda: None, mode="heavy")()
    running = [lk for lk in link._links.values() if lk.proc is not None]
    assert running
    link.close_all(wait=True)
    assert all(lk.proc is not None and lk.proc.returncode is not None for lk in running)
    assert sleeps == []


def test_a_child_reaped_by_someone_else_is_not_waited_for() -> None:
    """The job's own os.waitpid took the sidecar's status: nothing is left to wait for, and
    its pid (free again) is not opened as if it were still the sidecar's."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitpid(proc.pid, 0)
    assert link.await_exit(proc, 5) == 0  # Popen's own answer for a child reaped elsewhere
