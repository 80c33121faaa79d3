"""Span rings: what a worker recorded survives its death, parents follow nesting in threads
and asyncio tasks, a ring that overflows counts what it lost, and the C and pure-Python
writers record the same spans."""

from __future__ import annotations

import asyncio
import glob
import importlib.util
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest
from helpers import wait_until

from workerscope import Subscriber, load, mark, monitor, span, timed


def python_script(code):
    """argv running `code` (dedented) in a fresh interpreter."""
    return [sys.executable, "-c", textwrap.dedent(code)]


def by_id(timeline):
    return {(s.worker, s.pid, s.id): s for s in timeline.spans}


def parent_of(timeline, s):
    return by_id(timeline).get((s.worker, s.pid, s.parent))


# -- a killed worker loses nothing -------------------------------------------------------------
KILLED_JOB = """
    import sys, time
    from workerscope import profiled, timed

    @timed
    def step(i):
        time.sleep(0.01)

    @timed
    def stuck(flag):
        open(flag, "w").close()
        time.sleep(600)

    def job(flag):
        for i in range(10):
            step(i)
        stuck(flag)

    profiled(job, mode="heavy", interval=0.05, endpoint=sys.argv[1], out=sys.argv[2])(sys.argv[3])
"""


def test_sigkill_inside_an_open_span_loses_no_span(clean_env, tmp_path):
    """10 spans of 10 ms, then SIGKILL inside an open span: the driver's timeline and the out
    file hold all 10 and the open one, cut short at the death; the job was killed."""
    out, flag = tmp_path / "killed.wsc", tmp_path / "flag"
    with Subscriber() as sub:
        worker = subprocess.Popen([*python_script(KILLED_JOB), sub.endpoint, str(out), str(flag)])
        try:
            wait_until(flag.exists, what="the worker to enter its last span", timeout=30)
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
        killed_at = time.time_ns()
        assert sub.wait(jobs=1, byes=1, timeout=30)
        driver = sub.timeline()
    wait_until(out.exists, what="the out file", timeout=30)
    for t in (driver, load(out)):
        (job,) = t.jobs
        assert job.status in ("killed", "oom_killed") and job.status != "ok"
        steps = [s for s in t.spans if s.name == "step"]
        assert len(steps) == 10
        assert all(not s.cut_short and 9e6 <= s.duration_ns < 1e9 for s in steps)
        (open_span,) = [s for s in t.spans if s.name == "stuck"]
        assert open_span.cut_short and open_span.error is None
        assert open_span.start_ns >= max(s.end_ns for s in steps)
        assert open_span.end_ns <= killed_at + 5e9 and open_span.end_ns >= open_span.start_ns
        job_span = next(s for s in t.spans if s.kind == "job")
        assert all(s.parent == job_span.id and s.job == job.id for s in [*steps, open_span])
        (w,) = t.workers.values()
        assert w.spans_lost == 0 and w.pid == worker.pid
    assert not ring_dirs(worker.pid), "the sidecar removes the ring directory when it exits"


def ring_dirs(pid):
    """The span-ring directories of worker `pid` still there."""
    return [p for d in ("/dev/shm", tempfile.gettempdir())
            for p in glob.glob(os.path.join(d, f"workerscope-{pid}-*"))]


