"""What the live exports cost (issue 24): OTLP's throughput against the driver's own ingest of the
same frames, the driver CPU it adds per 1,000 frames, and the worker and sidecar CPU it adds
(want 0: the export lives at the driver, never in the worker).

    python benchmarks/bench_export.py [--workers 4] [--seconds 4] [--rounds 3]

1. A real run: WORKERS worker processes, each one heavy job of SECONDS s (interval 0.02 s,
   a @timed function called 50 times every 10 ms: ~5,000 spans/s a worker), into a Subscriber recording to
   a .wsc. Its frames are the replay set.
2. Throughput, best of ROUNDS: each worker's frames, as recorded, sent back to back by a
   sender process of its own (a plain-tcp DEALER, as a sidecar's) into
     ingest   Subscriber(insecure=True): from the go to every bye received (sub.wait)
     + otlp   Subscriber(insecure=True, otlp=URL): the same, then to every queued frame sent
              on (its close() returns once the exporter's queue is empty)
   The collector is a stdlib HTTP server in a process of its own that answers 200 to all.
   Export throughput = frames / time from the go to the collector's last request (and, for
   the close's cost, to close() returned); ingest = frames / time to all received.
3. Cost, the same real job run with and without otlp=URL, ROUNDS times interleaved: the
   driver's CPU (this process: time.process_time, the collector being another process) and
   its exporter process's (the children's rusage, less the workers') per 1,000 frames
   received, and each worker's own and its sidecar's CPU (os.wait4's rusage of the worker,
   which waits for its sidecar).
"""

from __future__ import annotations

import argparse
import http.server
import multiprocessing as mp
import os
import platform
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings

for _var in [v for v in os.environ if v.startswith("WORKERSCOPE_")]:
    del os.environ[_var]

from workerscope import Subscriber, protocol  # noqa: E402
from workerscope.record import FRAME, RecordReader  # noqa: E402

JOB = textwrap.dedent("""
    import sys, time
    from workerscope import profiled, timed

    @timed
    def step(i):
        return i * i

    def job(seconds):
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            step(n)
            n += 1
            if n % 50 == 0:
                time.sleep(0.01)

    profiled(job, mode="heavy", interval=0.02, endpoint=sys.argv[1])(float(sys.argv[2]))
""")


LAST_POST = mp.get_context("fork").Value("d", 0.0)  # monotonic: the collector's last request


def collector(port_q: mp.Queue) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()
            LAST_POST.value = time.monotonic()  # CLOCK_MONOTONIC: one clock for the host

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_q.put(httpd.server_address[1])
    httpd.serve_forever()


def sender(frames: list[bytes], endpoint: mp.Queue, ready: mp.Event, go: mp.Event) -> None:
    import zmq

    address = endpoint.get()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.connect(address)
    ready.set()
    go.wait()
    for f in frames:
        sock.send(f)
    # As a sidecar: read what the driver sends (its acks of frames read) until it acknowledges
    # the bye. Closing with the driver's acks unread would reset the connection (TCP sends RST
    # for unread data), and the driver would lose the frames still in its socket buffer.
    bye = protocol.decode_frame(frames[-1])
    assert bye.kind == protocol.BYE, bye.kind
    bye_seq = bye.seq
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if sock.poll(1000):
            reply = protocol.decode_frame(sock.recv())
            if reply.kind == protocol.ACK and reply.body.get("seq") == bye_seq:
                break
    sock.close(linger=0)
    ctx.term()


def run_job(endpoint: str, workers: int, seconds: float) -> float:
    """User + system CPU s of the workers, with their sidecars, of one real run."""
    procs = [subprocess.Popen([sys.executable, "-c", JOB, endpoint, str(seconds)])
             for _ in range(workers)]
    cpu = 0.0
    for p in procs:
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        assert p.returncode == 0, p.returncode
        cpu += usage.ru_utime + usage.ru_stime
    return cpu


def record_frames(workers: int, seconds: float) -> dict[str, list[bytes]]:
    import msgpack

    path = os.path.join(tempfile.mkdtemp(), "run.wsc")
    with Subscriber(record=path) as sub:
        run_job(sub.endpoint, workers, seconds)
        assert sub.wait(byes=workers, timeout=60)
    by_worker: dict[str, list[bytes]] = {}
    for entry in RecordReader(path):
        if entry.tag == FRAME:
            wid = msgpack.unpackb(entry.data, raw=False)[2]  # [version, kind, worker, ...]
            by_worker.setdefault(wid, []).append(entry.data)
    return by_worker


