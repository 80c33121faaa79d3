"""A fleet's day on one driver (issue 25): WORKERS simulated workers at 1 Hz into one Subscriber,
for a bounded time, projected to a day.

    python benchmarks/bench_fleet.py [--workers 4096] [--senders 8] [--seconds 60]
                                     [--spans 20] [--floor-seconds 20]

1. Real frame shapes: one real heavy job (a worker and 3 child processes: a 4-process tree,
   a @timed function called SPANS times a second) into a Subscriber recording to a .wsc. Its
   hello, job start and end, its last 4-process sample and its spans frames are the templates.
2. The fleet: SENDERS processes, forked before this process makes any zmq context, each
   speaking for WORKERS / SENDERS workers, every worker on a DEALER of its own made by
   transport.dealer (CURVE with the endpoint's keys, a routing id of its own: as a sidecar's)
   and its own worker id (HOSTS hosts, each with a boot id). A worker says hello and starts
   a job, then every second sends one sample (the template's, its time now and its counters
   and RSS moved on) and one spans frame (SPANS records, the template's names, attributes and
   nesting, at times of the second just gone), its sends spread over the second as a fleet's
   are; a job ends and the next starts every JOB_S s; at the end its job ends and it says bye,
   and it reads the driver's acks until its bye's.
3. Two receivers of the same fleet, one after the other:
     floor       a bare ROUTER with the Subscriber's options and CURVE (no ZAP handler),
                 recv_multipart() then msgpack.unpackb of every frame, in this thread
     Subscriber  workerscope's driver as `workerscope listen -o fleet.wsc` runs it (a
                 record, CURVE, max_connections raised to fit the fleet), this thread
                 redrawing the live view (Subscriber.live() and export.live.render) once a
                 second, as `listen --live` does
   Per receiver: frames/s received, CPU per frame (this process's time.process_time(): the
   Subscriber's threads are in it, the senders are not). For the Subscriber also: frames lost
   (seq gaps, refused, bad: want 0), driver CPU in cores (want <= 1), peak RSS (want <= 256
   MiB) and its slope, record bytes a frame, the live view's refresh (want <= 1 s), and, after
   close, the time load() takes to open the record. A day is projected from the rates: frames,
   record bytes, and load()'s time per frame.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from typing import Any

for _var in [v for v in os.environ if v.startswith("WORKERSCOPE_")]:
    del os.environ[_var]

import msgpack  # noqa: E402
import psutil  # noqa: E402
import zmq  # noqa: E402

from workerscope import Subscriber, load, protocol  # noqa: E402
from workerscope.driver.keys import DriverKeys  # noqa: E402
from workerscope.driver.subscriber import RECEIVE_QUEUE  # noqa: E402
from workerscope.export.live import render  # noqa: E402
from workerscope.record import FRAME, RecordReader  # noqa: E402
from workerscope.transport import dealer  # noqa: E402

HOSTS_PER_SENDER = 64  # simulated hosts per sender process
JOB_S = 20  # a worker's jobs last this long
CONNECT_TIMEOUT = 120.0
DAY_S = 86_400

JOB = textwrap.dedent("""
    import subprocess, sys, time
    from workerscope import profiled, timed

    @timed
    def step(i):
        return sum(range(200))

    def job(seconds, per_s):
        kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
                for _ in range(3)]
        time.sleep(0.5)  # the children are in the tree before the first timed sample
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            step(n)
            n += 1
            time.sleep(1 / per_s)
        for k in kids:
            k.kill()
            k.wait()

    profiled(job, mode="heavy", interval=0.5, endpoint=sys.argv[1])(3.0, float(sys.argv[2]))
