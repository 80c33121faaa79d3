"""A job run in a multiprocessing child of the fork start method (Lithops' JobRunner, a Pool's
workers) ends with os._exit, which runs no atexit handler: the child's frames and bye must
still reach the driver. Lithops' localhost calls lost their light jobs this way on a loaded
machine."""

from __future__ import annotations

import multiprocessing

import pytest

from workerscope import Subscriber, profiled


def _call(endpoint: str, mode: str) -> None:
    assert profiled(lambda: sum(range(1000)), endpoint=endpoint, mode=mode,
                    interval=0.05)() == 499500


@pytest.mark.parametrize("mode", ["light", "heavy"])
def test_a_fork_child_s_job_and_bye_arrive(clean_env, mode):
    ctx = multiprocessing.get_context("fork")
    with Subscriber() as sub:
        p = ctx.Process(target=_call, args=(sub.endpoint, mode))
        p.start()
        p.join(120)
        assert p.exitcode == 0
        p.close()
        # The bye is what only a close at exit sends: it arrives at once or never.
        assert sub.wait(jobs=1, byes=1, timeout=30), (sub.received, mode)
        t = sub.timeline()
    assert [j.status for j in t.jobs] == ["ok"]
    assert [w.status for w in t.workers.values()] == ["exited"]
