"""Jobs: monitor (a block) and profiled (a function), in light, heavy or off mode.

A heavy job runs on the process's sidecar (see link.py); a light one reads counters at its
edges (light.py). Either way monitoring never breaks the job: a lost sidecar leaves a timeline
that says so.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, cast, overload

from .. import protocol, spanring
from ..builder import build
from ..config import Config, Options, env_names, resolve
from ..errors import ConfigError, WorkerscopeError
from ..protocol import Status
from ..timeline import Timeline, check_output_path, out_path
from . import envwatch, light
from . import recorder as spans

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .link import SidecarLink

_ENV_VARS = tuple(env_names().values())
_env_changes = envwatch.changes
P = ParamSpec("P")
R = TypeVar("R")


# -- jobs ------------------------------------------------------------------------------------------
# Heavy jobs open in this process, in the order they began. A job that begins while one that
# keeps its frames (a monitor) is open keeps its own too, and hands them to that one at its
# end: the spans of a job go to the job itself (the innermost on its thread), and the outer
# timeline would otherwise lack the inner job and everything in it.
_heavy_lock = threading.Lock()
_heavy_open: list[_HeavyJob] = []


def _own_ring(config: Config) -> spans.Writer | None:
    """A ring for a job without a sidecar, read by the worker itself at the job's end."""
    try:
        return spans.Writer(None, spans.ring_slots(config.ring_records, config.span_cpu),
                            config.span_cpu)
    except OSError:
        return None


log = logging.getLogger("workerscope")


def check_out(out: str | None, folder: bool) -> None:
    """ConfigError now if `out` (a template: {pid}, {job}, {host}) could never be saved: an
    unknown extension, or with `folder`, a folder that does not exist."""
    if out is None:
        return
    try:
        check_output_path(out_path(out, pid=0, job=0), folder=folder)
    except WorkerscopeError as err:
        raise ConfigError(str(err)) from err


def _check_out_here(out: str) -> None:
    """Say at a job's start, once, where the machine the job runs on cannot hold its `out`
    file (its folder is missing, or is a file): the job of hours would otherwise learn it at
    its end. The job runs on."""
    path = out
    try:
        path = out_path(out, pid=os.getpid(), job=0)
        check_output_path(path, folder=True)
    except WorkerscopeError as err:
        _warn_once(f"{err}: the job's timeline cannot be written there (out={out!r}); the job "
                   "runs on")


def _warn(msg: str) -> None:
    # With no logging configured, Python's last-resort handler puts warnings on stderr.
    log.warning("workerscope: %s", msg)


_warned: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        _warn(msg)


