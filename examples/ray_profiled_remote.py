"""Ray: @profiled_remote(...) in place of @ray.remote(...); every call of the task is a job.

    pip install 'workerscope[ray]'
    python examples/ray_profiled_remote.py

workerscope's options and Ray's go in one call. Bare, @profiled_remote takes its settings from
the workers' environment, which runtime_env's env_vars set for every worker (as below).
"""

import ray

from workerscope import Subscriber, timed
from workerscope.engines import profiled_remote


@timed
def square_sum(x):
    return sum(i * x for i in range(1_000_000))


@profiled_remote(interval=0.1, num_cpus=1)     # endpoint: from WORKERSCOPE_ENDPOINT below
def work(x):
    return square_sum(x)


if __name__ == "__main__":
    with Subscriber() as sub:
        ray.init(num_cpus=2, include_dashboard=False,
                 runtime_env={"env_vars": {"WORKERSCOPE_ENDPOINT": sub.endpoint}})
        try:
            print(ray.get([work.remote(i) for i in range(4)]))
        finally:
            ray.shutdown()
        sub.wait(jobs=4, timeout=60)
        print("wrote", sub.timeline().save("ray.html"))
