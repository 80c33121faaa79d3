"""The record's bytes and CPU a frame, by layout, on a fleet's frames (issue 25's fourth item).

    python benchmarks/bench_record.py [--workers 4096] [--seconds 10] [--round 2200]
    python benchmarks/bench_record.py --real 8 [--seconds 60] [--round 2200]

--real N: the frames are not simulated but real: N heavy jobs at once, each a real worker
with its own sidecar at the default settings (a tree of 4 processes, a @timed function
called 20 times a second), for SECONDS, into one Subscriber(record=...); their frames, in
the order that record has them, then go through each layout as below.

The frames are bench_fleet's: one real heavy job's (a worker and 3 children, a @timed function
called 20 times a second) as templates, then WORKERS simulated workers each sending a sample
of its 4-process tree and a spans frame of 20 spans every second, interleaved as a fleet's
arrive (8 senders' workers in turn, each frame's time read off a clock: no two alike). They
go through the real RecordWriter, flushed every ROUND frames (a 4,096-worker fleet sends
~2,200 in one of the writer's 0.25 s rounds), into each layout a writer can write:
  2  entries as they are (the floor: no compression)
  3  each round a block of a zlib stream (level 1, sync flushes): the layout before
  4  each round a block of a Zstandard stream (level 1, a 1 MiB window): the layout before;
     and at level 3, Zstandard's own default, beside it
  5  as 4, with each spans frame's ids and times delta-coded: today's
Per layout: bytes a frame (the file over the frames), of sample and spans frames alone (each
kind written on its own), the writer's CPU a frame (this process's, its thread included:
queueing, compressing, writing) and the reader's (RecordReader over the file: reading,
checking, decompressing). Best of 3 runs each, interleaved.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_fleet import FakeWorker, real_frames

from workerscope import protocol, record
from workerscope.record import RecordReader, RecordWriter

SENDERS = 8
# Each case: (layout, Zstandard level), what it is.
CASES = {(2, 0): "as they are", (3, 0): "zlib blocks", (4, 1): "Zstandard blocks",
         (4, 3): "Zstandard, level 3", (5, 1): "spans delta-coded"}


class _Capture:
    """A socket that keeps what is sent."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.frames.append(data)

    def recv(self, flags: int = 0) -> bytes:
        raise OSError("nothing to receive")


def fleet_frames(workers: int, seconds: int) -> list[bytes]:
    step = 1_000_000_000 * SENDERS // workers
    templates = real_frames(20)
    sock = _Capture()
    fleet = [FakeWorker(sock, f"host-{i % 64}", 10_000 + 8 * i, 40_000 + i,  # type: ignore[arg-type]
                        f"boot-{i % 64}", templates, 20) for i in range(workers)]
    now = time.time_ns()
    for w in fleet:
        w.start_job(now)
    rng = random.Random(1)
    groups = [fleet[i::SENDERS] for i in range(SENDERS)]  # as bench_fleet's senders hold them
    for s in range(seconds):
        now += 1_000_000_000
        # Each sender's workers in turn, the senders' sends interleaved, each at a time of its
        # own spread over the second (a clock read: no two alike, as a real fleet's).
        for k in range(len(groups[0])):
            for group in groups:
                if k < len(group):
                    group[k].tick(s, now + k * step + rng.randrange(step))
    for w in fleet:
        w.bye(now + 1_000_000_000)
    return sock.frames


REAL_JOB = """
import subprocess, sys, time
from workerscope import profiled, timed

@timed
def step(i):
    return sum(range(200))

def job(seconds):
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
            for _ in range(3)]
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        step(n)
        n += 1
        time.sleep(0.05)
    for k in kids:
        k.kill()
        k.wait()

profiled(job, mode="heavy", endpoint=sys.argv[1])(float(sys.argv[2]))
"""


def real_job_frames(jobs: int, seconds: int) -> list[bytes]:
    """The frames of `jobs` real heavy jobs run at once, as one driver recorded them."""
    from workerscope import Subscriber
    from workerscope.record import FRAME

    path = os.path.join(tempfile.mkdtemp(), "real.wsc")
    with Subscriber(record=path) as sub:
        procs = [subprocess.Popen([sys.executable, "-c", REAL_JOB, sub.endpoint, str(seconds)])
                 for _ in range(jobs)]
        for p in procs:
            if p.wait(seconds + 120) != 0:
                raise RuntimeError("a real job failed")
        if not sub.wait(byes=jobs, timeout=60):
            raise RuntimeError("not every real job's sidecar said bye")
    frames = [e.data for e in RecordReader(path) if e.tag == FRAME]
    os.unlink(path)
    return frames


