"""A process's memory cgroup, found where this process sees it mounted, for every reader (the
host's limit and usage in samples, the OOM evidence at a death): one lookup, so both name the
same cgroup in a mount namespace that mounts the hierarchy elsewhere."""

from __future__ import annotations

import os

from . import procfs

UNLIMITED = 1 << 60  # cgroup v1 writes a huge number for "no limit"
# Per cgroup version: (OOM-kill counter, limit, usage, peak) files.
FILES = {
    1: ("memory.oom_control", "memory.limit_in_bytes", "memory.usage_in_bytes",
        "memory.max_usage_in_bytes"),
    2: ("memory.events", "memory.max", "memory.current", "memory.peak"),
}


def int_or_none(text: bytes) -> int | None:
    """A cgroup file's number; None for "max", "no limit", or anything else."""
    text = text.strip()
    if not text or text == b"max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= UNLIMITED else value


def read_int(path: str) -> int | None:
    """int_or_none of a file; None where it is missing or unreadable."""
    try:
        with open(path, "rb") as f:
            return int_or_none(f.read())
    except OSError:
        return None


def controller_dir(pid: int | str, controller: str, probe: str,
                   mounts: dict[int, tuple[str, str]] | None = None,
                   found: tuple[int, str] | None = None) -> tuple[int, str] | None:
    """(cgroup version, directory) of pid's cgroup of one controller as this process sees it,
    or None (no such controller, a cgroup outside what the mounts show, the process gone).
    probe: a file the directory has where the controller is there (v2 lists every cgroup, with
    or without the controller); mounts: procfs.cgroup_mounts(controller), read once by a
    caller that looks often; found: procfs.read_memory_cgroup(pid, controller), read already."""
    found = procfs.read_memory_cgroup(pid, controller) if found is None else found
    mounts = procfs.cgroup_mounts(controller) if mounts is None else mounts
    if found is None or found[0] not in mounts:
        return None
    version, path = found
    root, point = mounts[version]
    root = root.rstrip("/")
    if root and not (path == root or path.startswith(root + "/")):
        return None  # a cgroup outside what this mount shows
    where = os.path.normpath(os.path.join(point, path[len(root):].lstrip("/")))
    if not os.path.exists(os.path.join(where, probe)):
        return None  # v2 without the controller here, or hidden
    return version, where


def memory_dir(pid: int | str,
               mounts: dict[int, tuple[str, str]] | None = None) -> tuple[int, str] | None:
    """(cgroup version, directory) of pid's memory cgroup (controller_dir)."""
    found = procfs.read_memory_cgroup(pid)
    if found is None:
        return None
    return controller_dir(pid, "memory", FILES[found[0]][0], mounts, found)


def inactive_file(where: str, version: int) -> int:
    """A memory cgroup's inactive page cache (memory.stat), 0 if unreadable: what the kernel
    reclaims first, so usage less this is the working set its OOM heuristics count."""
    key = b"inactive_file " if version == 2 else b"total_inactive_file "
    try:
        with open(os.path.join(where, "memory.stat"), "rb") as f:
            for line in f:
                if line.startswith(key):
                    return int(line[len(key):])
    except (OSError, ValueError):
        return 0
    return 0


# The CPU controller's throttling counters: v1's cpu.stat counts nanoseconds, v2's microseconds.
CPU_THROTTLED = {1: (b"throttled_time", 1e9), 2: (b"throttled_usec", 1e6)}
PRESSURE = ("cpu", "memory", "io")  # v2's RESOURCE.pressure files, as /proc/pressure/RESOURCE


def cpu_dir(pid: int | str) -> tuple[int, str] | None:
    """(version, directory) of pid's CPU cgroup, where it has cpu.stat."""
    return controller_dir(pid, "cpu", "cpu.stat")


def parse_cpu_stat(data: bytes, version: int) -> dict[str, float]:
    """Throttling in a cpu.stat text: cgroup_cpu_throttled_s (time its tasks could not run
    because the cgroup's quota was spent), cgroup_cpu_throttled_periods and cgroup_cpu_periods
    (enforcement periods, throttled and all); absent where the file lacks them."""
    out: dict[str, float] = {}
    key, per_s = CPU_THROTTLED[version]
    for line in data.split(b"\n"):
        name, _, value = line.partition(b" ")
        try:
            if name == key:
                out["cgroup_cpu_throttled_s"] = int(value) / per_s
            elif name == b"nr_throttled":
                out["cgroup_cpu_throttled_periods"] = int(value)
            elif name == b"nr_periods":
                out["cgroup_cpu_periods"] = int(value)
        except ValueError:
            continue
    return out


def parse_pressure(data: bytes) -> tuple[float | None, float | None]:
    """(some, full) of a PSI text, in seconds since boot (or the cgroup's birth): the time at
    least one task (some), or every task (full), stalled on the resource."""
    some = full = None
    for line in data.split(b"\n"):
        kind, _, rest = line.partition(b" ")
        i = rest.find(b"total=")
        if i < 0:
            continue
        try:
            total = int(rest[i + 6:].split()[0]) / 1e6
        except (IndexError, ValueError):
            continue
        if kind == b"some":
            some = total
        elif kind == b"full":
            full = total
    return some, full


def memory_files(pid: int | str) -> tuple[str | None, str | None]:
    """(limit file, usage file) of pid's memory cgroup, or None where there is none."""
    found = memory_dir(pid)
    if found is None:
        return None, None
    version, where = found
    _, limit, usage, _ = FILES[version]
    return os.path.join(where, limit), os.path.join(where, usage)
