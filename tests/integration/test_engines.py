"""Real engines run profiled jobs unchanged but for the wrapper, and everything reaches the
driver: multiprocessing (fork and spawn), Dask distributed, Lithops localhost, Ray."""

from __future__ import annotations

import multiprocessing

import pytest
from helpers import lithops_clean, lithops_localhost, run_ray_driver
from jobs import job

from workerscope import Subscriber, profiled

pytestmark = pytest.mark.engines


def _check(sub, t, n_tasks):
    """Every task's job, spans and samples reached the driver, with nothing lost."""
    assert sub.wait(jobs=n_tasks, timeout=60)
    assert len(t.jobs) == n_tasks and all(j.status == "ok" for j in t.jobs)
    assert sum(s.name == "crunch" for s in t.spans) == n_tasks
    assert sum(s.name == "load_rows" for s in t.spans) == n_tasks
    for j in t.jobs:
        # Sampled at its edges, or sharing a sample taken a moment before (back-to-back jobs
        # shorter than a tick share them), and at every tick.
        samples = [s for s in t.samples if s.worker == j.worker and s.scope == "tree"
                   and j.start_ns - 20_000_000 <= s.t_ns <= j.end_ns + 1_000_000_000]
        assert samples, f"job {j.id} of {j.worker} has no samples"
    assert all(lost == 0 for lost in sub.lost.values())


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_pool(clean_env, method):
    """multiprocessing.Pool with fork and with spawn."""
    with Subscriber() as sub:
        wrapped = profiled(job, mode="heavy", interval=0.05, endpoint=sub.endpoint)
        with multiprocessing.get_context(method).Pool(2) as pool:
            results = pool.map(wrapped, range(6))
        assert [r["n"] for r in results] == list(range(6))
        assert sub.wait(jobs=6, timeout=60)
        _check(sub, sub.timeline(), 6)


def test_dask_local_cluster(clean_env):
    """Dask distributed: client.map over a LocalCluster of 2 worker processes."""
    distributed = pytest.importorskip("distributed")
    with Subscriber() as sub:
        wrapped = profiled(job, mode="heavy", interval=0.05, endpoint=sub.endpoint)
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as cluster, \
                distributed.Client(cluster) as client:
            results = client.gather(client.map(wrapped, range(8)))
        assert [r["n"] for r in results] == list(range(8))
        assert sub.wait(jobs=8, timeout=60)
        t = sub.timeline()
        _check(sub, t, 8)
        assert len(t.workers) == 2


def test_lithops_localhost(clean_env, tmp_path):
    """Lithops with its localhost backend and storage."""
    lithops = pytest.importorskip("lithops")
    with Subscriber() as sub:
        wrapped = profiled(job, mode="heavy", interval=0.05, endpoint=sub.endpoint)
        fexec = lithops_localhost(lithops)
        # Ship only the job module: workerscope itself is installed where the workers run.
        fexec.map(wrapped, range(4), include_modules=["jobs"])
        results = fexec.get_result()
        lithops_clean(fexec)
        assert [r["n"] for r in results] == list(range(4))
        assert sub.wait(jobs=4, timeout=60)
        _check(sub, sub.timeline(), 4)


RAY_DRIVER = """
import json, sys
import ray
from jobs import job
from workerscope import profiled

endpoint = sys.argv[1]

@ray.remote
@profiled(mode="heavy", interval=0.05, endpoint=endpoint)
def decorated(n):
    return job(n)

ray.init(num_cpus=2, include_dashboard=False)
try:
    remote = ray.remote(profiled(job, mode="heavy", interval=0.05, endpoint=endpoint))
    results = ray.get([remote.remote(i) for i in range(4)])
    results += ray.get([decorated.remote(i) for i in range(4, 6)])
finally:
    ray.shutdown()
print(json.dumps([r["n"] for r in results]))
"""


def test_ray(clean_env):
    """Ray tasks: `ray.remote(profiled(fn, ...))` as users write it, and `@ray.remote` over a
    function decorated with `@profiled(...)`. Ray's driver runs in a process of its own (it
    keeps descriptors open after shutdown); the Subscriber is here."""
    pytest.importorskip("ray")
    with Subscriber() as sub:
        assert run_ray_driver(RAY_DRIVER, sub.endpoint) == list(range(6))
        _check(sub, sub.timeline(), 6)
