"""The public instruments: timed, span, mark (spans in the worker) and monitor, profiled (jobs)."""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import time
from typing import Any, Callable, TypeVar, overload

from . import light, protocol, spans
from .config import Config, env_names, resolve
from .timeline import Job, Span, Timeline, Worker, out_path

F = TypeVar("F", bound=Callable[..., Any])
_ENV_VARS = tuple(env_names().values())


# -- spans -----------------------------------------------------------------------------------------
def _record_span(buf: spans.Buffer, job: Any, sid: int, parent: Any, name: str, start: int,
                 attrs: dict[str, Any] | None, error: str | None) -> None:
    buf.add((protocol.RECORD_SPAN, job, sid, parent, name, start, spans.now_ns(),
             spans.thread_id(), attrs, error))


def _wrap(fn: F, name: str | None, attrs: dict[str, Any] | None) -> F:
    label = name or getattr(fn, "__qualname__", None) or repr(fn)
    attrs = attrs or None

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            buf = spans.active
            if buf is None:
                return await fn(*args, **kwargs)
            job, parent = spans.current.get()
            if job is None:
                job = spans.default_job
            sid = spans.next_id()
            token = spans.current.set((job, sid))
            start = spans.now_ns()
            error = None
            try:
                return await fn(*args, **kwargs)
            except BaseException as exc:
                error = type(exc).__qualname__
                raise
            finally:
                spans.current.reset(token)
                _record_span(buf, job, sid, parent, label, start, attrs, error)

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        buf = spans.active
        if buf is None:
            return fn(*args, **kwargs)
        job, parent = spans.current.get()
        if job is None:
            job = spans.default_job
        sid = spans.next_id()
        token = spans.current.set((job, sid))
        start = spans.now_ns()
        error = None
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            error = type(exc).__qualname__
            raise
        finally:
            spans.current.reset(token)
            _record_span(buf, job, sid, parent, label, start, attrs, error)

    return wrapper  # type: ignore[return-value]


@overload
def timed(fn: F) -> F: ...
@overload
def timed(fn: str | None = None, **attrs: Any) -> Callable[[F], F]: ...


def timed(fn: Any = None, **attrs: Any) -> Any:
    """Record each call of a function as a span: `@timed`, `@timed("name")`, `@timed(k=v)`.

    With no monitor active in the process, the wrapper costs one global read beyond the call.
    """
    if callable(fn):
        return _wrap(fn, None, None)
    name = fn
    if name is not None and not isinstance(name, str):
        raise TypeError("timed() takes a function, or a span name (str) and attributes")

    def decorate(f: F) -> F:
        return _wrap(f, name, attrs)

    return decorate


class _NoSpan:
    __slots__ = ()

    def __enter__(self) -> "_NoSpan":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


_NO_SPAN = _NoSpan()


class _Span:
    __slots__ = ("buf", "name", "attrs", "job", "sid", "parent", "token", "start")

    def __init__(self, buf: spans.Buffer, name: str, attrs: dict[str, Any] | None) -> None:
        self.buf, self.name, self.attrs = buf, name, attrs

    def __enter__(self) -> "_Span":
        self.job, self.parent = spans.current.get()
        if self.job is None:
            self.job = spans.default_job
        self.sid = spans.next_id()
        self.token = spans.current.set((self.job, self.sid))
        self.start = spans.now_ns()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        spans.current.reset(self.token)
        error = None if exc_type is None else exc_type.__qualname__
        _record_span(self.buf, self.job, self.sid, self.parent, self.name, self.start,
                     self.attrs, error)


def span(name: str, **attrs: Any) -> Any:
    """A context manager recording its block as a span named `name` with `attrs`."""
    buf = spans.active
    if buf is None:
        return _NO_SPAN
    return _Span(buf, name, attrs or None)


def mark(name: str, **attrs: Any) -> None:
    """Record an instant event."""
    buf = spans.active
    if buf is None:
        return
    job, parent = spans.current.get()
    if job is None:
        job = spans.default_job
    t = spans.now_ns()
    buf.add((protocol.RECORD_MARK, job, spans.next_id(), parent, name, t, t, spans.thread_id(),
             attrs or None, None))


# -- jobs ------------------------------------------------------------------------------------------
_active_lock = threading.Lock()
_active_jobs: list[int] = []


def _activate(buf: spans.Buffer, job: int) -> None:
    with _active_lock:
        _active_jobs.append(job)
        spans.active = buf
        # Threads the job starts do not inherit its context; while one job alone runs in this
        # process, their spans belong to it. With several at once, that would be a guess.
        spans.default_job = _active_jobs[0] if len(_active_jobs) == 1 else None


def _deactivate(job: int) -> None:
    with _active_lock:
        if job in _active_jobs:
            _active_jobs.remove(job)
        spans.default_job = _active_jobs[0] if len(_active_jobs) == 1 else None
        if not _active_jobs:
            spans.active = None


def _warn(msg: str) -> None:
    print(f"workerscope: {msg}", file=sys.stderr)