class _HeavyJob:
    """One job on the worker's sidecar: the part monitor and profiled share."""

    def __init__(self, config: Config, name: str, want_timeline: bool,
                 submitted: int | None = None) -> None:
        self.config, self.name, self.want_timeline = config, name, want_timeline
        self.submitted = submitted  # wall ns it was submitted at (profiled.queued())
        self.timeline: Timeline | None = None
        self.link: SidecarLink | None = None
        self.lost: str | None = None
        self.job = spans.next_id()
        self.own: spans.Writer | None = None
        self.keep = want_timeline
        self.thread = threading.get_ident()
        self.frames: list[bytes] = []  # this job's frames, when kept
        self.nested: list[bytes] = []  # the frames of jobs that ran inside this one

    def start(self) -> None:
        from .link import get_link

        self.start_ns = time.time_ns()
        self.start_mono = time.monotonic_ns()
        with _heavy_lock:
            # Nested in a job that keeps its frames: keep this one's for it (see _heavy_open).
            self.keep = self.want_timeline or bool(self._open_keepers())
        if self.config.reset_peak:
            light.keep_lifetime_peak()  # the sidecar resets the peak at this job's start
        try:
            self.link = get_link(self.config)
            self.link.job_start(self.job, self.name, self.config.out, keep=self.keep,
                                config=self.config, submitted=self.submitted)
        except Exception as err:  # noqa: BLE001 - monitoring must never break the job it watches
            self.lost = str(err)
            _warn(f"sidecar lost, the job runs unmonitored: {err!r}")
            self.link = None
        if self.link is None:
            self.own = _own_ring(self.config)
        self.writer = self.link.writer if self.link is not None else self.own
        spans.enter_job(self.job, self.writer)
        with _heavy_lock:
            _heavy_open.append(self)
        if self.config.allocations:
            from . import allocations

            allocations.start(self.config.allocations, self.config.stacks_memory)

    def _open_keepers(self) -> list[_HeavyJob]:
        """The open jobs this one is nested in (on its thread) that keep their timeline."""
        return [j for j in _heavy_open
                if j is not self and j.want_timeline and j.thread == self.thread]

    def end(self, exc: BaseException | None) -> None:
        if self.config.allocations:
            from . import allocations

            allocations.at_job_end()
        spans.leave_job(self.job)
        with _heavy_lock:
            if self in _heavy_open:
                _heavy_open.remove(self)
            keepers = self._open_keepers()
        try:
            self._end(exc)
        finally:
            if self.own is not None:
                spans.release(self.own)
        for outer in keepers:
            outer.nested.extend(self.frames)

    def _end(self, exc: BaseException | None) -> None:
        status = Status.OK if exc is None else Status.ERROR
        error, tb = (None, None) if exc is None else spans.describe(exc)
        if self.link is not None:
            try:
                frames = self.link.job_end(self.job, status, error, self.keep, traceback=tb)
                if frames is not None:
                    self.frames = frames
                    if self.want_timeline:
                        self.timeline = build(_merged(frames, self.nested))
                return
            except Exception as err:  # noqa: BLE001 - monitoring must never break the job it watches
                self.lost = str(err)
                _warn(f"sidecar lost during the job: {err!r}")
        try:
            self.timeline = self._lost_timeline(status, error, tb)
        except Exception as err:  # noqa: BLE001 - monitoring must never break the job it watches
            _warn(f"the job's timeline could not be built: {err!r}")
            self.timeline = Timeline()
        if self.config.out:
            # The sidecar would have written this file; with it gone, the worker does, under
            # the same name ({pid}, {job}, {host} filled in the same way).
            path = self.config.out
            try:
                path = out_path(self.config.out, pid=os.getpid(), job=self.job)
                self.timeline.save(path)
            except Exception as err:  # noqa: BLE001 - monitoring must never break the job it watches
                _warn(f"could not write {path}: {err!r}")

    def _lost_timeline(self, status: Status, error: str | None, tb: str | None) -> Timeline:
        """What the worker alone still knows when its sidecar is gone: the job and the spans
        its ring still holds, as the frames a sidecar would have sent, through the builder
        (the one path to a Timeline). The worker is marked sidecar_lost."""
        pid, tid, host = os.getpid(), threading.get_native_id(), os.uname().nodename
        wid = protocol.worker_id(host, pid, "lost", self.config.node)
        end = time.monotonic_ns()
        hello: protocol.HelloBody = {"host": host, "pid": pid, "node": self.config.node,
                                     "anchor": protocol.clock_anchor()}
        start: protocol.JobStartBody = {"job": self.job, "name": self.name,
                                        "t": self.start_mono, "pid": pid, "tid": tid}
        finish: protocol.JobEndBody = {"job": self.job, "t": end, "status": status,
                                       "error": error}
        if tb:
            finish["traceback"] = tb
        bye: protocol.ByeBody = {"t": end, "status": Status.SIDECAR_LOST, "dropped": 0,
                                 "errors": [self.lost or ""]}
        bodies: list[tuple[protocol.FrameKind, protocol.FrameBody]] = [
            (protocol.HELLO, hello), (protocol.JOB_START, start)]
        records = self._ring_spans(pid, tid, end)
        bodies += [(kind, body) for kind, body, _ in protocol.span_bodies(pid, records, [])]
        bodies += [(protocol.JOB_END, finish), (protocol.BYE, bye)]
        return build(protocol.encode_frame(kind, wid, seq, dict(body))
                     for seq, (kind, body) in enumerate(bodies))

    def _ring_spans(self, pid: int, tid: int, end: int) -> list[protocol.SpanRecord]:
        """This job's completed spans in the worker's own ring (read from its start)."""
        if self.writer is None or self.writer.closed:
            return []
        jobs = spanring.Jobs()
        jobs.start(self.job, pid, tid, self.start_mono)
        jobs.end(self.job, end)
        try:
            reader = spanring.RingReader(self.writer.mm, pid)
        except (ValueError, spanring.RingError):
            return []  # unmapped meanwhile
        try:
            return [r for r in reader.read(jobs)
                    if r.kind == protocol.RECORD_SPAN and r.job == self.job]
        finally:
            reader.close()


