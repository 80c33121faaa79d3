"""The worker's process tree: who is in it, and what each member and the whole tree used.

Children are found by reading /proc/PID/task/TID/children of the members we already know,
which costs a few small reads per member; psutil's children(recursive=True) scans all of /proc
instead and dominates the cost on busy hosts. Where that file is missing (kernels without
CONFIG_PROC_CHILDREN), psutil's scan is the fallback.

Readings come straight from /proc/PID/{stat,status,io,fd} (one small read each, where psutil
makes several per value), keeping each member's previous reading for its whole life: a fresh
reader per tick would lose the CPU times that cpu_percent needs (psrecord #47). psutil is used
for USS/PSS (smaps) and where /proc/PID/task/TID/children is missing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import psutil

from .. import procfs
from ..procfs import read_io, reset_peak

_HAVE_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")

# Counters that only grow; a member that leaves keeps its share in the tree total.
COUNTERS = ("read_bytes", "write_bytes", "read_chars", "write_chars",
            "ctx_switches_voluntary", "ctx_switches_involuntary")
# Like CPU times, the kernel adds a reaped child's IO to its parent's /proc/PID/io (but not its
# context switches), so these are carried only when no member of the tree reaps the process.
FOLDED_INTO_REAPER = frozenset({"read_bytes", "write_bytes", "read_chars", "write_chars"})
_STATUS_FIELDS = {k: v for k, v in procfs.STATUS_FIELDS.items() if k != b"VmRSS"}


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


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _stat(pid: int) -> tuple[float, float, float, float, int, int, int]:
    """From /proc/PID/stat: user, system, children's user and system seconds, rss bytes,
    start time (ticks since boot: tells a reused pid apart) and parent pid. One read where
    psutil makes several."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    rest = data[data.rindex(b")") + 2:].split()
    tick = _TICK
    return (int(rest[11]) / tick, int(rest[12]) / tick, int(rest[13]) / tick,
            int(rest[14]) / tick, int(rest[21]) * _PAGE, int(rest[19]), int(rest[1]))


def _name(pid: int) -> str:
    with open(f"/proc/{pid}/comm", "rb") as f:
        return f.read().decode(errors="replace").strip()


@dataclass
class Member:
    ppid: int
    name: str
    start: int  # start time in ticks since boot: the same pid later is another process
    proc: psutil.Process | None = None  # only for USS/PSS, which need smaps
    # Last readings, kept so a member that vanishes still counts in the tree totals.
    cpu_user: float = 0.0
    cpu_system: float = 0.0
    own_cpu: float | None = None
    counters: dict[str, float] = field(default_factory=dict)
    uss: tuple[float, float] | None = None  # (uss, pss) of the last full memory reading
    t: int | None = None
    uss_t: int = 0