def write(path: str, frames: list[bytes], layout: int, round_frames: int) -> float:
    """The frames into a record of the layout; CPU seconds it took."""
    resume = layout in (3, 4)  # a record of an earlier layout, resumed: the writer goes on in it
    if resume:
        with open(path, "wb") as f:
            f.write({3: record.RECORD_MAGIC_V3, 4: record.RECORD_MAGIC_V4}[layout] + os.urandom(4))
    t0 = time.process_time()
    writer = RecordWriter(path, compress=layout != 2, resume=resume)
    for i, frame in enumerate(frames, 1):
        if not writer.append(frame):
            raise RuntimeError("the writer's queue was full")
        if i % round_frames == 0:
            writer.flush()
    writer.close()
    assert writer.layout == layout and writer.frames == len(frames)
    return time.process_time() - t0


def read(path: str, frames: int) -> float:
    t0 = time.process_time()
    reader = RecordReader(path)
    n = sum(1 for _ in reader)
    if n != frames or reader.damaged or reader.torn:
        raise RuntimeError(f"read {n} of {frames} entries, {reader.damaged} damaged")
    return time.process_time() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=4096)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--round", type=int, default=2200, help="frames a writer's round")
    ap.add_argument("--real", type=int, default=0, help="real heavy jobs instead of a fleet")
    args = ap.parse_args()
    frames = (real_job_frames(args.real, args.seconds) if args.real
              else fleet_frames(args.workers, args.seconds))
    kinds = [protocol.decode_frame(f).kind for f in frames]
    by_kind = {k: [f for f, fk in zip(frames, kinds, strict=True) if fk == k]
               for k in (protocol.SAMPLE, protocol.SPANS)}
    print(f"# {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    who = f"{args.real} real heavy jobs" if args.real else f"{args.workers} workers"
    print(f"# {who} x {args.seconds} s: {len(frames):,} frames, "
          f"{sum(map(len, frames)) / len(frames):,.0f} B a frame as sent; "
          f"a writer's round {args.round} frames; best of 3")
    folder = tempfile.mkdtemp()
    best: dict[tuple[int, int, str], float] = {}
    for _ in range(3):
        for layout, level in CASES:
            record.LEVEL = level or record.LEVEL
            path = os.path.join(folder, f"l{layout}.wsc")
            w = write(path, frames, layout, args.round)
            r = read(path, len(frames))
            size = os.path.getsize(path)
            for key, value in (("w", w), ("r", r), ("b", size)):
                best[layout, level, key] = min(best.get((layout, level, key), value), value)
            for kind, sel in by_kind.items():
                write(path, sel, layout, args.round)
                best[layout, level, kind] = os.path.getsize(path) / len(sel)
            os.unlink(path)
    n = len(frames)
    print()
    spans_frames = [protocol.decode_frame(f).body["records"] for f in by_kind[protocol.SPANS]]
    per_frame = sum(map(len, spans_frames)) / max(1, len(spans_frames))  # records a frame
    print(f"# a spans frame holds {per_frame:.1f} records on average")
    print(f"{'layout':<24}{'B/frame':>9}{'sample':>9}{'spans':>9}{'B/span':>8}"
          f"{'write us':>10}{'read us':>9}")
    print("-" * 78)
    for (layout, level), name in CASES.items():
        b = {k: best[layout, level, k] for k in ("b", "w", "r", protocol.SAMPLE, protocol.SPANS)}
        print(f"{f'{layout} {name}':<24}{b['b'] / n:>9.1f}{b[protocol.SAMPLE]:>9.1f}"
              f"{b[protocol.SPANS]:>9.1f}{b[protocol.SPANS] / per_frame:>8.2f}"
              f"{1e6 * b['w'] / n:>10.2f}{1e6 * b['r'] / n:>9.2f}")
    def ratio(a: tuple[int, int], b: tuple[int, int], key: str) -> float:
        return best[a[0], a[1], key] / best[b[0], b[1], key]

    zstd, zlib, zstd3, delta = (4, 1), (3, 0), (4, 3), (5, 1)
    print(f"\nZstandard / zlib: {ratio(zstd, zlib, 'b'):.2f}x the bytes, "
          f"{ratio(zstd, zlib, 'w'):.2f}x the writer's CPU, "
          f"{ratio(zstd, zlib, 'r'):.2f}x the reader's; level 3 / level 1: "
          f"{ratio(zstd3, zstd, 'b'):.2f}x the bytes, {ratio(zstd3, zstd, 'w'):.2f}x the "
          "writer's CPU")
    print(f"spans delta-coded / not: {ratio(delta, zstd, 'b'):.2f}x the bytes, "
          f"{ratio(delta, zstd, 'w'):.2f}x the writer's CPU, "
          f"{ratio(delta, zstd, 'r'):.2f}x the reader's; "
          f"a frame {best[5, 1, 'b'] / n:.0f} B (want <= 100)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
