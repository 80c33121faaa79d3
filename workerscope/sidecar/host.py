"""Host-wide readings: CPU per core, memory (and the cgroup's limit), swap, disk, network, load.

Each source is one file, held open and re-read with pread at offset 0 (the kernel regenerates
it): /proc/stat and /proc/meminfo every tick; /proc/net/dev (the sidecar's network namespace),
/proc/diskstats, /proc/loadavg and the worker's memory cgroup's limit and usage at most once
a second (`slow_every_ns`) and when asked (a job's edges). Those are counters that lose
nothing read less often, a one-minute average, a limit and a usage; at a 0.1 s interval they
were half the host's share of a tick. No psutil: it
opens each file anew and parses every line into objects, ~0.5 ms a tick where this takes tens
of microseconds. Values mean what psutil's meant (see docs/METRICS.md).

What cannot be read is absent, never 0; `errors` says once what was missing and why.
"""

from __future__ import annotations

import logging
import os

from .. import cgroup, procfs

_TICK = os.sysconf("SC_CLK_TCK")
_SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own size
_CHUNK = 1 << 16

log = logging.getLogger("workerscope.sidecar")


def _cpu_freq_files(pid: int, most: int = 64) -> list[tuple[str, str]]:
    """(name, path) of the current clock (cpufreq) of each core the worker may run on (at
    most `most` of them), where the kernel shows them (not in most virtual machines)."""
    try:
        cores = sorted(os.sched_getaffinity(pid))[:most]
    except OSError:
        return []
    base = "/sys/devices/system/cpu"
    return [(f"freq cpu{n}", p) for n in cores
            if os.path.exists(p := f"{base}/cpu{n}/cpufreq/scaling_cur_freq")]


def _disks() -> frozenset[bytes]:
    """Whole disks (as psutil counts them: what /sys/block lists, loop and zram included),
    not their partitions, whose IO the disk's line already holds."""
    try:
        return frozenset(name.replace("!", "/").encode() for name in os.listdir("/sys/block"))
    except OSError:
        return frozenset()


