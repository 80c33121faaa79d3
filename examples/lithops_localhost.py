"""Lithops: FunctionExecutor.map(profiled(fn, ...), items), here on the localhost backend.

    pip install 'workerscope[lithops]'
    python examples/lithops_localhost.py

On a cloud backend, workers must reach the driver: run the Subscriber on a host they can
reach (Subscriber("tcp://0.0.0.0:5555")), or use mode="light" and read each call's
`last_stats`, which needs no connection at all.
"""

import sys

import lithops

from workerscope import Subscriber, profiled, timed


@timed
def work(x):
    return sum(i * x for i in range(1_000_000))


if __name__ == "__main__":
    with Subscriber() as sub:
        wrapped = profiled(work, mode="heavy", interval=0.1, endpoint=sub.endpoint)
        fexec = lithops.FunctionExecutor(config={
            "lithops": {"backend": "localhost", "storage": "localhost"},
            "localhost": {"runtime": sys.executable}})  # the workers need this environment
        fexec.map(wrapped, range(4))
        print(fexec.get_result())
        sub.wait(jobs=4, timeout=60)
        print("wrote", sub.timeline().save("lithops.html"))
