"""How fast one driver Subscriber ingests sidecar frames from 1, 8 and 64 concurrent senders,
against a raw pyzmq + msgpack floor, and the latency from a real sidecar's sample to the driver.

    python benchmarks/bench_ingest.py

Senders are processes forked once at the start, before this process makes any zmq context
(a context must not cross a fork); each makes a fresh context and DEALER per round, as a
sidecar does. Per round each sender first builds its frames with protocol.encode_frame, shaped
like the sidecar's: a hello (real host name, boot_id, protocol.clock_anchor(), the sidecar's
metric names), FRAMES // senders samples {"t", "tree": 16 metrics, "procs": PROCS x [pid,
15 metrics], "host": 27 metrics}, then a bye. It connects, says ready, and at the go sends them
all back to back (blocking sends: frames queue, never drop), then closes with a linger that
lets them all out. Building the frames is outside the measurement; so is connecting.

Receivers, each timed from the go to the last of senders x (samples + 2) frames, on the same
wire: CURVE (the Subscriber's default on tcp://) and plain (insecure=True), at the
Subscriber's RCVHWM (receive_queue) and MAXMSGSIZE:
  raw ROUTER + unpackb   the floor: a bare ROUTER in this process's main thread,
                         recv_multipart() then msgpack.unpackb(raw=False, strict_map_key=True)
                         of each frame; with CURVE, the server's keys and no ZAP handler
  Subscriber             workerscope's driver as a program uses it: this thread in
                         sub.wait(byes=senders). Its receive thread checks each frame's
                         envelope, counts seq gaps, binds it to its connection, folds it into
                         the live state, appends it to the record file (a temporary one
                         here) and acknowledges each bye; a sample's body is decoded a few
                         times a second per worker, for the live view, the rest when a
                         timeline is built from the record
  Subscriber + on_frame  the same with an on_frame callback that counts frames: every frame
                         is then decoded whole, to be handed over
Best of REPEATS rounds per case, the cases interleaved. After each Subscriber round the script
checks that every frame arrived: no seq gap, no bad frame, every worker said bye, and the
record holds every frame.

Latency: a real sidecar samples at 0.01 s, sending to a Subscriber whose on_frame computes,
for each sample, the driver's time.time_ns() at delivery minus the sample's time mapped to
wall time through the anchor of that sidecar's hello (wall = t - anchor_mono + anchor_wall).
The sample's t is read before the sidecar reads /proc, so the figure includes the sidecar's
own sampling, encoding, ZeroMQ over loopback TCP, and the Subscriber's decode and fold. Two
workers: one idle (time.sleep, in this process), one a child process spinning on a core.
The floor: a bare DEALER in a child process sends a sample-shaped frame every interval, its
t read just before encoding, to a bare ROUTER + unpackb here (no /proc reads, no Timeline).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import socket
import subprocess
import sys
import time
from typing import Any

# A WORKERSCOPE_* variable in the caller's environment would change what is measured.
for _var in [v for v in os.environ if v.startswith("WORKERSCOPE_")]:
    del os.environ[_var]

import msgpack  # noqa: E402
import psutil  # noqa: E402
import zmq  # noqa: E402

import workerscope  # noqa: E402
from workerscope import protocol  # noqa: E402
from workerscope.driver.keys import DriverKeys  # noqa: E402
from workerscope.driver.subscriber import RECEIVE_QUEUE  # noqa: E402
from workerscope.procfs import boot_id  # noqa: E402
from workerscope.sidecar.service import METRICS  # noqa: E402
from workerscope.transport import dealer  # noqa: E402
from workerscope.worker.link import close_all  # noqa: E402

SENDERS = (1, 8, 64)
FRAMES = 24_000  # sample frames per round, shared among the senders
PROCS = 4  # processes per sample frame ("procs": a worker with a few children)
REPEATS = 5
ROUND_TIMEOUT = 60.0
LATENCY_S = 4.0
LATENCY_INTERVAL = 0.01


# -- the frames -----------------------------------------------------------------------------
def _proc_values(i: int, k: int) -> dict[str, float]:
    cpu = 0.01 * i + k
    return {"cpu_percent": 97.5 + k, "cpu_user_s": round(cpu, 2),
            "cpu_system_s": round(cpu / 20, 2),
            "rss_bytes": 300_000_000 + 4096 * i, "peak_rss_bytes": 310_000_000 + 4096 * i,
            "num_threads": 8, "ctx_switches_voluntary": 40 * i, "ctx_switches_involuntary": 3 * i,
            "read_bytes": 4096 * i, "write_bytes": 512 * i, "read_chars": 30_000 * i,
            "write_chars": 800 * i, "num_fds": 23, "uss_bytes": 250_000_000,
            "pss_bytes": 270_000_000}


def sample_body(i: int, t_ns: int, pids: list[int]) -> dict[str, Any]:
    """One sample as the sidecar sends it (sidecar/__main__.py Sidecar.sample)."""
    procs = [[pid, _proc_values(i, k)] for k, pid in enumerate(pids)]
    tree = {key: sum(v[key] for _, v in procs) for key in procs[0][1]}
    tree.update(num_procs=len(procs), cpu_percent=100.0 * len(procs))
    host = {f"cpu_percent_core{c}": 50.0 + c for c in range(8)}
    host.update({"cpu_percent": 55.5, "cpu_iowait_percent": 0.25, "cpu_steal_percent": 0.0,
                 "mem_used_bytes": 9_000_000_000 + i, "mem_available_bytes": 20_000_000_000,
                 "mem_total_bytes": 32_000_000_000, "swap_used_bytes": 0,
                 "cgroup_mem_used_bytes": 1_200_000_000, "net_sent_bytes": 10_000 * i,
                 "net_recv_bytes": 20_000 * i, "net_sent_packets": 10 * i,
                 "net_recv_packets": 20 * i, "disk_read_bytes": 1000 * i,
                 "disk_write_bytes": 5000 * i, "load_1m": 1.5, "load_5m": 1.25,
                 "load_15m": 1.0})
    return {"t": t_ns, "tree": tree, "procs": procs, "host": host}


def build_frames(n: int, target: int, sidecar: int) -> tuple[str, list[bytes]]:
    host = socket.gethostname()
    wid = f"{host}:{target}:{sidecar}"
    hello = {"node": None, "host": host, "pid": target, "sidecar_pid": sidecar,
             "interval": 0.01, "anchor": protocol.clock_anchor(), "boot_id": boot_id(),
             "metrics": METRICS, "net_scope": "host"}
    frames = [protocol.encode_frame(protocol.HELLO, wid, 0, hello)]
    pids = [target + k for k in range(PROCS)]
    t0 = time.monotonic_ns()
    for i in range(n):
        frames.append(protocol.encode_frame(protocol.SAMPLE, wid, i + 1,
                                            sample_body(i, t0 + i * 10_000_000, pids)))
    frames.append(protocol.encode_frame(protocol.BYE, wid, n + 1, {
        "t": t0 + n * 10_000_000, "status": "exited", "samples": n, "errors": [],
        "sent": n + 2, "dropped": 0}))
    return wid, frames


# -- the senders ----------------------------------------------------------------------------
def sender_main(conn: Any, index: int) -> None:
    """One sender process: per round, build, connect, say ready, send at the go, close."""
    while True:
        msg = conn.recv()
        if msg is None:
            return
        endpoint, n, round_no = msg
        # A pretend target pid per round and sender: each round's workers are new ones.
        _, frames = build_frames(n, 100_000 + 1000 * index + round_no, os.getpid())
        ctx = zmq.Context()
        # with the endpoint's keys, as a sidecar does; blocking sends: frames queue, never drop
        sock = dealer(ctx, endpoint, send_hwm=1000, linger_ms=30_000)
        conn.send(("ready", len(frames), sum(len(f) for f in frames)))
        conn.recv()  # the go
        for f in frames:
            sock.send(f)  # blocking: at the high-water mark, wait rather than drop
        sock.close()  # lingers until every frame is out (or 30 s)
        ctx.term()
        conn.send(("done",))


class Senders:
    def __init__(self, count: int) -> None:
        ctx = mp.get_context("fork")
        self.conns, self.procs = [], []
        for i in range(count):
            ours, theirs = ctx.Pipe()
            p = ctx.Process(target=sender_main, args=(theirs, i), daemon=True)
            p.start()
            theirs.close()
            self.conns.append(ours)
            self.procs.append(p)

    def prepare(self, k: int, endpoint: str, frames: int, round_no: int) -> tuple[int, int]:
        """Have the first k senders build and connect; (frames, bytes) they will send."""
        for c in self.conns[:k]:
            c.send((endpoint, frames // k, round_no))
        total = nbytes = 0
        for c in self.conns[:k]:
            if not c.poll(ROUND_TIMEOUT):
                raise RuntimeError("a sender did not get ready")
            _, n, b = c.recv()
            total += n
            nbytes += b
        return total, nbytes

    def go(self, k: int) -> None:
        for c in self.conns[:k]:
            c.send("go")

    def finish(self, k: int) -> None:
        for c in self.conns[:k]:
            if not c.poll(ROUND_TIMEOUT):
                raise RuntimeError("a sender did not finish")
            c.recv()

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
        for c in self.conns:
            c.close()


# -- the receivers --------------------------------------------------------------------------
def round_floor(senders: Senders, k: int, round_no: int, secure: bool) -> tuple[float, int, int]:
    """The floor: a bare ROUTER, its options the Subscriber's (RCVHWM, MAXMSGSIZE, CURVE when
    `secure`), recv_multipart() then unpackb of every frame, in this thread."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_FRAME_BYTES)
    sock.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
    sock.setsockopt(zmq.RCVTIMEO, int(ROUND_TIMEOUT * 1000))
    keys = DriverKeys.new() if secure else None
    try:
        if keys is not None:
            keys.serve(sock)  # no ZAP handler: any client key gets in, the floor's cost only
        sock.bind("tcp://127.0.0.1:*")
        bound = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        endpoint = keys.endpoint(bound) if keys is not None else bound
        expected, nbytes = senders.prepare(k, endpoint, FRAMES, round_no)
        time.sleep(0.2)  # let the connections settle
        recv, unpackb, clock = sock.recv_multipart, msgpack.unpackb, time.perf_counter
        first = clock()
        senders.go(k)
        for _ in range(expected):
            _, data = recv()
            unpackb(data, raw=False, strict_map_key=True)
        last = clock()
        senders.finish(k)
    finally:
        sock.close(0)
        ctx.term()
    return last - first, expected, nbytes


