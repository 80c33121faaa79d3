"""Naming a worker's death: what the sidecar reads when the worker's pipe hits EOF.

The sidecar is not the worker's parent and cannot wait() on it. What it can still read:
- the exit status, from /proc/PID/stat's exit_code while the worker is a zombie (until its
  parent reaps it): killed by which signal, or exited with which status;
- the OOM-kill counter of the worker's memory cgroup (v1 `memory.oom_control`, v2
  `memory.events`), first read in each job (and for each cgroup the worker is seen in), read
  again after the death: a rise means the kernel's OOM killer killed a process of that cgroup.
  With it go the cgroup's limit, usage and peak, and the worker's last RSS from the samples;
- the kernel log (/dev/kmsg) where it is readable, whose OOM record names the pid killed.
See docs/METRICS.md, "How a worker's death is named".
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from typing import Any, NamedTuple

from .. import cgroup, procfs
from ..protocol import Status
from ..units import fmt_signal

# How long to wait after EOF for the worker to become a zombie: its files close just before.
ZOMBIE_WAIT_S = 0.2
# Bounds on reading the kernel log after a death.
KMSG_MAX_BYTES = 1 << 20
KMSG_MAX_S = 0.05
KERNEL_LOG_CHARS = 300
REAPED = "its parent reaped it before the sidecar could read its exit status"
STILL_RUNNING = f"the worker was still running {ZOMBIE_WAIT_S * 1000:.0f} ms later"
_MIB = 1024 * 1024
_FILES = cgroup.FILES
MAX_XIDS = 16  # the last GPU Xid errors a death record keeps
LIMIT_REREAD_S = 5.0  # a memory cgroup's limit is read again after this long (memory())


class Death(NamedTuple):
    """How the worker died: the open jobs' status and error text, and the figures behind them
    (the job_end frame's `death` map)."""

    status: Status
    error: str
    figures: dict[str, Any]

log = logging.getLogger("workerscope.sidecar")


def _oom_kills(path: str) -> int | None:
    """The `oom_kill N` line of memory.oom_control (v1, Linux 4.13+) or memory.events (v2)."""
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError) as err:
        log.debug("cgroup OOM counter %s unreadable: %s", path, err)
    return None


def _mib(n: float) -> str:
    return f"{n / _MIB:.1f} MiB"