@dataclass
class ProcessTree:
    """Members of the tree rooted at `root`, leaving out `exclude` (the sidecar itself)."""

    root: int
    exclude: frozenset[int] = frozenset()
    # uss/pss need /proc/PID/smaps_rollup, ~150 us a process: read them at most this often.
    uss_every_ns: int = 1_000_000_000
    # CPU times move in clock ticks (10 ms): a rate over a shorter gap (the extra samples at a
    # job's start and end) would read 0 % or a spike. Such a sample has no cpu_percent, and the
    # next one measures over the whole longer gap.
    min_rate_ns: int = 50_000_000
    members: dict[int, Member] = field(default_factory=dict)
    # CPU and counters of members that left the tree without being reaped into a member's
    # children-times (reparented away, or the root itself gone): kept so totals never fall.
    carried_user: float = 0.0
    carried_system: float = 0.0
    carried: dict[str, float] = field(default_factory=dict)
    last_cpu_total: float = 0.0
    last_t: int | None = None
    peak_rss: int = 0
    last_counters: dict[str, float] = field(default_factory=dict)
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
        else:  # pragma: no cover - kernels without CONFIG_PROC_CHILDREN
            seen = {}
            try:
                rootp = psutil.Process(self.root)
                seen[self.root] = 0
                seen.update((k.pid, 0) for k in rootp.children(recursive=True))
            except psutil.Error:
                seen = {}  # the root is gone: the tree is empty
            for pid in self.exclude:
                seen.pop(pid, None)
        new = []
        for pid, ppid in seen.items():
            if pid in self.members:
                continue
            try:
                stat = _stat(pid)
                name = _name(pid)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue  # exited between the listing and now
            parent = ppid or stat[6]
            self.members[pid] = Member(parent, name, stat[5])
            new.append((pid, parent, name))
        gone = [pid for pid in self.members if pid not in seen]
        for pid in gone:
            self._retire(pid)
        return new, gone

    def _retire(self, pid: int) -> None:
        m = self.members.pop(pid)
        reaped_inside = m.ppid in self.members
        for key, value in m.counters.items():
            if not (reaped_inside and key in FOLDED_INTO_REAPER):
                self.carried[key] = self.carried.get(key, 0) + value
        if not reaped_inside:
            # Nobody in the tree will reap it, so its CPU would vanish from the sum.
            self.carried_user += m.cpu_user
            self.carried_system += m.cpu_system

    def reset_peaks(self) -> None:
        """Start a new job: each member's VmHWM and the tree's peak restart from now."""
        for pid in self.members:
            reset_peak(pid)
        self.peak_rss = 0

    def read(self, now_ns: int) -> tuple[dict[str, float], list[list[Any]]]:
        """One reading of every member and of the tree. Values that can't be read are absent."""
        procs: list[list[Any]] = []
        tree_user = self.carried_user
        tree_system = self.carried_system
        sums: dict[str, float] = {"rss_bytes": 0, "num_threads": 0, "peak_rss_bytes": 0}
        counter_ok = {k: True for k in COUNTERS}
        uss_ok = True
        sums_uss = [0.0, 0.0]
        fds_ok, fds = True, 0
        vanished = []
        for pid, m in self.members.items():
            values: dict[str, float] = {}
            try:
                user, system, c_user, c_system, rss, start, _ = _stat(pid)
                status = procfs.read_status(pid, _STATUS_FIELDS)
            except (FileNotFoundError, ProcessLookupError):
                vanished.append(pid)
                continue
            except PermissionError:
                self.unreadable.add(pid)
                continue
            if start != m.start:  # the pid now belongs to another process
                vanished.append(pid)
                continue
            own = user + system
            if m.own_cpu is None or m.t is None:
                m.own_cpu, m.t = own, now_ns
            elif now_ns - m.t >= self.min_rate_ns:
                values["cpu_percent"] = (own - m.own_cpu) / ((now_ns - m.t) / 1e9) * 100.0
                m.own_cpu, m.t = own, now_ns
            m.cpu_user = user + c_user
            m.cpu_system = system + c_system
            values["cpu_user_s"] = user
            values["cpu_system_s"] = system
            values["rss_bytes"] = rss
            values.update(status)
            try:
                m.counters.update(read_io(pid))
            except (PermissionError, FileNotFoundError, ProcessLookupError) as err:
                if isinstance(err, PermissionError):
                    self.unreadable.add(pid)
                for key in ("read_bytes", "write_bytes", "read_chars", "write_chars"):
                    counter_ok[key] = False
            for key in ("ctx_switches_voluntary", "ctx_switches_involuntary"):
                if key in status:
                    m.counters[key] = status[key]
                else:
                    counter_ok[key] = False
            for key in COUNTERS:
                if key in m.counters:
                    values[key] = m.counters[key]
            try:
                nfds = len(os.listdir(f"/proc/{pid}/fd"))
                values["num_fds"] = nfds
                fds += nfds
            except OSError:
                fds_ok = False
            if now_ns - m.uss_t >= self.uss_every_ns:
                m.uss_t = now_ns
                try:
                    if m.proc is None:
                        m.proc = psutil.Process(pid)
                    full = m.proc.memory_full_info()
                    m.uss = (full.uss, getattr(full, "pss", 0.0))
                except (psutil.Error, OSError):
                    m.uss = None
            if m.uss is not None:
                values["uss_bytes"], values["pss_bytes"] = m.uss
                sums_uss[0] += m.uss[0]
                sums_uss[1] += m.uss[1]
            else:
                uss_ok = False
            tree_user += m.cpu_user
            tree_system += m.cpu_system
            sums["rss_bytes"] += rss
            sums["num_threads"] += status.get("num_threads", 0)
            sums["peak_rss_bytes"] += status.get("peak_rss_bytes", rss)
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
            if self.last_t is None:
                self.last_cpu_total, self.last_t = total, now_ns
            elif now_ns - self.last_t >= self.min_rate_ns:
                seconds = (now_ns - self.last_t) / 1e9
                tree["cpu_percent"] = (total - self.last_cpu_total) / seconds * 100.0
                self.last_cpu_total, self.last_t = total, now_ns
        if procs:
            tree["rss_bytes"] = sums["rss_bytes"]
            tree["num_threads"] = sums["num_threads"]
            # An upper bound: the sum of each member's own peak, and members peak at different
            # times. It never misses a peak that fell between two samples.
            self.peak_rss = max(self.peak_rss, int(sums["peak_rss_bytes"]))
            tree["peak_rss_bytes"] = self.peak_rss
            for key in COUNTERS:
                if counter_ok[key]:
                    total = self.carried.get(key, 0) + sum(
                        m.counters.get(key, 0) for m in self.members.values())
                    # An exited child not yet reaped has left the sum, and its parent's
                    # counters have not grown yet: hold the total until they do.
                    tree[key] = self.last_counters[key] = max(total, self.last_counters.get(key, 0))
            if fds_ok:
                tree["num_fds"] = fds
            if uss_ok:
                tree["uss_bytes"], tree["pss_bytes"] = sums_uss
        if self.unreadable:
            tree["unreadable_procs"] = len(self.unreadable & set(self.members))
        return tree, procs
