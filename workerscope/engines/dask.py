"""Dask: a worker plugin that makes every task a job, with no function wrapped.

    client.register_plugin(WorkerscopePlugin(endpoint=sub.endpoint))

Dask runs a task in a thread of the worker's executor, several at once when the worker has
several threads. WorkerPlugin's hooks (setup, teardown, transition) run on the worker's event
loop, not in that thread, so a job begun there would own neither the task's spans nor its
thread's CPU. The plugin therefore hooks the two places a task passes on its way to its thread:
`Worker.execute(key)`, the coroutine that hands one task to its executor, marks the key in a
context variable, and the executors' `submit`, which that coroutine calls before it first
yields, wraps the call it is given in a job named after the key. The job then begins and ends
in the task's own thread, around Dask's own bookkeeping of the task (microseconds), and its
status comes from Dask's result: a task that raised is a job in error, named after the
exception. Both hooks are attributes of the worker instance, put back at teardown; the types
stay Dask's, so Dask still runs its thread pools as thread pools (it checks the type's name).

Heavy mode (the default) starts the worker process's sidecar at setup, so the first task does
not pay for it, and closes it at teardown: the sidecar reads the rings a last time and says bye
to the driver. Tasks that are coroutines (they run on the event loop), actor calls and tasks
sent to a process pool executor run as Dask runs them, unmonitored.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import WorkerPlugin

from ..config import Options, resolve
from ..errors import ConfigError
from ..worker.jobs import check_out, profiled

if TYPE_CHECKING:
    from typing_extensions import Unpack

log = logging.getLogger("workerscope")

# (plugin, key) while a worker's execute() hands that task to its executor.
_task: contextvars.ContextVar[tuple[WorkerscopePlugin, Hashable] | None] = \
    contextvars.ContextVar("workerscope_dask_task", default=None)


class WorkerscopePlugin(WorkerPlugin):
    """Every task a Dask worker runs in its thread pool becomes a workerscope job, named after
    the task's key (`name=` maps a key to another name, e.g. `distributed.utils.key_split` for
    the task's prefix). The `@timed` functions and `span()` blocks a task runs land under its job.

    Options are `profiled`'s (every setting of workerscope.config.Config; the mode is "heavy"
    unless given), checked here, in the client; WORKERSCOPE_* variables of the worker's
    environment override them, as for `profiled`.
    """

    name = "workerscope"  # one per worker: registering again replaces the plugin

    def __init__(self, name: Callable[[Hashable], str] | None = None,
                 **options: Unpack[Options]) -> None:
        if options.get("mode") is None:
            options["mode"] = "heavy"
        self.options: dict[str, Any] = dict(options)
        # A bad option fails here, in the client, not in every worker.
        check_out(resolve(**self.options).out, folder=False)
        self.job_name = name
        self._undo: list[Callable[[], None]] = []
        self._link: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "job_name": self.job_name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options, self.job_name = state["options"], state["job_name"]
        self._undo, self._link = [], None

    # -- lifecycle ---------------------------------------------------------------------------
    async def setup(self, worker: Any) -> None:
        executors = getattr(worker, "executors", None)
        if not callable(getattr(worker, "execute", None)) or not isinstance(executors, dict):
            log.warning("workerscope: this Dask worker has no execute() or executors (a Dask "
                        "this plugin does not know?); its tasks run unmonitored")
            return
        self._hook_execute(worker)
        for executor in {id(e): e for e in executors.values()}.values():
            # Dask's own test for running a task in a thread (Worker.execute): its thread pool
            # is a copy of concurrent.futures', not a subclass.
            if "ThreadPoolExecutor" in str(type(executor)):
                self._hook_submit(executor)
        config = self._config()
        if config.mode == "heavy":
            # Off the event loop: the sidecar's start takes a moment.
            self._link = await asyncio.to_thread(_open_link, config)

    async def teardown(self, worker: Any) -> None:
        while self._undo:
            self._undo.pop()()
        link, self._link = self._link, None
        if link is not None:
            # The sidecar's bye waits for the driver's ack (bye_timeout at most): off the loop.
            await asyncio.to_thread(_close_link, link)

    # -- hooks ---------------------------------------------------------------------------------
    def _hook_execute(self, worker: Any) -> None:
        execute = worker.execute

        @functools.wraps(execute)
        async def marked(key: Hashable, *args: Any, **kwargs: Any) -> Any:
            token = _task.set((self, key))
            try:
                return await execute(key, *args, **kwargs)
            finally:
                _task.reset(token)

        worker.execute = marked
        self._undo.append(functools.partial(_restore, worker, "execute", marked))

    def _hook_submit(self, executor: Any) -> None:
        submit = executor.submit

        @functools.wraps(submit)
        def wrapped(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            task = _task.get()
            if task is None or task[0] is not self:
                return submit(fn, *args, **kwargs)  # not a task of ours: Dask's own work
            return submit(self._run, task[1], fn, args, kwargs)

        executor.submit = wrapped
        self._undo.append(functools.partial(_restore, executor, "submit", wrapped))

    # -- in the task's thread ------------------------------------------------------------------
    def _run(self, key: Hashable, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
        """Run what Dask submitted for task `key` as one job, in this thread."""
        try:
            job = profiled(_as_named(self._name(key)), **self.options)
        except ConfigError as err:
            # A bad WORKERSCOPE_* variable in this worker: profiled checks it when it is made,
            # and that must not fail the task. (profiled itself, made in the client, runs on.)
            _warn_once(f"{err}; the worker's tasks run unmonitored")
            return fn(*args, **kwargs)
        result: list[Any] = []
        try:
            return job(fn, args, kwargs, result)
        except BaseException:
            if not result:
                raise  # Dask's own call raised (SystemExit, KeyboardInterrupt): let it through
            msg, exc, tb = result
            exc.__traceback__ = tb  # as Dask left it: its report of the task is written already
            return msg

    def _name(self, key: Hashable) -> str:
        if self.job_name is not None:
            try:
                return str(self.job_name(key))
            except Exception as err:  # noqa: BLE001 - a naming bug must not fail the task
                log.warning("workerscope: name(%r) failed (%r); the job is named after the key",
                            key, err)
        return key if isinstance(key, str) else str(key)

    def _config(self) -> Any:
        try:
            return resolve(**self.options)
        except ConfigError as err:
            log.warning("workerscope: %s; the plugin runs with the settings it was given", err)
            return resolve({}, **self.options)


_warned: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        log.warning("workerscope: %s", msg)


def _as_named(name: str) -> Callable[..., Any]:
    """A function named `name` (profiled names its jobs after the function) that calls what Dask
    submitted and raises the task's own exception when the task failed, so that the job ends
    in error, named after it."""
    def call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
             result: list[Any]) -> Any:
        msg = fn(*args, **kwargs)
        # Dask catches the task's exception and reports it in this message (_run_task).
        if isinstance(msg, dict) and msg.get("op") == "task-erred":
            exc = msg.get("actual_exception")
            if isinstance(exc, BaseException):
                result += [msg, exc, exc.__traceback__]
                raise exc
        return msg

    call.__name__ = call.__qualname__ = name
    return call


def _restore(obj: Any, attr: str, ours: object) -> None:
    """Take our hook off `obj`, unless another one was put over it since (it keeps ours)."""
    if obj.__dict__.get(attr) is ours:
        del obj.__dict__[attr]


# -- the worker process's sidecar: shared by the plugins of the workers of one process ------------
_users: dict[int, int] = {}
_users_lock = threading.Lock()


def _open_link(config: Any) -> Any:
    from ..worker.link import get_link

    try:
        link = get_link(config)
    except Exception as err:  # noqa: BLE001 - monitoring must never break the worker
        log.warning("workerscope: the sidecar did not start (%r); each task tries again", err)
        return None
    with _users_lock:
        _users[id(link)] = _users.get(id(link), 0) + 1
    return link


def _close_link(link: Any) -> None:
    with _users_lock:
        left = _users[id(link)] = _users.get(id(link), 1) - 1
        if left <= 0:
            del _users[id(link)]
    if left <= 0:
        link.close(wait=True)
