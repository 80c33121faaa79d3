"""The worker's process tree: who is in it, and what each member and the whole tree used.

Children are found by reading /proc/PID/task/TID/children of the members we already know,
which costs a few small reads per member; psutil's children(recursive=True) scans all of /proc
instead and dominates the cost on busy hosts. Where that file is missing (kernels without
CONFIG_PROC_CHILDREN, other OSes), psutil's scan is the fallback.

One psutil.Process per pid for its whole life: a new object per tick would lose the CPU times
that cpu_percent needs (psrecord #47).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import psutil

_HAVE_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


@dataclass
class Member:
    proc: psutil.Process
    ppid: int
    name: str
    # Last readings, kept so a member that vanishes still counts in the tree totals.
    cpu_user: float = 0.0
    cpu_system: float = 0.0
    own_cpu: float | None = None
    read_bytes: int = 0
    write_bytes: int = 0
    t: int | None = None


def _children_of(pid: int) -> list[int] | None:
    """Direct children of pid, or None when pid no longer exists."""
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(x) for x in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # that thread ended while we looked
    return kids


@dataclass
class ProcessTree:
    """Members of the tree rooted at `root`, leaving out `exclude` (the sidecar itself)."""

    root: int
    exclude: frozenset[int] = frozenset()
    members: dict[int, Member] = field(default_factory=dict)
    # CPU and IO of members that left the tree without being reaped into a member's
    # children-times (reparented away, or the root itself gone): kept so totals never fall.
    carried_user: float = 0.0
    carried_system: float = 0.0
    carried_read: int = 0
    carried_write: int = 0
    last_cpu_total: float = 0.0
    last_t: int | None = None
    unreadable: set[int] = field(default_factory=set)

    def discover(self) -> tuple[list[tuple[int, int, str]], list[int]]:
        """Refresh membership. Returns (new members as (pid, ppid, name), pids gone)."""
        if _HAVE_CHILDREN_FILE:
            # Walk from the root and from every known member: a member whose parent exited
            # (reparented to init or a subreaper) is still part of the job.
            seen: dict[int, int] = {}
            stack = [(self.root, 0)] + [(pid, m.ppid) for pid, m in self.members.items()]
            while stack:
                pid, ppid = stack.pop()
                if pid in seen or pid in self.exclude:
                    continue
                kids = _children_of(pid)
                if kids is None:
                    continue
                seen[pid] = ppid
                stack.extend((kid, pid) for kid in kids)
        else:  # pragma: no cover - exercised on non-Linux only
            seen = {}
            try:
                rootp = psutil.Process(self.root)
                seen[self.root] = 0
                for kid in rootp.children(recursive=True):
                    if kid.pid not in self.exclude:
                        seen[kid.pid] = 0
            except psutil.Error:
                pass  # the root is gone: the tree is empty
        new = []
        for pid, ppid in seen.items():
            if pid in self.members:
                continue
            try:
                proc = psutil.Process(pid)
                name = proc.name()
                ppid = ppid or proc.ppid()
            except psutil.Error:
                continue  # exited between the listing and now
            self.members[pid] = Member(proc, ppid, name)
            new.append((pid, ppid, name))
        gone = [pid for pid in self.members if pid not in seen]
        for pid in gone:
            self._retire(pid)
        return new, gone

    def _retire(self, pid: int) -> None:
        m = self.members.pop(pid)
        self.carried_read += m.read_bytes
        self.carried_write += m.write_bytes
        if m.ppid not in self.members:
            # Nobody in the tree will reap it, so its CPU would vanish from the sum.
            self.carried_user += m.cpu_user
            self.carried_system += m.cpu_system

    def read(self, now_ns: int) -> tuple[dict[str, float], list[list]]:
        """One reading of every member and of the tree. Values that can't be read are absent."""
        procs: list[list] = []
        tree_user = self.carried_user
        tree_system = self.carried_system
        tree_read = self.carried_read
        tree_write = self.carried_write
        rss = 0
        threads = 0
        io_ok = True
        vanished = []
        for pid, m in self.members.items():
            values: dict[str, float] = {}
            try:
                with m.proc.oneshot():
                    ct = m.proc.cpu_times()
                    mem = m.proc.memory_info()
                    values["num_threads"] = m.proc.num_threads()
                    try:
                        io = m.proc.io_counters()
                    except (psutil.AccessDenied, AttributeError):
                        io = None
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                vanished.append(pid)
                continue
            except psutil.AccessDenied:
                self.unreadable.add(pid)
                continue
            own = ct.user + ct.system
            if m.own_cpu is not None and m.t is not None and now_ns > m.t:
                values["cpu_percent"] = (own - m.own_cpu) / ((now_ns - m.t) / 1e9) * 100.0
            m.own_cpu, m.t = own, now_ns
            m.cpu_user = ct.user + ct.children_user
            m.cpu_system = ct.system + ct.children_system
            values["cpu_user_s"] = ct.user
            values["cpu_system_s"] = ct.system
            values["rss_bytes"] = mem.rss
            tree_user += m.cpu_user
            tree_system += m.cpu_system
            rss += mem.rss
            threads += values["num_threads"]
            if io is not None:
                m.read_bytes, m.write_bytes = io.read_bytes, io.write_bytes
                values["read_bytes"] = io.read_bytes
                values["write_bytes"] = io.write_bytes
            else:
                io_ok = False
            tree_read += m.read_bytes
            tree_write += m.write_bytes
            procs.append([pid, values])
        for pid in vanished:
            self._retire(pid)
        tree: dict[str, float] = {}
        if procs or self.carried_user or self.carried_system:
            # Totals never fall: a member reaped outside the tree keeps its share in `carried`.
            total = max(tree_user + tree_system, self.last_cpu_total)
            tree["cpu_user_s"] = tree_user
            tree["cpu_system_s"] = total - tree_user
            tree["num_procs"] = len(procs)
            if self.last_t is not None and now_ns > self.last_t:
                seconds = (now_ns - self.last_t) / 1e9
                tree["cpu_percent"] = (total - self.last_cpu_total) / seconds * 100.0
            self.last_cpu_total, self.last_t = total, now_ns
        if procs:
            tree["rss_bytes"] = rss
            tree["num_threads"] = threads
            if io_ok:
                tree["read_bytes"] = tree_read
                tree["write_bytes"] = tree_write
        return tree, procs
