"""Per-span resource attribution: what the process and its tree used while each span ran.

Cumulative counters (CPU seconds, IO bytes) are interpolated linearly between the samples around
each edge of the span, so a span longer than a couple of intervals gets its own share; gauges
(RSS, GPU) take the samples inside the span plus the interpolated values at its edges. The
kernel's RSS high-water mark (VmHWM, sampled as peak_rss_bytes) catches a peak that fell
between two samples. Shorter spans than the interval get the rate of the interval they sit in:
the numbers are estimates, and say so in their names (`_s`, `_bytes`, never exact counters).

A span's `cpu_s` is its process's CPU, unless a span in another thread of the same process
overlaps it (jobs count against jobs, spans against spans): then the process's CPU is not
this span's, and where the sidecar read the span's own thread (scope `thread`) it is that
thread's CPU. Alone in its process, a span keeps the whole process's CPU, so the threads it
starts (a BLAS pool, say) count for it. `tree_cpu_s` is always the whole tree's. A span
recorded with the span_cpu setting carries its thread's CPU read at its begin and end
(Span.cpu_ns): that is its `cpu_s`, measured, whatever the samples say.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..protocol import Status
from ..timeline import STRAGGLER_FACTOR, Span, Timeline, is_straggler
from .deaths import by_worker, is_cut_short
from .growth import Memory, pinned

# A worker or a job that died: drawn with a cross and counted as bad in every view. A worker's
# status says killed; its job's says killed or oom_killed (deaths.py names the cause).
DIED = (Status.KILLED, Status.OOM_KILLED, Status.SIDECAR_LOST)
# A job in one of these has not failed (yet).
NOT_FAILED = (Status.OK, Status.RUNNING)

Attribution = dict[tuple[str, int, int], dict[str, float]]  # (worker, pid, span id) -> estimates


@dataclass
class _Series:
    times: list[int]
    values: list[float]

    def at(self, t: int) -> float | None:
        """Linear interpolation at t, clamped to the first and last sample."""
        if not self.times:
            return None
        return _at_all(self.times, [self.values], bisect.bisect_left(self.times, t), t)[0]

    def within(self, t0: int, t1: int) -> list[float]:
        lo, hi = bisect.bisect_left(self.times, t0), bisect.bisect_right(self.times, t1)
        return self.values[lo:hi]

    def first_after(self, t: int) -> float | None:
        i = bisect.bisect_left(self.times, t)
        return self.values[i] if i < len(self.values) else None

    def last_before(self, t: int) -> float | None:
        i = bisect.bisect_right(self.times, t)
        return self.values[i - 1] if i else None


def _at_all(times: list[int], columns: list[list[float]], i: int, t: int) -> list[float]:
    """Each column's value at t (0.0 for an empty one), interpolated linearly between the
    samples around it and clamped to the first and last; i = bisect_left(times, t), so
    times[i - 1] < t <= times[i] between them."""
    if i == 0 or i >= len(times):
        k = 0 if i == 0 else -1
        return [v[k] if v else 0.0 for v in columns]
    t0, t1 = times[i - 1], times[i]
    dt, span = t - t0, t1 - t0
    return [v[i - 1] + (v[i] - v[i - 1]) * dt / span if v else 0.0 for v in columns]


def _shared_times(rows: list[tuple[int, dict[str, float]]], series: dict[str, _Series],
                  mem: Memory) -> list[int] | None:
    """The process's sample times where every series (and its Memory) either has a value at
    each of them or is empty: then one bisect of a span's edge serves them all (the common
    case). None where some series skipped some samples."""
    n = len(rows)
    if all(len(s.times) in (0, n) for s in series.values()) and len(mem.times) in (0, n):
        return [t for t, _ in rows]
    return None


@dataclass
class _GpuSeries:
    """The tree's GPU use at each sample: the SM share of its processes summed (100 a GPU
    busy) and how many GPUs they held contexts on, each over the interval the sample ends."""

    times: list[int]
    util: list[float]
    gpus: list[float]

    def busy(self, t0: int, t1: int) -> tuple[float, float] | None:
        """(busy %, idle GPU-seconds) of the tree's GPUs over [t0, t1]: each sample's share
        weighted by how much of its interval the span covers. None where no GPU was in use."""
        times = self.times
        k = max(bisect.bisect_right(times, t0), 1)
        capacity = busy = 0.0
        while k < len(times) and times[k - 1] < t1:
            overlap = (min(times[k], t1) - max(times[k - 1], t0)) / 1e9
            n = self.gpus[k]
            if overlap > 0 and n > 0:
                capacity += overlap * n
                busy += overlap * n * min(self.util[k] / (100.0 * n), 1.0)
            k += 1
        return None if capacity <= 0 else (100.0 * busy / capacity, capacity - busy)


def _gpu_series(rows: list[tuple[int, dict[str, float]]]) -> _GpuSeries:
    g = _GpuSeries([], [], [])
    for t, v in rows:
        if "gpu_util_percent" in v and "gpu_devices" in v:
            g.times.append(t)
            g.util.append(float(v["gpu_util_percent"]))
            g.gpus.append(float(v["gpu_devices"]))
    return g


def _series(samples: Iterable[tuple[int, dict[str, float]]],
            key: str | Callable[[dict[str, float]], float | None]) -> _Series:
    times: list[int] = []
    values: list[float] = []
    for t, v in samples:
        value = key(v) if callable(key) else v.get(key)
        if value is not None:
            times.append(t)
            values.append(float(value))
    return _Series(times, values)


def _cpu(v: dict[str, float]) -> float | None:
    if "cpu_user_s" in v and "cpu_system_s" in v:
        return v["cpu_user_s"] + v["cpu_system_s"]
    return None


def _concurrent(spans: list[Span]) -> set[tuple[str, int, int]]:
    """(worker, pid, id) of each span that overlaps, in time, a span of the same kind (job or
    not) in another thread of its process: one sweep over the spans in start order."""
    groups: dict[tuple[str, int, bool], list[Span]] = {}
    for s in spans:
        groups.setdefault((s.worker, s.pid, s.kind == "job"), []).append(s)
    out: set[tuple[str, int, int]] = set()
    for group in groups.values():
        if len({s.tid for s in group}) < 2:
            continue  # one thread: nothing runs beside it (the common case)
        group.sort(key=lambda s: s.start_ns)
        ends: list[tuple[int, int]] = []  # heap of (end, index) of the spans open now
        open_in: dict[int, int] = {}  # tid -> spans open now
        unmarked: dict[int, list[int]] = {}  # tid -> open spans not yet found concurrent
        marked = [False] * len(group)
        for i, s in enumerate(group):
            while ends and ends[0][0] <= s.start_ns:
                open_in[group[heapq.heappop(ends)[1]].tid] -= 1
            if len(ends) > open_in.get(s.tid, 0):  # a span of another thread is open
                marked[i] = True
                for tid, waiting in unmarked.items():
                    if tid != s.tid:
                        for j in waiting:
                            marked[j] = marked[j] or group[j].end_ns > s.start_ns
                        waiting.clear()
            else:
                unmarked.setdefault(s.tid, []).append(i)
            heapq.heappush(ends, (s.end_ns, i))
            open_in[s.tid] = open_in.get(s.tid, 0) + 1
        out.update((s.worker, s.pid, s.id) for s, m in zip(group, marked, strict=True) if m)
    return out


def attribute(t: Timeline) -> Attribution:
    """(worker, pid, span id) -> estimates of what ran during the span."""
    by_proc: dict[tuple[str, int], list[tuple[int, dict[str, float]]]] = {}
    by_tree: dict[str, list[tuple[int, dict[str, float]]]] = {}
    by_thread: dict[tuple[str, int, int], list[tuple[int, dict[str, float]]]] = {}
    for s in t.samples:
        if s.scope == "proc" and s.pid is not None:
            by_proc.setdefault((s.worker, s.pid), []).append((s.t_ns, s.values))
        elif s.scope == "tree":
            by_tree.setdefault(s.worker, []).append((s.t_ns, s.values))
        elif s.scope == "thread" and s.pid is not None and s.tid is not None:
            by_thread.setdefault((s.worker, s.pid, s.tid), []).append((s.t_ns, s.values))
    cache: dict[tuple[Any, ...], dict[str, _Series]] = {}
    memory: dict[tuple[Any, ...], Memory] = {}
    gpu_cache: dict[str, _GpuSeries] = {}
    shared: dict[tuple[Any, ...], list[int] | None] = {}

    def proc_series(worker: str, pid: int) -> dict[str, _Series]:
        key = ("p", worker, pid)
        if key not in cache:
            rows = sorted(by_proc.get((worker, pid), []), key=lambda r: r[0])
            cache[key] = {"cpu": _series(rows, _cpu), "rss": _series(rows, "rss_bytes"),
                          "hwm": _series(rows, "peak_rss_bytes"),
                          "read": _series(rows, "read_bytes"),
                          "write": _series(rows, "write_bytes"),
                          "gpu_mem": _series(rows, "gpu_mem_bytes"),
                          "gpu_util": _series(rows, "gpu_util_percent")}
            memory[key] = Memory.of(rows)
            shared[key] = _shared_times(rows, cache[key], memory[key])
        return cache[key]

    def tree_series(worker: str) -> dict[str, _Series]:
        key = ("t", worker)
        if key not in cache:
            rows = sorted(by_tree.get(worker, []), key=lambda r: r[0])
            cache[key] = {"cpu": _series(rows, _cpu)}
            gpu_cache[worker] = _gpu_series(rows)
        return cache[key]

    # (worker, pid) -> what its spans are worked out from: its series, its tree's, its Memory,
    # its shared sample times and its tree's GPU use (None where the tree used no GPU).
    context: dict[tuple[str, int], tuple[Any, ...]] = {}
    thread_cpu: dict[tuple[str, int, int], _Series] = {}
    out: Attribution = {}
    beside = _concurrent(t.spans) if by_thread else set()
    for span in t.spans:
        key = (span.worker, span.pid, span.id)
        ctx = context.get(key[:2])
        if ctx is None:
            proc, tree = proc_series(span.worker, span.pid), tree_series(span.worker)
            p_key, gpu_use = ("p", span.worker, span.pid), gpu_cache[span.worker]
            ctx = context[key[:2]] = (proc, tree, memory[p_key], shared[p_key],
                                      gpu_use if gpu_use.times else None)
        proc, tree, mem, times, gpu_use = ctx
        out[key] = res = (_one(span, proc, tree, mem) if times is None
                          else _one_shared(span, proc, tree, mem, times))
        if gpu_use is not None:
            gpu = gpu_use.busy(span.start_ns, span.end_ns)
            if gpu is not None:
                res["gpu_busy_percent"], res["gpu_idle_s"] = gpu
        thread = (span.worker, span.pid, span.tid)
        if beside and key in beside and thread in by_thread:
            if thread not in thread_cpu:
                thread_cpu[thread] = _series(sorted(by_thread[thread], key=lambda r: r[0]), _cpu)
            cpu = thread_cpu[thread]
            # Only a thread read across the span tells its CPU (a thread first seen after
            # the span ended does not): else the process's stays, as before.
            if cpu.times and cpu.times[0] <= span.end_ns and cpu.times[-1] >= span.start_ns:
                d = _delta(cpu, span.start_ns, span.end_ns)
                if d is not None:
                    out[key]["cpu_s"] = d
        if span.cpu_ns is not None:  # measured at its edges (span_cpu): no estimate needed
            out[key]["cpu_s"] = span.cpu_ns / 1e9
    return out


def _delta(series: _Series, t0: int, t1: int) -> float | None:
    """A counter's rise over [t0, t1], interpolated at each edge (0 where it fell)."""
    times, values = series.times, series.values
    k = bisect.bisect_left(times, t0)
    if 0 < k < len(times) and t0 <= t1 < times[k]:  # both edges in one interval: its rate
        a, span = times[k - 1], times[k] - times[k - 1]
        v0, dv = values[k - 1], values[k] - values[k - 1]
        return max((v0 + dv * (t1 - a) / span) - (v0 + dv * (t0 - a) / span), 0.0)
    start, end = series.at(t0), series.at(t1)
    return None if start is None or end is None else max(end - start, 0.0)


