"""Flood a driver and show its memory stays under Subscriber.memory_ceiling (issue 13, problem 3),
its descriptors and CPU hold, and a real job still arrives afterwards.

    python benchmarks/bench_flood.py [--nofile 1024] [--scale 0.1] [--byes 300]

The driver is a Subscriber with its default bounds, alone in a process of its own (so its
memory is its own), started with RLIMIT_NOFILE as this shell has it, or --nofile N (soft and
hard: the issue's 1,100 connections ran out of the common 1,024). This script, holding the
endpoint's keys (the worst sender: one that passes the handshake), then floods it, one phase
after another, each phase waited out until the driver has accounted for every frame sent.
Besides the floods of volume, the key holder's attacks on the stores that were once unbounded
(docs/SECURITY.md's threat rows), at the sizes that found them; --scale multiplies their
counts, not their sizes (the default run, 1.0, takes ~3 minutes on 2 CPUs):

  absurd pongs       2 workers of another host answer the driver's pings with t1 = -2**63
                     and 2**64-1 (close() raised OverflowError, every later save failed);
                     first, while the record is small, the driver then saves its timeline()
                     as a .wsc and loads it back (and at the end says what close() did)
  frames at the cap  CONNS connections each send FRAMES valid spans frames of ~1 MiB (the
                     size cap, ~36,000 records each) as fast as ZeroMQ takes them: the
                     per-connection queue, decoding at the cap and max_kept_bytes
  empty lists        CONNS connections each send FRAMES 1 MiB frames of nested empty lists
                     (~1M Python objects each if decoded whole)
  multipart          CONNS messages of 50 parts (no sidecar sends more than one)
  job names          one connection opens 1,200 jobs named with 1 MB each (cut at 1,000
                     characters; the live state kept them whole for the worker's life)
  long worker ids    one connection sends 3,000 sample frames, each under a new worker id of
                     500 KB (refused: past 512 characters; the live view kept each id)
  boot ids           2,000 hellos with a boot id of 500 KB, each a worker and a connection of
                     its own (a connection speaks for one worker only; refused: over 128)
  tree samples       200 workers each send one tree sample of 55,000 keys (the live rows
                     keep only the values they show)
  bye notes          8 workers each say bye 72 times (--byes) with 1 MiB of new notes (the
                     notes budget of the record: 8 KiB a worker, 8 MiB in all)
  connections        RAW plain TCP connections, kept open (more than --nofile allows)
  real job           a heavy profiled() job with the endpoint, the RAW connections still open
  past max_workers   the RAW connections closed, hellos of new workers up to max_workers (a
                     connection each), then 3,000 sample frames under new short ids over one
                     connection, each refused past max_workers (before the check of whom a
                     connection speaks for): the fill's workers hold their slots for stale_after
  churn              twice max_workers workers, each a hello and a bye over a connection of its
                     own, closed after: the driver lets go of workers gone and done to make
                     room (let_go), in bounded memory
  real job again     a heavy job after the churn: it gets in

After each phase: the driver's RSS now and its peak (VmHWM, the kernel's high-water mark of
the whole process), both as growth over its RSS once started (the baseline, measured in the
same run), its descriptors, and what it counted as refused. The last lines say what the
absurd pongs left (clock offsets, the save, close()) and compare the peak growth with the
driver's own memory_ceiling (docs/SECURITY.md gives the arithmetic).
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
from collections.abc import Callable, Iterable, Iterator

# A WORKERSCOPE_* variable in the caller's environment would change what is measured.
for _var in [v for v in os.environ if v.startswith("WORKERSCOPE_")]:
    del os.environ[_var]

# Span records are built with the tests' record factories (tests/factories.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))

import msgpack  # noqa: E402
import zmq  # noqa: E402
from factories import frame, span_record  # noqa: E402

from workerscope import protocol  # noqa: E402
from workerscope.config import split_endpoint  # noqa: E402
from workerscope.transport import MAX_FRAME_BYTES, dealer  # noqa: E402

CONNS = 32
FRAMES = 16
RAW = 1100
WAIT_S = 600.0
BATCH = 100  # connections open at a time where each frame needs one of its own
SEND_HWM = 16  # frames queued here per connection: a phase's gigabytes are made as they go
# The key holder's attacks on stores that were unbounded (docs/SECURITY.md), at the issue's
# sizes; --scale multiplies the counts, not the sizes.
PONG_TIMES = (-2**63, 2**64 - 1)  # t1 of a pong: outside int64 (close() raised OverflowError)
PONGS = 5  # pings answered per worker
JOB_NAMES, NAME_CHARS = 1200, 1_000_000  # job_start frames, over one connection
LONG_IDS, LONG_ID_CHARS = 3000, 500_000  # sample frames, each under a new worker id
BOOT_IDS, BOOT_ID_CHARS = 2000, 500_000  # hellos, each a worker (and a connection) of its own
TREES, TREE_SIZE = 200, 55_000  # workers, each with one tree sample of that many keys
BYE_WORKERS, BYES, NOTES, NOTE_CHARS = 8, 72, 16, 63_000  # 16 notes: a bye just under 1 MiB
PAST = 3000  # sample frames under new short ids, once max_workers workers are in

DRIVER = """
import json, os, resource, shutil, sys, tempfile, time
if int(sys.argv[1]):
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[1])))
from workerscope import Subscriber, load

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

