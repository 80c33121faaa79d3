"""Flood a driver and show its memory stays under Subscriber.memory_ceiling (issue 13, problem 3),
its descriptors and CPU hold, and a real job still arrives afterwards.

    python benchmarks/bench_flood.py [--nofile 1024]

The driver is a Subscriber with its default bounds, alone in a process of its own (so its
memory is its own), started with RLIMIT_NOFILE as this shell has it, or --nofile N (soft and
hard: the issue's 1,100 connections ran out of the common 1,024). This script, holding the
endpoint's keys (the worst sender: one that passes the handshake), then floods it, one phase
after another, each phase waited out until the driver has accounted for every frame sent:

  frames at the cap    CONNS connections each send FRAMES valid spans frames of ~1 MiB (the
                       size cap, ~36,000 records each) as fast as ZeroMQ takes them: the
                       per-connection queue, decoding at the cap and max_kept_bytes
  empty lists          CONNS connections each send FRAMES 1 MiB frames of nested empty lists
                       (~1M Python objects each if decoded whole)
  multipart            CONNS messages of 50 parts (no sidecar sends more than one)
  connections          RAW plain TCP connections, kept open (more than --nofile allows)
  real job             a heavy profiled() job with the endpoint, the RAW connections still open

After each phase: the driver's RSS now and its peak (VmHWM, the kernel's high-water mark of
the whole process), both as growth over its RSS once started (the baseline, measured in the
same run), its descriptors, and what it counted as refused. The last line compares the peak
growth with the driver's own memory_ceiling (docs/SECURITY.md gives the arithmetic).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable

# A WORKERSCOPE_* variable in the caller's environment would change what is measured.
for _var in [v for v in os.environ if v.startswith("WORKERSCOPE_")]:
    del os.environ[_var]

# Span records are built with the tests' record factories (tests/factories.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))

import msgpack  # noqa: E402
import zmq  # noqa: E402
from factories import span_record  # noqa: E402

from workerscope import protocol  # noqa: E402
from workerscope.config import split_endpoint  # noqa: E402
from workerscope.transport import MAX_FRAME_BYTES, dealer  # noqa: E402

CONNS = 32
FRAMES = 16
RAW = 1100
WAIT_S = 600.0

DRIVER = """
import json, os, resource, sys
if int(sys.argv[1]):
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[1])))
from workerscope import Subscriber

def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    out["fds"] = len(os.listdir("/proc/self/fd"))
    out["cpu_s"] = sum(os.times()[:2])
    return out

