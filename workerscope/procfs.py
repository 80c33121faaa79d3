"""Every reader and writer of /proc the product has, shared by the sidecar, light mode and the
driver (no psutil: light mode's import stays cheap). `pid` may be an int or "self"."""

from __future__ import annotations

import os
from typing import NamedTuple

_IO_FIELDS = {b"read_bytes": "read_bytes", b"write_bytes": "write_bytes", b"rchar": "read_chars",
              b"wchar": "write_chars"}
_new = tuple.__new__


class Stat(NamedTuple):
    """The fields of a /proc/PID/stat text the product reads every tick (proc(5) numbers them
    from 1). Every kernel since 2.6 writes them; fields after them come and go with kernel
    versions (exit_code, 52, since 3.5: see parse_stat_exit) and are not needed here."""

    comm: bytes  # 2, without its parentheses: may hold anything, spaces and ")" included
    state: bytes  # 3: b"R", b"S", b"Z", ...
    utime: int  # 14-17: CPU times in clock ticks; cutime and cstime are the reaped
    stime: int  # children's, which the kernel adds to their parent's
    cutime: int
    cstime: int
    num_threads: int  # 20
    starttime: int  # 22: clock ticks after boot
    vsize: int  # 23: bytes mapped; 0 once a dying process has let its memory go
    rss: int  # 24: pages
    minflt: int  # 10: minor faults (pages touched): a rise means memory was touched since


class Io(NamedTuple):
    """Character and storage IO of a /proc/PID/io text, in bytes; None where the file does not
    have the field (kernels without task IO accounting lack the storage ones)."""

    read_chars: int | None
    write_chars: int | None
    read_bytes: int | None
    write_bytes: int | None


def parse_stat(data: bytes) -> Stat | None:
    """The fields of a /proc/PID/stat text; None for one without them all (empty: the process
    is gone; cut short; not a stat text), never an error."""
    # comm (field 2) may hold spaces and parentheses: the fields start after the last ")".
    end = data.rfind(b")")
    start = data.find(b"(")
    if start < 0 or end < start:
        return None
    f = data[end + 2:].split(b" ", 22)  # as parse_tick's
    if len(f) < 22:
        return None
    try:
        return _new(Stat, (data[start + 1:end], f[0], int(f[11]), int(f[12]), int(f[13]),
                           int(f[14]), int(f[17]), int(f[19]), int(f[20]), int(f[21]),
                           int(f[7])))
    except ValueError:
        return None


# What parse_tick gives, as a plain tuple: a NamedTuple made and read by name per process per
# tick cost ~0.5 us of a 7.5 us read; the tick unpacks these in one go.
IoTick = tuple[int, int, int, int]
Tick = tuple[bytes, bytes, int, int, int, int, int, int, bool, "IoTick | Io", int]


def parse_tick(stat: bytes, io: bytes) -> Tick | None:
    """What every tick reads of one process, from its /proc/PID/stat and /proc/PID/io texts:
    (comm, state, utime, stime, cutime, cstime, num_threads, rss, mapped, io, minflt), mapped being
    vsize != 0, io a plain (read_chars, write_chars, read_bytes, write_bytes) where the text
    has the kernel's order, else parse_io's Io (None where absent: b"" gives all None).
    None where stat lacks its fields, as parse_stat. One call for both: the tick's hot path
    pays ~0.1 us a Python call."""
    end = stat.rfind(b")")
    start = stat.find(b"(")
    if start < 0 or end < start:
        return None
    # One space between fields, as the kernel writes them: a split on it costs a third less
    # than on any whitespace (the last field kept ends with a newline, which int() takes).
    f = stat[end + 2:].split(b" ", 22)
    if len(f) < 22:
        return None
    v = io.split(None, 12)
    try:
        # rchar wchar syscr syscw read_bytes write_bytes ...: every kernel's order since
        # 2.6.20, checked by two names (looking up all costs ~40% more).
        counters: IoTick | Io = ((int(v[1]), int(v[3]), int(v[9]), int(v[11]))
                                 if v[8] == b"read_bytes:" and v[10] == b"write_bytes:"
                                 else parse_io(io))
    except (IndexError, ValueError):
        counters = parse_io(io)
    try:
        # vsize compared as text: it only says whether the memory is still mapped.
        return (stat[start + 1:end], f[0], int(f[11]), int(f[12]), int(f[13]), int(f[14]),
                int(f[17]), int(f[21]), f[20] != b"0", counters, int(f[7]))
    except ValueError:
        return None


_IO_NAMES = (b"rchar:", b"wchar:", b"read_bytes:", b"write_bytes:")


def parse_io(data: bytes) -> Io:
    """The character and storage IO of a /proc/PID/io text, by field name."""
    v = data.split()
    named = dict(zip(v[::2], v[1::2], strict=False))

    def get(key: bytes) -> int | None:
        try:
            return int(named[key])
        except (KeyError, ValueError):
            return None

    return Io(*(get(key) for key in _IO_NAMES))


def io_fields(data: bytes) -> dict[str, int]:
    """Storage and character IO of a /proc/PID/io text, by metric name (absent if missing)."""
    out = {}
    for line in data.split(b"\n"):
        key, _, value = line.partition(b":")
        name = _IO_FIELDS.get(key)
        if name is not None:
            out[name] = int(value)
    return out


