"""Every reader and writer of /proc the product has, shared by the sidecar, light mode and the
driver (no psutil: light mode's import stays cheap). `pid` may be an int or "self"."""

from __future__ import annotations

import os

_IO_FIELDS = {b"read_bytes": "read_bytes", b"write_bytes": "write_bytes", b"rchar": "read_chars",
              b"wchar": "write_chars"}


def read_io(pid: int | str) -> dict[str, int]:
    """Storage and character IO from /proc/PID/io (PermissionError for others' processes)."""
    with open(f"/proc/{pid}/io", "rb") as f:
        lines = f.read().split(b"\n")
    out = {}
    for line in lines:
        key, _, value = line.partition(b":")
        name = _IO_FIELDS.get(key)
        if name is not None:
            out[name] = int(value)
    return out


def read_net_dev(pid: int | str) -> dict[str, float] | None:
    """Bytes and packets summed over the interfaces of pid's network namespace; None if
    unreadable."""
    totals = [0, 0, 0, 0]
    try:
        with open(f"/proc/{pid}/net/dev") as f:
            lines = f.readlines()[2:]
    except OSError:
        return None
    for line in lines:
        _, _, data = line.partition(":")
        cols = data.split()
        if len(cols) >= 10:
            totals[0] += int(cols[0])  # rx bytes
            totals[1] += int(cols[1])  # rx packets
            totals[2] += int(cols[8])  # tx bytes
            totals[3] += int(cols[9])  # tx packets
    return {"net_recv_bytes": totals[0], "net_recv_packets": totals[1],
            "net_sent_bytes": totals[2], "net_sent_packets": totals[3]}


def boot_id() -> str:
    """This boot of this machine: processes that share it share one monotonic clock."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


# Fields of /proc/PID/status the product reads, and their metric names. Vm* values are kB.
STATUS_FIELDS = {
    b"VmHWM": "peak_rss_bytes",
    b"VmRSS": "rss_bytes",
    b"voluntary_ctxt_switches": "ctx_switches_voluntary",
    b"nonvoluntary_ctxt_switches": "ctx_switches_involuntary",
    b"Threads": "num_threads",
}


def parse_status(data: bytes, fields: dict[bytes, str] = STATUS_FIELDS) -> dict[str, int]:
    """The wanted fields of a /proc/PID/status text, kB values in bytes. find() on the few
    fields wanted: parsing all ~55 lines cost twice the read itself."""
    out: dict[str, int] = {}
    for key, name in fields.items():
        i = data.find(b"\n" + key + b":")
        if i >= 0:
            end = data.find(b"\n", i + 1)
            value = int(data[i + len(key) + 2:end].split()[0])
            out[name] = value * 1024 if key.startswith(b"Vm") else value
    return out


def read_status(pid: int | str, fields: dict[bytes, str] = STATUS_FIELDS) -> dict[str, int]:
    """parse_status of /proc/PID/status (OSError if the process is gone)."""
    with open(f"/proc/{pid}/status", "rb") as f:
        return parse_status(f.read(), fields)


def reset_peak(pid: int | str) -> bool:
    """Reset pid's RSS high-water mark (VmHWM) to its current RSS, so a warm worker's next job
    reports its own peak (Lithops #970). This resets it for every tool that reads it
    (ru_maxrss, `/usr/bin/time -v`). False where the kernel or permissions don't allow it."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")  # 5 touches nothing but the peak (see proc(5))
        return True
    except OSError:
        return False


def net_namespace(pid: int | str) -> int | None:
    """The inode of pid's network namespace: two processes with one inode share counters."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None