sub = Subscriber().start()
print(json.dumps({"endpoint": sub.endpoint, "ceiling": sub.memory_ceiling,
                  "connections": sub._conns.ceiling,
                  "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0], **status()}),
      flush=True)
for line in sys.stdin:
    print(json.dumps({"refused": sub.refused, "bad": sub.bad_frames, "jobs": sub.jobs_ended,
                      "frames": sum(sub.received.values()), **status()}), flush=True)
sub.close()
"""


class Driver:
    def __init__(self, nofile: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(nofile)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.start = json.loads(self.proc.stdout.readline())
        host, port = split_endpoint(self.start["endpoint"])[0][len("tcp://"):].rsplit(":", 1)
        self.host_port = (host, int(port))

    def ask(self) -> dict:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def until(self, check: Callable[[dict], bool]) -> dict:
        deadline = time.monotonic() + WAIT_S
        while True:
            now = self.ask()
            if check(now):
                return now
            if time.monotonic() > deadline:
                raise RuntimeError(f"the driver never got there: {now}")
            time.sleep(0.05)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


def spans_frame(worker: str) -> bytes:
    t = time.monotonic_ns()
    n = 37_000
    while True:
        records = [span_record(id=i, start_ns=t) for i in range(n)]
        frame = protocol.encode_frame("spans", worker, 1, {"pid": 7, "records": records})
        if len(frame) <= MAX_FRAME_BYTES:
            return frame
        n -= 1000


def empty_lists_frame(worker: str) -> bytes:
    inner = [[]] * 60_000
    return msgpack.packb([1, "spans", worker, 1,
                          {"records": [inner] * ((MAX_FRAME_BYTES - 1000) // 60_003)}])


def hello(worker: str) -> bytes:
    return protocol.encode_frame("hello", worker, 0, {
        "host": "flood", "pid": 1, "anchor": [time.time_ns(), time.monotonic_ns()]})


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nofile", type=int, default=0, help="the driver's RLIMIT_NOFILE")
    args = ap.parse_args()
    driver = Driver(args.nofile)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    socks: list[zmq.Socket[bytes]] = []
    raw: list[socket.socket] = []
    base = driver.start["VmRSS"]
    rows: list[tuple[str, str, float, dict]] = []
    versions = f"pyzmq {zmq.__version__} (libzmq {zmq.zmq_version()}), msgpack " + ".".join(
        map(str, msgpack.version))
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {versions}; driver RLIMIT_NOFILE "
          f"{driver.start['nofile']}, connection ceiling {driver.start['connections']}, "
          f"memory_ceiling {mib(driver.start['ceiling'])} MiB, baseline RSS {mib(base)} MiB")

    def phase(name: str, sent: str, run: Callable[[], None], done: Callable[[dict], bool]) -> None:
        t0 = time.perf_counter()
        run()
        now = driver.until(done)
        rows.append((name, sent, time.perf_counter() - t0, now))

    frames_before = [0]

    def flood(make: Callable[[str], bytes], tag: str) -> Callable[[], None]:
        def run() -> None:
            for n in range(CONNS):
                sock = dealer(ctx, driver.start["endpoint"], send_hwm=0, linger_ms=0)
                socks.append(sock)
                wid = f"{tag}:{n}:1"
                sock.send(hello(wid))
                frame = make(wid)
                for _ in range(FRAMES):
                    sock.send(frame, zmq.NOBLOCK, copy=False)  # one buffer, sent FRAMES times
        return run

    try:
        phase("frames at the cap", f"{CONNS} x {FRAMES} x 1 MiB", flood(spans_frame, "spans"),
              lambda s: s["frames"] >= CONNS * (FRAMES + 1))
        frames_before[0] = driver.ask()["bad"]
        phase("empty lists", f"{CONNS} x {FRAMES} x 1 MiB", flood(empty_lists_frame, "empties"),
              lambda s: s["bad"] >= frames_before[0] + CONNS * FRAMES)

        def multipart() -> None:
            for sock in socks[:CONNS]:
                sock.send_multipart([b"x" * 1000] * 50)
        bad = driver.ask()["bad"]
        phase("multipart", f"{CONNS} x 50 parts", multipart, lambda s: s["bad"] >= bad + CONNS)

        def connections() -> None:
            raw.extend(socket.create_connection(driver.host_port) for _ in range(RAW))
        live = len(socks)
        phase("connections", f"{RAW} TCP", connections,
              lambda s: s["refused"]["connections"] >= RAW + live - driver.start["connections"])

        def real_job() -> None:
            # In a process of its own: a job here would have its sidecar reset the peaks
            # (VmHWM) of this process's whole tree, the driver's among them.
            code = ("from workerscope import profiled; print(profiled(sum, mode='heavy', "
                    f"interval=0.05, endpoint={driver.start['endpoint']!r})([1, 2]))")
            job = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 timeout=120)
            assert job.stdout.strip() == "3", job.stderr
        phase("real job", "1 heavy job", real_job, lambda s: s["jobs"] >= 1)
        idle = driver.ask()
        time.sleep(1.0)
        idle_cpu = driver.ask()["cpu_s"] - idle["cpu_s"]
    finally:
        for s in raw:
            s.close()
        for sock in socks:
            sock.close(0)
        ctx.term()
        driver.close()

    print()
    print(f"{'phase':<18} {'sent':<20} {'s':>6} {'RSS +MiB':>9} {'peak +MiB':>10} {'fds':>5}  "
          "refused")
    for name, sent, seconds, s in rows:
        refused = ", ".join(f"{k} {v}" for k, v in s["refused"].items() if v)
        print(f"{name:<18} {sent:<20} {seconds:6.1f} {mib(s['VmRSS'] - base):>9} "
              f"{mib(s['VmHWM'] - base):>10} {s['fds']:>5}  {refused}; bad {s['bad']}")
    peak = rows[-1][3]["VmHWM"] - base
    print(f"\npeak growth {mib(peak)} MiB of a memory_ceiling of "
          f"{mib(driver.start['ceiling'])} MiB ({100 * peak / driver.start['ceiling']:.0f}%); "
          f"the real job arrived; CPU of an idle second after: {idle_cpu:.2f} s")


if __name__ == "__main__":
    main()
