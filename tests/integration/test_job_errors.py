"""A job that raises keeps its exception's message and traceback, in every mode."""

from __future__ import annotations

import pytest

from workerscope import monitor, profiled


def failing_step(row: int) -> None:
    raise ValueError(f"bad row {row}")


def _job_span(t):
    [span] = [s for s in t.spans if s.kind == "job"]
    return span


@pytest.mark.parametrize("mode", ["heavy", "light"])
def test_a_job_that_raises_keeps_message_and_traceback(clean_env, mode):
    """monitor(): the job's error is "ValueError: bad row 7" and its span holds the traceback
    down to the function that raised."""
    m = monitor(mode=mode, interval=0.5)
    with pytest.raises(ValueError), m:
        failing_step(7)
    [job] = m.timeline.jobs
    assert job.status == "error" and job.error == "ValueError: bad row 7"
    span = _job_span(m.timeline)
    assert span.error == "ValueError: bad row 7"
    assert "failing_step" in span.attrs["traceback"]


@pytest.mark.parametrize("mode", ["heavy", "light"])
def test_a_profiled_job_that_raises_keeps_its_message(clean_env, tmp_path, mode):
    """profiled(): the same, for the job of a wrapped function."""
    wrapped = profiled(failing_step, mode=mode, interval=0.5, out=str(tmp_path / "j.wsc"))
    with pytest.raises(ValueError):
        wrapped(3)
    [job] = wrapped.last_timeline.jobs
    assert job.error == "ValueError: bad row 3"
    assert "failing_step" in _job_span(wrapped.last_timeline).attrs["traceback"]
