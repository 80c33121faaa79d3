"""The instruments: timed, span, mark. Each records into the process's span ring when a monitor
is active in the process (see recorder.py), and costs one check when none is.

Sync @timed calls and span() blocks take the C fast path when it is built; the pure-Python
writer here does the same work otherwise. Async functions, span() inside a running event
loop and mark() always use the Python writer; they carry the enclosing async span in a
context variable, so spans in asyncio tasks find their parents.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import sys
import time
import types
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar, overload

from .. import spanring
from ..spanring import END, ERR_BIT, F_ASYNC, F_MARK, GEN_SHIFT, H_COUNTER, RECORD_WORDS
from . import recorder as rec

F = TypeVar("F", bound=Callable[..., Any])
_running_loop = asyncio.events._get_running_loop
RECORDS = spanring.HEADER_WORDS  # where the records start, in words

log = logging.getLogger("workerscope")


# -- @timed ----------------------------------------------------------------------------------------
def _wrap(fn: F, name: str | None, attrs: dict[str, Any] | None) -> F:
    label = name or getattr(fn, "__qualname__", None) or repr(fn)
    attrs = attrs or None
    if inspect.iscoroutinefunction(fn):
        return _wrap_async(fn, label, attrs)
    if rec.fast is not None:
        wrapper: F = rec.fast.Timed(fn, label, attrs)
        functools.update_wrapper(wrapper, fn)
        return wrapper
    return _wrap_sync(fn, label, attrs)


def _reduce_timed(wrapper: Any) -> Any:
    """How a C-path wrapper pickles: as the function it stands for would. By reference (its
    module and name) where that finds it, except for cloudpickle (Lithops, Dask, Ray) with a
    function of __main__ or a local one: cloudpickle ships those by value, and so the wrapper
    is rebuilt around its function shipped that way. A plain pickle (multiprocessing) of a
    function of __main__ stays by reference, as it would for a plain function."""
    qualname = getattr(wrapper, "__qualname__", None)
    module = sys.modules.get(getattr(wrapper, "__module__", None) or "")
    found: Any = module
    for part in (qualname or "<>").split("."):
        found = getattr(found, part, None)
    if found is wrapper and (module is None or module.__name__ != "__main__"
                             or not _in_cloudpickle()):
        return qualname
    return _rebuild_timed, (wrapper._fn, wrapper._label, wrapper._attrs, dict(wrapper.__dict__))


def _in_cloudpickle() -> bool:
    # cloudpickle's Pickler.dump is Python: during its dump it is on the stack (any copy of
    # it: ray.cloudpickle, vendored ones), and no other pickler is.
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None:
        if "cloudpickle" in frame.f_globals.get("__name__", ""):
            return True
        frame = frame.f_back
    return False


def _rebuild_timed(fn: Callable[..., Any], label: Any, attrs: dict[str, Any] | None,
                   state: dict[str, Any]) -> Any:
    wrapper = _wrap(fn, label, attrs)
    wrapper.__dict__.update({k: v for k, v in state.items() if not k.startswith("__")})
    return wrapper


def _wrap_sync(fn: F, label: str, attrs: dict[str, Any] | None) -> F:
    """The pure-Python writer's wrapper: a begun record, the call, the end patched in. Kept
    inline (no helper calls on the way) because every call pays for it."""
    # Only what pickles goes in the closure: cloudpickle copies it, with the names it uses
    # (modules and constants), when it ships a function of __main__ by value.
    cache = [0, 0]  # the ring generation and this name's id there
    now, thread_cpu = time.monotonic_ns, time.thread_time_ns

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        w = rec.active
        if w is None:
            return fn(*args, **kwargs)
        q, mm, seqs, mask, half, gen, pack, cpu_flag = w.hot
        if cache[0] != gen:
            cache[1] = w.intern(label, attrs)
            cache[0] = gen
        try:
            st = rec._tl.s
        except AttributeError:
            st = rec.thread_state(w)
        if st[0] != gen:
            st = rec.thread_state(w)
        depth = st[2] = st[2] + 1
        seq = seqs()
        q[H_COUNTER] = seq  # first: a reader checks a slot against it (spanring.py)
        b = RECORDS + ((seq - 1) & mask) * RECORD_WORDS
        pack(mm, b * 8 + 8, cache[1] | cpu_flag, st[1] | depth << 32, now(), 0,
             rec.current_ctx(gen) if rec.async_open else 0)
        q[b] = seq  # last: the record is whole
        cpu0 = thread_cpu() if cpu_flag else -1
        err = 0
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            err = ERR_BIT
            w.error(gen << GEN_SHIFT | seq, exc)
            raise
        finally:
            st[2] -= 1
            end = now() | err
            try:
                # Not half a ring old: the slot is still ours (the counter moves before a slot
                # is reused). Else an F_END record.
                if cpu0 >= 0:
                    w.finish(seq, end, st[1], thread_cpu() - cpu0)
                elif q[H_COUNTER] - seq < half:
                    q[b + END] = end
                else:
                    w.finish(seq, end, st[1])
            except ValueError:
                rec.ends_unwritten += 1  # the ring was unmapped meanwhile (its link closed)

    return wrapper  # type: ignore[return-value]


def _wrap_async(fn: F, label: str, attrs: dict[str, Any] | None) -> F:
    cache = [0, 0]

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        w = rec.active
        if w is None:
            return await fn(*args, **kwargs)
        if cache[0] != w.gen:
            cache[1] = w.intern(label, attrs)
            cache[0] = w.gen
        token = rec.begin(w, cache[1], F_ASYNC)
        reset = rec.async_ctx.set(token)
        rec.opened_async(1)
        failed = False
        try:
            return await fn(*args, **kwargs)
        except BaseException as exc:
            failed = True
            w.error(token, exc)
            raise
        finally:
            _reset(reset)
            rec.opened_async(-1)
            rec.finish(w, token, failed)

    return wrapper  # type: ignore[return-value]


def _reset(token: Any) -> None:
    try:
        rec.async_ctx.reset(token)
    except ValueError:
        # Ended in another context than it began (a coroutine driven by hand): the span is
        # recorded; only the enclosing-span marker of that context stays set.
        log.debug("async span ended outside the context it began in")


@overload
def timed(fn: F) -> F: ...
@overload
def timed(fn: str | None = None, **attrs: Any) -> Callable[[F], F]: ...


def timed(fn: Any = None, **attrs: Any) -> Any:
    """Record each call of a function as a span: `@timed`, `@timed("name")`, `@timed(k=v)`.

    With no monitor active in the process, the wrapper costs one check beyond the call.
    """
    if callable(fn):
        return _wrap(fn, None, None)
    name = fn
    if name is not None and not isinstance(name, str):
        raise TypeError("timed() takes a function, or a span name (str) and attributes")

    def decorate(f: F) -> F:
        return _wrap(f, name, attrs)

    return decorate


# -- span() ----------------------------------------------------------------------------------------
class _NoSpan:
    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


_NO_SPAN = _NoSpan()


class _Span:
    """A sync block (pure-Python writer): one depth level on its thread, like a call. Inline
    like the @timed wrapper, for the same reason."""

    __slots__ = ("at", "attrs", "cpu0", "name", "seq", "st", "w")

    def __init__(self, name: Any, attrs: dict[str, Any] | None) -> None:
        self.name, self.attrs = name, attrs

    def __enter__(self) -> _Span:
        w = self.w = rec.active
        if w is None:
            return self
        q, mm, seqs, mask, _, gen, pack, cpu_flag = w.hot
        try:
            st = rec._tl.s
        except AttributeError:
            st = rec.thread_state(w)
        if st[0] != gen:
            st = rec.thread_state(w)
        self.st = st
        depth = st[2] = st[2] + 1
        nid = w.span_names.get(self.name) or w.name_id(self.name)
        seq = self.seq = seqs()
        q[H_COUNTER] = seq
        b = self.at = RECORDS + ((seq - 1) & mask) * RECORD_WORDS
        pack(mm, b * 8 + 8, nid | cpu_flag, st[1] | depth << 32, time.monotonic_ns(), 0,
             rec.current_ctx(gen) if rec.async_open else 0)
        q[b] = seq
        if self.attrs:
            w.extra(gen << GEN_SHIFT | seq, {"attrs": self.attrs})
        self.cpu0 = time.thread_time_ns() if cpu_flag else -1
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        w = self.w
        if w is None:
            return
        st, seq = self.st, self.seq
        st[2] -= 1
        end = time.monotonic_ns()
        if exc_type is not None:
            w.error(w.gen << GEN_SHIFT | seq, exc)
            end |= ERR_BIT
        try:
            if self.cpu0 >= 0:
                w.finish(seq, end, st[1], time.thread_time_ns() - self.cpu0)
            elif w.q[H_COUNTER] - seq < w.half:
                w.q[self.at + END] = end
            else:
                w.finish(seq, end, st[1])
        except ValueError:
            rec.ends_unwritten += 1  # the ring was unmapped meanwhile (its link closed)


class _AsyncSpan:
    """A block inside a running event loop: it may span awaits while other tasks run on the
    thread, so it takes no depth level; its task's context carries it to the spans inside."""

    __slots__ = ("attrs", "name", "reset", "token", "w")

    def __init__(self, name: Any, attrs: dict[str, Any] | None) -> None:
        self.name, self.attrs = name, attrs

    def __enter__(self) -> _AsyncSpan:
        w = self.w = rec.active
        if w is None:
            return self
        self.token = rec.begin(w, w.name_id(self.name), F_ASYNC)
        if self.attrs:
            w.extra(self.token, {"attrs": self.attrs})
        self.reset = rec.async_ctx.set(self.token)
        rec.opened_async(1)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        w = self.w
        if w is None:
            return
        _reset(self.reset)
        rec.opened_async(-1)
        if exc_type is not None:
            w.error(self.token, exc)
        rec.finish(w, self.token, exc_type is not None)


def _py_span(name: str, /, **attrs: Any) -> AbstractContextManager[Any]:
    """A context manager recording its block as a span named `name` with `attrs`."""
    if rec.active is None:
        return _NO_SPAN
    if _running_loop() is not None:
        return _AsyncSpan(name, attrs or None)
    return _Span(name, attrs or None)


class SpanFactory(Protocol):
    """span(name, **attrs): a context manager that records its block as a span."""

    def __call__(self, name: str, /, **attrs: Any) -> AbstractContextManager[Any]: ...


# The C path's span() does the same (and returns an _AsyncSpan inside a running event loop).
span: SpanFactory = rec.fast.span if rec.fast is not None else _py_span
rec.set_async_span(_AsyncSpan)
if rec.fast is not None:
    rec.fast.set_reduce(_reduce_timed)
rec.attach_from_environment()  # under `workerscope run`: record from the start


# -- mark() ----------------------------------------------------------------------------------------
def mark(name: str, **attrs: Any) -> None:
    """Record an instant event."""
    w = rec.active
    if w is None:
        return
    token = rec.begin(w, w.name_id(name), F_MARK)
    if token:
        if attrs:
            w.extra(token, {"attrs": attrs})
        rec.finish(w, token, False)