class _HeavyJob:
    """One job on the worker's sidecar: the part monitor and profiled share."""

    def __init__(self, config: Config, name: str, want_timeline: bool) -> None:
        self.config, self.name, self.want_timeline = config, name, want_timeline
        self.timeline: Timeline | None = None
        self.link = None
        self.lost: str | None = None
        self.job = spans.next_id()

    def start(self) -> None:
        from .sidecar.launcher import get_link

        self.start_ns = time.time_ns()
        try:
            self.link = get_link(self.config)
            self.link.job_start(self.job, self.name, self.config.out, keep=self.want_timeline)
        except Exception as err:  # monitoring must never break the job it watches
            self.lost = str(err)
            _warn(f"sidecar lost, the job runs unmonitored: {err!r}")
            self.link = None
        buf = self.link.buffer if self.link is not None else spans.Buffer()
        self.buffer = buf
        _activate(buf, self.job)
        self.token = spans.current.set((self.job, self.job))

    def end(self, exc: BaseException | None) -> None:
        spans.current.reset(self.token)
        _deactivate(self.job)
        status = "ok" if exc is None else "error"
        error = None if exc is None else type(exc).__qualname__
        if self.link is not None:
            try:
                frames = self.link.job_end(self.job, status, error, self.want_timeline)
                if frames is not None:
                    self.timeline = Timeline.from_frames(frames)
                return
            except Exception as err:  # monitoring must never break the job it watches
                self.lost = str(err)
                _warn(f"sidecar lost during the job: {err!r}")
                self.buffer = self.link.buffer
        self.timeline = self._lost_timeline(status, error)
        if self.config.out:
            # The sidecar would have written this file; with it gone, the worker does, under
            # the same name ({pid}, {job}, {host} filled in the same way).
            path = self.config.out
            try:
                path = out_path(self.config.out, pid=os.getpid(), job=self.job)
                self.timeline.save(path)
            except Exception as err:  # monitoring must never break the job it watches
                _warn(f"could not write {path}: {err!r}")

    def _lost_timeline(self, status: str, error: str | None) -> Timeline:
        """What the worker alone still knows when its sidecar is gone: the job and its
        spans not yet shipped. The worker is marked sidecar_lost."""
        pid = os.getpid()
        wid = f"{self.config.node + '/' if self.config.node else ''}{os.uname().nodename}:{pid}:lost"
        t = Timeline()
        t.workers[wid] = Worker(wid, host=os.uname().nodename, node=self.config.node, pid=pid,
                                status="sidecar_lost", errors=[self.lost or ""])
        end = time.time_ns()
        offset = time.time_ns() - time.monotonic_ns()
        t.jobs.append(Job(wid, self.job, self.name, self.start_ns, end, status, error, pid, None))
        t.spans.append(Span(wid, self.job, self.job, None, self.name, self.start_ns, end, pid,
                            threading.get_native_id(), {"status": status}, error, "job"))
        bodies = list(self.link.unsent) if self.link is not None else []
        body = self.buffer.drain()
        if body is not None:
            bodies.append(body)
        for rec in (r for b in bodies for r in b["records"]):
            rtype, job, sid, parent, name, start, stop, tid, attrs, err = rec
            if rtype == protocol.RECORD_SPAN and job == self.job:
                t.spans.append(Span(wid, job, sid, parent, name, start + offset, stop + offset,
                                    pid, tid, attrs, err))
        t.sort()
        return t


class monitor:
    """Run a block under the sidecar sampler; `.timeline` holds the block's Timeline after exit.

        with monitor(interval=0.1) as m:
            work()
        m.timeline.save("work.json")
    """

    def __init__(self, interval: float | None = None, endpoint: str | None = None,
                 out: str | None = None, node: str | None = None, name: str = "monitor",
                 samples_per_frame: int | None = None) -> None:
        self.config = resolve(interval=interval, endpoint=endpoint, out=out, node=node,
                              samples_per_frame=samples_per_frame)
        self.name = name
        self.timeline: Timeline | None = None
        self._job: _HeavyJob | None = None

    def __enter__(self) -> "monitor":
        self._job = _HeavyJob(self.config, self.name, want_timeline=True)
        self._job.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._job is not None
        self._job.end(exc)
        self.timeline = self._job.timeline


class profiled:
    """Wrap `fn` so each call is one monitored job; the call returns fn's result unchanged.

    Picklable (when fn is), so it can be shipped to process pools, Dask or Lithops. mode is
    "heavy" (sidecar sampler), "light" (start/end counters, no extra process) or "off".
    """

    def __init__(self, fn: Callable[..., Any], mode: str | None = None,
                 interval: float | None = None, endpoint: str | None = None,
                 out: str | None = None, node: str | None = None,
                 samples_per_frame: int | None = None) -> None:
        self.fn = fn
        self.options = {"mode": mode, "interval": interval, "endpoint": endpoint, "out": out,
                        "node": node, "samples_per_frame": samples_per_frame}
        resolve(**self.options)  # a bad option fails here, in the driver, not in every worker
        functools.update_wrapper(self, fn)
        self.last_stats: dict[str, float] | None = None
        self.last_timeline: Timeline | None = None
        self._cached: tuple[tuple, Config] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"fn": self.fn, "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["fn"], **state["options"])  # type: ignore[misc]

    def _config(self) -> Config:
        # Settings come from the options and the WORKERSCOPE_* variables of the process the
        # call runs in; resolving them costs ~9 us, so it is redone only when those change.
        key = tuple(os.environ.get(var) for var in _ENV_VARS)
        cached = self._cached
        if cached is None or cached[0] != key:
            cached = self._cached = (key, resolve(**self.options))
        return cached[1]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        config = self._config()
        if config.mode == "off":
            return self.fn(*args, **kwargs)
        if config.mode == "light":
            return light.run(self, config, args, kwargs)
        name = getattr(self.fn, "__qualname__", None) or repr(self.fn)
        job = _HeavyJob(config, name, want_timeline=config.out is not None)
        job.start()
        try:
            result = self.fn(*args, **kwargs)
        except BaseException as exc:
            job.end(exc)
            self.last_timeline = job.timeline
            raise
        job.end(None)
        self.last_timeline = job.timeline
        return result


# A forked child runs none of its parent's jobs.
os.register_at_fork(after_in_child=_active_jobs.clear)
