"""The driver's record: every frame on disk as it arrives, readable after the driver is killed,
and a driver whose memory does not grow with the run's length."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import python_script

from workerscope import Subscriber, load, monitor, protocol, timed
from workerscope.cli import main
from workerscope.errors import WorkerscopeError
from workerscope.record import FACTS, RECORD_MAGIC, RecordReader, RecordWriter

# A driver in a process of its own, so it can be killed and its memory measured alone. It
# answers each line on stdin: "flush" (wait until the record holds every frame received so
# far), "close", anything else (stats only). With a second argument, it notes which workers
# sent spans (an on_frame callback).
DRIVER = """
import json, sys
from workerscope import Subscriber

spans_from = set()

def on_frame(frame):
    if frame.kind == "spans":
        spans_from.add(frame.worker)

def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))

sub = Subscriber(record=sys.argv[1], on_frame=on_frame if sys.argv[2:] else None).start()
print(json.dumps({"endpoint": sub.endpoint}), flush=True)
for line in sys.stdin:
    if line.strip() == "flush":
        sub.flush()
    elif line.strip() == "close":
        sub.close()
    print(json.dumps({"received": sum(sub.received.values()), "recorded": sub.record_frames,
                      "jobs": sub.jobs_started, "byes": sum(
                          s not in ("running", "idle", "stale") for s in sub.states().values()),
                      "rss": rss(), "bad": sub.bad_frames, "refused": sub.refused,
                      "spans_from": len(spans_from)}), flush=True)
"""

# A worker: one job sampled every 0.01 s, calling a @timed step until a line comes on stdin.
WORKER = """
import select, sys, time
from workerscope import monitor, timed

@timed
def step():
    time.sleep(0.02)

with monitor(interval=0.01, endpoint={endpoint!r}, name="w{n}"):
    print("started", flush=True)
    while not select.select([sys.stdin], [], [], 0)[0]:
        step()
"""


class Driver:
    def __init__(self, record: str, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", DRIVER, record, *args], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.endpoint = json.loads(self.proc.stdout.readline())["endpoint"]

    def ask(self, command: str = "stats") -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def until(self, ok, timeout: float = 120.0) -> dict:
        """Ask until ok(stats): the frames come at the machine's pace, not the clock's."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.ask()
            if ok(stats) or time.monotonic() > deadline:
                return stats
            time.sleep(0.1)


def _workers(endpoint: str, n: int = 4) -> list[subprocess.Popen]:
    procs = [subprocess.Popen(python_script(WORKER.format(endpoint=endpoint, n=i)), text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE) for i in range(n)]
    for p in procs:
        assert p.stdout.readline().strip() == "started"
    return procs


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.stdin.write("\n")
            p.stdin.flush()
    for p in procs:
        p.wait(60)
        p.stdin.close()
        p.stdout.close()


@pytest.mark.timeout(300)
def test_a_driver_killed_mid_run_leaves_a_record_that_loads(clean_env, tmp_path):
    """kill -9 of a driver recording 4 live workers: the record loads, with every frame the
    driver had written at its last flush, samples and spans of all four, and their open jobs
    ending where the record does."""
    path = str(tmp_path / "run.wsc")
    driver = Driver(path, "note spans")
    workers = _workers(driver.endpoint)
    try:
        driver.until(lambda s: s["jobs"] == 4 and s["spans_from"] == 4 and s["received"] > 400)
        flushed = driver.ask("flush")["recorded"]
        os.kill(driver.proc.pid, signal.SIGKILL)
        driver.proc.wait(30)
    finally:
        _stop(workers)
        driver.proc.stdin.close()
        driver.proc.stdout.close()
    reader = RecordReader(path)
    entries = list(reader)
    assert reader.frames >= flushed > 400
    t = load(path)
    assert len(t.workers) == 4
    for wid in t.workers:
        assert any(s.scope == "tree" and s.worker == wid for s in t.samples)
        assert any(s.name.endswith("step") and s.worker == wid for s in t.spans)
    assert sorted(j.name for j in t.jobs) == ["w0", "w1", "w2", "w3"]
    assert all(j.status == "lost" and "record ends" in (j.error or "") for j in t.jobs)
    # Nothing is known of the workers past the record's end: not "running" for ever.
    assert {w.status for w in t.workers.values()} == {"lost"}
    assert all(any("record ends" in n for n in w.notes) for w in t.workers.values())
    assert any(e.tag == FACTS for e in entries), "the driver's facts are in the record"


