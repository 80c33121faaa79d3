"""Unit tests start no process: a test here that forks, spawns or execs fails, whether or not
the child is gone by its end (the root conftest's no_leaks catches only those left running).
Tests that need a real process, sidecar or socket peer belong in tests/integration."""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess

import pytest

_STARTS = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")


@pytest.fixture(autouse=True)
def no_processes(monkeypatch):
    """Fail a unit test that starts a process (fork, spawn, subprocess, os.system)."""
    started: list[str] = []

    def refuse(name):
        def start(*args, **kwargs):
            started.append(name)
            raise AssertionError(f"a unit test started a process ({name}): move it to tests/integration")
        return start

    for name in _STARTS:
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse(name))
    # multiprocessing's spawn calls fork_exec through its module; subprocess bound it at import.
    monkeypatch.setattr(_posixsubprocess, "fork_exec", refuse("fork_exec"))
    monkeypatch.setattr(subprocess, "_fork_exec", refuse("fork_exec"))
    yield
    assert not started, f"a unit test started a process: {started}"