""")


# -- the templates ----------------------------------------------------------------------------
def real_frames(spans_per_s: int) -> dict[str, Any]:
    """The bodies of one real heavy job's frames, by kind: hello, job_start, job_end, the last
    sample with 4 processes, and the records of its spans frames."""
    path = os.path.join(tempfile.mkdtemp(), "real.wsc")
    with Subscriber(record=path) as sub:
        subprocess.run([sys.executable, "-c", JOB, sub.endpoint, str(spans_per_s)], check=True,
                       timeout=120)
        if not sub.wait(byes=1, timeout=60):
            raise RuntimeError("the real job's sidecar did not say bye")
    out: dict[str, Any] = {"records": []}
    for entry in RecordReader(path):
        if entry.tag != FRAME:
            continue
        frame = protocol.decode_frame(entry.data)
        body = frame.body
        if frame.kind == protocol.SAMPLE and len(body.get("procs", [])) == 4:
            out["sample"] = body
        elif frame.kind == protocol.SPANS:
            out["records"].extend(body["records"])
        elif frame.kind in (protocol.HELLO, protocol.JOB_START, protocol.JOB_END):
            out.setdefault(frame.kind.value, body)
    os.unlink(path)
    missing = {"hello", "job_start", "job_end", "sample"} - set(out)
    if missing or not out["records"]:
        raise RuntimeError(f"the real job sent no {sorted(missing) or 'spans'}")
    return out


class FakeWorker:
    """One simulated worker: its id, its socket, its sequence numbers and its clock."""

    def __init__(self, sock: zmq.Socket[bytes], host: str, pid: int, sidecar: int,
                 boot: str, templates: dict[str, Any], spans_per_s: int) -> None:
        self.sock, self.pid, self.t = sock, pid, templates
        self.wid = protocol.worker_id(host, pid, sidecar)
        self.seq = 0  # the next frame's
        self.job = 0
        self.span_id = 0
        self.spans_per_s = spans_per_s
        self.records = sorted((r for r in templates["records"] if r[0] == protocol.RECORD_SPAN),
                              key=lambda r: r[5])
        # Each span's duration and the gap before the next drawn from the real job's (clock
        # reads: ~10 us +- 1.6, 50 ms +- 0.5 at 20 a second), so no two workers' times run
        # alike; its id counts on from the real job's first.
        self.durations = [r[6] - r[5] for r in self.records]
        self.gaps = [b[5] - a[5] for a, b in zip(self.records, self.records[1:], strict=False)]
        self.gaps = self.gaps or [0]
        self.first_id = self.records[0][2]
        self.rng = random.Random(pid * 7919 + sidecar)
        self.pids = [pid + k for k in range(4)]
        hello = dict(templates["hello"], host=host, pid=pid, sidecar_pid=sidecar, boot_id=boot,
                     anchor=protocol.clock_anchor())
        self.sent = 0
        self.send(protocol.HELLO, hello)

    def send(self, kind: str, body: dict[str, Any]) -> None:
        self.sock.send(protocol.encode_frame(kind, self.wid, self.seq, body))
        self.seq += 1  # a sidecar's first frame is seq 0
        self.sent += 1

    def answer(self) -> int | None:
        """Answer the driver's pings, as a sidecar does (the driver acknowledges a bye once
        it has the worker's clock); the highest seq acknowledged, if any."""
        acked = None
        while True:
            try:
                data = self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return acked
            frame = protocol.decode_frame(data)
            if frame.kind == protocol.PING:
                self.send(protocol.PONG, {"id": frame.body.get("id"), "t0": frame.body.get("t0"),
                                          "t1": time.time_ns()})
            elif frame.kind == protocol.ACK and isinstance(frame.body.get("seq"), int):
                acked = max(acked or 0, frame.body["seq"])

    def start_job(self, now: int) -> None:
        self.job += 1
        self.send(protocol.JOB_START, dict(self.t["job_start"], job=self.job, t=now,
                                           pid=self.pid))

    def end_job(self, now: int) -> None:
        self.send(protocol.JOB_END, dict(self.t["job_end"], job=self.job, t=now))

    def tick(self, i: int, now: int) -> None:
        """One second's frames: a sample and a spans frame."""
        body = self.t["sample"]
        procs = []
        for k, (_, v) in enumerate(body["procs"]):
            v = dict(v)
            v["cpu_user_s"] = v.get("cpu_user_s", 0.0) + 0.9 * i
            v["rss_bytes"] = v.get("rss_bytes", 0) + 4096 * ((i * 7 + k) % 97)
            procs.append([self.pids[k], v])
        tree = dict(body.get("tree", {}), cpu_user_s=0.9 * i * 4)
        self.send(protocol.SAMPLE, dict(body, t=now, procs=procs, tree=tree))
        records = []
        step = 1_000_000_000 // self.spans_per_s
        start = now - 1_000_000_000
        pick = self.rng.choice
        for k in range(self.spans_per_s):
            r = list(self.records[k % len(self.records)])
            r[1], r[2], r[3] = self.job, self.first_id + self.span_id, None
            self.span_id += 1
            r[5], r[6] = start, start + pick(self.durations)
            r[7] = self.pid
            records.append(r)
            start += pick(self.gaps) * step // 50_000_000  # the real job's gaps, at this rate
        self.send(protocol.SPANS, {"pid": self.pid, "records": records,
                                   "threads": [[self.pid, "MainThread"]], "spans_lost": 0})

    def bye(self, now: int) -> int:
        self.end_job(now)
        self.send(protocol.BYE, {"t": now, "status": "exited", "dropped": 0, "errors": [],
                                 "sent": self.sent + 1})
        return self.seq - 1  # the bye's