def _one(span: Span, p: dict[str, _Series], tree: dict[str, _Series], mem: Memory,
         times: list[int] | None = None) -> dict[str, float]:
    """The estimates of one span. times: _shared_times of its process, where it has them."""
    if times is not None:
        return _one_shared(span, p, tree, mem, times)
    t0, t1 = span.start_ns, span.end_ns
    res: dict[str, float] = {}
    for name, series in (("cpu_s", p["cpu"]), ("tree_cpu_s", tree["cpu"]),
                         ("read_bytes", p["read"]), ("write_bytes", p["write"])):
        d = _delta(series, t0, t1)
        if d is not None:
            res[name] = d
    rss = p["rss"]
    start, end = rss.at(t0), rss.at(t1)
    if start is not None and end is not None:
        peak = max([start, end, *rss.within(t0, t1)])
        # A high-water mark that rose across the span: the peak fell inside it (or near it).
        hwm_before, hwm_after = p["hwm"].last_before(t0), p["hwm"].first_after(t1)
        if hwm_before is not None and hwm_after is not None and hwm_after > hwm_before:
            peak = max(peak, hwm_after)
        res["peak_rss_bytes"] = peak
    for name, bounds in (("rss_growth_bytes", mem.end_growth(t0, t1)),
                         ("peak_growth_bytes", mem.peak_growth(t0, t1))):
        figure = pinned(bounds)
        if figure is not None:
            res[name] = figure
    # The process's own SM share (NVML per-process utilisation), not the device's: a device
    # is shared with other processes, and a host has other devices.
    util = p["gpu_util"].within(t0, t1)
    if util:
        res["gpu_util_percent"] = sum(util) / len(util)
    gmem = p["gpu_mem"].within(t0, t1)
    if gmem:
        res["gpu_mem_bytes"] = max(gmem)
    return res