class KernelLog:
    """/dev/kmsg, opened once and kept at the end of the log from each job's start, so that
    after a death only the records written since are read. Often unreadable in containers
    (no /dev/kmsg, or dmesg_restrict without CAP_SYSLOG): `error` then says why."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.error: str | None = None
        try:
            self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as err:
            self.error = f"kernel log unreadable: {err.strerror or err}"

    def skip_to_end(self) -> None:
        if self.fd is not None:
            try:
                os.lseek(self.fd, 0, os.SEEK_END)
            except OSError as err:
                self.error = f"kernel log unreadable: {err.strerror or err}"
                self.close()

    def messages(self) -> list[str]:
        """The records since skip_to_end, bounded in bytes and time."""
        out: list[str] = []
        if self.fd is None:
            return out
        total, deadline = 0, time.monotonic() + KMSG_MAX_S
        while total < KMSG_MAX_BYTES and time.monotonic() < deadline:
            try:
                record = os.read(self.fd, 8192)  # one record per read
            except BlockingIOError:
                break  # read all there is
            except OSError as err:
                if err.errno == errno.EPIPE:
                    continue  # records overwritten before we read them; go on with the rest
                self.error = f"kernel log unreadable: {err.strerror or err}"
                break
            if not record:
                break
            total += len(record)
            # "prio,seq,usec,flags;message\n" then " KEY=value" continuation lines
            _, _, text = record.decode(errors="replace").partition(";")
            out.append(text.split("\n", 1)[0])
        return out

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def find_oom_record(messages: list[str], pid: int) -> str | None:
    """The kernel's line about the OOM kill of pid: "... Killed process PID (name) ..." or
    else "oom-kill:...,task=name,pid=PID,..."; the last such line."""
    killed = oom = None
    for msg in messages:
        if f"Killed process {pid} " in msg:
            killed = msg
        elif msg.startswith("oom-kill:") and f",pid={pid}," in msg:
            oom = msg
    line = killed or oom
    return None if line is None else line[:KERNEL_LOG_CHARS]


class DeathWatch:
    """What the sidecar keeps about the process at the other end of its pipe, so that when
    the pipe hits EOF it can say how that process died."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self.start_ticks: int | None = procfs.read_stat_exit(pid)[1]
        except (OSError, ValueError, IndexError):
            self.start_ticks = None
        self.mounts = procfs.cgroup_mounts()
        self.kmsg = KernelLog()
        # Each memory cgroup (directory: version) the worker was seen in during the open
        # jobs, the latest last, and its OOM-kill count when first seen.
        self.cgroups: dict[str, int] = {}
        self.oom_before: dict[str, int] = {}
        self.rss: dict[str, float] = {}
        self._limits: dict[str, tuple[int | None, float]] = {}  # cgroup -> (limit, read at)
        self.xids: list[dict[str, Any]] = []  # GPU Xid errors during the open jobs (gpu.py)

    # -- while the worker lives ------------------------------------------------------------
    def job_started(self) -> None:
        """The first open job: counters and the kernel log count from here."""
        self.cgroups.clear()
        self.oom_before.clear()
        self.rss.clear()
        self.xids.clear()
        self.kmsg.skip_to_end()
        self._follow_cgroup()

    def tick(self, tree: dict[str, float], procs: list[list[Any]]) -> None:
        """After each sample: the worker's last RSS, and its cgroup (it may be moved)."""
        for pid, values in procs:
            # Only a reading with the worker's memory still mapped (VmHWM is there): once
            # killed, a dying process reads RSS 0, which is not what it died with.
            # A dying process also shows the root cgroup: follow only a living one.
            if pid == self.pid and "peak_rss_bytes" in values and "rss_bytes" in values:
                self.rss["last_rss_bytes"] = values["rss_bytes"]
                self.rss["peak_rss_bytes"] = values["peak_rss_bytes"]
                if "rss_bytes" in tree:
                    self.rss["last_tree_rss_bytes"] = tree["rss_bytes"]
                self._follow_cgroup()

    def memory(self) -> tuple[int, int] | None:
        """(usage, limit) in bytes of the memory cgroup the worker was last seen in, the
        limit the lowest of it and its ancestors' (read again every LIMIT_REREAD_S). None
        where it has no limit or is not readable. One read a tick: working_set() reads the
        longer memory.stat, only when the usage says it matters."""
        if not self.cgroups:
            return None
        where = next(reversed(self.cgroups))
        version = self.cgroups[where]
        _, limit_file, usage_file, _ = _FILES[version]
        limit, read_at = self._limits.get(where, (None, -LIMIT_REREAD_S))
        if time.monotonic() - read_at >= LIMIT_REREAD_S:
            limit = _effective_limit(where, limit_file, self.mounts[version][1])
            self._limits[where] = (limit, time.monotonic())
        if not limit:
            return None
        usage = cgroup.read_int(os.path.join(where, usage_file))
        return None if usage is None else (usage, limit)

    def working_set(self, usage: int) -> int:
        """The cgroup's usage less the page cache the kernel would reclaim first
        (inactive_file), as the kernel's own OOM heuristics and container tools count it."""
        if not self.cgroups:
            return usage
        where = next(reversed(self.cgroups))
        return max(0, usage - cgroup.inactive_file(where, self.cgroups[where]))

    def _cgroup_dir(self) -> tuple[int, str] | None:
        return cgroup.memory_dir(self.pid, self.mounts)

    def _follow_cgroup(self) -> None:
        found = self._cgroup_dir()
        if found is None:
            return
        version, where = found
        self.cgroups.pop(where, None)
        self.cgroups[where] = version
        if where not in self.oom_before:
            count = _oom_kills(os.path.join(where, _FILES[version][0]))
            if count is not None:
                self.oom_before[where] = count

    # -- after EOF -------------------------------------------------------------------------
    def exit_status(self) -> tuple[int | None, str | None]:
        """(wait status, None), or (None, why it is unknown). Polls /proc/PID/stat for up to
        ZOMBIE_WAIT_S: the pipe closes slightly before the worker becomes a zombie."""
        deadline = time.monotonic() + ZOMBIE_WAIT_S
        while True:
            try:
                state, start, code = procfs.read_stat_exit(self.pid)
            except (OSError, ValueError, IndexError):
                return None, REAPED
            if self.start_ticks is not None and start != self.start_ticks:
                return None, REAPED  # and its pid taken by another process since
            if state in ("Z", "X"):
                if code is None:
                    return None, "this kernel does not show a zombie's exit status"
                return code, None
            if time.monotonic() >= deadline:
                return None, STILL_RUNNING
            time.sleep(0.001)

    def after_eof(self) -> Death:
        """Name the death. Call it first thing after EOF: the exit status lasts only until
        the worker's parent reaps it."""
        code, unknown = self.exit_status()
        figures: dict[str, Any] = {"pid": self.pid}
        sig = exit_status = None
        if code is not None:
            figures["wait_status"] = code
            if os.WIFSIGNALED(code):
                sig = figures["signal"] = os.WTERMSIG(code)
                figures["core_dumped"] = os.WCOREDUMP(code)
            elif os.WIFEXITED(code):
                exit_status = figures["exit_status"] = os.WEXITSTATUS(code)
        self._cgroup_figures(figures)
        figures.update({k: int(v) for k, v in self.rss.items()})
        if self.xids:
            figures["gpu_xids"] = self.xids[-MAX_XIDS:]
        log_line = None
        if self.kmsg.fd is not None:
            log_line = find_oom_record(self.kmsg.messages(), self.pid)
        if log_line is not None:
            figures["kernel_log"] = log_line
        elif self.kmsg.error:
            figures["kernel_log_error"] = self.kmsg.error
        self.kmsg.close()
        # The OOM killer sends SIGKILL: a rise of the counter with another ending was some
        # other process of the cgroup (a child), said as such below.
        oom = log_line is not None or (figures.get("oom_kills", 0) > 0
                                       and sig in (None, signal.SIGKILL) and exit_status is None)
        if oom:
            figures["cause"] = "oom"
            return Death(Status.OOM_KILLED, _oom_text(figures), figures)
        if sig is not None:
            figures["cause"] = "signal"
            error = f"killed by {fmt_signal(sig)}"
            if figures.get("core_dumped"):
                error += " (core dumped)"
        elif exit_status is not None:
            figures["cause"] = "exit"
            error = f"exited inside the job with status {exit_status}"
        elif unknown == STILL_RUNNING:
            figures["cause"] = "unknown"
            figures["note"] = unknown
            error = f"the worker's pipe closed during the job, and {unknown}"
        else:
            figures["cause"] = "unknown"
            figures["note"] = unknown
            error = f"the worker ended during the job; how is unknown: {unknown}"
        if figures.get("oom_kills", 0) > 0:
            error += (f"; {figures['oom_kills']} process(es) of its memory cgroup were "
                      "OOM-killed during the job")
        return Death(Status.KILLED, error, figures)

    def _cgroup_figures(self, figures: dict[str, Any]) -> None:
        """The figures of the cgroup the worker died in: the one whose OOM-kill count rose,
        else the last it was seen in. Not the one its /proc/PID/cgroup shows now: a dead
        process shows the root cgroup there."""
        if not self.cgroups:
            return
        rises: dict[str, int] = {}
        for where, version in self.cgroups.items():
            now = _oom_kills(os.path.join(where, _FILES[version][0]))
            before = self.oom_before.get(where)
            if now is not None and before is not None:
                rises[where] = max(now - before, 0)
        where = max(reversed(self.cgroups), key=lambda w: rises.get(w, 0))
        version = self.cgroups[where]
        figures["cgroup"] = where
        if where in rises:
            figures["oom_kills"] = rises[where]
        _, limit_file, usage_file, peak_file = _FILES[version]
        limit = _effective_limit(where, limit_file, self.mounts[version][1])
        for key, value in (("cgroup_limit_bytes", limit),
                           ("cgroup_usage_bytes", cgroup.read_int(os.path.join(where, usage_file))),
                           ("cgroup_peak_bytes", cgroup.read_int(os.path.join(where, peak_file)))):
            if value is not None:
                figures[key] = value


