"""Dask distributed: one worker plugin, and every task is a job; no function wrapped.

    pip install 'workerscope[dask]'
    python examples/dask_plugin.py

Each task is a job named after its key, with the @timed functions and span() blocks it ran
under it, on one sidecar per worker process (started with the plugin, closed when the worker
closes). On a real cluster, bind the Subscriber where the workers can reach it, e.g.
Subscriber("tcp://0.0.0.0:5555"), and hand the plugin sub.endpoint with <driver-host> in place
of 0.0.0.0 (keep the ?curve=... part: it holds the keys the workers need).
"""

import dask.bag as db
from dask.distributed import Client, LocalCluster

from workerscope import Subscriber, span, timed
from workerscope.engines import WorkerscopePlugin


@timed
def primes_below(n):
    return [k for k in range(2, n) if all(k % d for d in range(2, int(k**0.5) + 1))]


def count_primes(n):                   # a plain function: the plugin makes each call a job
    with span("count", below=n):
        return len(primes_below(n))


if __name__ == "__main__":
    with Subscriber() as sub:
        with LocalCluster(n_workers=2, threads_per_worker=2, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            client.register_plugin(WorkerscopePlugin(endpoint=sub.endpoint, interval=0.1))
            print(client.gather(client.map(count_primes, range(10_000, 90_000, 10_000))))
            bag = db.from_sequence(range(1_000, 9_000, 1_000), npartitions=4)
            print(bag.map(count_primes).sum().compute())
        # The workers have closed: each sidecar said bye once its last task was in.
        sub.wait(byes=2, timeout=60)
        timeline = sub.timeline()
    print(len(timeline.jobs), "jobs, e.g.", ", ".join(sorted(j.name for j in timeline.jobs)[:3]))
    print("wrote", timeline.save("dask-plugin.html"), timeline.save("dask-plugin.json"))
