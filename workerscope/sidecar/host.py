"""Host-wide readings: CPU per core, memory (and the cgroup's limit), swap, disk, network, load.

What cannot be read is absent, never 0; `errors` says once what was missing and why.
"""

from __future__ import annotations

import os

import psutil

UNLIMITED = 1 << 60  # cgroup v1 writes a huge number for "no limit"


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= UNLIMITED else value


def cgroup_memory_files(pid: int) -> tuple[str | None, str | None]:
    """(limit file, usage file) of pid's memory cgroup, v2 or v1, or None where there is none."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            for base in (f"/sys/fs/cgroup{path}", "/sys/fs/cgroup"):
                if os.path.exists(f"{base}/memory.max"):
                    return f"{base}/memory.max", f"{base}/memory.current"
        if "memory" in controllers.split(","):
            # Inside a container the cgroup path often names the host's hierarchy while the
            # container sees its own cgroup at the mount root: try both.
            for base in (f"/sys/fs/cgroup/memory{path}", "/sys/fs/cgroup/memory"):
                if os.path.exists(f"{base}/memory.limit_in_bytes"):
                    return f"{base}/memory.limit_in_bytes", f"{base}/memory.usage_in_bytes"
    return None, None


class HostSampler:
    def __init__(self, pid: int | None = None) -> None:
        self._last_cores: list[tuple[float, float, float, float]] | None = None
        self._limit_file, self._usage_file = cgroup_memory_files(pid or os.getpid())
        self.errors: dict[str, str] = {}

    def _cpu(self, out: dict[str, float]) -> None:
        try:
            times = psutil.cpu_times(percpu=True)
        except (OSError, RuntimeError) as err:
            self.errors.setdefault("cpu", str(err))
            return
        cores = [(sum(t), t.idle, getattr(t, "iowait", 0.0), getattr(t, "steal", 0.0))
                 for t in times]
        last = self._last_cores
        self._last_cores = cores
        if not last or len(last) != len(cores):
            return
        busy_all = iowait_all = steal_all = span_all = 0.0
        for k, (now, before) in enumerate(zip(cores, last, strict=True)):
            span = now[0] - before[0]
            idle, iowait, steal = (now[i] - before[i] for i in (1, 2, 3))
            # idle, iowait and steal (time the hypervisor gave to others) are not busy.
            busy = span - idle - iowait - steal
            if span <= 0:
                continue  # no clock tick on this core since the last reading: no figure
            out[f"cpu_percent_core{k}"] = min(max(100.0 * busy / span, 0.0), 100.0)
            busy_all += max(busy, 0.0)
            iowait_all += iowait
            steal_all += steal
            span_all += max(span, 0.0)
        if span_all > 0:
            out["cpu_percent"] = min(100.0 * busy_all / span_all, 100.0)
            out["cpu_iowait_percent"] = 100.0 * iowait_all / span_all
            out["cpu_steal_percent"] = 100.0 * steal_all / span_all

    def read(self) -> dict[str, float]:
        out: dict[str, float] = {}
        self._cpu(out)
        try:
            vm = psutil.virtual_memory()
            out["mem_used_bytes"] = vm.used
            out["mem_available_bytes"] = vm.available
            out["mem_total_bytes"] = vm.total
            sw = psutil.swap_memory()
            out["swap_used_bytes"] = sw.used
        except (OSError, RuntimeError) as err:
            self.errors.setdefault("memory", str(err))
        if self._limit_file:
            limit = _read_int(self._limit_file)
            usage = _read_int(self._usage_file) if self._usage_file else None
            if limit is not None:
                out["cgroup_mem_limit_bytes"] = limit
            if usage is not None:
                out["cgroup_mem_used_bytes"] = usage
        try:
            net = psutil.net_io_counters()
            if net is not None:
                out["net_sent_bytes"] = net.bytes_sent
                out["net_recv_bytes"] = net.bytes_recv
                out["net_sent_packets"] = net.packets_sent
                out["net_recv_packets"] = net.packets_recv
        except (OSError, RuntimeError) as err:
            self.errors.setdefault("network", str(err))
        try:
            disk = psutil.disk_io_counters()
            if disk is not None:
                out["disk_read_bytes"] = disk.read_bytes
                out["disk_write_bytes"] = disk.write_bytes
        except (OSError, RuntimeError) as err:
            self.errors.setdefault("disk", str(err))
        try:
            out["load_1m"], out["load_5m"], out["load_15m"] = os.getloadavg()
        except OSError as err:
            self.errors.setdefault("load", str(err))
        return out