def _disguise(wrapper: Any, fn: Callable[..., Any]) -> None:
    """Give the wrapper fn's name, docs and attributes, as functools.update_wrapper does, and
    a name and annotations where fn has none (a functools.partial, a callable object): the
    engines copy a profiled function by value as a function (cloudpickle), which needs both."""
    functools.update_wrapper(wrapper, fn)
    inner = getattr(fn, "func", None) if isinstance(fn, functools.partial) else None
    name = (getattr(fn, "__name__", None) or getattr(inner, "__name__", None)
            or type(fn).__name__)
    for attr, value in (("__name__", name), ("__qualname__", name), ("__annotations__", {}),
                        ("__module__", getattr(inner or type(fn), "__module__", None))):
        if attr not in wrapper.__dict__:
            setattr(wrapper, attr, value)


def _merged(frames: list[bytes], nested: list[bytes]) -> list[bytes]:
    """A job's frames and those of the jobs nested in it, each once: they share the hello and
    the samples taken while both ran."""
    seen = set(frames)
    out = list(frames)
    for f in nested:
        if f not in seen:
            seen.add(f)
            out.append(f)
    return out


class _LightJob:
    """A light job. Inside a heavy job of this process (a monitor), it is also a job of that
    job's sidecar, so that job's timeline (and its driver) shows it and its spans."""

    def __init__(self, config: Config, name: str) -> None:
        # The ring is the process's: while a heavy job is open (on this thread, else on
        # another), its sidecar reads the spans, this job's included once it is a job there.
        here = threading.get_ident()
        with _heavy_lock:
            outer = next((j for j in reversed(_heavy_open) if j.thread == here),
                         _heavy_open[-1] if _heavy_open else None)
        self.sub: _HeavyJob | None = None
        if outer is not None and outer.link is not None:
            self.sub = _HeavyJob(dataclasses.replace(outer.config, out=None), name,
                                 want_timeline=False)
        self.light = light.LightJob(config, name, record_spans=self.sub is None)

    def start(self) -> None:
        if self.sub is not None:
            self.sub.start()
        self.light.start()

    def end(self, exc: BaseException | None) -> None:
        self.light.end(exc)
        if self.sub is not None:
            self.sub.end(exc)

    @property
    def stats(self) -> dict[str, float] | None:
        return self.light.stats

    @property
    def timeline(self) -> Timeline:
        if self.sub is not None and self.sub.frames:
            return build(self.sub.frames)
        return self.light.timeline


class monitor:
    """Run a block as one job; `.timeline` holds the block's Timeline after exit.

        with monitor(interval=0.1) as m:
            work()
        m.timeline.save("work.json")

    Options are profiled's; the mode is heavy (the sidecar samples the block) unless given or
    set by WORKERSCOPE_MODE. light: `.stats` holds the block's light stats and `.timeline`
    its job and spans; off: the block runs bare and `.timeline` stays None.
    """

    def __init__(self, name: str = "monitor", **options: Unpack[Options]) -> None:
        if options.get("mode") is None:
            options["mode"] = "heavy"
        try:
            self.config = resolve(**options)
        except ConfigError as err:
            # A bad WORKERSCOPE_* value where the block runs must not stop it: the block runs
            # with the settings given here, and that is said once.
            self.config = resolve({}, **options)
            _warn_once(f"{err}; the block runs with the settings given to monitor()")
        check_out(self.config.out, folder=True)  # before the block runs, not after it
        self.name = name
        self.timeline: Timeline | None = None
        self.stats: dict[str, float] | None = None
        self._job: _HeavyJob | _LightJob | None = None

    def __enter__(self) -> monitor:
        if self.config.mode == "light":
            self._job = _LightJob(self.config, self.name)
        elif self.config.mode == "heavy":
            self._job = _HeavyJob(self.config, self.name, want_timeline=True)
        if self._job is not None:
            self._job.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        job, self._job = self._job, None
        if job is None:
            return  # mode off
        job.end(exc)
        try:
            self.timeline = job.timeline
        except Exception as err:  # noqa: BLE001 - monitoring must never break the block it watches
            _warn(f"the block's timeline could not be built: {err!r}")
        if isinstance(job, _LightJob):
            self.stats = job.stats