def round_subscriber(senders: Senders, k: int, round_no: int, secure: bool, callback: bool
                     ) -> tuple[float, int, int]:
    """A Subscriber as a driver program uses it: this thread in sub.wait(byes=k) until every
    sender said bye; with `callback`, an on_frame that counts (every frame then decoded whole
    to be handed over)."""
    count = [0]

    def on_frame(frame: protocol.Frame) -> None:
        count[0] += 1

    with workerscope.Subscriber(on_frame=on_frame if callback else None,
                                insecure=not secure) as sub:
        expected, nbytes = senders.prepare(k, sub.endpoint, FRAMES, round_no)
        time.sleep(0.2)
        first = time.perf_counter()
        senders.go(k)
        if not sub.wait(byes=k, timeout=ROUND_TIMEOUT):
            raise RuntimeError("not every sender's bye reached the Subscriber")
        last = time.perf_counter()
        senders.finish(k)
        received = sum(sub.received.values())
        if received != expected or any(sub.lost.values()) or sub.bad_frames:
            raise RuntimeError(f"Subscriber: {received} of {expected} frames, "
                               f"lost {sum(sub.lost.values())}, bad {sub.bad_frames}")
        if callback and count[0] != expected:
            raise RuntimeError(f"on_frame saw {count[0]} of {expected} frames")
        if len(sub.received) != k:
            raise RuntimeError(f"Subscriber saw {len(sub.received)} workers, not {k}")
        if sub.flush() != expected:
            raise RuntimeError(f"the record holds {sub.record_frames} of {expected} frames")
    return last - first, expected, nbytes


