"""Dask distributed: client.map(profiled(fn, ...), items) on a LocalCluster.

    pip install 'workerscope[dask]'
    python examples/dask_cluster.py

On a real cluster, bind the Subscriber where the workers can reach it, e.g.
Subscriber("tcp://0.0.0.0:5555"), and pass its sub.endpoint with <driver-host> in place of
0.0.0.0 (keep the ?curve=... part: it holds the keys the workers need).
"""

from dask.distributed import Client, LocalCluster

from workerscope import Subscriber, profiled, span, timed


@timed
def load(i):
    return list(range(100_000 * (i + 1)))


def task(i):
    rows = load(i)
    with span("reduce", rows=len(rows)):
        return sum(rows)


if __name__ == "__main__":
    with Subscriber() as sub:
        wrapped = profiled(task, mode="heavy", interval=0.1, endpoint=sub.endpoint)
        with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            print(client.gather(client.map(wrapped, range(8))))
        sub.wait(jobs=8, timeout=60)
        timeline = sub.timeline()
    print("wrote", timeline.save("dask.html"), timeline.save("dask.json"))