def test_ring_directories_of_dead_workers_are_collected(clean_env):
    """A ring directory whose worker and sidecar were both killed (nobody left to remove it)
    is removed by the next worker that makes one."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    pidns = os.stat("/proc/self/ns/pid").st_ino
    where = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    stale = os.path.join(where, f"workerscope-{gone.pid}-{pidns}-test")
    os.makedirs(stale)
    open(os.path.join(stale, f"{gone.pid}.ring"), "wb").close()
    with monitor(interval=0.5):
        pass
    assert not os.path.exists(stale)


# -- parents in threads and asyncio tasks --------------------------------------------------------
@timed
def middle(tag):
    with span(f"{tag}/leaf"):
        mark(f"{tag}/mark")
        return deepest(tag)


@timed
def deepest(tag):
    return tag


@timed
async def task(tag):
    with span(f"{tag}/block"):
        await asyncio.sleep(0.01)  # the other task runs here, inside its own block
        middle(tag)
        await sub_task(tag)


@timed
async def sub_task(tag):
    await asyncio.sleep(0)
    with span(f"{tag}/after"):
        await asyncio.sleep(0)


def test_parents_follow_nesting_in_threads_and_tasks(clean_env):
    """4 threads and 2 asyncio tasks nest spans at once: every span's parent is the span that
    encloses it on its own thread or in its own task; top-level ones hang off the job."""
    gate = threading.Barrier(4)

    def thread_work(i):
        with span(f"t{i}/outer"):
            gate.wait(10)
            for _ in range(3):
                middle(f"t{i}")

    async def both():
        await asyncio.gather(task("a0"), task("a1"))

    with monitor(interval=0.5) as m:
        threads = [threading.Thread(target=thread_work, args=(i,), name=f"w{i}") for i in range(4)]
        for th in threads:
            th.start()
        asyncio.run(both())
        for th in threads:
            th.join()
    t = m.timeline
    job = next(s for s in t.spans if s.kind == "job")
    names = {s.name for s in t.spans}
    for i in range(4):
        tag = f"t{i}"
        (outer,) = [s for s in t.spans if s.name == f"{tag}/outer"]
        assert outer.parent == job.id and outer.job == job.id
        leaves = [s for s in t.spans if s.name == f"{tag}/leaf"]
        assert len(leaves) == 3
        for leaf in leaves:
            mid = parent_of(t, leaf)
            assert mid.name == "middle" and mid.tid == leaf.tid == outer.tid
            assert parent_of(t, mid) is outer
            (deep,) = [s for s in t.spans if s.name == "deepest" and s.parent == leaf.id]
            assert deep.tid == leaf.tid and leaf.start_ns <= deep.start_ns <= deep.end_ns <= leaf.end_ns
    assert {f"w{i}" for i in range(4)} <= set(t.threads.values())
    for tag in ("a0", "a1"):
        (block,) = [s for s in t.spans if s.name == f"{tag}/block"]
        top = parent_of(t, block)
        assert top.name == "task" and top.parent == job.id
        (leaf,) = [s for s in t.spans if s.name == f"{tag}/leaf"]
        assert parent_of(t, parent_of(t, leaf)) is block, "middle() nests in its task's block"
        (after,) = [s for s in t.spans if s.name == f"{tag}/after"]
        sub = parent_of(t, after)
        assert sub.name == "sub_task" and parent_of(t, sub) is block
    blocks = sorted((s for s in t.spans if s.name.endswith("/block")), key=lambda s: s.start_ns)
    assert blocks[1].start_ns < blocks[0].end_ns, "the two tasks' blocks overlapped"
    marks = {mk.name for mk in t.marks}
    assert {"t0/mark", "a0/mark", "a1/mark"} <= marks
    assert "middle" in names and t.workers[job.worker].spans_lost == 0


# -- forked children ---------------------------------------------------------------------------
@timed
def in_child(n):
    return n * 2


@timed
def child_dies():
    os.kill(os.getpid(), signal.SIGKILL)


def _child():
    in_child(3)
    child_dies()


def test_forked_child_records_into_its_own_ring(clean_env):
    """A child forked during a job records into a ring of its own, which the sidecar finds:
    its spans carry its pid, and the span open when it was killed is cut short."""
    ctx = multiprocessing.get_context("fork")
    with monitor(interval=0.05) as m:
        in_child(1)
        child = ctx.Process(target=_child)
        child.start()
        child.join(30)
    assert child.exitcode == -signal.SIGKILL
    t = m.timeline
    mine = [s for s in t.spans if s.pid == child.pid]
    assert sorted((s.name, s.cut_short) for s in mine) == [("child_dies", True),
                                                           ("in_child", False)]
    assert [s.pid for s in t.spans if s.name == "in_child" and s.pid != child.pid] == [os.getpid()]


# -- a ring that overflows ---------------------------------------------------------------------
@timed
def tick(i):
    return i


def test_overflowing_ring_counts_what_it_lost(clean_env):
    """With a 64-record ring, 20,000 spans in a burst overflow it: every span either reaches
    the timeline or is counted in the worker's spans_lost, and a note says why."""
    clean_env.setenv("WORKERSCOPE_RING_RECORDS", "64")
    n = 20_000
    with monitor(interval=0.5) as m:
        for i in range(n):
            tick(i)
    t = m.timeline
    (w,) = t.workers.values()
    got = sum(s.name == "tick" for s in t.spans)
    assert w.spans_lost > 0 and got + w.spans_lost == n
    assert any("span ring full" in note for note in w.notes)


def test_span_older_than_half_the_ring_still_ends(clean_env):
    """An outer span with more inner spans than half its 64-record ring ends with a record of
    its own (its slot may be reused by then): its end is exact and nothing is counted lost."""
    clean_env.setenv("WORKERSCOPE_RING_RECORDS", "64")
    with monitor(interval=0.5) as m:
        with span("outer"):
            for i in range(40):
                tick(i)
        t_end = time.time_ns()
    t = m.timeline
    (outer,) = [s for s in t.spans if s.name == "outer"]
    ticks = [s for s in t.spans if s.name == "tick"]
    assert len(ticks) == 40 and all(s.parent == outer.id for s in ticks)
    assert not outer.cut_short and max(s.end_ns for s in ticks) <= outer.end_ns <= t_end + 2e6
    assert next(iter(t.workers.values())).spans_lost == 0