def read_io(pid: int | str) -> dict[str, int]:
    """io_fields of /proc/PID/io (PermissionError for others' processes)."""
    with open(f"/proc/{pid}/io", "rb") as f:
        return io_fields(f.read())


def parse_net_dev(data: bytes) -> dict[str, float]:
    """Bytes and packets summed over the interfaces of a /proc/PID/net/dev text."""
    totals = [0, 0, 0, 0]
    for line in data.split(b"\n")[2:]:
        _, _, counters = line.partition(b":")
        cols = counters.split()
        if len(cols) >= 10:
            totals[0] += int(cols[0])  # rx bytes
            totals[1] += int(cols[1])  # rx packets
            totals[2] += int(cols[8])  # tx bytes
            totals[3] += int(cols[9])  # tx packets
    return {"net_recv_bytes": totals[0], "net_recv_packets": totals[1],
            "net_sent_bytes": totals[2], "net_sent_packets": totals[3]}


def read_net_dev(pid: int | str) -> dict[str, float] | None:
    """parse_net_dev of pid's network namespace; None if unreadable."""
    try:
        with open(f"/proc/{pid}/net/dev", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return parse_net_dev(data)


_CHUNK = 1 << 16


def pread_all(fd: int) -> bytes:
    """The whole text of a /proc (or cgroup) file held open, read again from offset 0: the
    kernel writes it anew, so a file opened once is read each tick for a syscall, where an
    open, read and close cost three. OSError as os.pread's."""
    data = os.pread(fd, _CHUNK, 0)
    while data and len(data) % _CHUNK == 0:  # a host with hundreds of cores
        more = os.pread(fd, _CHUNK, len(data))
        if not more:
            break
        data += more
    return data


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


def catches(pid: int | str, sig: int) -> bool | None:
    """Whether process `pid` has a handler for signal `sig` now (the SigCgt mask of
    /proc/PID/status: a handler from Python or from C alike); None if unreadable."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            data = f.read()
    except OSError:
        return None
    at = data.find(b"\nSigCgt:")
    if at < 0:
        return None
    try:
        mask = int(data[at + 8:data.index(b"\n", at + 1)].strip(), 16)
    except ValueError:
        return None
    return bool(mask >> (sig - 1) & 1)


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


def parse_stat_exit(data: bytes) -> tuple[str, int, int | None]:
    """(state, start time in clock ticks after boot, exit_code) from a /proc/PID/stat text.
    exit_code (field 52, Linux 3.5+; None before) is the wait status a zombie holds for its
    parent: what a process that is not the parent can still learn of how it ended. It reads 0
    where the reader may not ptrace the process (another user's)."""
    # comm (field 2) may hold spaces and parentheses: the fields start after the last ")".
    fields = data[data.rfind(b")") + 2:].split()
    code = int(fields[49]) if len(fields) > 49 else None
    return fields[0].decode(), int(fields[19]), code


def read_stat_exit(pid: int | str) -> tuple[str, int, int | None]:
    """parse_stat_exit of /proc/PID/stat (OSError once the process is reaped)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return parse_stat_exit(f.read())


def parse_memory_cgroup(data: bytes, controller: str = "memory") -> tuple[int, str] | None:
    """(1 or 2, path) of a controller's cgroup in a /proc/PID/cgroup text: the cgroup v1 line
    whose controllers include it, else the v2 line (hierarchy 0, no controllers); controller
    "": the v2 line."""
    v2 = None
    for line in data.decode(errors="replace").splitlines():
        _, controllers, path = line.split(":", 2)
        if controller and controller in controllers.split(","):
            return 1, path
        if controllers == "":
            v2 = path
    return None if v2 is None else (2, v2)


def read_memory_cgroup(pid: int | str, controller: str = "memory") -> tuple[int, str] | None:
    """parse_memory_cgroup of /proc/PID/cgroup; None if unreadable or gone."""
    try:
        with open(f"/proc/{pid}/cgroup", "rb") as f:
            return parse_memory_cgroup(f.read(), controller)
    except (OSError, ValueError):
        return None


def cgroup_mounts(controller: str = "memory") -> dict[int, tuple[str, str]]:
    """Where this process sees a controller's cgroup hierarchies: {1: (root, mount point)}
    for a v1 mount with the controller, {2: (root, mount point)} for the v2 mount. root is
    the cgroup path shown at the mount point (not "/" in a container without a cgroup
    namespace), so a /proc/PID/cgroup path P is at mount point + P[len(root):]."""
    out: dict[int, tuple[str, str]] = {}
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, point = (_unescape(x) for x in fields[3:5])
        if tail[0] == "cgroup" and controller in tail[2].split(","):
            out.setdefault(1, (root, point))
        elif tail[0] == "cgroup2":
            out.setdefault(2, (root, point))
    return out


def _unescape(field: str) -> str:
    r"""mountinfo writes space, tab, newline and backslash in paths as \040-style octal."""
    if "\\" not in field:
        return field
    import re  # here: light mode imports this module and should not pay for re

    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
