"""Lithops: an executor whose every function call is a job, with the function unwrapped.

    fexec = profiled_executor(lithops.FunctionExecutor(...), endpoint=sub.endpoint)
    fexec.map(work, items)          # each call a job on its worker's sidecar

Lithops has no hook that runs code around a call in its workers: what it ships is the function
and its data. So the executor wraps each function it is given in `profiled` before Lithops
ships it (map, call_async, map_reduce); everything else is the executor's own. The other route
needs no wrapper object: `fexec.map(profiled(work), items, extra_env={"WORKERSCOPE_ENDPOINT":
sub.endpoint, "WORKERSCOPE_MODE": "heavy"})`, Lithops' `extra_env` setting the workers'
variables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config import Options, resolve
from ..worker.jobs import check_out, profiled

if TYPE_CHECKING:
    from typing_extensions import Unpack


class profiled_executor:
    """A Lithops FunctionExecutor (or any object with its map/call_async/map_reduce) whose
    functions run as profiled jobs. Options are profiled's; the mode is light unless given:
    Lithops runs each call in a process of its own (on localhost, and in a cold serverless
    container), where heavy mode would start a sidecar for every call (~125 ms each here).
    mode="heavy" samples each call's process tree over time, at that cost."""

    def __init__(self, executor: Any, **options: Unpack[Options]) -> None:
        if options.get("mode") is None:
            options["mode"] = "light"
        self.options: dict[str, Any] = dict(options)
        check_out(resolve(**self.options).out, folder=False)  # a bad option fails here
        self.executor = executor

    def _wrap(self, fn: Callable[..., Any]) -> Any:
        return profiled(fn, **self.options)

    def call_async(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.executor.call_async(self._wrap(func), *args, **kwargs)

    def map(self, map_function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.executor.map(self._wrap(map_function), *args, **kwargs)

    def map_reduce(self, map_function: Callable[..., Any], map_iterdata: Any,
                   reduce_function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.executor.map_reduce(self._wrap(map_function), map_iterdata,
                                        self._wrap(reduce_function), *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.executor, name)  # get_result, wait, clean, ...: the executor's

    def __enter__(self) -> profiled_executor:
        self.executor.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self.executor.__exit__(*exc)
