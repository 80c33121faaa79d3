"""Ray: ray.remote(profiled(fn, ...)), or @ray.remote over @profiled(...): ray.remote takes
only functions, and a profiled function passes for one.

    pip install 'workerscope[ray]'
    python examples/ray_tasks.py
"""

import ray

from workerscope import Subscriber, profiled, timed


@timed
def work(x):
    return sum(i * x for i in range(1_000_000))


if __name__ == "__main__":
    with Subscriber() as sub:
        ray.init(num_cpus=2, include_dashboard=False)
        remote = ray.remote(profiled(work, mode="heavy", interval=0.1, endpoint=sub.endpoint))
        print(ray.get([remote.remote(i) for i in range(4)]))
        ray.shutdown()
        sub.wait(jobs=4, timeout=60)
        print("wrote", sub.timeline().save("ray.html"))
