"""Shared fixtures. Every test must leave no sidecar, child process or socket behind.
Helpers the tests import live in helpers.py, record and frame factories in factories.py.
tests/unit starts no process (its conftest fails a test that does); tests/integration holds
the tests with real processes, sidecars, sockets and browsers."""

from __future__ import annotations

import gc
import os
import sys

import psutil
import pytest
from helpers import TEST_ENV, SampleCounter, is_mp_helper, open_fds, orphan_sidecars

from workerscope.worker import light
from workerscope.worker import link as launcher

# The test environment's settings (helpers.TEST_ENV), set before anything starts so sidecars,
# pool workers and CLI subprocesses inherit them; clean_env keeps them.
os.environ.update(TEST_ENV)

# Test modules share their fixed timelines and browser helpers by import (`from test_deaths
# import death_timeline`), across tests/unit and tests/integration: both are on the path
# whichever of them is run.
HERE = os.path.dirname(os.path.abspath(__file__))
for _folder in ("unit", "integration"):
    if os.path.join(HERE, _folder) not in sys.path:
        sys.path.append(os.path.join(HERE, _folder))


@pytest.fixture(scope="session", autouse=True)
def _light_files():
    """Light jobs hold their /proc files open for the process's life (light._OwnFiles): open
    them first, so they are not counted as a test's leak."""
    light._own_files()


@pytest.fixture(scope="session", autouse=True)
def _matplotlib_font():
    """matplotlib keeps its font file open once it has drawn text: open it first, so it is not
    counted as a test's leak."""
    try:
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
    fds = open_fds()
    yield
    orphans = orphan_sidecars()
    launcher.close_all(wait=True)
    light._close_senders()
    assert not orphans, f"sidecars left running that no link owns: {orphans}"
    gc.collect()  # pools and the like close their pipes when collected
    leaked = {}
    for fd in open_fds() - fds:
        try:
            leaked[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed since we listed it
    assert not leaked, f"file descriptors left open: {leaked}"
    me = psutil.Process()
    kids = [p for p in me.children(recursive=True) if not is_mp_helper(p)]
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
    """No WORKERSCOPE_* variable from the caller's shell leaks into a test; the test
    environment's own (TEST_ENV) stay. Returns monkeypatch, to set more."""
    for name in list(os.environ):
        if name.startswith("WORKERSCOPE_") and name not in TEST_ENV:
            monkeypatch.delenv(name)
    for name, value in TEST_ENV.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


@pytest.fixture
def samples():
    """A started SampleCounter; pass .endpoint to monitor() and call .wait(n)."""
    counter = SampleCounter()
    with counter.sub:
        yield counter
        launcher.close_all(wait=True)  # sidecars say bye while the driver still answers
