"""Ray: `@profiled_remote(...)` in place of `@ray.remote(...)` makes every call of a task a job.

    @profiled_remote(endpoint=sub.endpoint, num_cpus=1)   # workerscope's options, then Ray's
    def work(x): ...
    ray.get([work.remote(i) for i in range(8)])

Ray offers no per-task hook in its workers: `runtime_env`'s `worker_process_setup_hook` runs
once per worker process, and nothing it can reach through Ray's public API sees the tasks that
follow. So the task function itself carries the job, as `ray.remote(profiled(fn, ...))` would;
this spares the user the nesting and the split of the options. Each `.remote()` call of a task
made so stamps the time of the call, in the driver, as the job's submit time (the job's queue
time is how long Ray took to start it: scheduling, a worker's start, a free CPU); actor method
calls are not stamped. Without options the settings
come from the workers' environment: `ray.init(runtime_env={"env_vars":
{"WORKERSCOPE_ENDPOINT": sub.endpoint, "WORKERSCOPE_MODE": "heavy"}})` reaches every worker.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import ray

from ..config import SETTINGS
from ..worker.jobs import Queued, profiled

# profiled's options (every setting); every other keyword is Ray's.
_OURS = tuple(s.name for s in SETTINGS)


def profiled_remote(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """`ray.remote` over `profiled`: bare (`@profiled_remote`, settings from the workers'
    WORKERSCOPE_* variables, heavy mode unless they say otherwise) or called with profiled's
    options and ray.remote's together. On a function, each call of the task is a job; on a
    class, an actor, each call of one of its public methods a job named after the method."""
    ours = {k: options.pop(k) for k in _OURS if k in options}
    ours.setdefault("mode", "heavy")
    if fn is None:
        return lambda f: _remote(f, ours, options)
    return _remote(fn, ours, options)


def _remote(fn: Callable[..., Any], ours: dict[str, Any], theirs: dict[str, Any]) -> Any:
    if inspect.isclass(fn):
        actor = _actor(fn, ours)
        return ray.remote(**theirs)(actor) if theirs else ray.remote(actor)
    job = profiled(fn, **ours)

    def stamped(submitted: int, /, *args: Any, **kwargs: Any) -> Any:
        return Queued(job, submitted)(*args, **kwargs)

    # Ray names the task after the function and checks its arguments against its signature:
    # the name is the user's, the signature this one's (no __wrapped__ for Ray to follow).
    for attr in ("__name__", "__qualname__", "__module__", "__doc__"):
        setattr(stamped, attr, getattr(fn, attr, getattr(stamped, attr)))
    return _Stamped(ray.remote(**theirs)(stamped) if theirs else ray.remote(stamped))


class _Stamped:
    """A Ray remote function whose `.remote()` calls carry the time of the call (Ray's own
    for everything else: `.options()` gives another of these, the rest is Ray's)."""

    def __init__(self, remote: Any) -> None:
        self._remote = remote

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._remote.remote(time.time_ns(), *args, **kwargs)

    def options(self, **options: Any) -> _Stamped:
        return _Stamped(self._remote.options(**options))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._remote, name)


def _actor(cls: type, ours: dict[str, Any]) -> type:
    """A subclass of cls whose public methods (its own and inherited ones, not dunders) run
    as profiled jobs. Ray makes the actor of it as it would of cls."""
    methods = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        if inspect.isfunction(attr):  # plain methods: static and class methods stay as they are
            methods[name] = profiled(attr, **ours)
    if not methods:
        raise TypeError(f"profiled_remote: class {cls.__qualname__} has no public method to "
                        "run as a job")
    actor = type(cls.__name__, (cls,), {**methods, "__module__": cls.__module__,
                                         "__qualname__": cls.__qualname__,
                                         "__doc__": cls.__doc__})
    return actor