# -- latency --------------------------------------------------------------------------------
BUSY_WORKER = r"""
import sys, time, workerscope
from workerscope.worker.link import close_all
with workerscope.monitor(interval=float(sys.argv[2]), endpoint=sys.argv[1]):
    end = time.monotonic() + float(sys.argv[3])
    x = 0
    while time.monotonic() < end:
        x += 1
close_all(wait=True)
"""


RAW_SENDER = r"""
import os, sys, time, zmq
sys.path.insert(0, sys.argv[4])
from bench_ingest import sample_body
from workerscope import protocol
ctx = zmq.Context()
sock = ctx.socket(zmq.DEALER)
sock.setsockopt(zmq.LINGER, 5000)
sock.connect(sys.argv[1])
time.sleep(0.3)  # connected before the first timed frame
interval, n = float(sys.argv[2]), int(float(sys.argv[3]) / float(sys.argv[2]))
pid = os.getpid()
wid = f"raw:{pid}:{pid}"
tick = time.monotonic()
for i in range(n):
    t = time.monotonic_ns()
    sock.send(protocol.encode_frame(protocol.SAMPLE, wid, i, sample_body(i, t, [pid])))
    tick += interval
    time.sleep(max(0.0, tick - time.monotonic()))
sock.close()
ctx.term()
"""


