"""A long run into one driver: 256 workers sampled once a second for an hour, sent as fast as
they go, into one Subscriber that records them. Prints the driver's memory (its peak against
its size once started) and the record's size.

    python benchmarks/bench_long_run.py [WORKERS] [SECONDS]

BENCH_KEEP_RECORD=1 in the environment keeps the record afterwards (to profile load() on it).

The driver is a Subscriber(record=...) in a process of its own (so its memory is its own),
on tcp://127.0.0.1 with CURVE, as a driver program runs it. SENDERS processes each play
WORKERS / SENDERS workers, one DEALER (one connection) per worker, as a sidecar has: each
worker says hello, starts a job, then sends SECONDS samples shaped like a sidecar's (a tree, 4
processes and the host, bench_ingest.sample_body) dated one second apart, a spans frame of 20
spans (one thread's calls, one after another) every 10 samples and a heartbeat every sample;
then it ends the job and says bye. The
frames of an hour are sent in about a minute: what is measured is the driver's memory as a
function of the frames it received, which does not depend on how fast they came. At the end
the script checks every frame is in the record (streamed, not loaded). Then it loads the
record as a report does (`workerscope.load`, default `max_samples`: past 1,000,000 samples
they are folded into time bins) in a process of its own, and prints that process's peak
memory and CPU time; `workerscope report` of the record (the terminal views, to a pipe) in a
process of its own, its CPU time; and, the floor, the CPU of reading the same record and
unpacking each of its frames (msgpack), building nothing, in a process of its own.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import socket
import subprocess
import sys
import time
from typing import Any

for _var in [v for v in os.environ if v.startswith("WORKERSCOPE_")]:
    del os.environ[_var]

# Span records are built with the tests' record factories (tests/factories.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))

import zmq  # noqa: E402
from bench_fleet import wait_for_acks  # noqa: E402
from bench_ingest import sample_body  # noqa: E402
from factories import span_record  # noqa: E402

from workerscope import protocol  # noqa: E402
from workerscope.procfs import boot_id  # noqa: E402
from workerscope.record import RecordReader  # noqa: E402
from workerscope.transport import dealer  # noqa: E402

WORKERS = 256
SECONDS = 3600
SENDERS = 4
SPANS_EVERY = 10
SPANS_PER_FRAME = 20

DRIVER = """
import json, sys
from workerscope import Subscriber

def status():
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {k: int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}

sub = Subscriber(record=sys.argv[1], max_workers=4096).start()
print(json.dumps({"endpoint": sub.endpoint, **status()}), flush=True)
for line in sys.stdin:
    if line.strip() == "close":
        sub.close()
    print(json.dumps({"received": sum(sub.received.values()), "lost": sum(sub.lost.values()),
                      "bad": sub.bad_frames, "byes": sum(s == "exited" for s in
                                                         sub.states().values()),
                      "recorded": sub.flush(), "refused": sum(sub.refused.values()),
                      **status()}), flush=True)
"""


# Loads the record as `workerscope report` does, and says what that cost.
LOADER = """
import json, sys, time
from workerscope import load

def status():
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {k: int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}

before = status()
cpu = time.process_time()
t = load(sys.argv[1])
print(json.dumps({"cpu": time.process_time() - cpu, "samples": len(t.samples),
                  "spans": len(t.spans), "marks": len(t.marks), "before": before["VmRSS"],
                  **status()}))
"""

# `workerscope report RECORD` in this process, its terminal views written to a pipe; the CPU
# it took, from the start of main() (the imports before are a bare interpreter's and the
# package's, paid by every command).
REPORT = """
import json, sys, time
from workerscope.cli import main
cpu = time.process_time()
code = main(["report", sys.argv[1]])
sys.stderr.write(json.dumps({"cpu": time.process_time() - cpu, "code": code}) + "\\n")
"""

# The floor load() is held to (issue 25: within 2x): the same record read and each of its
# frames unpacked (msgpack.unpackb, as the driver's decoder calls it), nothing built.
FLOOR = """
import json, sys, time
import msgpack
from workerscope.record import FRAME, RecordReader