@pytest.mark.timeout(300)
def test_the_driver_s_memory_does_not_grow_with_the_run(clean_env, tmp_path):
    """4 real workers sampled every 0.01 s: past the first 8 s (imports, first workers,
    buffers reaching their size), the driver's RSS grows by at most 300 B a frame received
    (it once grew ~3 KB: every sample kept as Python objects); the record holds every frame."""
    path = str(tmp_path / "run.wsc")
    driver = Driver(path)
    workers = _workers(driver.endpoint)
    try:
        started = time.monotonic()
        driver.until(lambda s: time.monotonic() - started >= 8)
        before = driver.ask()
        after = driver.until(lambda s: s["received"] - before["received"] >= 6000)
        _stop(workers)
        driver.until(lambda s: s["byes"] == 4)
        end = driver.ask("close")
    finally:
        _stop(workers)
        driver.proc.stdin.close()
        driver.proc.wait(30)
        driver.proc.stdout.close()
    frames = after["received"] - before["received"]
    assert frames >= 6000
    grew = after["rss"] - before["rss"]
    print(f"driver RSS grew {grew} B over {frames} frames: {grew / frames:.1f} B a frame")
    assert grew <= 300 * frames, f"{grew / frames:.0f} B a frame"
    assert end["bad"] == 0 and not any(end["refused"].values())
    assert end["recorded"] == end["received"]
    reader = RecordReader(path)
    for _ in reader:
        pass
    assert reader.frames == end["received"] and reader.torn == 0
    t = load(path)
    assert sorted(j.status for j in t.jobs) == ["ok"] * 4
    assert all(w.status == "exited" for w in t.workers.values())


def _small_record(path: str) -> int:
    """A record of one real worker's job, written by a Subscriber; its length in bytes."""
    with Subscriber(record=path) as sub:
        with monitor(interval=0.05, endpoint=sub.endpoint, name="small"):
            step()
        assert sub.wait(jobs=1, timeout=30)
        sub.flush()  # the job's frames in a block of their own, before the close's
    return os.path.getsize(path)


@timed
def step() -> int:
    return sum(range(1000))


def test_a_torn_record_loads_up_to_its_last_whole_entry(clean_env, tmp_path, caplog):
    """A record cut inside its last entry (a compressed block of the writer's last round)
    loads every whole entry before it, and says so."""
    path = str(tmp_path / "run.wsc")
    size = _small_record(path)
    whole = load(path)
    assert [j.name for j in whole.jobs] == ["small"] and whole.jobs[0].status == "ok"
    with open(path, "r+b") as f:
        f.truncate(size - 3)  # into the last entry
    torn = load(path)
    assert any("torn entry" in n for w in torn.workers.values() for n in w.notes)
    assert "torn entry" in caplog.text
    assert [s.name for s in torn.spans] == [s.name for s in whole.spans]


def test_an_empty_or_foreign_record_is_a_clear_error(tmp_path, capsys):
    """An empty file, or one cut inside the magic, is a WorkerscopeError that says which, and
    `workerscope report` prints it without a traceback."""
    empty = tmp_path / "empty.wsc"
    empty.write_bytes(b"")
    with pytest.raises(WorkerscopeError, match="is empty"):
        load(empty)
    assert main(["report", str(empty)]) != 0
    err = capsys.readouterr().err
    assert "is empty" in err and "Traceback" not in err
    cut = tmp_path / "cut.wsc"
    cut.write_bytes(RECORD_MAGIC[:5])
    with pytest.raises(WorkerscopeError, match="not a workerscope timeline"):
        load(cut)


def test_the_report_command_reads_a_record(clean_env, tmp_path, capsys):
    """`workerscope report RECORD` prints the report of a record written by a monitored job."""
    path = str(tmp_path / "run.wsc")
    _small_record(path)
    assert main(["report", path]) == 0
    assert "small" in capsys.readouterr().out


def test_a_record_is_appended_to_as_frames_come(tmp_path):
    """Each frame is in the file by the next flush, whole, in order; the writer never blocks
    the caller and counts what it could not queue."""
    path = str(tmp_path / "r.wsc")
    writer = RecordWriter(path, queue_bytes=1000)
    frames = [protocol.encode_frame("heartbeat", "w:1:1", seq, {"n": seq}) for seq in range(5)]
    for frame in frames:
        assert writer.append(frame)
    assert writer.flush() == os.path.getsize(path)
    assert [e.data for e in RecordReader(path)] == frames
    assert not writer.append(b"x" * 2000) and writer.dropped == 1
    writer.close()
    resumed = RecordWriter(path, resume=True)
    resumed.append(frames[0])
    resumed.close()
    assert [e.data for e in RecordReader(path)] == [*frames, frames[0]]


def test_listen_records_to_a_wsc_and_survives_kill_9(clean_env, tmp_path):
    """`workerscope listen -o run.wsc` records as frames come: killed with SIGKILL after a job,
    its record still shows the job and its spans."""
    out = tmp_path / "run.wsc"
    proc = subprocess.Popen([sys.executable, "-m", "workerscope", "listen", "-q", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        endpoint = proc.stdout.readline().split()[-1]
        with monitor(interval=0.05, endpoint=endpoint, name="before the kill"):
            step()
        deadline = time.monotonic() + 60
        while not any(j.status == "ok" for j in _jobs(out)):  # at the record's next write
            assert time.monotonic() < deadline, "the job never reached the record"
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.communicate()
    t = load(out)
    assert [j.name for j in t.jobs] == ["before the kill"]
    assert any(s.name.endswith("step") for s in t.spans)


def _jobs(path) -> list:
    try:
        return load(path).jobs
    except WorkerscopeError:
        return []  # not written yet
