"""multiprocessing.Pool, fork or spawn: the job code is unchanged but for the wrapper.

    python examples/multiprocessing_pool.py [fork|spawn]
"""

import multiprocessing
import sys

from workerscope import Subscriber, profiled, timed


@timed
def square_sum(n):
    return sum(i * i for i in range(n))


def task(i):
    return square_sum(200_000 * (i + 1))


if __name__ == "__main__":
    method = sys.argv[1] if len(sys.argv) > 1 else "spawn"
    with Subscriber() as sub:
        wrapped = profiled(task, mode="heavy", interval=0.1, endpoint=sub.endpoint)
        with multiprocessing.get_context(method).Pool(2) as pool:
            print(pool.map(wrapped, range(6)))
        sub.wait(jobs=6, timeout=60)
        print("wrote", sub.timeline().save("multiprocessing.html"))
