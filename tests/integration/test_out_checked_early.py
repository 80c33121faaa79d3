"""An out= path the worker's machine cannot hold is said when the job starts, not at its end."""

from __future__ import annotations

import logging

import pytest

from workerscope import profiled


@pytest.mark.parametrize("mode", ["heavy", "light"])
def test_out_under_a_file_is_said_before_the_job_runs(clean_env, tmp_path, caplog, mode):
    """out= under a regular file: a warning naming the path comes before fn's first line runs,
    and the job still runs and returns its result."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    out = str(blocker / "job-{pid}.wsc")
    said_before: list[bool] = []

    def work() -> int:
        said_before.append(any("not-a-folder" in r.getMessage() for r in caplog.records))
        return 42

    wrapped = profiled(work, mode=mode, interval=0.5, out=out)
    with caplog.at_level(logging.WARNING, logger="workerscope"):
        assert wrapped() == 42
    assert said_before == [True]
