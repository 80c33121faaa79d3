"""The driver cannot be knocked over, lied to or made to lose data (issue 13, problems 2, 3, 6
and 7): authentication on TCP, one worker per connection, bounded memory under a flood, jobs
of silent workers lost rather than running, a restarted driver that knows its workers, and
ipc paths claimed with care. Real sockets and real sidecars throughout."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import msgpack
import pytest
import zmq
from factories import span_record
from helpers import eventually, python_script

from workerscope import Subscriber, monitor, profiled, protocol
from workerscope.config import resolve, split_endpoint
from workerscope.driver.keys import endpoint_for, new_key
from workerscope.errors import WorkerscopeError
from workerscope.transport import MAX_FRAME_BYTES, dealer

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/, where jobs.py is



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Sender:
    """A DEALER speaking the sidecar's side of the protocol by hand, with the endpoint's keys
    when it carries them (a key holder), under any worker id it likes."""

    def __init__(self, endpoint: str) -> None:
        self.ctx = zmq.Context()
        self.sock = dealer(self.ctx, endpoint, linger_ms=1000)
        self.seq: dict[str, int] = {}

    def send(self, worker: str, kind: str, body: dict) -> None:
        seq = self.seq.get(worker, 0)
        self.seq[worker] = seq + 1
        try:  # never block: a DEALER whose handshake failed has no connection to queue on
            self.sock.send(protocol.encode_frame(kind, worker, seq, body), zmq.NOBLOCK)
        except zmq.Again:
            pass

    def hello(self, worker: str) -> None:
        self.send(worker, "hello", {"host": "h", "pid": 7,
                                    "anchor": [time.time_ns(), time.monotonic_ns()]})

    def close(self) -> None:
        self.sock.close(linger=1000)
        self.ctx.term()


def _plain(endpoint: str) -> str:
    return split_endpoint(endpoint)[0]


# -- 2. authentication -------------------------------------------------------------------------
def test_tcp_endpoint_carries_keys_and_plain_text_needs_asking(clean_env):
    """A tcp:// Subscriber hands out tcp://HOST:PORT?curve=KEY,KEY, which settings accept;
    plain text only with insecure=True, and then with a warning."""
    with Subscriber() as sub:
        address, keys = split_endpoint(sub.endpoint)
        assert address.startswith("tcp://127.0.0.1:") and keys is not None
        assert resolve({}, endpoint=sub.endpoint).endpoint == sub.endpoint
        assert sub.key is not None and endpoint_for(address, sub.key) == sub.endpoint
    with pytest.warns(UserWarning, match="plain text"), Subscriber(insecure=True) as sub:
        assert "?" not in sub.endpoint and sub.key is None
        side = Sender(sub.endpoint)
        try:
            side.hello("plain:1:2")
            assert eventually(lambda: "plain:1:2" in sub.received)
        finally:
            side.close()


def test_a_sender_without_the_key_never_gets_in(clean_env):
    """Frames from a DEALER without keys, or with another driver's keys, never reach the
    Subscriber (their handshakes fail, counted); a real job with sub.endpoint does."""
    with Subscriber() as sub:
        other = endpoint_for(_plain(sub.endpoint), new_key())
        intruders = [Sender(_plain(sub.endpoint)), Sender(other)]
        try:
            for n, side in enumerate(intruders):
                side.hello(f"intruder:{n}:1")
                side.send(f"intruder:{n}:1", "job_start", {"job": 1, "name": "fake", "t": 0,
                                                           "pid": 7})
            assert eventually(lambda: sub.refused["handshakes"] >= 2), sub.refused
            job = profiled(sum, mode="heavy", interval=0.05, endpoint=sub.endpoint)
            assert job([1, 2]) == 3
            assert sub.wait(jobs=1, timeout=30)
        finally:
            for side in intruders:
                side.close()
        assert not any(w.startswith("intruder") for w in sub.received)
        assert [j.name for j in sub.timeline().jobs] == ["sum"]


def test_a_connection_speaks_only_for_its_own_worker(clean_env):
    """A connection that said hello as worker A cannot send frames as worker B, nor can a
    second connection speak for A while A's is alive: refused and counted."""
    with Subscriber() as sub:
        a, b = Sender(sub.endpoint), Sender(sub.endpoint)
        try:
            a.hello("hostA:1:2")
            assert eventually(lambda: "hostA:1:2" in sub.received)  # a holds A from now on
            a.send("hostB:3:4", "hello", {"host": "hostB", "pid": 3,
                                          "anchor": [time.time_ns(), time.monotonic_ns()]})
            a.send("hostB:3:4", "job_start", {"job": 9, "name": "forged", "t": 0, "pid": 3})
            b.send("hostA:1:2", "bye", {"status": "exited"})  # closing A's run for it
            a.send("hostA:1:2", "job_start", {"job": 1, "name": "real",
                                              "t": time.monotonic_ns(), "pid": 1})
            assert sub.wait(started=1, timeout=10)
            assert eventually(lambda: sub.refused["identity"] == 3), sub.refused
        finally:
            a.close()
            b.close()
        t = sub.timeline()
    assert set(sub.received) == {"hostA:1:2"} and t.workers["hostA:1:2"].status == "running"
    assert [j.name for j in t.jobs] == ["real"]


