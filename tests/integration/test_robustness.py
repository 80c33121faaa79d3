"""Monitoring never breaks the job: odd attributes, threads, huge batches, hostile frames."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
import zmq
from helpers import python_script, run_cli
from jobs import load_rows

from workerscope import Subscriber, load, monitor, profiled, protocol, span, timed
from workerscope.errors import ConfigError
from workerscope.transport import dealer
from workerscope.worker import link as launcher

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/, where jobs.py is


def test_unencodable_attributes_do_not_break_the_job(clean_env):
    """Span attrs msgpack can't carry (a Path, an object) become text; the job is unharmed."""
    with monitor(interval=0.5) as m, span("load", path=pathlib.PurePosixPath("/data/x"), thing=object()):
        load_rows(1)
    s = next(x for x in m.timeline.spans if x.name == "load")
    assert s.attrs["path"] == "PurePosixPath('/data/x')"
    assert m.timeline.jobs[0].status == "ok"


def test_concurrent_jobs_in_threads(clean_env):
    """Three threads each running a monitored block get their own timelines, promptly."""
    results = {}

    def work(i):
        with monitor(interval=0.05, name=f"t{i}") as m, span(f"inside{i}"):
            time.sleep(0.2)
        results[i] = m.timeline

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert time.monotonic() - t0 < 20, "a job end waited on another job's reply"
    for i, t in results.items():
        assert [j.name for j in t.jobs] == [f"t{i}"]
        assert all(w.status != "sidecar_lost" for w in t.workers.values())
        assert f"inside{i}" in {s.name for s in t.spans}
    assert len(results) == 3


@timed
def tick(i):
    return i


def test_flusher_and_job_end_never_race(clean_env):
    """Many short jobs with a busy flusher: no job raises, no span is lost or misfiled."""
    clean_env.setenv("WORKERSCOPE_FLUSH_INTERVAL", "0.01")
    for n in range(15):
        with monitor(interval=0.5) as m:
            for i in range(2000):
                tick(i)
        inner = [s for s in m.timeline.spans if s.name == "tick"]
        assert len(inner) == 2000, (n, len(inner))


def test_huge_span_batch_arrives_whole(clean_env):
    """A batch far above one frame's worth of spans is split into frames, none lost."""
    clean_env.setenv("WORKERSCOPE_FLUSH_INTERVAL", "3600")  # everything ships at job end
    with Subscriber() as sub:
        with monitor(interval=1.0, endpoint=sub.endpoint) as m:
            for i in range(60_000):
                tick(i)
        assert sub.wait(jobs=1, timeout=60)
        driver = sub.timeline()
    assert sum(s.name == "tick" for s in m.timeline.spans) == 60_000
    assert sum(s.name == "tick" for s in driver.spans) == 60_000
    assert sub.bad_frames == 0 and sub.lost[next(iter(sub.lost))] == 0


