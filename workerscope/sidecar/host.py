"""Host-wide readings: CPU per core, memory, network and disk bytes. Unreadable means absent."""

from __future__ import annotations

import psutil


def _busy_and_total(t) -> tuple[float, float]:
    total = sum(t)
    # idle and iowait are not busy; steal is time the hypervisor took, also not ours.
    idle = t.idle + getattr(t, "iowait", 0.0) + getattr(t, "steal", 0.0)
    return total - idle, total


class HostSampler:
    def __init__(self) -> None:
        self._last_cores: list[tuple[float, float]] | None = None

    def read(self) -> dict[str, float]:
        out: dict[str, float] = {}
        try:
            cores = [_busy_and_total(t) for t in psutil.cpu_times(percpu=True)]
        except (OSError, RuntimeError):
            cores = None
        if cores and self._last_cores and len(cores) == len(self._last_cores):
            percents = []
            for k, ((busy, total), (busy0, total0)) in enumerate(zip(cores, self._last_cores)):
                span = total - total0
                pct = 100.0 * (busy - busy0) / span if span > 0 else 0.0
                pct = min(max(pct, 0.0), 100.0)
                out[f"cpu_percent_core{k}"] = pct
                percents.append(pct)
            out["cpu_percent"] = sum(percents) / len(percents)
        self._last_cores = cores
        try:
            vm = psutil.virtual_memory()
            out["mem_used_bytes"] = vm.used
            out["mem_available_bytes"] = vm.available
        except (OSError, RuntimeError):
            pass  # left absent: no value is better than a wrong 0
        try:
            net = psutil.net_io_counters()
            if net is not None:
                out["net_sent_bytes"] = net.bytes_sent
                out["net_recv_bytes"] = net.bytes_recv
        except (OSError, RuntimeError):
            pass  # left absent
        try:
            disk = psutil.disk_io_counters()
            if disk is not None:
                out["disk_read_bytes"] = disk.read_bytes
                out["disk_write_bytes"] = disk.write_bytes
        except (OSError, RuntimeError):
            pass  # left absent
        return out
