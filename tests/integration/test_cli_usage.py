"""The command line as a shell sees it: --version, and bad command lines as usage errors."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

import pytest


def workerscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workerscope", *args], capture_output=True,
                          text=True, timeout=60)


def test_version_prints_the_installed_version():
    """`workerscope --version` prints `workerscope X.Y.Z` (the installed package's) and exits 0."""
    try:
        expected = version("workerscope")
    except PackageNotFoundError:
        expected = "0+unknown"
    r = workerscope("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"workerscope {expected}\n"
    assert re.fullmatch(r"workerscope \d+(\.\d+)*\S*\n|workerscope 0\+unknown\n", r.stdout)


@pytest.mark.parametrize("args", [("run",), ("run", "--")])
def test_run_with_nothing_to_run_is_a_usage_error(args):
    """`workerscope run` with no command after -- says what to give, and exits 2."""
    r = workerscope(*args)
    assert r.returncode == 2
    assert r.stderr.startswith("workerscope: nothing to run: give a command after --"), r.stderr
    assert "Traceback" not in r.stderr


def test_attach_to_a_pid_that_does_not_exist_is_a_usage_error():
    """`workerscope attach 999999999` names the missing process and exits 2."""
    r = workerscope("attach", "999999999")
    assert r.returncode == 2
    assert r.stderr == "workerscope: no process 999999999\n"


def test_a_negative_sample_budget_is_a_usage_error_before_the_file_is_read(tmp_path):
    """`report --max-sample-mib -1` is refused before the file is opened, exit 2."""
    r = workerscope("report", str(tmp_path / "missing.wsc"), "--max-sample-mib", "-1")
    assert r.returncode == 2
    assert r.stderr == "workerscope: --max-sample-mib must be 0 (every sample) or more\n"


def test_importing_the_cli_leaves_the_heavy_parts_unloaded():
    """`import workerscope.cli` loads no pyzmq, driver, sidecar, worker link, builder, record
    reader, terminal view or importlib.metadata: the CLI's start-up stays cheap."""
    code = ("import sys, workerscope.cli; print('\\n'.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True, timeout=60).stdout.split())
    heavy = {"zmq", "importlib.metadata", "workerscope.driver", "workerscope.sidecar",
             "workerscope.worker.link", "workerscope.builder", "workerscope.record",
             "workerscope.export.terminal", "workerscope.export.live", "workerscope.demo"}
    assert not heavy & loaded, heavy & loaded
