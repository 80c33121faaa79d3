"""Faults that must not lose data or hurt the job: killed worker, killed sidecar, no driver,
bad frames."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import threading
import time

import zmq
from helpers import python_script
from jobs import job, load_rows

from workerscope import Subscriber, load, monitor, profiled, protocol
from workerscope.transport import dealer
from workerscope.worker import link as launcher

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/, where jobs.py is


def test_worker_sigkilled_mid_job_still_delivers(clean_env, tmp_path):
    """SIGKILL of the worker: the sidecar sees EOF, takes a last sample, and delivers the
    timeline with status killed to the driver and to the out file."""
    out = tmp_path / "killed.wsc"
    spans_seen = threading.Event()

    def on_frame(frame):
        if frame.kind == protocol.SPANS and frame.body["records"]:
            spans_seen.set()

    with Subscriber(on_frame=on_frame) as sub:
        worker = subprocess.Popen(python_script(f"""
            import sys; sys.path.insert(0, {TESTS!r})
            from jobs import wait_then_sleep
            from workerscope import profiled
            profiled(wait_then_sleep, mode="heavy", interval=0.05, endpoint={sub.endpoint!r},
                     out={str(out)!r})({str(tmp_path / 'flag')!r}, 120)
        """))
        try:
            assert spans_seen.wait(30), "the job's first spans never arrived"
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
        assert sub.wait(jobs=1, byes=1, timeout=30)
        t = sub.timeline()
    (w,) = t.workers.values()
    assert w.status == "killed" and w.pid == worker.pid and w.lost == 0
    (j,) = t.jobs
    assert j.status == "killed"
    assert "load_rows" in {s.name for s in t.spans}
    last = max(s.t_ns for s in t.samples if s.scope == "tree")
    assert last >= j.start_ns
    saved = load(out)
    assert [x.status for x in saved.jobs] == ["killed"]
    assert "load_rows" in {s.name for s in saved.spans}


def test_sidecar_killed_mid_job_leaves_result_unchanged(clean_env):
    """Killing the sidecar mid-block changes nothing for the job; its timeline says so."""
    with monitor(interval=0.05) as m:
        link = next(iter(launcher._links.values()))
        link.proc.kill()
        link.proc.wait()
        assert load_rows(3) == [0, 1, 2]
    (w,) = m.timeline.workers.values()
    assert w.status == "sidecar_lost"
    assert "load_rows" in {s.name for s in m.timeline.spans}, "spans not yet shipped are kept"
    assert [j.status for j in m.timeline.jobs] == ["ok"]


def _kill_own_sidecar_then(n):
    """A job that kills its worker's sidecar mid-call, then carries on."""
    proc = next(iter(launcher._links.values())).proc
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return job(n)


def test_profiled_survives_sidecar_death_and_restarts_it(clean_env, tmp_path):
    """A heavy call whose sidecar dies mid-call returns fn's result and writes the timeline it
    still has (sidecar_lost) to out; the next call gets a new sidecar."""
    out = tmp_path / "lost-{job}.wsc"
    wrapped = profiled(job, mode="heavy", interval=0.05, out=str(out))
    assert wrapped(3) == job(3)
    first = next(iter(launcher._links.values())).proc
    killer = profiled(_kill_own_sidecar_then, mode="heavy", interval=0.05, out=str(out))
    assert killer(4) == job(4)
    assert first.returncode == -signal.SIGKILL
    files = sorted(f.name for f in tmp_path.glob("lost-*.wsc"))
    assert "lost-{job}.wsc" not in files, "the placeholder is filled in by the worker too"
    lost = [load(tmp_path / f) for f in files]
    statuses = sorted(next(iter(t.workers.values())).status for t in lost)
    assert statuses == ["idle", "sidecar_lost"]
    crunched = next(t for t in lost if next(iter(t.workers.values())).status == "sidecar_lost")
    assert {"load_rows", "crunch"} <= {s.name for s in crunched.spans}
    assert wrapped(5) == job(5)
    second = next(iter(launcher._links.values())).proc
    assert second.pid != first.pid and second.poll() is None


def test_no_driver_listening_never_blocks(clean_env):
    """With nothing at the endpoint, jobs run at full speed and the sidecar gives up at bye."""
    clean_env.setenv("WORKERSCOPE_BYE_TIMEOUT", "0.3")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free, and nobody listens once closed
    wrapped = profiled(job, mode="heavy", interval=0.01, endpoint=f"tcp://127.0.0.1:{port}")
    results = [wrapped(i) for i in range(20)]
    assert results == [job(i) for i in range(20)]
    link = next(iter(launcher._links.values()))
    launcher.close_all(wait=True)
    assert link.proc.returncode == 0


def _raw_dealer(endpoint):
    ctx = zmq.Context()
    sock = dealer(ctx, endpoint, linger_ms=1000)
    return ctx, sock


def test_subscriber_survives_bad_frames_and_counts_gaps(clean_env):
    """Garbage is counted and skipped, a malformed sample skipped and noted; a seq gap of 3
    is counted as 3 frames lost."""
    with Subscriber() as sub:
        ctx, sock = _raw_dealer(sub.endpoint)
        try:
            sock.send(b"\x00garbage")
            sock.send(protocol.encode_frame("sample", "w1", 0, {"t": "not-a-number"}))
            anchor = [time.time_ns(), time.monotonic_ns()]
            sock.send(protocol.encode_frame("hello", "w1", 1, {"host": "h", "pid": 1,
                                                                "anchor": anchor}))
            sock.send(protocol.encode_frame("job_start", "w1", 2, {"job": 1, "name": "j", "t": 0,
                                                                    "pid": 1}))
            sock.send(protocol.encode_frame("job_end", "w1", 6, {"job": 1, "t": 10,
                                                                  "status": "ok"}))
            assert sub.wait(jobs=1, timeout=10)
        finally:
            sock.close()
            ctx.term()
        # The garbage at once; the sample's body when a timeline is built from the record
        # (the driver reads sample bodies only when someone needs them).
        assert sub.bad_frames == 1
        assert sub.lost == {"w1": 3}
        t = sub.timeline()
        assert [j.name for j in t.jobs] == ["j"] and t.workers["w1"].lost == 3
        assert "1 malformed frame(s) of this worker in the record were skipped" in t.workers["w1"].notes


def test_ipc_endpoint_is_private(clean_env):
    """An ipc:// Subscriber's socket file is its owner's alone, and a job can stream to it."""
    with Subscriber("ipc://") as sub:
        path = sub.endpoint[len("ipc://"):]
        assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0  # made under umask 0o077
        with monitor(interval=0.5, endpoint=sub.endpoint):
            load_rows(2)
        assert sub.wait(jobs=1, timeout=10)
    assert not os.path.exists(path)


def test_default_listens_on_loopback_only(clean_env):
    """The default Subscriber binds 127.0.0.1, never all interfaces."""
    with Subscriber() as sub:
        assert sub.endpoint.startswith("tcp://127.0.0.1:")