def replay(by_worker: dict[str, list[bytes]],
           url: str | None) -> tuple[float, float, float, int]:
    """(s to every bye received, s to the collector's last request, s to close() returned
    (with no export: both close()), frames)."""
    ctx = mp.get_context("fork")
    ready = [ctx.Event() for _ in by_worker]
    go = ctx.Event()
    queues = [ctx.Queue() for _ in by_worker]
    procs = [ctx.Process(target=sender, args=(frames, q, r, go))
             for frames, q, r in zip(by_worker.values(), queues, ready, strict=True)]
    for p in procs:
        p.start()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # plain tcp on loopback, on purpose
        sub = Subscriber("tcp://127.0.0.1:0", insecure=True, otlp=url).start()
    for q in queues:
        q.put(sub.endpoint)
    for r in ready:
        r.wait(30)
    t0, m0 = time.perf_counter(), time.monotonic()
    go.set()
    assert sub.wait(byes=len(by_worker), timeout=60), (sub.received, sub.refused, sub.states(),
                                                       sub._state.counts())
    received = time.perf_counter() - t0
    sub.close()
    closed = time.perf_counter() - t0
    sent = LAST_POST.value - m0 if url is not None else closed
    for p in procs:
        p.join()
    frames = sum(len(f) for f in by_worker.values())
    counts = sub.otlp_counts
    if counts is not None:
        assert counts.frames_dropped == 0 and counts.failed == 0, counts
    return received, sent, closed, frames


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    port_q: mp.Queue = mp.get_context("fork").Queue()
    coll = mp.get_context("fork").Process(target=collector, args=(port_q,), daemon=True)
    coll.start()
    url = f"http://127.0.0.1:{port_q.get()}"
    print(f"# {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")

    by_worker = record_frames(args.workers, args.seconds)
    n = sum(len(f) for f in by_worker.values())
    size = sum(len(x) for f in by_worker.values() for x in f)
    print(f"# replay set: {n} frames, {size / 1e6:.1f} MB, {args.workers} workers")
    ingest, export, closing = [], [], []
    for _ in range(args.rounds):
        received, _, _, frames = replay(by_worker, None)
        ingest.append(frames / received)
        _, sent, closed, frames = replay(by_worker, url)
        export.append(frames / sent)
        closing.append(frames / closed)
    best_in, best_out = max(ingest), max(export)
    print(f"\n| path | frames/s (best of {args.rounds}) |")
    print("|---|---|")
    print(f"| driver ingest (Subscriber, plain tcp): the go to every bye received | {best_in:,.0f} |")
    print(f"| OTLP export: the go to the collector's last request | {best_out:,.0f} |")
    print(f"| the same, to the Subscriber's close() returned | {max(closing):,.0f} |")
    print(f"| export / ingest | {best_out / best_in:.2f}x |")

    rows = {False: [], True: []}
    for _ in range(args.rounds):
        for export_on in (False, True):
            sub = Subscriber(otlp=url if export_on else None).start()
            c0 = time.process_time()
            k0 = _children_cpu()
            worker_cpu = run_job(sub.endpoint, args.workers, args.seconds)
            assert sub.wait(byes=args.workers, timeout=60)
            sub.close()
            driver_cpu = time.process_time() - c0
            # The exporter process (reaped by close()): all children's CPU but the workers'.
            exporter_cpu = max(_children_cpu() - k0 - worker_cpu, 0.0) if export_on else 0.0
            frames = sum(sub.received.values())
            rows[export_on].append((driver_cpu + exporter_cpu, worker_cpu, frames, driver_cpu))
    print(f"\n| real job, {args.workers} workers x {args.seconds:g} s | driver CPU s (its "
          "process) | + exporter process CPU s | ms / 1k frames, both | workers + sidecars "
          "CPU s |")
    print("|---|---|---|---|---|")
    for export_on in (False, True):
        d = min(r[0] for r in rows[export_on])
        own = min(r[3] for r in rows[export_on])
        w = min(r[1] for r in rows[export_on])
        f = sum(r[2] for r in rows[export_on]) / len(rows[export_on])
        print(f"| {'with otlp=URL' if export_on else 'no export'} | {own:.3f} | {d - own:.3f} | "
              f"{d / f * 1e6:.1f} | {w:.3f} |")
    d0 = min(r[0] for r in rows[False])
    d1 = min(r[0] for r in rows[True])
    f1 = sum(r[2] for r in rows[True]) / len(rows[True])
    w0 = min(r[1] for r in rows[False])
    w1 = min(r[1] for r in rows[True])
    print(f"\nadded driver + exporter CPU: {(d1 - d0) / f1 * 1e6:.1f} ms per 1,000 frames; "
          f"added worker + sidecar CPU: {w1 - w0:+.3f} s ({(w1 - w0) / w0 * 100:+.1f}%, "
          "the noise of the same job run twice)")


if __name__ == "__main__":
    main()
