"""Small readers of /proc shared by the sidecar and light mode (no psutil: light mode's import
stays cheap). `pid` may be an int or "self"."""

from __future__ import annotations

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
