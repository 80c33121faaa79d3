"""What the sidecar itself costs, sent as scope `sidecar` with every sample: a monitor that
says what it uses (see docs/METRICS.md)."""

from __future__ import annotations

import logging
import os
import time

_PAGE = os.sysconf("SC_PAGE_SIZE")

log = logging.getLogger("workerscope.sidecar")


class SelfCost:
    """The sidecar's CPU (user + system, all its threads: CLOCK_PROCESS_CPUTIME_ID, exact
    where /proc/self/stat counts 10 ms ticks), its RSS (/proc/self/statm, held open), and the
    CPU its last sample took."""

    def __init__(self, min_rate_ns: int = 50_000_000) -> None:
        self.min_rate_ns = min_rate_ns
        self._fd = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        self._last: tuple[int, float] | None = None  # (t, cpu_s) of the last rate

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()

    def read(self, now_ns: int, sample_cpu_ns: int | None) -> dict[str, float]:
        """cpu_s (cumulative), cpu_percent (since the last rate, 100 = one core), rss_bytes and
        sample_cost_s (CPU seconds the sidecar's previous sample took, all of its work:
        /proc, GPU, encoding and sending)."""
        cpu = time.process_time()
        out: dict[str, float] = {"cpu_s": cpu}
        try:
            out["rss_bytes"] = int(os.pread(self._fd, 4096, 0).split(None, 2)[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            log.debug("sidecar RSS unreadable: left absent, never 0")
        if sample_cpu_ns is not None:
            out["sample_cost_s"] = sample_cpu_ns / 1e9
        if self._last is None:
            self._last = (now_ns, cpu)
        elif now_ns - self._last[0] >= self.min_rate_ns:
            t0, cpu0 = self._last
            out["cpu_percent"] = (cpu - cpu0) / ((now_ns - t0) / 1e9) * 100.0
            self._last = (now_ns, cpu)
        return out