def sender_main(conn: Any, index: int, count: int, spans_per_s: int) -> None:
    """One sender process: per phase, connect its workers, say ready, send at the go for the
    phase's seconds, say bye, wait for the acks (when the receiver sends them), report."""
    while True:
        msg = conn.recv()
        if msg is None:
            return
        endpoint, seconds, acks, templates = msg
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        workers = []
        for k in range(count):
            h = k % HOSTS_PER_SENDER
            host = f"fleet-{index:02d}-{h:03d}"
            sock = dealer(ctx, endpoint, send_hwm=10_000, linger_ms=30_000)
            workers.append(FakeWorker(sock, host, 10_000 + k, 20_000 + k,
                                      f"boot-{index:02d}-{h:03d}", templates, spans_per_s))
        now = time.monotonic_ns()
        for w in workers:
            w.start_job(now)
        conn.send("ready")
        conn.recv()  # the go
        before = sum(w.sent for w in workers)
        cpu0 = time.process_time()
        t0 = time.monotonic()
        for i in range(1, seconds + 1):
            for k, w in enumerate(workers):
                due = t0 + i - 1 + k / count  # the fleet's sends spread over each second
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                now = time.monotonic_ns()
                w.answer()
                w.tick(i, now)
                if i % JOB_S == 0 and i < seconds:
                    w.end_job(now)
                    w.start_job(now)
        now = time.monotonic_ns()
        last = {w.wid: w.bye(now) for w in workers}
        late = time.monotonic() - (t0 + seconds)
        if acks:  # as a sidecar: read the driver's acks until the bye's
            by_sock = {w.sock: w for w in workers}
            wait_for_acks({w.sock: last[w.wid] for w in workers},
                          lambda s, by=by_sock: by[s].answer(), 120)
        for w in workers:
            w.sock.close()
        ctx.term()
        total = sum(w.sent for w in workers)
        conn.send((total, total - before, time.process_time() - cpu0, late))


def wait_for_acks(waiting: dict[Any, int], read: Any, seconds: float) -> None:
    """As a sidecar after its bye: read each socket (`read(sock)`: the highest seq the
    driver acknowledged in what it read, if any) until the driver acknowledged its seq, for
    `seconds` at most."""
    poller = zmq.Poller()
    for s in waiting:
        poller.register(s, zmq.POLLIN)
    deadline = time.monotonic() + seconds
    while waiting and time.monotonic() < deadline:
        for s, _ in poller.poll(1000):
            if (read(s) or -1) >= waiting.get(s, 0):
                poller.unregister(s)
                del waiting[s]


