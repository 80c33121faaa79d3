"""profiled() in a real process pool, all workers streaming into one Subscriber."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import pickle

import pytest
from jobs import job

from workerscope import Subscriber, profiled


@pytest.mark.engines
@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_pool_of_two_runs_six_heavy_jobs(clean_env, start_method):
    """6 calls over 2 workers: all jobs end at the driver, nothing lost, 12 inner + 6 job spans."""
    with Subscriber() as sub:
        wrapped = profiled(job, mode="heavy", interval=0.05, endpoint=sub.endpoint)
        ctx = multiprocessing.get_context(start_method)
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
            results = list(pool.map(wrapped, range(6)))
        assert sub.wait(jobs=6, timeout=30)
        assert sub.wait(byes=2, timeout=30), "each worker's sidecar says bye when the pool ends"
        t = sub.timeline()
    assert results == [job(n) | {"pid": r["pid"]} for n, r in enumerate(results)]
    assert len({r["pid"] for r in results}) == 2
    assert len(t.workers) == 2
    assert all(w.lost == 0 and w.status in ("exited", "ended") for w in t.workers.values())
    assert sub.bad_frames == 0
    inner = [s for s in t.spans if s.kind == "span"]
    jobs = [s for s in t.spans if s.kind == "job"]
    assert len(jobs) == 6 and len(inner) == 12
    assert sorted(s.name for s in inner) == ["crunch"] * 6 + ["load_rows"] * 6
    job_ids = {(s.worker, s.id) for s in jobs}
    assert all((s.worker, s.parent) in job_ids for s in inner), "inner spans nest under their job"
    assert all(j.status == "ok" for j in t.jobs)
    pids = {w.pid for w in t.workers.values()}
    assert {s.pid for s in t.samples if s.scope == "tree"} == pids


def test_profiled_pickles_and_returns_result_unchanged(clean_env):
    """The wrapper survives pickling with its options and returns fn's own result."""
    wrapped = profiled(job, mode="light", interval=0.5)
    clone = pickle.loads(pickle.dumps(wrapped))
    assert clone.options == wrapped.options
    assert clone(4) == job(4)
    assert clone.__name__ == "job"
    assert set(clone.last_stats) >= {"wall_s", "cpu_user_s", "cpu_system_s"}


def test_mode_off_and_env_override(clean_env):
    """mode off runs fn bare; WORKERSCOPE_MODE=off overrides a heavy argument in the worker."""
    clean_env.setenv("WORKERSCOPE_MODE", "off")
    wrapped = profiled(job, mode="heavy")
    assert wrapped(2) == job(2)
    assert wrapped.last_stats is None and wrapped.last_timeline is None