def save():
    # A .wsc of the timeline so far, loaded back: what an absurd pong once broke.
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "flood.wsc")
    t0 = time.perf_counter()
    try:
        sub.timeline().save(path)
        return {"saved": os.path.getsize(path), "loaded": len(load(path).workers),
                "save_s": time.perf_counter() - t0}
    except Exception as err:
        return {"save_error": repr(err)}
    finally:
        shutil.rmtree(folder)

sub = Subscriber().start()
print(json.dumps({"endpoint": sub.endpoint, "ceiling": sub.memory_ceiling,
                  "connections": sub._conns.ceiling, "max_workers": sub.max_workers,
                  "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0], **status()}),
      flush=True)
def byes():
    st = sub._state  # wait(byes=N)'s count: workers let go of keep theirs
    with st.cond:
        return st.byes_let_go + sum(w.status != "running" for w in st.builder.t.workers.values())

for line in sys.stdin:
    received = sub.received
    out = {"refused": sub.refused, "bad": sub.bad_frames, "jobs": sub.jobs_ended,
           "frames": sum(received.values()), "workers": len(received), "let_go": sub.let_go,
           "byes": byes(), "stale": sum(v == "stale" for v in sub.states().values()),
           "received": {w: n for w, n in received.items() if w.startswith("pong")}, **status()}
    if line.strip() == "save":
        out.update(save(), offsets={w: o for w, o in sub.clock_offsets().items()
                                    if w.startswith("pong")})
    print(json.dumps(out), flush=True)
try:
    sub.close()
    print(json.dumps({"closed": "ok"}), flush=True)
except Exception as err:
    print(json.dumps({"closed": repr(err)}), flush=True)
"""


class Driver:
    def __init__(self, nofile: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(nofile)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.start = json.loads(self.proc.stdout.readline())
        host, port = split_endpoint(self.start["endpoint"])[0][len("tcp://"):].rsplit(":", 1)
        self.host_port = (host, int(port))

    def ask(self, command: str = "") -> dict:
        self.proc.stdin.write(command + "\n")
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

    def close(self) -> str:
        """What the driver's close() did: "ok", or the exception it raised."""
        self.proc.stdin.close()
        line = self.proc.stdout.readline()
        self.proc.wait(60)
        return json.loads(line)["closed"] if line else "no answer"


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


def hello(worker: str, **fields: object) -> bytes:
    return protocol.encode_frame("hello", worker, 0, {
        "host": "flood", "pid": 1, "anchor": [time.time_ns(), time.monotonic_ns()], **fields})


def job_names(worker: str, jobs: int) -> Iterator[bytes]:
    """A worker opening `jobs` jobs, each named with NAME_CHARS characters (cut at 1,000)."""
    yield hello(worker)
    for job in range(jobs):
        yield frame("job_start", worker=worker, seq=1 + job, job=job, t=time.monotonic_ns(),
                    pid=1, tid=1, name=f"{job:07d}".ljust(NAME_CHARS, "n"))


def samples(worker: Callable[[int], str], n: int) -> Iterator[bytes]:
    """Sample frames, the k-th under the worker id worker(k), each its first frame."""
    for k in range(n):
        yield frame("sample", worker=worker(k), t=time.monotonic_ns(), tree={})


def tree_sample(worker: str) -> list[bytes]:
    tree = {f"key{i}": float(i) for i in range(TREE_SIZE)} | {"rss_bytes": 5.0, "cpu_percent": 7.0}
    return [hello(worker), frame("sample", worker=worker, seq=1, t=time.monotonic_ns(), tree=tree)]


def byes(worker: str, n: int) -> Iterator[bytes]:
    """A worker saying bye `n` times, each with NOTES new notes of NOTE_CHARS characters."""
    yield hello(worker)
    for seq in range(1, n + 1):
        notes = [f"{worker} {seq:03d}-{i:02d} ".ljust(NOTE_CHARS, "n") for i in range(NOTES)]
        yield frame("bye", worker=worker, seq=seq, status="exited", notes=notes)


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


class Sender:
    """This side of the flood: DEALERs holding the endpoint's keys, each speaking for the
    workers it likes, and the driver asked until it has accounted for what they sent."""

    def __init__(self, driver: Driver, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
        self.driver, self.ctx = driver, ctx

    def socket(self) -> zmq.Socket[bytes]:
        return dealer(self.ctx, self.driver.start["endpoint"], send_hwm=SEND_HWM, linger_ms=0)

    def one(self, frames: Iterable[bytes], counted: Callable[[dict], int], n: int) -> None:
        """Send `frames` over one connection (blocking at SEND_HWM frames queued), then wait
        until counted(driver status) reaches n."""
        sock = self.socket()
        try:
            for data in frames:
                sock.send(data)
            self.driver.until(lambda s: counted(s) >= n)
        finally:
            sock.close(0)

    def each(self, n: int, frames_of: Callable[[int], Iterable[bytes]],
             counted: Callable[[dict], int], per: int = 1) -> None:
        """Connection k of n sends frames_of(k), BATCH connections at a time (under the
        driver's connection ceiling), each closed once the driver has counted its `per`."""
        for first in range(0, n, BATCH):
            batch = [self.socket() for _ in range(min(BATCH, n - first))]
            try:
                for k, sock in enumerate(batch, first):
                    for data in frames_of(k):
                        sock.send(data)
                target = (first + len(batch)) * per
                self.driver.until(lambda s, target=target: counted(s) >= target)
            finally:
                for sock in batch:
                    sock.close(0)

    def pongs(self, wid: str, t1: int) -> int:
        """A worker of another host answering the driver's pings with an absurd time; the
        pongs it sent."""
        sock = self.socket()
        sent = 0
        try:
            sock.send(hello(wid, host="otherhost", sidecar_pid=43, boot_id="another-boot"))
            while sent < PONGS and sock.poll(30_000 if sent == 0 else 1_000):
                ping = protocol.decode_frame(sock.recv())
                if ping.kind == protocol.PING:
                    sent += 1
                    sock.send(frame("pong", worker=wid, seq=sent, id=ping.body["id"],
                                    t0=ping.body["t0"], t1=t1))
            self.driver.until(lambda s: s["received"].get(wid, 0) >= 1 + sent)
        finally:
            sock.close(0)
        return sent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nofile", type=int, default=0, help="the driver's RLIMIT_NOFILE")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply the counts of the key holder's attacks (not their sizes)")
    ap.add_argument("--byes", type=int, default=BYES,
                    help="byes each bye-notes worker says (before --scale)")
    args = ap.parse_args()

    def scaled(n: int) -> int:
        return max(1, round(n * args.scale))

    driver = Driver(args.nofile)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    send = Sender(driver, ctx)
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

    def counted(get: Callable[[dict], int]) -> Callable[[dict], int]:
        """How much get(driver status) has grown since now."""
        before = get(driver.ask())
        return lambda s: get(s) - before

    def frames(s: dict) -> int:
        return int(s["frames"])

    def bad_frames(s: dict) -> int:
        return int(s["bad"])

    frames_before = [0]

    def flood(make: Callable[[str], bytes], tag: str) -> Callable[[], None]:
        def run() -> None:
            for n in range(CONNS):
                sock = dealer(ctx, driver.start["endpoint"], send_hwm=0, linger_ms=0)
                socks.append(sock)
                wid = f"{tag}:{n}:1"
                sock.send(hello(wid))
                data = make(wid)
                for _ in range(FRAMES):
                    sock.send(data, zmq.NOBLOCK, copy=False)  # one buffer, sent FRAMES times
        return run

    saved: dict = {}
    try:
        # First, while the record is small enough that a timeline() of it is quick to save.
        pongs: list[int] = []

        def absurd_pongs() -> None:
            pongs.extend(send.pongs(f"pong{k}:42:43", t1) for k, t1 in enumerate(PONG_TIMES))
            saved.update(driver.ask("save"))
        phase("absurd pongs", "", absurd_pongs, lambda s: True)
        rows[0] = (rows[0][0], f"{sum(pongs)} pongs of {len(pongs)}", *rows[0][2:])

        phase("frames at the cap", f"{CONNS} x {FRAMES} x 1 MiB", flood(spans_frame, "spans"),
              lambda s: s["frames"] >= CONNS * (FRAMES + 1) + len(pongs) + sum(pongs))
        frames_before[0] = driver.ask()["bad"]
        phase("empty lists", f"{CONNS} x {FRAMES} x 1 MiB", flood(empty_lists_frame, "empties"),
              lambda s: s["bad"] >= frames_before[0] + CONNS * FRAMES)

        def multipart() -> None:
            for sock in socks[:CONNS]:
                sock.send_multipart([b"x" * 1000] * 50)
        bad = driver.ask()["bad"]
        phase("multipart", f"{CONNS} x 50 parts", multipart, lambda s: s["bad"] >= bad + CONNS)

        jobs = scaled(JOB_NAMES)
        got = counted(frames)
        phase("job names", f"{jobs} x 1 MB names",
              lambda: send.one(job_names("names:1:2", jobs), got, jobs + 1),
              lambda s: got(s) >= jobs + 1)

        ids = scaled(LONG_IDS)
        got = counted(bad_frames)
        long_id = "x" * LONG_ID_CHARS
        phase("long worker ids", f"{ids} x 500 KB ids",
              lambda: send.one(samples(lambda k: f"{long_id}{k}:1:2", ids), got, ids),
              lambda s: got(s) >= ids)

        boots = scaled(BOOT_IDS)
        got = counted(bad_frames)
        boot_id = "b" * BOOT_ID_CHARS
        phase("boot ids", f"{boots} x 500 KB, 1 each",
              lambda: send.each(boots, lambda k: [hello(f"boot:{k}:2", boot_id=boot_id)], got),
              lambda s: got(s) >= boots)

        trees = scaled(TREES)
        got = counted(frames)
        phase("tree samples", f"{trees} x {TREE_SIZE:,} keys",
              lambda: send.each(trees, lambda k: tree_sample(f"tree:{k}:2"), got, per=2),
              lambda s: got(s) >= 2 * trees)

        n_byes = scaled(args.byes)
        got = counted(frames)
        phase("bye notes", f"{BYE_WORKERS} x {n_byes} x 1 MiB",
              lambda: send.each(BYE_WORKERS, lambda k: byes(f"bye:{k}:2", n_byes), got,
                                per=n_byes + 1),
              lambda s: got(s) >= BYE_WORKERS * (n_byes + 1))

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

        # Last: once max_workers are in, every new worker is refused, a real one too.
        past = scaled(PAST)
        fill = driver.start["max_workers"] - driver.ask()["workers"]
        got_in = counted(lambda s: int(s["workers"]))

        def past_max_workers() -> None:
            for s in raw:  # the driver hung up most already; the rest would be in the way
                s.close()
            raw.clear()
            send.each(fill, lambda k: [hello(f"fill:{k}:2")], got_in)
            refused = counted(lambda s: int(s["refused"]["workers"] + s["refused"]["identity"]))
            # All but the first refused: past max_workers, or, where the first made room
            # (workers of the earlier phases, gone for stale_after), for the connection
            # speaking for that first id only.
            send.one(samples(lambda k: f"past:{k}:2", past), refused, past - 1)
        phase("past max_workers", f"{fill} + {past} new ids", past_max_workers,
              lambda s: True)

        # A day of short-lived workers: each says hello and bye over a connection of its own,
        # then closes it; twice max_workers of them, so the driver must let go of gone ones.
        # First the fill's workers go stale (silent for stale_after, their connections
        # closed): until then they hold their slots.
        driver.until(lambda s: s["stale"] >= fill)
        churn = 2 * driver.start["max_workers"]
        got = counted(lambda s: int(s["byes"]))
        phase("churn", f"{churn} workers", lambda: send.each(
            churn, lambda k: [hello(f"churn:{k}:2"), frame("bye", worker=f"churn:{k}:2", seq=1)],
            got), lambda s: got(s) >= churn)
        phase("real job again", "1 heavy job", real_job, lambda s: s["jobs"] >= 2)
    finally:
        for s in raw:
            s.close()
        for sock in socks:
            sock.close(0)
        ctx.term()
        closed = driver.close()

    print()
    print(f"{'phase':<18} {'sent':<21} {'s':>6} {'RSS +MiB':>9} {'peak +MiB':>10} {'fds':>5}  "
          "refused")
    for name, sent, seconds, s in rows:
        refused_now = ", ".join(f"{k} {v}" for k, v in s["refused"].items() if v)
        print(f"{name:<18} {sent:<21} {seconds:6.1f} {mib(s['VmRSS'] - base):>9} "
              f"{mib(s['VmHWM'] - base):>10} {s['fds']:>5}  {refused_now}; bad {s['bad']}"
              f"{'; let go ' + str(s['let_go']) if s.get('let_go') else ''}")
    save = (f"saved as .wsc ({saved['saved']:,} B, {saved['loaded']} workers loaded back)"
            if "saved" in saved else f"its save failed: {saved.get('save_error')}")
    print(f"\nafter the absurd pongs: clock offsets {saved.get('offsets')}, the timeline {save}; "
          f"close() at the end: {closed}")
    peak = rows[-1][3]["VmHWM"] - base
    print(f"peak growth {mib(peak)} MiB of a memory_ceiling of "
          f"{mib(driver.start['ceiling'])} MiB ({100 * peak / driver.start['ceiling']:.0f}%); "
          f"the real job arrived; CPU of an idle second after it: {idle_cpu:.2f} s")


if __name__ == "__main__":
    main()