class _Calls:
    """What a profiled function keeps of its calls in this process: the last job, the
    settings read for it, its function view. Never copied with the function (a ring's
    memory map cannot be, and a copy's calls are its own)."""

    __slots__ = ("cached", "last", "last_stats", "view")

    def __init__(self) -> None:
        self.cached: tuple[object, Config] | None = None
        self.last: _LightJob | Timeline | None = None
        self.last_stats: dict[str, float] | None = None
        self.view: Callable[..., Any] | None = None

    def __reduce__(self) -> tuple[type[_Calls], tuple[()]]:
        return _Calls, ()


class _Profiled(Generic[P, R]):
    """The job logic of `profiled`, without the function disguise (see there)."""

    def __init__(self, fn: Callable[P, R], /, **options: Unpack[Options]) -> None:
        # A bad option fails here, in the driver, not in every worker. The out folder is not
        # checked: it is the workers' machine's, which may not be this one.
        # The arguments only: this runs again wherever the function is unpickled by
        # reference (a module's @profiled, imported by every pool worker), where a bad
        # WORKERSCOPE_* variable must not break the import; _config reads those at each call.
        check_out(resolve({}, **options).out, folder=False)
        # First: update_wrapper copies fn's own attributes, which must not shadow ours (a
        # callable object with an attribute named fn or options).
        _disguise(self, fn)
        self.fn = fn
        self.options: dict[str, object] = dict(options)
        self._mark_kind()
        self._calls = _Calls()

    def __getstate__(self) -> dict[str, Any]:
        return {"fn": self.fn, "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # No validation here: this runs in the worker, while a pool unpickles its task, where
        # an exception would break the whole pool (BrokenProcessPool). Settings are checked
        # at each call instead, and a bad one there never stops the job (_config).
        _disguise(self, state["fn"])
        self.fn = state["fn"]
        self.options = state["options"]
        self._mark_kind()
        self._calls = _Calls()

    def _mark_kind(self) -> None:
        envwatch.start()
        # The environment's change count at which this function was last found off (a plain
        # function, mode off): calls at that count go straight to fn, -1 never does.
        self._off_at = -1
        self._is_gen = inspect.isgeneratorfunction(self.fn)
        self._is_async = inspect.iscoroutinefunction(self.fn)
        if self._is_async:
            # Imported here, not at the top: asyncio costs a heavy job's cold start ~30 ms.
            import asyncio

            # So asyncio and inspect see a coroutine function, as they do for the fn itself.
            self._is_coroutine = getattr(asyncio.coroutines, "_is_coroutine", None)
            if hasattr(inspect, "markcoroutinefunction"):  # 3.12+
                inspect.markcoroutinefunction(self)

    def _config(self) -> Config:
        # Settings come from the options and the WORKERSCOPE_* variables of the process the
        # call runs in; resolving them costs ~9 us, so it is redone only when the environment
        # changed (counted by envwatch), or, where it cannot be watched, when those variables did.
        key: object = envwatch.changes() if envwatch.start() else tuple(
            os.environ.get(var) for var in _ENV_VARS)
        cached = self._calls.cached
        if cached is None or cached[0] != key:
            try:
                config = resolve(**self.options)
            except ConfigError as err:
                # A bad WORKERSCOPE_* value where the job runs must not stop it: run with the
                # settings of the call alone and say so, once per value.
                config = resolve({}, **self.options)
                _warn_once(f"{err}; the job runs with the settings given to profiled()")
            cached = self._calls.cached = (key, config)
        return cached[1]

    @property
    def last_stats(self) -> dict[str, float] | None:
        """The last light job's stats in this process (None before one, or after a heavy one)."""
        return self._calls.last_stats

    @property
    def last_timeline(self) -> Timeline | None:
        """The last job's Timeline: a heavy job's when it kept one (out= set), a light job's
        job, stats and spans (built when first asked for)."""
        last = self._calls.last
        return last.timeline if isinstance(last, _LightJob) else last

    def _job(self, config: Config, submitted: int | None = None) -> _HeavyJob | _LightJob:
        if config.out:
            _check_out_here(config.out)
        name = getattr(self.fn, "__qualname__", None) or repr(self.fn)
        if config.mode == "light":
            return _LightJob(config, name)
        return _HeavyJob(config, name, want_timeline=config.out is not None,
                         submitted=submitted)

    def queued(self) -> Queued[P, R]:
        """This job, stamped with the time now: submit that (`pool.submit(run.queued(), x)`,
        `pool.map` of it) and each job carries the time it waited between its submit and
        its start (a heavy job's Job.queued_ns; the reports' queue times). The stamp is the
        wall clock of the process that calls queued(), taken as the driver's. On a method,
        queue the function and pass the instance: `C.method.queued()(obj, x)`."""
        return Queued(self, time.time_ns())

    def _end(self, job: _HeavyJob | _LightJob, exc: BaseException | None) -> None:
        job.end(exc)
        if isinstance(job, _LightJob):
            self._calls.last_stats = job.stats
            self._calls.last = job
        else:
            self._calls.last = job.timeline

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._off_at == _env_changes():  # off, and nothing changed since: a bare call
            return self.fn(*args, **kwargs)
        return self._invoke(args, kwargs, None)

    def _invoke(self, args: Any, kwargs: Any, submitted: int | None) -> R:
        if self._is_gen:
            return cast("R", self._iterate(args, kwargs, submitted))
        if self._is_async:
            return cast("R", self._await(args, kwargs, submitted))
        changes = _env_changes()  # before the settings are read: a change meanwhile reads again
        config = self._config()
        if config.mode == "off":
            if envwatch.start():
                self._off_at = changes
            return self.fn(*args, **kwargs)
        job = self._job(config, submitted)
        job.start()
        try:
            result = self.fn(*args, **kwargs)
        except BaseException as exc:
            self._end(job, exc)
            raise
        self._end(job, None)
        return result

    def _iterate(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                 submitted: int | None = None) -> Generator[Any, Any, Any]:
        """A generator function's job is its iteration, from the first item to the end."""
        config = self._config()
        if config.mode == "off":
            return (yield from cast(Any, self.fn)(*args, **kwargs))
        job = self._job(config, submitted)
        job.start()
        try:
            result = yield from cast(Any, self.fn)(*args, **kwargs)
        except BaseException as exc:
            self._end(job, exc)
            raise
        self._end(job, None)
        return result

    async def _await(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                     submitted: int | None = None) -> Any:
        """A coroutine function's job is the awaited call."""
        config = self._config()
        if config.mode == "off":
            return await cast(Any, self.fn)(*args, **kwargs)
        job = self._job(config, submitted)
        job.start()
        try:
            result = await cast(Any, self.fn)(*args, **kwargs)
        except BaseException as exc:
            self._end(job, exc)
            raise
        self._end(job, None)
        return result


class Queued(Generic[P, R]):
    """A profiled job and when it was submitted (profiled.queued()): picklable as the job
    is (by name, for a module's @profiled), with the time beside it."""

    __slots__ = ("job", "submitted")

    def __init__(self, job: _Profiled[P, R] | Callable[P, R], submitted: int) -> None:
        # A profiled that cloudpickle copied is a function over it: its runner is found again.
        self.job: _Profiled[P, R] | Callable[P, R] = _runner(job)
        self.submitted = submitted

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if not isinstance(self.job, _Profiled):  # never the job's problem: run it, unstamped
            return self.job(*args, **kwargs)
        return self.job._invoke(args, kwargs, self.submitted)

    def __reduce__(self) -> tuple[Any, ...]:
        # The job pickles as a profiled does: by name (a module's @profiled), by its state,
        # or, through cloudpickle, as the function it passes for (_trampoline), whose
        # runner Queued finds again (_runner).
        return (_queued, (self.job, self.submitted))


def _queued(job: Any, submitted: int) -> Queued[..., Any]:
    return Queued(job, submitted)


def _runner(job: Any) -> Any:
    """The job logic of a profiled, or of the function cloudpickle made of one (its runner
    is in the closure: see _trampoline)."""
    if isinstance(job, _Profiled):
        return job
    for cell in getattr(job, "__closure__", None) or ():
        if isinstance(cell.cell_contents, _Profiled):
            return cell.cell_contents
    return job


def _forget_after_fork() -> None:
    # A forked child runs none of its parent's jobs (and a lock held at the fork stays held).
    global _heavy_lock
    _heavy_open.clear()
    _heavy_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


class _Decorator(Protocol):
    """What `profiled(**options)` returns: apply it to a function."""

    def __call__(self, fn: Callable[P, R], /) -> profiled[P, R]: ...


def _trampoline(runner: _Profiled[..., Any]) -> Callable[..., Any]:
    """A real function that calls `runner`, of the same kind as the function it profiles:
    what a profiled object turns into when cloudpickle copies it by value (Ray, Dask)."""
    if runner._is_gen:
        def call_gen(*args: Any, **kwargs: Any) -> Any:
            return (yield from runner(*args, **kwargs))
        return call_gen
    if runner._is_async:
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return await runner(*args, **kwargs)
        return call_async

    def call(*args: Any, **kwargs: Any) -> Any:
        return runner(*args, **kwargs)
    return call


def _restore(state: dict[str, Any]) -> profiled[..., Any]:
    obj: profiled[..., Any] = object.__new__(profiled)
    obj.__setstate__(state)
    return obj


class profiled(_Profiled[P, R]):
    """Wrap `fn` so each call is one monitored job; the call returns fn's result unchanged.

        wrapped = profiled(fn, mode="heavy", endpoint=sub.endpoint)
        @profiled                      # or @profiled(mode="heavy", interval=0.1)
        def job(x): ...

    mode is "heavy" (sidecar sampler), "light" (start/end counters, no extra process) or
    "off". A generator function's job is its iteration; a coroutine function's, the awaited
    call.

    It passes for a plain function: picklable by reference when it is a module's global
    (process pools), and by value through cloudpickle, which copies it as a real function
    that calls the job logic (Ray, whose `ray.remote` accepts only functions, Dask, Lithops).
    """

    @overload
    def __new__(cls, fn: Callable[P, R], /, **options: Unpack[Options]) -> profiled[P, R]: ...
    @overload
    def __new__(  # type: ignore[misc]  # @profiled(...) returns the decorator
            cls, fn: None = None, /, **options: Unpack[Options]) -> _Decorator: ...

    def __new__(cls, fn: Callable[P, R] | None = None, /, **options: Unpack[Options]) -> Any:
        if fn is None:  # @profiled(mode=..., ...): a decorator
            resolve({}, **options)  # a bad option fails at the decorator, not at first call
            return lambda f: cls(f, **options)
        return super().__new__(cls)

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        """On a class, a method: bound to the instance, as a function would be."""
        return self if obj is None else types.MethodType(self, obj)

    # isinstance(x, types.FunctionType) -- and so inspect.isfunction, which ray.remote
    # requires -- consults __class__ after type(x). type(x), which the picklers and the
    # interpreter use, stays profiled.
    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return types.FunctionType

    def _function_view(self) -> Callable[..., Any]:
        view = self._calls.view
        if view is None:
            twin: _Profiled[..., Any] = object.__new__(_Profiled)
            twin.__setstate__(self.__getstate__())
            view = self._calls.view = _trampoline(twin)
        return view

    @property
    def __code__(self) -> types.CodeType:
        return self._function_view().__code__

    @property
    def __globals__(self) -> dict[str, Any]:
        return self._function_view().__globals__

    @property
    def __closure__(self) -> tuple[Any, ...] | None:
        return self._function_view().__closure__

    @property
    def __defaults__(self) -> tuple[Any, ...] | None:
        return None

    @property
    def __kwdefaults__(self) -> dict[str, Any] | None:
        return None

    def __reduce__(self) -> str | tuple[Any, ...]:
        # A module's global (@profiled on a def) pickles by name, as functions do: its fn is
        # no longer reachable by name, so pickling fn itself would fail.
        module = sys.modules.get(getattr(self, "__module__", ""), None)
        name = getattr(self, "__qualname__", "")
        if module is not None and _lookup(module, name) is self:
            return name
        return (_restore, (self.__getstate__(),))


def _lookup(module: object, dotted: str) -> object:
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return obj
