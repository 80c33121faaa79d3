"""Profile every task of a ProcessPoolExecutor and look at all workers on one timeline.

    python examples/process_pool.py        # writes pool.json: open it in https://ui.perfetto.dev
"""

import concurrent.futures
import time

from workerscope import Subscriber, profiled, span, timed


@timed
def fetch(i):
    time.sleep(0.1)
    return list(range(100_000 * (i + 1)))


@timed
def reduce_rows(rows):
    return sum(x * x for x in rows)


def task(i):
    rows = fetch(i)
    with span("reduce", rows=len(rows)):
        return reduce_rows(rows)


if __name__ == "__main__":
    with Subscriber() as sub:
        wrapped = profiled(task, mode="heavy", interval=0.1, endpoint=sub.endpoint)
        with concurrent.futures.ProcessPoolExecutor(2) as pool:
            print(list(pool.map(wrapped, range(4))))
        sub.wait(jobs=4, timeout=30)
        timeline = sub.timeline()
    print("wrote", timeline.save("pool.json"), "- lost frames:", sub.lost)