class Fleet:
    def __init__(self, workers: int, senders: int, spans_per_s: int) -> None:
        ctx = mp.get_context("fork")
        self.conns, self.procs = [], []
        self.results: dict[Any, tuple[int, int, float, float]] = {}
        per = [workers // senders + (i < workers % senders) for i in range(senders)]
        for i, n in enumerate(per):
            ours, theirs = ctx.Pipe()
            p = ctx.Process(target=sender_main, args=(theirs, i, n, spans_per_s),
                            daemon=True)
            p.start()
            theirs.close()
            self.conns.append(ours)
            self.procs.append(p)

    def prepare(self, endpoint: str, seconds: int, acks: bool,
                templates: dict[str, Any]) -> None:
        for c in self.conns:
            c.send((endpoint, seconds, acks, templates))
        for c in self.conns:
            if not c.poll(CONNECT_TIMEOUT):
                raise RuntimeError("a sender did not get ready")
            c.recv()

    def go(self) -> None:
        for c in self.conns:
            c.send("go")

    def done(self, timeout: float) -> tuple[int, int, float, float] | None:
        """(frames sent, of them after the go, senders' CPU s, the most a sender ran late)
        once all are done, else
        None (what the senders done so far said is kept for the next call)."""
        for c in self.conns:
            if c not in self.results:
                if not c.poll(timeout):
                    return None
                self.results[c] = c.recv()
        results = list(self.results.values())
        self.results.clear()
        return (sum(r[0] for r in results), sum(r[1] for r in results),
                sum(r[2] for r in results), max(r[3] for r in results))

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(None)
            except OSError:
                pass
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()


# -- the receivers ----------------------------------------------------------------------------
def run_floor(fleet: Fleet, seconds: int, templates: dict[str, Any]) -> dict[str, float]:
    """A bare ROUTER with the Subscriber's options and CURVE, recv_multipart() then unpackb."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_FRAME_BYTES)
    sock.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
    keys = DriverKeys.new()
    keys.serve(sock)
    sock.bind("tcp://127.0.0.1:*")
    endpoint = keys.endpoint(sock.getsockopt_string(zmq.LAST_ENDPOINT))
    fleet.prepare(endpoint, seconds, False, templates)
    recv, unpackb = sock.recv_multipart, msgpack.unpackb
    before = 0  # the hellos and job starts, sent before the go
    while sock.poll(500):
        recv()
        before += 1
    received = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    last = t0
    fleet.go()
    finished = None
    while True:
        if sock.poll(200):
            _, data = recv()
            unpackb(data, raw=False, strict_map_key=True)
            received += 1
            last = time.perf_counter()
            continue
        if finished is None:
            finished = fleet.done(0)
        if finished is not None and not sock.poll(1000):
            break
    wall = last - t0
    cpu = time.process_time() - cpu0
    sock.close(0)
    ctx.term()
    total, _, _, late = finished
    return {"sent": total, "total": before + received, "received": received, "wall": wall,
            "cpu": cpu, "late": late}


def run_subscriber(fleet: Fleet, workers: int, seconds: int,
                   templates: dict[str, Any]) -> dict[str, Any]:
    path = os.path.join(tempfile.mkdtemp(), "fleet.wsc")
    proc = psutil.Process()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sub = Subscriber(record=path, max_connections=workers + 64).start()
    try:
        fleet.prepare(sub.endpoint, seconds, True, templates)
        time.sleep(1.0)  # the hellos and job starts in
        rss0 = proc.memory_info().rss
        at_go = sum(sub.received.values())
        cpu0, t0 = time.process_time(), time.perf_counter()
        fleet.go()
        rss: list[tuple[float, int]] = []
        refresh: list[float] = []
        finished = None
        while finished is None:
            r0 = time.perf_counter()
            render(sub.live(), sub.endpoint, width=120, jobs=sub.jobs_ended)
            refresh.append(time.perf_counter() - r0)
            rss.append((time.perf_counter() - t0, proc.memory_info().rss))
            finished = fleet.done(max(0.0, 1.0 - (time.perf_counter() - r0)))
        if not sub.wait(byes=workers, timeout=120):
            raise RuntimeError(f"{workers - len([s for s in sub.states().values()])} byes "
                               "did not come")
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        total = sum(sub.received.values())
        received = total - at_go
        lost = sum(sub.lost.values())
        refused = sum(sub.refused.values())
        bad = sub.bad_frames
        in_record = sub.flush()
    finally:
        sub.close()
    size = os.path.getsize(path)
    l0 = time.perf_counter()
    t = load(path)
    opened = time.perf_counter() - l0
    loaded = (len(t.workers), len(t.spans), len(t.samples))
    os.unlink(path)
    sent, after_go, sender_cpu, late = finished
    # RSS's slope over the second half of the run (the first fills the live state).
    half = [(x, y) for x, y in rss if x >= rss[-1][0] / 2]
    slope = (statistics.linear_regression([x for x, _ in half], [y for _, y in half]).slope
             if len(half) >= 3 else float("nan"))
    return {"sent": sent, "total": total, "after_go": after_go, "received": received,
            "wall": wall, "cpu": cpu, "late": late,
            "lost": lost, "refused": refused, "bad": bad, "record": in_record, "size": size,
            "rss0": rss0, "rss": rss, "rss_peak": max(y for _, y in rss), "rss_slope": slope,
            "refresh": refresh, "opened": opened, "loaded": loaded, "sender_cpu": sender_cpu}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=4096)
    ap.add_argument("--senders", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--floor-seconds", type=int, default=20)
    ap.add_argument("--spans", type=int, default=20, help="spans a worker sends a second")
    args = ap.parse_args()
    print(f"# {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()},"
          f" pyzmq {zmq.__version__} (libzmq {zmq.zmq_version()})")
    # The senders first: a zmq context must not cross a fork.
    fleet = Fleet(args.workers, args.senders, args.spans)
    templates = real_frames(args.spans)
    sizes = {k: len(protocol.encode_frame(protocol.SAMPLE, "h:1:2", 1, templates[k]))
             for k in ("sample",)}
    print(f"# {args.workers} workers on {args.senders} sender processes, 1 sample and 1 spans "
          f"frame ({args.spans} spans) a second each; the real sample frame is "
          f"{sizes['sample']:,} B")
    try:
        floor = run_floor(fleet, args.floor_seconds, templates)
        sub = run_subscriber(fleet, args.workers, args.seconds, templates)
    finally:
        fleet.close()
    offered = sub["after_go"] / args.seconds  # samples, spans, job edges, pongs, byes
    f_rate, s_rate = floor["received"] / floor["wall"], sub["received"] / sub["wall"]
    f_cpu = floor["cpu"] / floor["received"] * 1e6
    s_cpu = sub["cpu"] / sub["received"] * 1e6
    per_frame = sub["size"] / sub["total"]
    day_frames = offered * DAY_S
    opened_per_frame = sub["opened"] / sub["total"]
    mib = 1024 ** 2
    print()
    print("| figure | floor (bare ROUTER + unpackb) | Subscriber | want |")
    print("|---|---|---|---|")
    print(f"| frames/s received (sent {offered:,.0f}/s) | {f_rate:,.0f} | {s_rate:,.0f} | "
          f"{offered:,.0f} |")
    print(f"| frames sent / received | {floor['sent']:,} / {floor['total']:,} | "
          f"{sub['sent']:,} / {sub['total']:,} | all |")
    print(f"| lost (seq gaps) / refused / bad | | {sub['lost']} / {sub['refused']} / "
          f"{sub['bad']} | 0 |")
    print(f"| CPU a frame | {f_cpu:.1f} us | {s_cpu:.1f} us ({s_cpu / f_cpu:.2f}x) | |")
    print(f"| driver CPU | {floor['cpu'] / floor['wall']:.2f} cores | "
          f"{sub['cpu'] / sub['wall']:.2f} cores | <= 1 |")
    print(f"| driver RSS, peak (at start) | | {sub['rss_peak'] / mib:.0f} MiB "
          f"({sub['rss0'] / mib:.0f}) | <= 256 MiB |")
    print(f"| RSS slope, second half | | {sub['rss_slope'] / mib * 3600:+.0f} MiB/h | 0 |")
    quarters = [sub["rss"][min(len(sub["rss"]) - 1, len(sub["rss"]) * q // 4)] for q in (1, 2, 3, 4)]
    print("| RSS at each quarter of the run | | "
          + ", ".join(f"{y / mib:.0f} MiB at {x:.0f} s" for x, y in quarters) + " | |")
    refresh = sorted(sub["refresh"])
    print(f"| live view refresh, median / max | | {statistics.median(refresh):.3f} / "
          f"{refresh[-1]:.3f} s | <= 1 s |")
    print(f"| record bytes a frame | | {per_frame:,.0f} B | |")
    print(f"| load() of the record | | {sub['opened']:.1f} s ({sub['total']:,} frames, "
          f"{sub['size'] / mib:,.0f} MiB; {sub['loaded'][1]:,} spans) | |")
    print(f"| a day, projected: frames / record | | {day_frames / 1e6:,.0f} M / "
          f"{day_frames * per_frame / 1024 ** 3:,.0f} GiB | |")
    print(f"| a day, projected: load() | | {day_frames * opened_per_frame / 60:,.0f} min | |")
    print(f"| senders' CPU (all), late at the end | {floor['late']:.2f} s | "
          f"{sub['sender_cpu'] / sub['wall']:.2f} cores, {sub['late']:.2f} s | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
