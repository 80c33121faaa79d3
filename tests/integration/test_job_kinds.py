"""profiled() on every kind of callable users hand it, and a bad setting in a worker's
environment: the job is timed as the user means it and monitoring never breaks the pool."""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import time

import pytest

from workerscope import Subscriber, profiled, timed


@timed
def step(i):
    time.sleep(0.01)
    return i


def numbers(n):
    for i in range(n):
        yield step(i)


async def fetch(n):
    total = 0
    for i in range(n):
        await asyncio.sleep(0.01)
        total += step(i)
    return total


def double(x):
    return 2 * x


@pytest.mark.parametrize("mode", ["heavy", "light"])
def test_generator_job_times_the_iteration(clean_env, mode):
    """A profiled generator function is one job from the first item to the last, with the
    spans of its items inside it, not a job of the call that only makes the generator."""
    with Subscriber() as sub:
        gen = profiled(numbers, mode=mode, interval=0.05, endpoint=sub.endpoint)(5)
        assert sub.jobs_started == 0
        assert list(gen) == [0, 1, 2, 3, 4]
        assert sub.wait(jobs=1, timeout=30)
        t = sub.timeline()
    (job,) = t.jobs
    assert job.status == "ok"
    assert (job.end_ns - job.start_ns) / 1e9 >= 0.045, "the job must cover the 5 items"
    if mode == "heavy":
        inner = [s for s in t.spans if s.name.endswith("step")]
        assert len(inner) == 5
        assert all(job.start_ns <= s.start_ns and s.end_ns <= job.end_ns for s in inner)


@pytest.mark.parametrize("mode", ["heavy", "light"])
def test_async_job_times_the_awaited_call(clean_env, mode):
    """A profiled coroutine function stays a coroutine function; the job is the awaited
    call, spans inside it included."""
    with Subscriber() as sub:
        wrapped = profiled(fetch, mode=mode, interval=0.05, endpoint=sub.endpoint)
        assert asyncio.iscoroutinefunction(wrapped)
        assert asyncio.run(wrapped(4)) == 6
        assert sub.wait(jobs=1, timeout=30)
        t = sub.timeline()
    (job,) = t.jobs
    assert job.status == "ok"
    assert (job.end_ns - job.start_ns) / 1e9 >= 0.035, "the job must cover the awaits"


def test_generator_that_raises_is_an_error_job(clean_env):
    """An exception inside the iteration ends the job as error and reaches the caller."""
    def broken():
        yield 1
        raise KeyError("boom")

    with Subscriber() as sub:
        gen = profiled(broken, mode="heavy", interval=0.05, endpoint=sub.endpoint)()
        with pytest.raises(KeyError):
            list(gen)
        assert sub.wait(jobs=1, timeout=30)
        (job,) = sub.timeline().jobs
    assert job.status == "error"


@pytest.mark.parametrize("variable,value", [
    ("WORKERSCOPE_INTERVAL", "0"),
    ("WORKERSCOPE_INTERVAL", "abc"),
    ("WORKERSCOPE_MODE", "bogus"),
])
def test_bad_setting_in_a_worker_never_breaks_the_pool(clean_env, capfd, variable, value):
    """A bad WORKERSCOPE_* value where the workers run: every result comes back (the pool
    is not broken) and each worker says once, on stderr, what it ignored."""
    ctx = multiprocessing.get_context("spawn")
    wrapped = profiled(double, mode="light")  # valid here, in the driver
    clean_env.setenv(variable, value)  # inherited by the spawned workers only
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        assert list(pool.map(wrapped, range(6))) == [0, 2, 4, 6, 8, 10]
    err = capfd.readouterr().err
    assert 1 <= err.count(f"{variable}={value!r}") <= 2, err  # once per worker process


def test_bad_setting_is_said_once(clean_env, caplog):
    """In the process itself: the job runs with the arguments' settings and one warning
    names the variable."""
    wrapped = profiled(double, mode="light")
    clean_env.setenv("WORKERSCOPE_INTERVAL", "abc")
    assert [wrapped(i) for i in range(3)] == [0, 2, 4]
    said = [r.getMessage() for r in caplog.records if "WORKERSCOPE_INTERVAL" in r.getMessage()]
    assert len(said) == 1, said
    assert wrapped.last_stats is not None, "the job ran in light mode, as profiled() was told"