def _one_shared(span: Span, p: dict[str, _Series], tree: dict[str, _Series], mem: Memory,
                times: list[int]) -> dict[str, float]:
    """_one where the process's series share their sample times: the same figures, by the same
    arithmetic, from three bisects of the span's edges rather than one or two a series."""
    t0, t1 = span.start_ns, span.end_ns
    at0 = bisect.bisect_left(times, t0)
    if 0 < at0 < len(times) and t0 <= t1 < times[at0]:  # times[at0 - 1] < t0 <= t1 < ...
        return _inside(t0, t1, p, tree, mem, times, at0)
    at1, after1 = bisect.bisect_left(times, t1), bisect.bisect_right(times, t1)
    res: dict[str, float] = {}
    # Each series' value at each edge, the four interpolated in one call an edge.
    columns = [p["cpu"].values, p["read"].values, p["write"].values, p["rss"].values]
    starts, ends = _at_all(times, columns, at0, t0), _at_all(times, columns, at1, t1)
    if columns[0]:
        res["cpu_s"] = max(ends[0] - starts[0], 0.0)
    tree_cpu = _delta(tree["cpu"], t0, t1)  # the tree's samples: times of their own
    if tree_cpu is not None:
        res["tree_cpu_s"] = tree_cpu
    for name, k in (("read_bytes", 1), ("write_bytes", 2)):
        if columns[k]:
            res[name] = max(ends[k] - starts[k], 0.0)
    rss = columns[3]
    if rss:
        peak = max([starts[3], ends[3], *rss[at0:after1]])
        hwm = p["hwm"].values
        if hwm:
            before0 = bisect.bisect_right(times, t0)
            hwm_before = hwm[before0 - 1] if before0 else None
            hwm_after = hwm[at1] if at1 < len(hwm) else None
            if hwm_before is not None and hwm_after is not None and hwm_after > hwm_before:
                peak = max(peak, hwm_after)
        res["peak_rss_bytes"] = peak
    growths = mem.growth(t0, t1, (at0, at1, after1)) if mem.times else (None, None)
    for name, bounds in zip(("rss_growth_bytes", "peak_growth_bytes"), growths, strict=True):
        figure = pinned(bounds)
        if figure is not None:
            res[name] = figure
    util = p["gpu_util"].values[at0:after1]
    if util:
        res["gpu_util_percent"] = sum(util) / len(util)
    gmem = p["gpu_mem"].values[at0:after1]
    if gmem:
        res["gpu_mem_bytes"] = max(gmem)
    return res