# -- the C and the pure-Python writer ----------------------------------------------------------
PICKLES = """
    import pickle, subprocess, sys
    from workerscope import timed

    @timed
    def work(x):
        return x * 3

    assert pickle.loads(pickle.dumps(work)) is work  # multiprocessing: by reference
    try:
        import cloudpickle
    except ImportError:
        print("no cloudpickle")
        raise SystemExit
    # Lithops, Dask, Ray: a function of __main__ goes by value, to a process without it.
    load = "import sys, cloudpickle; print(cloudpickle.loads(sys.stdin.buffer.read())(5))"
    there = subprocess.run([sys.executable, "-c", load], input=cloudpickle.dumps(work),
                           capture_output=True, check=True)
    print(there.stdout.decode().strip())
"""


@pytest.mark.parametrize("pure", [False, True], ids=["c", "python"])
def test_timed_functions_of_main_pickle_both_ways(clean_env, pure):
    """A @timed function of a script pickles by reference with pickle (process pools) and by
    value with cloudpickle (Lithops, Dask, Ray), with either writer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERSCOPE_")}
    if pure:
        env["WORKERSCOPE_PURE_PYTHON"] = "1"
    out = subprocess.run(python_script(PICKLES), env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("15", "no cloudpickle")


PARITY = """
    import asyncio, json, threading
    from workerscope import mark, monitor, span, timed
    from workerscope.worker import recorder

    @timed("named", team="db")
    def named(x):
        with span("inner", rows=x):
            mark("here", at=x)
            return leaf(x)

    @timed
    def leaf(x):
        return x

    @timed
    def fails(x):
        raise ValueError(f"bad {x}")

    @timed
    async def coro(x):
        await asyncio.sleep(0)
        return named(x)

    class Thing:
        @timed
        def method(self, x):
            return named(x)

    with monitor(interval=0.5) as m:
        named(1)
        Thing().method(2)
        try:
            fails(3)
        except ValueError:
            pass
        th = threading.Thread(target=named, args=(4,), name="other")
        th.start(); th.join()
        async def main():
            await asyncio.gather(coro(5), coro(6))
        asyncio.run(main())
    t = m.timeline
    key = {(s.pid, s.id): s for s in t.spans}
    def path(s):
        out = []
        while s is not None:
            out.append(s.name)
            s = key.get((s.pid, s.parent))
        return "/".join(reversed(out))
    rows = sorted(([path(s), s.kind, s.attrs and {k: v for k, v in s.attrs.items()
                   if k not in ("traceback", "status")}, s.error,
                   (s.attrs or {}).get("traceback", "").count("File"), s.cut_short,
                   t.threads.get((s.worker, s.pid, s.tid))]
                  for s in t.spans), key=json.dumps)
    marks = sorted(([mk.name, mk.attrs] for mk in t.marks), key=json.dumps)
    print(json.dumps({"fast": recorder.fast is not None, "rows": rows, "marks": marks}))
"""


def _run_parity(pure):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERSCOPE_")}
    if pure:
        env["WORKERSCOPE_PURE_PYTHON"] = "1"
    out = subprocess.run(python_script(PARITY), env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return json.loads(out)


def test_c_and_python_writers_record_the_same_spans(clean_env):
    """The same work recorded by the C fast path and by the pure-Python writer (forced with
    WORKERSCOPE_PURE_PYTHON=1) gives the same spans, parents, attrs, errors and marks."""
    built = importlib.util.find_spec("workerscope.worker._fastspan") is not None
    if not built and shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the fast path cannot have been built")
    assert built, "the C fast path is not built: pip install -e . builds it"
    c, py = _run_parity(pure=False), _run_parity(pure=True)
    assert c["fast"] and not py["fast"]
    assert c["rows"] == py["rows"]
    assert c["marks"] == py["marks"]
    rows = {r[0]: r for r in py["rows"]}
    assert rows["monitor/fails"][3] == "ValueError: bad 3" and rows["monitor/fails"][4] == 1
    assert sorted(r[2]["rows"] for r in py["rows"] if r[0] == "monitor/named/inner") == [1, 4]
    assert rows["monitor/named"][2] == {"team": "db"}
    assert rows["monitor/Thing.method/named/inner/leaf"][6] == "MainThread"
    assert rows["monitor/coro/named/inner/leaf"][6] == "MainThread"
    assert any(r[0] == "monitor/named/inner/leaf" and r[6] == "other" for r in py["rows"])
