"""Light mode: counters read at a job's start and end, no extra process, a flat stats dict."""

from __future__ import annotations

import os
import time
from typing import Any

from .config import Config


def _read_status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _read_io() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/self/io") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("read_bytes", "write_bytes"):
                    out[key] = int(value)
    except OSError:
        return {}
    return out


def _reset_peak() -> bool:
    """Reset the kernel's RSS high-water mark so a warm worker reports this job's own peak."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Reading:
    __slots__ = ("wall", "times", "io")

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.times = os.times()
        self.io = _read_io()


def stats(start: Reading, end: Reading, peak_reset: bool) -> dict[str, float]:
    wall = end.wall - start.wall
    user = (end.times.user - start.times.user) + (end.times.children_user - start.times.children_user)
    system = (end.times.system - start.times.system) + (
        end.times.children_system - start.times.children_system)
    out: dict[str, float] = {"wall_s": wall, "cpu_user_s": user, "cpu_system_s": system}
    if wall > 0:
        out["cpu_percent"] = (user + system) / wall * 100.0
    for key in ("read_bytes", "write_bytes"):
        if key in start.io and key in end.io:
            out[key] = end.io[key] - start.io[key]
    rss = _read_status_kb("VmRSS:")
    if rss is not None:
        out["rss_bytes"] = rss
    peak = _read_status_kb("VmHWM:")
    if peak is not None and peak_reset:
        out["peak_rss_bytes"] = peak
    return out


def run(wrapper: Any, config: Config, args: tuple, kwargs: dict) -> Any:
    peak_reset = _reset_peak()
    start = Reading()
    try:
        return wrapper.fn(*args, **kwargs)
    finally:
        wrapper.last_stats = stats(start, Reading(), peak_reset)