def _inside(t0: int, t1: int, p: dict[str, _Series], tree: dict[str, _Series], mem: Memory,
            times: list[int], k: int) -> dict[str, float]:
    """_one_shared of a span between two samples, times[k - 1] < t0 <= t1 < times[k] (most
    spans, where calls are shorter than the interval): every figure from that interval alone,
    by the same arithmetic, without the lists, slices and bisects the general case needs. No
    sample falls inside the span, so it has no GPU figures of its process."""
    a, span = times[k - 1], times[k] - times[k - 1]
    d0, d1 = t0 - a, t1 - a
    res: dict[str, float] = {}
    cpu = p["cpu"].values
    if cpu:
        c0, dc = cpu[k - 1], cpu[k] - cpu[k - 1]
        res["cpu_s"] = max((c0 + dc * d1 / span) - (c0 + dc * d0 / span), 0.0)
    tree_cpu = _delta(tree["cpu"], t0, t1)
    if tree_cpu is not None:
        res["tree_cpu_s"] = tree_cpu
    read, write = p["read"].values, p["write"].values
    if read:
        v0, dv = read[k - 1], read[k] - read[k - 1]
        res["read_bytes"] = max((v0 + dv * d1 / span) - (v0 + dv * d0 / span), 0.0)
    if write:
        v0, dv = write[k - 1], write[k] - write[k - 1]
        res["write_bytes"] = max((v0 + dv * d1 / span) - (v0 + dv * d0 / span), 0.0)
    rss = p["rss"].values
    if rss:
        r0, dr = rss[k - 1], rss[k] - rss[k - 1]
        peak = max(r0 + dr * d0 / span, r0 + dr * d1 / span)
        hwm = p["hwm"].values
        if hwm and hwm[k] > hwm[k - 1]:
            peak = max(peak, hwm[k])
        res["peak_rss_bytes"] = peak
    if mem.times:
        for name, bounds in zip(("rss_growth_bytes", "peak_growth_bytes"),
                                mem.growth_inside(t0, t1, k), strict=True):
            figure = pinned(bounds)
            if figure is not None:
                res[name] = figure
    return res


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    k = (len(sorted_values) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


_NONE: dict[str, float] = {}  # a span's figures where attribution has none (never written)


def function_table(t: Timeline, attribution: Attribution | None = None) -> list[dict[str, Any]]:
    """One row per span name (jobs included, kind "job"): calls, wall-time statistics, self time
    (wall minus time in child spans), attributed CPU (`cpu_measured`: every call's was
    measured at its edges, not estimated), errors, calls cut short by their
    process's death, and two memory figures that answer different questions:
    `peak_growth_bytes`, the most the process's RSS rose above its level at a call's start
    during one call (what the function allocated: a sleep in a large process grew 0), and
    `peak_rss_bytes`, the process's largest RSS while a call ran (memory held before the
    call included: it blames whatever ran while the process was large). Where the tree used
    GPUs: `gpu_busy_percent`, their busy share while its calls ran (weighted by each call's
    time), and `gpu_idle_s`, the GPU-seconds they sat idle during its calls. Sorted by
    total."""
    attribution = attribute(t) if attribution is None else attribution
    child_time: dict[tuple[str, int, int], int] = {}
    for s in t.spans:
        if s.parent is not None:
            parent = (s.worker, s.pid, s.parent)
            child_time[parent] = child_time.get(parent, 0) + s.duration_ns
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    walls: dict[tuple[str, str], list[float]] = {}
    for s in t.spans:
        key = (s.name, s.kind)
        row = rows.get(key)
        if row is None:  # (a row made only once a name, not once a call)
            row = rows[key] = {"name": s.name, "kind": s.kind, "calls": 0, "total_s": 0.0,
                               "self_s": 0.0, "cpu_s": 0.0, "peak_rss_bytes": 0.0,
                               "peak_growth_bytes": None, "errors": 0, "cut_short": 0,
                               "has_cpu": False, "cpu_measured": 0,
                               "gpu_idle_s": None, "gpu_busy_percent": None, "gpu_wall": 0.0}
            walls[key] = []
        duration, ids = s.end_ns - s.start_ns, (s.worker, s.pid, s.id)
        wall = duration / 1e9
        walls[key].append(wall)
        row["calls"] += 1
        row["total_s"] += wall
        row["self_s"] += max(duration - child_time.get(ids, 0), 0) / 1e9
        row["errors"] += s.error is not None
        row["cut_short"] += is_cut_short(s)
        row["cpu_measured"] += s.cpu_ns is not None
        a = attribution.get(ids, _NONE)
        if "cpu_s" in a:
            row["cpu_s"] += a["cpu_s"]
            row["has_cpu"] = True
        row["peak_rss_bytes"] = max(row["peak_rss_bytes"], a.get("peak_rss_bytes", 0.0))
        if "gpu_idle_s" in a:  # busy weighted by each call's time
            row["gpu_idle_s"] = (row["gpu_idle_s"] or 0.0) + a["gpu_idle_s"]
            row["gpu_busy_percent"] = (row["gpu_busy_percent"] or 0.0) + a["gpu_busy_percent"] * wall
            row["gpu_wall"] += wall
        if "peak_growth_bytes" in a:  # 0 is a finding here (it grew nothing), not an absence
            row["peak_growth_bytes"] = max(row["peak_growth_bytes"] or 0.0,
                                           a["peak_growth_bytes"])
    out = []
    for key, row in rows.items():
        w = sorted(walls[key])
        row.update(mean_s=row["total_s"] / row["calls"], p50_s=_percentile(w, 0.5),
                   p95_s=_percentile(w, 0.95), max_s=w[-1])
        if not row.pop("has_cpu"):
            row["cpu_s"] = None
        # True where every call's CPU was measured (span_cpu), not estimated.
        row["cpu_measured"] = row["cpu_measured"] == row["calls"]
        if not row["peak_rss_bytes"]:
            row["peak_rss_bytes"] = None
        gpu_wall = row.pop("gpu_wall")
        if row["gpu_busy_percent"] is not None:
            row["gpu_busy_percent"] = row["gpu_busy_percent"] / gpu_wall if gpu_wall else 0.0
        out.append(row)
    out.sort(key=lambda r: -r["total_s"])
    return out


def cpu_basis(rows: list[dict[str, Any]]) -> str:
    """How the function table's CPU figures were got: "measured" (every row with a figure
    measured at its calls' edges, span_cpu), "estimated" (from the samples), "mixed", or ""
    (no figure)."""
    kinds = {r["cpu_measured"] for r in rows if r["cpu_s"] is not None}
    return "" if not kinds else "mixed" if len(kinds) > 1 else (
        "measured" if kinds.pop() else "estimated")


def cpu_mark(row: dict[str, Any], basis: str) -> str:
    """"~" before a row's estimated CPU figure in a table that has measured ones too."""
    return "~" if basis == "mixed" and not row["cpu_measured"] and row["cpu_s"] is not None else ""


def workers_table(t: Timeline, straggler_factor: float = STRAGGLER_FACTOR) -> list[dict[str, Any]]:
    """One row per worker: host, pid, status, jobs, frames lost, busy time, whether it is a
    straggler (timeline.is_straggler: its job time against those of the workers that ran jobs),
    and how it died inside a job: `died` ("oom", "SIGKILL", "exit 3", "" if it did not) and
    `death` (that job's Job.death figures)."""
    busy: dict[str, float] = {}
    jobs: dict[str, int] = {}
    failed: dict[str, int] = {}
    for j in t.jobs:
        end = j.end_ns if j.end_ns is not None else j.start_ns
        busy[j.worker] = busy.get(j.worker, 0.0) + (end - j.start_ns) / 1e9
        jobs[j.worker] = jobs.get(j.worker, 0) + 1
        failed[j.worker] = failed.get(j.worker, 0) + (j.status not in NOT_FAILED)
    peers = list(busy.values())
    died = by_worker(t)
    rows: list[dict[str, Any]] = []
    for wid, w in t.workers.items():
        b = busy.get(wid, 0.0)
        death = died.get(wid)
        rows.append({"worker": wid, "host": w.host, "pid": w.pid, "status": w.status,
                     "jobs": jobs.get(wid, 0), "failed_jobs": failed.get(wid, 0),
                     "lost": w.lost, "dropped": w.dropped, "busy_s": b,
                     "straggler": is_straggler(b, peers, straggler_factor),
                     "died": death.cause if death else "",
                     "death": death.job.death if death else None})
    rows.sort(key=lambda r: r["worker"])
    return rows
