"""Light mode: counters read at a job's start and end, no extra process, a flat stats dict.

Everything comes from a few small /proc reads (no psutil objects, no threads), so a job pays
tens of microseconds. With an endpoint, the stats go to the driver as the job's end frame,
through one non-blocking socket per worker process.
"""

from __future__ import annotations

import atexit
import os
import resource
import socket
import threading
import time
from typing import Any

from . import protocol, spans
from .config import Config


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _cores() -> list[tuple[int, int]] | None:
    """(busy, total) jiffies per core from /proc/stat."""
    data = _read("/proc/stat")
    if data is None:
        return None
    out = []
    for line in data.split(b"\n"):
        if line.startswith(b"cpu") and line[3:4].isdigit():
            v = [int(x) for x in line.split()[1:]]
            idle = v[3] + (v[4] if len(v) > 4 else 0) + (v[7] if len(v) > 7 else 0)
            total = sum(v[:8])
            out.append((total - idle, total))
    return out


def _status() -> dict[bytes, int]:
    data = _read("/proc/self/status") or b""
    out = {}
    for line in data.split(b"\n"):
        key, _, rest = line.partition(b":")
        if key in (b"VmHWM", b"VmRSS"):
            out[key] = int(rest.split()[0]) * 1024
    return out


def _io() -> dict[str, int]:
    data = _read("/proc/self/io") or b""
    out = {}
    for line in data.split(b"\n"):
        key, _, value = line.partition(b":")
        if key in (b"read_bytes", b"write_bytes", b"rchar", b"wchar"):
            out[key.decode()] = int(value)
    return out


def _net() -> tuple[int, int] | None:
    """(sent, received) bytes over all interfaces of this network namespace."""
    data = _read("/proc/self/net/dev")
    if data is None:
        return None
    sent = recv = 0
    for line in data.split(b"\n")[2:]:
        cols = line.partition(b":")[2].split()
        if len(cols) >= 9:
            recv += int(cols[0])
            sent += int(cols[8])
    return sent, recv


def _reset_peak() -> bool:
    """Reset the kernel's RSS high-water mark so a warm worker reports this job's own peak."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Reading:
    __slots__ = ("wall", "times", "io", "net", "cores", "children_maxrss")

    def __init__(self) -> None:
        self.times = os.times()
        self.io = _io()
        self.net = _net()
        self.cores = _cores()
        self.children_maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        self.wall = time.perf_counter()


def stats(start: Reading, end: Reading, peak_reset: bool) -> dict[str, float]:
    """The job's flat stats. Keys absent where a value could not be read."""
    wall = end.wall - start.wall
    t0, t1 = start.times, end.times
    out: dict[str, float] = {
        "wall_s": wall,
        "cpu_user_s": t1.user - t0.user,
        "cpu_system_s": t1.system - t0.system,
        "children_cpu_user_s": t1.children_user - t0.children_user,
        "children_cpu_system_s": t1.children_system - t0.children_system,
    }
    total = sum(out[k] for k in ("cpu_user_s", "cpu_system_s", "children_cpu_user_s",
                                 "children_cpu_system_s"))
    if wall > 0:
        out["cpu_percent"] = total / wall * 100.0
    if start.cores and end.cores and len(start.cores) == len(end.cores):
        pcts = []
        for k, ((b0, n0), (b1, n1)) in enumerate(zip(start.cores, end.cores)):
            pct = 100.0 * (b1 - b0) / (n1 - n0) if n1 > n0 else 0.0
            out[f"host_cpu_percent_core{k}"] = pct
            pcts.append(pct)
        out["host_cpu_percent"] = sum(pcts) / len(pcts)
    for key, name in (("read_bytes", "read_bytes"), ("write_bytes", "write_bytes"),
                      ("rchar", "read_chars"), ("wchar", "write_chars")):
        if key in start.io and key in end.io:
            out[name] = end.io[key] - start.io[key]
    if start.net and end.net:
        out["host_net_sent_bytes"] = end.net[0] - start.net[0]
        out["host_net_recv_bytes"] = end.net[1] - start.net[1]
    status = _status()
    if b"VmRSS" in status:
        out["rss_bytes"] = status[b"VmRSS"]
    if b"VmHWM" in status and peak_reset:
        out["peak_rss_bytes"] = status[b"VmHWM"]
    if end.children_maxrss > start.children_maxrss:
        # ru_maxrss of reaped children is a lifetime maximum (KiB): only a rise is this job's.
        out["children_peak_rss_bytes"] = end.children_maxrss * 1024
    return out


class _Sender:
    """One non-blocking socket per worker process for light-mode stats."""

    def __init__(self, config: Config) -> None:
        from .sidecar.outbox import Outbox  # zmq only for those who asked for an endpoint

        self.config = config
        host = socket.gethostname()
        prefix = f"{config.node}/" if config.node else ""
        self.worker = f"{prefix}{host}:{os.getpid()}:light"
        self.outbox = Outbox(config.endpoint or "")
        self.seq = -1
        self.send(protocol.HELLO, {"host": host, "node": config.node, "pid": os.getpid(),
                                   "anchor": [time.time_ns(), time.monotonic_ns()],
                                   "mode": "light"})

    def send(self, kind: str, body: dict[str, Any]) -> None:
        self.seq += 1
        self.outbox.send(protocol.encode_frame(kind, self.worker, self.seq, body))

    def close(self) -> None:
        self.send(protocol.BYE, {"t": time.monotonic_ns(), "status": "exited",
                                 "dropped": self.outbox.dropped})
        self.outbox.wait_ack(self.seq, self.config.bye_timeout)
        self.outbox.close()


_senders: dict[tuple, _Sender] = {}
_lock = threading.Lock()


def _sender(config: Config) -> _Sender:
    key = (config.endpoint, config.node)
    with _lock:
        s = _senders.get(key)
        if s is None:
            s = _senders[key] = _Sender(config)
        return s


def _close_senders() -> None:
    for s in list(_senders.values()):
        s.close()
    _senders.clear()


def _forget_after_fork() -> None:
    # The parent's sockets and zmq context must not be used in a forked child.
    global _lock
    _senders.clear()
    _lock = threading.Lock()


atexit.register(_close_senders)
os.register_at_fork(after_in_child=_forget_after_fork)


def run(wrapper: Any, config: Config, args: tuple, kwargs: dict) -> Any:
    """Call wrapper.fn under light mode; its stats land in wrapper.last_stats."""
    sender = _sender(config) if config.endpoint else None
    job = spans.next_id()
    name = getattr(wrapper.fn, "__qualname__", None) or repr(wrapper.fn)
    if sender is not None:
        sender.send(protocol.JOB_START, {"job": job, "name": name, "t": time.monotonic_ns(),
                                         "pid": os.getpid(), "tid": threading.get_native_id()})
    peak_reset = _reset_peak()
    start = Reading()
    status, error = "ok", None
    try:
        return wrapper.fn(*args, **kwargs)
    except BaseException as exc:
        status, error = "error", type(exc).__qualname__
        raise
    finally:
        wrapper.last_stats = stats(start, Reading(), peak_reset)
        if sender is not None:
            sender.send(protocol.JOB_END, {"job": job, "t": time.monotonic_ns(), "status": status,
                                           "error": error, "stats": wrapper.last_stats})
