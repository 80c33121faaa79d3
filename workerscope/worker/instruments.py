"""The instruments: timed, span, mark. Each records a span (or an instant) in the worker's
recorder when a monitor is active in the process, and costs one global read when none is."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from .. import protocol
from . import recorder as spans

F = TypeVar("F", bound=Callable[..., Any])


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

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


_NO_SPAN = _NoSpan()


class _Span:
    __slots__ = ("attrs", "buf", "job", "name", "parent", "sid", "start", "token")

    def __init__(self, buf: spans.Buffer, name: str, attrs: dict[str, Any] | None) -> None:
        self.buf, self.name, self.attrs = buf, name, attrs

    def __enter__(self) -> _Span:
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


