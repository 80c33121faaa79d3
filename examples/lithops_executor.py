"""Lithops: profiled_executor(FunctionExecutor(...)) makes every call a job, functions unwrapped.

    pip install 'workerscope[lithops]'
    python examples/lithops_executor.py

On a cloud backend, workers must reach the driver: run the Subscriber on a host they can reach
(Subscriber("tcp://0.0.0.0:5555")), or use mode="light", which sends each call's counters as
one message and starts no sidecar.
"""

import sys

import lithops

from workerscope import Subscriber, timed
from workerscope.engines import profiled_executor


@timed
def square_sum(x):
    return sum(i * x for i in range(1_000_000))


def work(x):
    return square_sum(x)


if __name__ == "__main__":
    with Subscriber() as sub:
        fexec = profiled_executor(lithops.FunctionExecutor(config={
            "lithops": {"backend": "localhost", "storage": "localhost"},
            "localhost": {"runtime": sys.executable}}),  # the workers need this environment
            endpoint=sub.endpoint, interval=0.1)
        fexec.map(work, range(4))
        print(fexec.get_result())
        sub.wait(jobs=4, timeout=60)
        print("wrote", sub.timeline().save("lithops.html"))