cpu = time.process_time()
n = 0
for entry in RecordReader(sys.argv[1]):
    if entry.tag == FRAME:
        msgpack.unpackb(entry.data, raw=False, strict_map_key=True, use_list=True)
        n += 1
print(json.dumps({"cpu": time.process_time() - cpu, "frames": n}))
"""


def worker_frames(wid: str, pid: int, seconds: int) -> Any:
    """The frames of one worker, one second of them at a time (a generator: an hour of 256
    workers' frames would not fit in memory at once)."""
    t0 = time.monotonic_ns()
    anchor = protocol.clock_anchor()
    seq = 0

    def frame(kind: str, body: dict[str, Any]) -> bytes:
        nonlocal seq
        seq += 1
        return protocol.encode_frame(kind, wid, seq - 1, body)

    yield [frame(protocol.HELLO, {"host": socket.gethostname(), "pid": pid, "sidecar_pid": pid + 1,
                                  "interval": 1.0, "anchor": anchor, "boot_id": boot_id()}),
           frame(protocol.JOB_START, {"job": 1, "name": "hour", "t": t0, "pid": pid,
                                      "tid": pid})]
    pids = [pid + k for k in range(4)]
    for s in range(seconds):
        t = t0 + s * 1_000_000_000
        out = [frame(protocol.SAMPLE, sample_body(s, t, pids))]
        if s % SPANS_EVERY == SPANS_EVERY - 1:
            # One thread's calls, one after another (2 ms each, 0.4 ms apart), in the last
            # 50 ms before the sample.
            records = [span_record(job=1, id=s * 100 + i, parent=1, name=f"step{i % 4}",
                                   start_ns=t - 50_000_000 + i * 2_400_000,
                                   end_ns=t - 48_000_000 + i * 2_400_000, tid=pid)
                       for i in range(SPANS_PER_FRAME)]
            out.append(frame(protocol.SPANS, {"pid": pid, "records": records}))
        out.append(frame(protocol.HEARTBEAT, {"t": t, "dropped": 0}))
        yield out
    t = t0 + seconds * 1_000_000_000
    yield [frame(protocol.JOB_END, {"job": 1, "t": t, "status": "ok"}),
           frame(protocol.BYE, {"t": t, "status": "exited", "dropped": 0, "errors": []})]


def sender(endpoint: str, first: int, count: int, seconds: int, conn: Any) -> None:
    ctx = zmq.Context()
    socks, streams = [], []
    for w in range(first, first + count):
        socks.append(dealer(ctx, endpoint, send_hwm=1000, linger_ms=120_000))
        streams.append(worker_frames(f"sim:{100_000 + 10 * w}:{100_001 + 10 * w}",
                                     100_000 + 10 * w, seconds))
    sent = 0
    for batches in zip(*streams, strict=True):  # one second of every worker, in turn
        for sock, frames in zip(socks, batches, strict=True):
            for f in frames:
                sock.send(f)  # blocking at the high-water mark: frames queue, never drop
                sent += 1
    # As a sidecar does: wait for each bye's ack before closing. Closing at once would lose
    # the tail: the driver's progress acks reach a socket already closed, the kernel answers
    # with a reset, and the frames still unread on the driver's side of the connection go.
    bye_seq = sent // count - 1  # every worker sends as many frames, seq from 0

    def acked(sock: zmq.Socket[bytes]) -> int | None:
        seqs = [-1]
        while sock.poll(0):
            frame = protocol.decode_frame(sock.recv())
            if frame.kind == protocol.ACK and isinstance(frame.body.get("seq"), int):
                seqs.append(frame.body["seq"])
        return max(seqs)

    wait_for_acks(dict.fromkeys(socks, bye_seq), acked, 600)
    for sock in socks:
        sock.close()
    ctx.term()
    conn.send(sent)


def main() -> int:
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else WORKERS
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else SECONDS
    record = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench-long-run-{os.getpid()}.wsc")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, record], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ask(command: str = "stats") -> dict[str, Any]:
        assert driver.stdin is not None and driver.stdout is not None
        driver.stdin.write(command + "\n")
        driver.stdin.flush()
        return dict(json.loads(driver.stdout.readline()))

    try:
        assert driver.stdout is not None
        start = json.loads(driver.stdout.readline())
        print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs; {workers} workers x "
              f"{seconds} s at 1 Hz into one Subscriber (tcp, CURVE), {SENDERS} sender "
              "processes, one connection per worker")
        ctx = mp.get_context("fork")
        per = workers // SENDERS
        pipes, procs = [], []
        began = time.perf_counter()
        for i in range(SENDERS):
            ours, theirs = ctx.Pipe()
            count = per if i < SENDERS - 1 else workers - per * (SENDERS - 1)
            p = ctx.Process(target=sender, args=(start["endpoint"], i * per, count, seconds,
                                                 theirs))
            p.start()
            pipes.append(ours)
            procs.append(p)
        sent = sum(c.recv() for c in pipes)
        for p in procs:
            p.join()
        while True:
            stats = ask()
            if stats["byes"] >= workers or time.perf_counter() - began > 3600:
                break
            time.sleep(0.5)
        took = time.perf_counter() - began
        end = ask("close")
    finally:
        if driver.stdin is not None:
            driver.stdin.close()
        driver.wait(60)
    reader = RecordReader(record)
    entries = sum(1 for _ in reader)
    size = os.path.getsize(record)
    try:
        loaded = json.loads(subprocess.run([sys.executable, "-c", LOADER, record], check=True,
                                           capture_output=True, text=True).stdout)
        floor = json.loads(subprocess.run([sys.executable, "-c", FLOOR, record], check=True,
                                          capture_output=True, text=True).stdout)
        shown = subprocess.run([sys.executable, "-c", REPORT, record], check=True,
                               capture_output=True, text=True)
        report = json.loads(shown.stderr.strip().splitlines()[-1])
    finally:
        if os.environ.get("BENCH_KEEP_RECORD"):
            print(f"record kept: {record}")
        else:
            os.unlink(record)
    grew = end["VmHWM"] - start["VmRSS"]
    rows = [
        ("frames sent", f"{sent:,}"),
        ("frames received / lost / bad / refused",
         f"{end['received']:,} / {end['lost']:,} / {end['bad']:,} / {end['refused']:,}"),
        ("frames in the record (streamed back)", f"{reader.frames:,} ({entries:,} entries, "
                                                  f"torn {reader.torn} B)"),
        ("record size", f"{size / 2**20:,.1f} MiB ({size / max(1, reader.frames):,.0f} B a frame)"),
        ("driver RSS once started", f"{start['VmRSS'] / 2**20:,.1f} MiB"),
        ("driver peak RSS (VmHWM)", f"{end['VmHWM'] / 2**20:,.1f} MiB"),
        ("peak growth a frame", f"{grew / max(1, end['received']):,.1f} B"),
        ("seconds to take them all", f"{took:,.1f} ({end['received'] / took:,.0f} frames/s)"),
        ("load(): samples / spans / marks kept",
         f"{loaded['samples']:,} / {loaded['spans']:,} / {loaded['marks']:,}"),
        ("load(): CPU seconds", f"{loaded['cpu']:,.2f}"),
        ("floor: read + unpack its frames, CPU s", f"{floor['cpu']:,.2f} (load() "
                                                   f"{loaded['cpu'] / floor['cpu']:.1f}x; "
                                                   "want <= 2x)"),
        ("workerscope report: CPU s (exit code)", f"{report['cpu']:,.2f} ({report['code']}; "
                                                  f"{report['cpu'] / floor['cpu']:.1f}x the "
                                                  f"floor, want <= 3x; {len(shown.stdout):,} "
                                                  "characters)"),
        ("load(): peak RSS (VmHWM) / before it", f"{loaded['VmHWM'] / 2**20:,.1f} MiB / "
                                                 f"{loaded['before'] / 2**20:,.1f} MiB"),
    ]
    for label, value in rows:
        print(f"{label:<42} {value}")
    ok = (end["received"] == sent and reader.frames == sent and not end["lost"]
          and not end["bad"])
    if not ok:
        print("FAILED: frames went missing")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
