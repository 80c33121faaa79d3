"""Subscriber.live() rows from real workers: failed jobs counted, no CPU for an ended worker
(issue 14)."""

from __future__ import annotations

import pytest
from helpers import burn

from workerscope import monitor, profiled
from workerscope.worker import link as launcher


def maybe_fail(x):
    if x < 0:
        raise ValueError("negative")
    return x


def row_of(sub, suffix):
    return next(r for r in sub.live() if str(r["worker"]).endswith(suffix))


def test_rows_count_failed_jobs_per_worker(clean_env, samples):
    """Each row counts the jobs of its worker that ended in failure; a worker with none shows 0."""
    sub = samples.sub
    wrapped = profiled(maybe_fail, endpoint=sub.endpoint)
    wrapped(1)
    for x in (-1, -2):
        with pytest.raises(ValueError):
            wrapped(x)
    with monitor(interval=0.5, endpoint=sub.endpoint):
        pass
    assert sub.wait(jobs=4, timeout=20)
    assert row_of(sub, ":light")["failed_jobs"] == 2
    heavy = next(r for r in sub.live() if not str(r["worker"]).endswith(":light"))
    assert heavy["failed_jobs"] == 0


def _last_tree(sub):
    tree = [x for x in sub.timeline().samples if x.scope == "tree"]
    return max(tree, key=lambda x: x.t_ns).values


def test_an_ended_worker_shows_no_cpu(clean_env, samples):
    """A running worker's row carries its CPU; once it has said bye, its last reading is not
    what it uses now, and the row shows none (its last RSS stays)."""
    sub = samples.sub
    for jobs in range(1, 30):
        with monitor(interval=0.05, endpoint=sub.endpoint):
            samples.wait(2)
            burn(0.06)
            (running,) = sub.live()
            assert running["status"] == "running"
        assert sub.wait(jobs=jobs, timeout=20)
        # A job's last sample carries a rate only when it came long enough after a tick;
        # the case this test is about needs one.
        if "cpu_percent" in _last_tree(sub):
            break
    (idle,) = sub.live()
    assert idle["cpu_percent"] is None, "an idle worker's last reading is not now either"
    launcher.close_all(wait=True)
    assert sub.wait(byes=1, timeout=20)
    (ended,) = sub.live()
    assert ended["status"] == "exited"
    assert ended["cpu_percent"] is None and ended["gpu_util_percent"] is None
    assert ended["rss_bytes"] is not None