def test_sigpipe_default_worker_survives_dead_sidecar(clean_env):
    """A worker that restored SIGPIPE's default action is not killed when its sidecar dies."""
    r = subprocess.run(python_script(f"""
        import signal, sys
        sys.path.insert(0, {TESTS!r})
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        from workerscope import monitor
        from workerscope.worker import link as launcher
        from jobs import load_rows
        with monitor(interval=0.05) as m:
            link = next(iter(launcher._links.values()))
            link.proc.kill(); link.proc.wait()
            for _ in range(50):
                load_rows(2)
        print(list(m.timeline.workers.values())[0].status)
    """), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "sidecar_lost"


def test_subscriber_thread_survives_hostile_frames_and_callbacks(clean_env):
    """A frame with an infinite pid, a non-numeric metric, or a failing callback is counted;
    the receive thread lives on and later frames still count."""
    def bad_callback(frame):
        raise RuntimeError("user bug")

    with Subscriber(on_frame=bad_callback) as sub:
        ctx = zmq.Context()
        sock = dealer(ctx, sub.endpoint, linger_ms=1000)
        try:
            anchor = [time.time_ns(), time.monotonic_ns()]
            sock.send(protocol.encode_frame("hello", "w", 0, {"host": "h", "pid": float("inf"),
                                                               "anchor": anchor}))
            sock.send(protocol.encode_frame("sample", "w", 1, {"t": 1, "tree": {"cpu": "high"}}))
            sock.send(protocol.encode_frame("job_start", "w", 2, {"job": 1, "name": "j", "t": 0,
                                                                   "pid": 1}))
            sock.send(protocol.encode_frame("job_end", "w", 3, {"job": 1, "t": 5}))
            assert sub.wait(jobs=1, timeout=10), "the receive thread died"
        finally:
            sock.close()
            ctx.term()
        assert sub.bad_frames == 2 and sub.callback_errors == 2


def test_out_path_placeholders(clean_env, tmp_path):
    """out="{job}.wsc" gives each job its own file; unknown placeholders fail early."""
    wrapped = profiled(load_rows, mode="heavy", interval=0.5, out=str(tmp_path / "{pid}-{job}.wsc"))
    for n in range(3):
        wrapped(n)
    files = sorted(tmp_path.glob(f"{os.getpid()}-*.wsc"))
    assert len(files) == 3
    assert all(len(load(f).jobs) == 1 for f in files)
    with pytest.raises(ConfigError, match="only"):
        profiled(load_rows, out="{user}.wsc")


def test_listen_without_jobs_idles(clean_env):
    """`listen` with no --jobs waits for Ctrl-C without spinning the CPU, then saves."""
    proc = subprocess.Popen([sys.executable, "-m", "workerscope", "listen", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("listening on")
        p = psutil.Process(proc.pid)
        before = sum(p.cpu_times()[:2])
        threading.Event().wait(1.0)
        used = sum(p.cpu_times()[:2]) - before
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert used < 0.3, f"idle listen used {used:.2f} s of CPU in 1 s"
    assert proc.returncode == 0


def test_run_counts_the_last_interval(clean_env, tmp_path):
    """`run` takes its last sample before reaping the command: CPU burned after the previous
    tick is still in the tree's totals."""
    code = "import time\nt = time.process_time() + 0.8\nwhile time.process_time() < t: pass\n"
    r = run_cli("run", "--interval", "5", "-o", str(tmp_path / "r.wsc"), "--", sys.executable,
                "-c", code)
    assert r.returncode == 0, r.stderr
    tree = [s.values for s in load(tmp_path / "r.wsc").samples if s.scope == "tree"]
    assert tree[-1]["cpu_user_s"] + tree[-1]["cpu_system_s"] >= 0.8


def test_light_workers_are_not_held_at_exit(clean_env):
    """A light worker's bye is acknowledged at once (it is never pinged), so it exits quickly."""
    # The default bye timeout: the ack, not the timeout, must end the wait.
    clean_env.delenv("WORKERSCOPE_BYE_TIMEOUT", raising=False)
    with Subscriber() as sub:
        r = subprocess.run(python_script(f"""
            import sys; sys.path.insert(0, {TESTS!r})
            from jobs import load_rows
            from workerscope import profiled
            profiled(load_rows, mode="light", endpoint={sub.endpoint!r})(3)
        """), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert sub.wait(jobs=1, byes=1, timeout=10)
        assert sub.clock_offsets() == {} and sub._pending_ack == {}
        (w,) = sub.timeline().workers.values()
        assert w.status == "exited"


def test_light_mode_from_many_threads(clean_env):
    """Light-mode jobs from 8 threads share one socket safely: every frame arrives, none lost."""
    with Subscriber() as sub:
        wrapped = profiled(load_rows, mode="light", endpoint=sub.endpoint)
        threads = [threading.Thread(target=lambda: [wrapped(2) for _ in range(300)])
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sub.wait(jobs=2400, timeout=60)
        assert list(sub.lost.values()) == [0]


def test_light_mode_bad_endpoint_still_runs_the_job(clean_env):
    """An endpoint ZeroMQ rejects (no port) warns once; the job runs and returns its result."""
    wrapped = profiled(load_rows, mode="light", endpoint="tcp://127.0.0.1")
    assert wrapped(2) == [0, 1] and wrapped(3) == [0, 1, 2]
    assert wrapped.last_stats["wall_s"] >= 0


def test_bytes_attributes_in_every_format(clean_env, tmp_path):
    """A span attribute holding bytes does not stop any export."""
    with monitor(interval=0.5) as m, span("fetch", key=b"s3://bucket/key"):
        load_rows(1)
    for name in ("t.json", "t.wsc", "t.html", "t.csv"):
        assert os.path.getsize(m.timeline.save(tmp_path / name)) > 0


def test_last_aggregated_readings_stay_with_their_job(clean_env):
    """With samples_per_frame, the readings gathered before a job ends are sent with that job."""
    with monitor(interval=0.02, samples_per_frame=5) as m:
        time.sleep(0.33)
    job = m.timeline.jobs[0]
    last = max(s.t_ns for s in m.timeline.samples if s.scope == "tree")
    assert job.end_ns - last < 25_000_000, (job.end_ns - last) / 1e6


def test_async_iterator_ends_at_close_even_when_behind(clean_env):
    """A consumer far behind still sees the iteration end when the Subscriber closes."""
    import asyncio

    async def main():
        sub = Subscriber().start()
        it = sub.frames(maxsize=2)
        wrapped = profiled(load_rows, mode="heavy", interval=0.01, endpoint=sub.endpoint)
        await asyncio.get_running_loop().run_in_executor(None, wrapped, 2)
        await asyncio.get_running_loop().run_in_executor(None, sub.wait, 1, 10)
        launcher.close_all(wait=True)
        sub.close()
        got = [f async for f in it]  # ends: the close's end marker made room for itself
        return got, sub.iterator_dropped, sum(sub.received.values())

    got, dropped, received = asyncio.run(asyncio.wait_for(main(), 60))
    assert dropped > 0 and len(got) + dropped == received