# -- 3. bounds -----------------------------------------------------------------------------------
DRIVER = """
import json, os, resource, sys, tempfile
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))  # as on many hosts: 1,100 once ran out
from workerscope import Subscriber

def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    t = os.times()
    out["cpu_s"] = t.user + t.system
    out["fds"] = len(os.listdir("/proc/self/fd"))
    return out

sub = Subscriber(max_connections=int(sys.argv[1]), max_kept_bytes=8 << 20,
                 max_workers=64).start()
print(json.dumps({"endpoint": sub.endpoint, "ceiling": sub.memory_ceiling,
                  "connections": sub._conns.ceiling, **status()}), flush=True)
for line in sys.stdin:
    if line.strip() == "files":  # the program's own work: open 100 files at once
        with tempfile.TemporaryDirectory() as d:
            files = [open(os.path.join(d, str(i)), "w") for i in range(100)]
            for f in files:
                f.close()
    print(json.dumps({"refused": sub.refused, "bad": sub.bad_frames, "jobs": sub.jobs_ended,
                      "frames": sum(sub.received.values()), **status()}), flush=True)
sub.close()
"""


class Driver:
    """A Subscriber in a process of its own (its descriptors limited to 1,024), so that its
    memory and descriptors are measured alone."""

    def __init__(self, max_connections: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(max_connections)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.start = json.loads(self.proc.stdout.readline())
        host, port = split_endpoint(self.start["endpoint"])[0][len("tcp://"):].rsplit(":", 1)
        self.host_port = (host, int(port))

    def ask(self, command: str = "stats") -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)
        self.proc.stdout.close()


def _spans_frame(worker: str, seq: int) -> bytes:
    """A valid spans frame just under the size cap: ~36,000 short records."""
    t = time.monotonic_ns()
    n = 37_000
    while True:
        records = [span_record(id=i, start_ns=t) for i in range(n)]
        frame = protocol.encode_frame("spans", worker, seq, {"pid": 7, "records": records})
        if len(frame) <= MAX_FRAME_BYTES:
            return frame
        n -= 1000