def measure_raw_latency() -> list[int]:
    """The floor: a bare DEALER in a child process sends a sample-shaped frame (one proc) every
    interval with t read just before encoding it; a bare ROUTER here decodes it with unpackb.
    No /proc reads. monotonic_ns is one clock for every process of a Linux host."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 10_000)
    lat: list[int] = []
    child = None
    try:
        sock.bind("tcp://127.0.0.1:*")
        endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        here = os.path.dirname(os.path.abspath(__file__))
        child = subprocess.Popen([sys.executable, "-c", RAW_SENDER, endpoint,
                                  repr(LATENCY_INTERVAL), repr(LATENCY_S), here])
        n = int(LATENCY_S / LATENCY_INTERVAL)
        for _ in range(n):
            try:
                _, data = sock.recv_multipart()
            except zmq.Again:
                break
            now = time.monotonic_ns()
            msg = msgpack.unpackb(data, raw=False, strict_map_key=True)
            lat.append(now - msg[4]["t"])
        child.wait(timeout=30)
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        sock.close(0)
        ctx.term()
    return lat


def measure_latency(busy: bool) -> list[int]:
    anchors: dict[str, tuple[int, int]] = {}
    lat: list[int] = []

    def on_frame(frame: protocol.Frame) -> None:
        now = time.time_ns()
        if frame.kind == protocol.HELLO:
            wall, mono = frame.body["anchor"]
            anchors[frame.worker] = (wall, mono)
        elif frame.kind == protocol.SAMPLE and frame.worker in anchors:
            wall, mono = anchors[frame.worker]
            lat.append(now - (frame.body["t"] - mono + wall))

    with workerscope.Subscriber(on_frame=on_frame) as sub:
        if busy:
            child = subprocess.Popen([sys.executable, "-c", BUSY_WORKER, sub.endpoint,
                                      repr(LATENCY_INTERVAL), repr(LATENCY_S)])
            try:
                child.wait(timeout=LATENCY_S + 60)
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait()
            ok = sub.wait(byes=1, timeout=10)
        else:
            with workerscope.monitor(interval=LATENCY_INTERVAL, endpoint=sub.endpoint):
                time.sleep(LATENCY_S)
            close_all(wait=True)  # the sidecar says bye and exits
            ok = sub.wait(byes=1, timeout=10)
        if not ok:
            raise RuntimeError("the sidecar did not say bye")
        if sub.lost and any(sub.lost.values()):
            print(f"  note: {sum(sub.lost.values())} frames lost", file=sys.stderr)
    return lat


def pct(values: list[int], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main() -> int:
    # Fork the senders first, before any zmq context exists in this process.
    senders = Senders(max(SENDERS))
    failed = False
    try:
        _, probe = build_frames(2, 1, 2)
        print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, pyzmq {zmq.__version__} "
              f"(libzmq {zmq.zmq_version()}), msgpack {'.'.join(map(str, msgpack.version))}; "
              f"{FRAMES:,} sample frames per round of {len(probe[1]):,} B "
              f"({PROCS} procs each) + hello and bye per sender, over tcp://127.0.0.1, "
              f"RCVHWM {RECEIVE_QUEUE}; "
              f"best of {REPEATS}")
        print()
        head = (f"{'senders':>7}  {'receiver':<34} {'frames':>7} {'MB':>6} {'seconds':>8} "
                f"{'frames/s':>9} {'MB/s':>7} {'us/frame':>8} {'x floor':>8}")
        print(head)
        print("-" * len(head))
        sys.stdout.flush()
        round_no = 0
        for k in SENDERS:
            for secure in (True, False):
                best: dict[str, tuple[float, int, int]] = {}
                wire = "CURVE" if secure else "plain"
                floor_label = f"raw ROUTER + unpackb, {wire}"
                cases = [(floor_label, None), (f"Subscriber, {wire}", False),
                         (f"Subscriber + on_frame, {wire}", True)]
                for _ in range(REPEATS):
                    for label, callback in cases:
                        round_no += 1
                        r = (round_floor(senders, k, round_no, secure) if callback is None
                             else round_subscriber(senders, k, round_no, secure, callback))
                        if label not in best or r[0] < best[label][0]:
                            best[label] = r
                floor = best[floor_label][0]
                for label, (secs, n, nbytes) in best.items():
                    print(f"{k:>7}  {label:<34} {n:>7,} {nbytes / 1e6:6.1f} {secs:8.3f} "
                          f"{n / secs:9,.0f} {nbytes / 1e6 / secs:7.1f} {secs / n * 1e6:8.1f} "
                          f"{floor / secs:7.2f}x")
            print()
            sys.stdout.flush()
    finally:
        senders.close()
    # After the senders are gone: the idle worker below is this process, and its sidecar
    # samples this process's whole tree, which the 64 senders would otherwise be part of.
    try:
        print(f"Latency, sample taken -> on_frame at the driver, one sidecar at "
              f"interval={LATENCY_INTERVAL} s for {LATENCY_S:.0f} s "
              f"(~{LATENCY_S / LATENCY_INTERVAL:.0f} samples expected), in us")
        print()
        head = f"{'worker':<44} {'samples':>7} {'p50':>8} {'p99':>8} {'max':>8} {'min':>8}"
        print(head)
        print("-" * len(head))
        for label, measure in (
                ("raw DEALER -> ROUTER + unpackb (floor)", measure_raw_latency),
                ("sidecar, idle worker (this process)", lambda: measure_latency(False)),
                ("sidecar, busy worker (child, CPU loop)", lambda: measure_latency(True))):
            lat = measure()
            if not lat:
                print(f"{label:<44} no samples arrived")
                failed = True
                continue
            print(f"{label:<44} {len(lat):>7} {pct(lat, 0.5) / 1e3:8.0f} "
                  f"{pct(lat, 0.99) / 1e3:8.0f} {max(lat) / 1e3:8.0f} {min(lat) / 1e3:8.0f}")
            sys.stdout.flush()
    finally:
        close_all(wait=True)
        left = psutil.Process().children(recursive=True)
        if left:
            print(f"LEFT BEHIND: {[p.pid for p in left]}", file=sys.stderr)
    return 1 if left or failed else 0


if __name__ == "__main__":
    sys.exit(main())
