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


def memory_dir(pid: int | str,
               mounts: dict[int, tuple[str, str]] | None = None) -> tuple[int, str] | None:
    """(cgroup version, directory) of pid's memory cgroup as this process sees it, or None
    (no memory controller, a cgroup outside what the mounts show, the process gone).
    mounts: procfs.cgroup_mounts(), read once by a caller that looks often."""
    found = procfs.read_memory_cgroup(pid)
    mounts = procfs.cgroup_mounts() if mounts is None else mounts
    if found is None or found[0] not in mounts:
        return None
    version, path = found
    root, point = mounts[version]
    root = root.rstrip("/")
    if root and not (path == root or path.startswith(root + "/")):
        return None  # a cgroup outside what this mount shows
    where = os.path.normpath(os.path.join(point, path[len(root):].lstrip("/")))
    if not os.path.exists(os.path.join(where, FILES[version][0])):
        return None  # v2 without the memory controller here, or hidden
    return version, where


def memory_files(pid: int | str) -> tuple[str | None, str | None]:
    """(limit file, usage file) of pid's memory cgroup, or None where there is none."""
    found = memory_dir(pid)
    if found is None:
        return None, None
    version, where = found
    _, limit, usage, _ = FILES[version]
    return os.path.join(where, limit), os.path.join(where, usage)