def _effective_limit(where: str, limit_file: str, mount_point: str) -> int | None:
    """The lowest memory limit of the cgroup and its ancestors up to the mount point: a
    container's limit is often set a level or two above the worker's own cgroup."""
    limits = []
    top = os.path.normpath(mount_point)
    here = where
    while True:
        value = cgroup.read_int(os.path.join(here, limit_file))
        if value is not None:
            limits.append(value)
        if len(here) <= len(top) or not here.startswith(top):
            break
        here = os.path.dirname(here)
    return min(limits, default=None)


def _oom_text(figures: dict[str, Any]) -> str:
    """"OOM-killed: cgroup limit 256.0 MiB, last RSS 250.3 MiB (kernel log: Killed process
    1234 (python))"."""
    parts = []
    if "cgroup_limit_bytes" in figures:
        parts.append(f"cgroup limit {_mib(figures['cgroup_limit_bytes'])}")
    if "last_rss_bytes" in figures:
        parts.append(f"last RSS {_mib(figures['last_rss_bytes'])}")
    if "peak_rss_bytes" in figures:
        parts.append(f"peak RSS {_mib(figures['peak_rss_bytes'])}")
    text = "OOM-killed" + (": " + ", ".join(parts) if parts else "")
    line = figures.get("kernel_log")
    if line:
        i = line.find("Killed process")
        short = line[i:] if i >= 0 else line
        # "Killed process 1234 (python) total-vm:..." -> up to the name
        short = short.split(" total-vm", 1)[0].rstrip(",")
        text += f" (kernel log: {short})"
    elif "oom_kills" in figures:
        text += f" (the cgroup's oom_kill count rose by {figures['oom_kills']})"
    return text
