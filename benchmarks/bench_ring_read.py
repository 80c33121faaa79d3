"""The sidecar's read of a span ring, per record: a burst written into a real ring file by the
worker's recorder, then read as the sidecar reads it (sidecar.rings.Rings.frames) and packed
as it sends it (protocol.encode_frame), with the reader's C passes and with their Python twin.

    python benchmarks/bench_ring_read.py [--spans N] [--rounds R]

The floor is the copy of the same records' words out of the mapping (memoryview.tolist, what
every read starts from) and msgpack's pack of ready SpanRecord tuples. CPU seconds
(time.process_time), best of R rounds of N spans each (default 5 of 60,000), in one process.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

for _var in [v for v in os.environ if v.startswith("WORKERSCOPE_")]:
    del os.environ[_var]

from workerscope import protocol, spanring  # noqa: E402
from workerscope.sidecar.rings import Rings  # noqa: E402
from workerscope.worker import recorder  # noqa: E402


def _write(writer: recorder.Writer, nid: int, spans: int) -> None:
    tid = 1234
    for _ in range(spans):
        seq = writer.begin(nid, 0, tid, 1, 0) & spanring.SEQ_MASK
        writer.finish(seq, recorder.now_ns(), tid)


def _round(rings: Rings, writer: recorder.Writer, nid: int, spans: int,
           scan: object) -> tuple[float, float, float]:
    """(copy floor, read, read + pack) CPU seconds for one burst of `spans`."""
    _write(writer, nid, spans)
    (ring,) = rings.rings.values()
    reader = ring.reader
    reader.scan = scan
    t = time.process_time()
    reader._words(reader.next_seq, reader.next_seq + spans - 1)
    copy = time.process_time() - t
    t = time.process_time()
    bodies = [body for _, body, _ in rings.frames(None, final=False, now_ns=time.monotonic_ns())]
    read = time.process_time() - t
    t = time.process_time()
    for seq, body in enumerate(bodies):
        protocol.encode_frame(protocol.SPANS, "bench", seq, body)
    pack = time.process_time() - t
    got = sum(len(b["records"]) for b in bodies)
    if got != spans:
        raise SystemExit(f"read {got} of {spans} spans")
    return copy, read, read + pack


def _pack_floor(spans: int) -> float:
    records = [protocol.SpanRecord(protocol.RECORD_SPAN, 1, (1 << 40) | i, 1, "noop", 10**15 + i,
                                   10**15 + i + 500, 1234, None, None, False, None)
               for i in range(spans)]
    bodies = [{"pid": 1, "records": records[i:i + 5000], "threads": []}
              for i in range(0, spans, 5000)]
    t = time.process_time()
    for seq, body in enumerate(bodies):
        protocol.encode_frame(protocol.SPANS, "bench", seq, body)
    return time.process_time() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=60_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    c_scan = spanring._load_scan()
    cases = [("C passes", c_scan)] if c_scan is not spanring.PythonScan else []
    cases.append(("Python passes", spanring.PythonScan))
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs; {args.spans:,} spans a "
          f"round, best of {args.rounds}; CPU us a record (records a second)\n")
    with tempfile.TemporaryDirectory() as d:
        writer = recorder.Writer(d, spanring.capacity_for(2 * args.spans))
        try:
            rings = Rings(d, os.getpid())
            rings.jobs.start(1, os.getpid(), None, 0)
            nid = writer.intern("noop")
            best: dict[str, list[float]] = {}
            for _ in range(args.rounds):  # the cases interleaved, round by round
                for name, scan in cases:
                    got = _round(rings, writer, nid, args.spans, scan)
                    was = best.setdefault(name, list(got))
                    best[name] = [min(a, b) for a, b in zip(was, got, strict=True)]
            floor_pack = min(_pack_floor(args.spans) for _ in range(args.rounds))
        finally:
            recorder.release(writer)
    n = args.spans
    copy = min(v[0] for v in best.values())

    def cell(seconds: float) -> str:
        return f"{seconds * 1e6 / n:.3f} ({n / seconds:,.0f}/s)"

    print(f"{'case':<16}{'read':>24}{'read + pack':>26}")
    print("-" * 66)
    print(f"{'floor':<16}{cell(copy):>24}{cell(copy + floor_pack):>26}   (copy; + pack alone)")
    for name, (_, read, sent) in best.items():
        print(f"{name:<16}{cell(read):>24}{cell(sent):>26}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