class HostSampler:
    def __init__(self, pid: int | None = None, slow_every_ns: int = 1_000_000_000) -> None:
        self.slow_every_ns = slow_every_ns
        self.pid = pid or os.getpid()
        self._slow_t: int | None = None
        self._last_cores: list[tuple[int, int, int, int]] | None = None
        self.errors: dict[str, str] = {}
        self._fds: dict[str, int] = {}
        for name, path in (("stat", "/proc/stat"), ("memory", "/proc/meminfo"),
                           ("network", "/proc/net/dev"), ("disk", "/proc/diskstats"),
                           ("load", "/proc/loadavg"), ("cgroups", f"/proc/{self.pid}/cgroup"),
                           *_cpu_freq_files(self.pid)):
            self._open(name, path)
        self._cgroups = b""  # the worker's /proc/PID/cgroup when its cgroups were last found
        self._cpu_version = 0
        # Throttling, pressure and clocks (the evidence of a straggler's cause): off only to
        # measure what they cost (benchmarks/bench_sampler.py).
        self.evidence = True
        self.cgroup_files: tuple[str | None, str | None] = (None, None)
        self._psi_prefix = ""
        self._find_cgroups(self._read("cgroups") or b"")
        self._disks = _disks()

    def _open(self, name: str, path: str) -> None:
        try:
            self._fds[name] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as err:
            self.errors.setdefault(name, str(err))

    def _find_cgroups(self, text: bytes) -> None:
        """(Re)open the files of the worker's cgroups: its memory cgroup's limit and usage, its
        CPU cgroup's cpu.stat, and pressure (PSI): its cgroup's on v2, else the host's. Called
        again when its /proc/PID/cgroup changes (a job that moves itself into a cgroup)."""
        self._cgroups = text
        for name in [n for n in self._fds if n.startswith(("cgroup ", "psi "))]:
            os.close(self._fds.pop(name))
        limit, usage = self.cgroup_files = cgroup.memory_files(self.pid)
        for name, path in (("cgroup limit", limit), ("cgroup usage", usage)):
            if path is not None:
                self._open(name, path)
        cpu = cgroup.cpu_dir(self.pid)
        if cpu is not None:
            self._cpu_version = cpu[0]
            self._open("cgroup cpu", os.path.join(cpu[1], "cpu.stat"))
        unified = cgroup.controller_dir(self.pid, "", "cgroup.procs")  # the v2 hierarchy
        own = unified is not None and unified[0] == 2 and os.path.exists(
            os.path.join(unified[1], "memory.pressure"))
        self._psi_prefix = "cgroup_" if own else ""
        for resource in cgroup.PRESSURE:
            path = (os.path.join(unified[1], f"{resource}.pressure") if own and unified
                    else f"/proc/pressure/{resource}")
            try:
                self._fds[f"psi {resource}"] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as err:
                # A kernel without PSI (or psi=0): no pressure metrics (docs/METRICS.md).
                log.debug("no %s pressure: %s: %s", resource, path, err.strerror or err)

    def _follow_cgroups(self) -> None:
        """Find the worker's cgroups again where its /proc/PID/cgroup changed: not for a worker
        that is exiting (an exiting task shows "/" in every v1 hierarchy), nor once it is gone
        (its file unreadable: dropped, and nothing to say)."""
        fd = self._fds.get("cgroups")
        if fd is None:
            return
        try:
            text = os.pread(fd, _CHUNK, 0)
        except OSError:
            os.close(self._fds.pop("cgroups"))
            return
        if not text or text == self._cgroups:
            return
        paths = {line.split(b":", 2)[-1] for line in text.splitlines() if line.count(b":") >= 2}
        if paths == {b"/"} and self._cgroups and paths != {
                line.split(b":", 2)[-1] for line in self._cgroups.splitlines()}:
            return  # an exiting task's: keep measuring the cgroups it ran in
        self._find_cgroups(text)

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                log.debug("fd %d was closed already", fd)
        self._fds = {}

    def _read(self, name: str) -> bytes | None:
        fd = self._fds.get(name)
        if fd is None:
            return None
        try:
            return procfs.pread_all(fd)
        except OSError as err:
            self.errors.setdefault(name, str(err))
            return None

    def read(self, now_ns: int | None = None, full: bool = True) -> dict[str, float]:
        """One reading. full=False (a regular tick at now_ns): network, disk, load and the
        cgroup only if `slow_every_ns` has passed since they were last read."""
        out: dict[str, float] = {}
        stat = self._read("stat")
        if stat is not None:
            self._cpu(stat, out)
        mem = self._read("memory")
        if mem is not None:
            self._memory(mem, out)
        if not full and now_ns is not None and self._slow_t is not None \
                and now_ns - self._slow_t < self.slow_every_ns:
            return out
        if now_ns is not None:
            self._slow_t = now_ns
        self._follow_cgroups()
        if self.evidence:
            self._pressure(out)
        if "cgroup limit" in self._fds:
            limit = self._read("cgroup limit")
            usage = self._read("cgroup usage")
            value = None if limit is None else cgroup.int_or_none(limit)
            if value is not None:
                out["cgroup_mem_limit_bytes"] = value
            value = None if usage is None else cgroup.int_or_none(usage)
            if value is not None:
                out["cgroup_mem_used_bytes"] = value
        net = self._read("network")
        if net is not None:
            self._network(net, out)
        disk = self._read("disk")
        if disk is not None:
            self._disk(disk, out)
        freqs = [int(data) for data in (self._read(n) for n in self._fds
                                        if self.evidence and n.startswith("freq "))
                 if data and data.strip().isdigit()]
        if freqs:  # kHz: the mean of the cores' current clocks
            out["cpu_freq_mhz"] = sum(freqs) / len(freqs) / 1000.0
        load = self._read("load")
        if load is not None:
            parts = load.split(None, 3)
            out["load_1m"], out["load_5m"], out["load_15m"] = (float(x) for x in parts[:3])
        return out

    def _pressure(self, out: dict[str, float]) -> None:
        """The cgroup's throttling and the pressure stalls (cgroup_ or host's), into out."""
        data = self._read("cgroup cpu")
        if data is not None:
            out.update(cgroup.parse_cpu_stat(data, self._cpu_version))
        prefix = self._psi_prefix
        for resource in cgroup.PRESSURE:
            data = self._read(f"psi {resource}")
            if data is None:
                continue
            some, full = cgroup.parse_pressure(data)
            if some is not None:
                out[f"{prefix}psi_{resource}_some_s"] = some
            if full is not None and (resource != "cpu" or full > 0):  # cpu's full: 0 off cgroups
                out[f"{prefix}psi_{resource}_full_s"] = full

    def _cpu(self, data: bytes, out: dict[str, float]) -> None:
        # "cpuK user nice system idle iowait irq softirq steal guest guest_nice", in ticks;
        # guest time is already in user and nice.
        cores: list[tuple[int, int, int, int]] = []
        end = data.find(b"\nintr")  # the cpu lines come first; the intr line can be kilobytes
        for line in data[:end if end > 0 else len(data)].split(b"\n")[1:]:
            if not line.startswith(b"cpu"):
                break
            v = line.split()
            n = len(v)
            total = sum(map(int, v[1:min(n, 9)]))
            cores.append((total, int(v[4]), int(v[5]) if n > 5 else 0, int(v[8]) if n > 8 else 0))
        last = self._last_cores
        self._last_cores = cores
        if not last or len(last) != len(cores):
            return
        busy_all = iowait_all = steal_all = span_all = 0
        for k, (now, before) in enumerate(zip(cores, last, strict=True)):
            span = now[0] - before[0]
            if span <= 0:
                continue  # no clock tick on this core since the last reading: no figure
            idle, iowait, steal = now[1] - before[1], now[2] - before[2], now[3] - before[3]
            # idle, iowait and steal (time the hypervisor gave to others) are not busy.
            busy = span - idle - iowait - steal
            out[f"cpu_percent_core{k}"] = min(max(100.0 * busy / span, 0.0), 100.0)
            busy_all += max(busy, 0)
            iowait_all += iowait
            steal_all += steal
            span_all += span
        if span_all > 0:
            out["cpu_percent"] = min(100.0 * busy_all / span_all, 100.0)
            out["cpu_iowait_percent"] = 100.0 * iowait_all / span_all
            out["cpu_steal_percent"] = 100.0 * steal_all / span_all

    def _memory(self, data: bytes, out: dict[str, float]) -> None:
        kb: dict[bytes, int] = {}
        for key in (b"MemTotal:", b"MemFree:", b"MemAvailable:", b"SwapTotal:", b"SwapFree:"):
            i = data.find(key)
            if i >= 0:
                kb[key] = int(data[i + len(key):data.find(b"\n", i)].split()[0]) * 1024
        total = kb.get(b"MemTotal:")
        if total is None:
            self.errors.setdefault("memory", "no MemTotal in /proc/meminfo")
            return
        # psutil's (and free's) "available": MemAvailable, which the kernel has had since 3.14;
        # in a container that shows the host's, never above the total.
        avail = kb.get(b"MemAvailable:", kb.get(b"MemFree:", 0))
        avail = min(max(avail, 0), total)
        out["mem_total_bytes"] = total
        out["mem_available_bytes"] = avail
        out["mem_used_bytes"] = total - avail
        if b"SwapTotal:" in kb and b"SwapFree:" in kb:
            out["swap_used_bytes"] = kb[b"SwapTotal:"] - kb[b"SwapFree:"]

    @staticmethod
    def _network(data: bytes, out: dict[str, float]) -> None:
        rx = rxp = tx = txp = 0
        for line in data.split(b"\n")[2:]:
            _, _, cols = line.partition(b":")
            v = cols.split()
            if len(v) >= 10:
                rx += int(v[0])
                rxp += int(v[1])
                tx += int(v[8])
                txp += int(v[9])
        out["net_sent_bytes"] = tx
        out["net_recv_bytes"] = rx
        out["net_sent_packets"] = txp
        out["net_recv_packets"] = rxp

    def _disk(self, data: bytes, out: dict[str, float]) -> None:
        read = write = 0
        disks = self._disks
        for line in data.split(b"\n"):
            v = line.split(None, 10)
            # major minor name reads merged sectors_read ms writes merged sectors_written ...
            if len(v) >= 10 and v[2] in disks:
                read += int(v[5])
                write += int(v[9])
        out["disk_read_bytes"] = read * _SECTOR
        out["disk_write_bytes"] = write * _SECTOR