def _empty_lists_frame(worker: str, seq: int) -> bytes:
    """A frame of empty lists, nested to pass any per-array limit: ~1M Python objects."""
    inner = [[]] * 60_000
    body = {"records": [inner] * ((MAX_FRAME_BYTES - 1000) // 60_003)}
    return msgpack.packb([1, "spans", worker, seq, body])


def _real_job_arrives(driver: Driver, endpoint: str) -> None:
    # In a process of its own: a job here would have its sidecar reset the peaks (VmHWM) of
    # this process's whole tree, the driver's among them.
    job = subprocess.run(python_script(f"""
        from workerscope import profiled
        print(profiled(sum, mode="heavy", interval=0.05, endpoint={endpoint!r})([1, 2]))
    """), capture_output=True, text=True, timeout=60)
    assert job.stdout.strip() == "3", job.stderr
    assert eventually(lambda: driver.ask()["jobs"] == 1), driver.ask()


@pytest.mark.timeout(300)
def test_a_flood_stays_under_the_memory_ceiling_and_a_real_job_still_arrives(clean_env):
    """Frames up to the size cap (spans past max_kept_bytes: the record cut), frames of empty lists, multipart
    messages and connections past max_connections: the driver's peak memory stays under its
    memory_ceiling, and a real job sent afterwards arrives."""
    driver = Driver(max_connections=16)
    ctx = zmq.Context()
    senders, raw = [], []
    try:
        endpoint, base = driver.start["endpoint"], driver.start["VmRSS"]
        for n in range(8):
            side = dealer(ctx, endpoint, send_hwm=0, linger_ms=0)
            wid = f"flood:{n}:1"
            side.send(protocol.encode_frame("hello", wid, 0, {
                "host": "flood", "pid": n, "anchor": [time.time_ns(), time.monotonic_ns()]}))
            for seq in range(1, 7):
                frame = _spans_frame(wid, seq) if n % 2 else _empty_lists_frame(wid, seq)
                side.send(frame, zmq.NOBLOCK)
            side.send_multipart([b"x" * 1000] * 50)  # no sidecar sends several parts
            senders.append(side)
        raw = [socket.create_connection(driver.host_port) for _ in range(100)]
        # Every frame accounted for: hellos and spans frames received (the spans past
        # max_kept_bytes not kept), frames of empty lists and multipart messages bad.
        assert eventually(lambda: driver.ask()["frames"] == 8 + 4 * 6, timeout=120)
        assert eventually(lambda: driver.ask()["bad"] == 4 * 6 + 8, timeout=120), driver.ask()
        assert eventually(lambda: driver.ask()["refused"]["connections"] >= 8 + 100 - 16)
        _real_job_arrives(driver, endpoint)
        end = driver.ask()
    finally:
        for s in raw:
            s.close()
        for side in senders:
            side.close(linger=0)
        ctx.term()
        driver.close()
    assert end["refused"]["kept"] > 0, "the spans were not cut at max_kept_bytes"
    grew, ceiling = end["VmHWM"] - base, driver.start["ceiling"]
    assert grew < ceiling, f"grew {grew >> 20} MiB, ceiling {ceiling >> 20} MiB"


@pytest.mark.timeout(300)
def test_1100_connections_leave_descriptors_free_and_the_loop_idle(clean_env):
    """1,100 connections to a driver whose process may hold 1,024 descriptors (once they ran
    out and the receive loop spun at 100% CPU): those past its ceiling are hung up and
    counted, it can still open files of its own, an idle second costs it no CPU, and a real
    job arrives."""
    driver = Driver(max_connections=2000)  # more than the descriptors allow
    raw: list[socket.socket] = []
    try:
        ceiling = driver.start["connections"]
        assert ceiling <= 1024 - 256, "descriptors kept for the program"
        raw = [socket.create_connection(driver.host_port) for _ in range(1100)]
        assert eventually(lambda: driver.ask()["refused"]["connections"] >= 1100 - ceiling)
        assert driver.ask("files")["fds"] < 1024  # it opened 100 files meanwhile
        for s in raw:
            s.close()
        raw.clear()
        idle = driver.ask()
        time.sleep(1.0)  # not a wait for a condition: the window the CPU time is measured over
        assert driver.ask()["cpu_s"] - idle["cpu_s"] < 0.5, "the receive loop spins"
        _real_job_arrives(driver, driver.start["endpoint"])
    finally:
        for s in raw:
            s.close()
        driver.close()


# -- 6. silence and restarts ----------------------------------------------------------------------
LONG_JOB = """
import os, sys
from workerscope import monitor
from workerscope.worker import link
with monitor(interval=0.1, endpoint={endpoint!r}, name="long"):
    print(next(iter(link._links.values())).proc.pid, flush=True)
    sys.stdin.readline()
"""


def test_a_silent_worker_s_open_job_becomes_lost(clean_env):
    """A worker silent past stale_after shows as stale and its open job as lost, not running;
    when it speaks again and ends the job, the job is ok."""
    with Subscriber(stale_after=1.0) as sub:
        worker = subprocess.Popen(python_script(LONG_JOB.format(endpoint=sub.endpoint)),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            sidecar = int(worker.stdout.readline())
            assert sub.wait(started=1, timeout=30)
            os.kill(sidecar, signal.SIGSTOP)
            try:
                assert eventually(lambda: "stale" in sub.states().values())
                (job,) = sub.timeline().jobs
                assert job.status == "lost" and "silent" in (job.error or "")
                assert job.end_ns is not None and job.end_ns >= job.start_ns
            finally:
                os.kill(sidecar, signal.SIGCONT)
            worker.stdin.write("\n")
            worker.stdin.flush()
            assert worker.wait(30) == 0
            assert sub.wait(jobs=1, byes=1, timeout=30)
            (job,) = sub.timeline().jobs
            assert job.status == "ok"
        finally:
            worker.kill()
            worker.wait()
            worker.stdin.close()
            worker.stdout.close()


def test_a_job_open_when_the_driver_closes_is_lost_not_running(clean_env):
    """A job still open when the Subscriber closes ends there, as lost: never running after
    the run."""
    sub = Subscriber().start()
    try:
        with monitor(interval=0.1, endpoint=sub.endpoint, name="outlived"):
            assert sub.wait(started=1, timeout=30)
            sub.close()
    finally:
        sub.close()
    (job,) = sub.timeline().jobs
    assert job.status == "lost" and "driver closed" in (job.error or "")


def test_a_restarted_driver_knows_running_workers_and_dates_their_samples(clean_env):
    """A driver restarted with the same key gets the running worker back by itself: its host
    and pid, its samples dated now (not ~57 years ago), its open job with its true start and
    marked as begun before this driver, and the job's end."""
    key, port = new_key(), _free_port()
    address = f"tcp://127.0.0.1:{port}"
    first = Subscriber(address, key=key).start()
    worker = subprocess.Popen(python_script(LONG_JOB.format(endpoint=first.endpoint)),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        worker.stdout.readline()
        assert first.wait(started=1, timeout=30)
        began = first.timeline().jobs[0].start_ns
        first.close()
        restarted_at = time.time_ns()
        with Subscriber(address, key=key) as sub:
            assert eventually(lambda: any(s.scope == "tree" for s in sub.timeline().samples))
            t = sub.timeline()
            (w,) = t.workers.values()
            assert w.pid == worker.pid and w.host == socket.gethostname()
            assert any("started after the worker" in n for n in w.notes), w.notes
            assert any("began before this driver" in n for n in w.notes), w.notes
            for s in t.samples:
                assert abs(s.t_ns - time.time_ns()) < 120 * 10**9, "a sample dated wrong"
            (job,) = t.jobs
            assert job.name == "long" and job.status == "running"
            assert abs(job.start_ns - began) < 5_000_000 and job.start_ns < restarted_at
            assert sub.lost[w.id] == 0, "frames sent before this driver are not lost"
            worker.stdin.write("\n")
            worker.stdin.flush()
            assert worker.wait(30) == 0
            assert sub.wait(jobs=1, byes=1, timeout=30)
            (job,) = sub.timeline().jobs
            assert job.status == "ok" and abs(job.start_ns - began) < 5_000_000
    finally:
        first.close()
        worker.kill()
        worker.wait()
        worker.stdin.close()
        worker.stdout.close()


# -- 7. ipc paths ------------------------------------------------------------------------------
def test_ipc_refuses_a_path_that_is_not_a_socket(clean_env, tmp_path):
    """An explicit ipc:// path that holds a regular file is refused, and the file is kept."""
    path = tmp_path / "notes.txt"
    path.write_text("keep me")
    with pytest.raises(WorkerscopeError, match="not a socket"):
        Subscriber(f"ipc://{path}").start()
    assert path.read_text() == "keep me"


def test_ipc_refuses_a_path_another_driver_listens_on(clean_env, tmp_path):
    """A second Subscriber cannot take over the ipc path of one that is listening; the first
    one keeps receiving."""
    address = f"ipc://{tmp_path}/driver.sock"
    with Subscriber(address) as sub:
        with pytest.raises(WorkerscopeError, match="listening"):
            Subscriber(address).start()
        job = profiled(sum, mode="heavy", interval=0.05, endpoint=sub.endpoint)
        assert job([1, 2]) == 3
        assert sub.wait(jobs=1, timeout=30)
    assert not os.path.exists(f"{tmp_path}/driver.sock")


def test_ipc_close_removes_only_the_socket_it_made(clean_env, tmp_path):
    """At close a Subscriber removes its own socket file, but not a file that someone else
    has put at its path meanwhile; a socket left behind by a driver gone is reused."""
    path = tmp_path / "driver.sock"
    leftover = socket.socket(socket.AF_UNIX)
    leftover.bind(str(path))  # bound, never listening, then closed: a dead driver's socket
    leftover.close()
    with Subscriber(f"ipc://{path}"):
        assert os.stat(path).st_mode & 0o077 == 0
        path.unlink()
        path.write_text("someone else's")
    assert path.read_text() == "someone else's"
    path.unlink()
    with Subscriber(f"ipc://{path}"):
        assert path.exists()
    assert not path.exists()
