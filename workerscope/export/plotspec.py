"""The resource plots, specified once: the HTML report draws them on canvas, plots.py as a
PNG. Both take their series from plot_series, so a plot shows the same lines in either view.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import NamedTuple

from ..protocol import is_gpu_scope
from ..timeline import Timeline
from .breakdown import TOP, process_lines

Points = list[tuple[int, float]]  # (t_ns, value), sorted by time


class PlotSpec(NamedTuple):
    id: str  # the canvas id in the HTML report
    title: str
    scope: str  # tree, host, gpu (any gpu<i> device), sidecar, or proc: a per-process breakdown
    metrics: tuple[str, ...]  # summed; a sample missing one of them has no value
    rate: bool  # the metrics are cumulative counters: plot their rate per second
    per_device: bool  # a machine's counters (host, gpu<i>): one line per device, not per worker
    unit: str  # the value's own unit, as report.js formats it: "%", "B" or "B/s"
    axis: str  # the PNG's y-axis label; a binary byte unit there sets the scale (units.py)
    # proc: the processes drawn one by one are those of highest "peak" or "area" (CPU time)
    rank: str = ""


PLOTS = (
    PlotSpec("plot-cpu", "CPU (tree)", "tree", ("cpu_percent",), False, False, "%",
             "% of a core"),
    PlotSpec("plot-proc-cpu", f"CPU by process (top {TOP})", "proc",
             ("cpu_percent",), False, False, "%", "% of a core", "area"),
    PlotSpec("plot-mem", "RSS (tree)", "tree", ("rss_bytes",), False, False, "B", "MiB"),
    PlotSpec("plot-proc-mem", f"RSS by process (top {TOP})", "proc", ("rss_bytes",),
             False, False, "B", "MiB", "peak"),
    PlotSpec("plot-io", "Disk IO (tree)", "tree", ("read_bytes", "write_bytes"), True, False,
             "B/s", "MiB/s"),
    PlotSpec("plot-net", "Network (host)", "host", ("net_sent_bytes", "net_recv_bytes"), True,
             True, "B/s", "MiB/s"),
    PlotSpec("plot-gpu", "GPU util", "gpu", ("util_percent",), False, True, "%", "%"),
    PlotSpec("plot-gpumem", "GPU memory", "gpu", ("mem_used_bytes",), False, True, "B", "GiB"),
    # What the monitoring itself cost (overhead.py tells it in words).
    PlotSpec("plot-sidecar", "workerscope's own CPU", "sidecar", ("cpu_percent",), False, False,
             "%", "% of a core"),
)


class Series(NamedTuple):
    label: str  # a worker id; for a machine's device "host" or "host gpu<i>"; for a process
    # "name pid", or "others (N processes)"
    color: int  # the worker's index in the order given; devices follow the workers; for a
    # worker's own process its worker's, for another process one after the workers' by its
    # rank, and breakdown.OTHERS (grey) for the others
    worker: bool  # True when label is a worker id (a view may shorten it)
    points: Points


def counter_rates(points: Points) -> Points:
    """Per-second rates of a cumulative counter, each at the end of its interval. A counter that
    went back (reset, or a process left the tree) gives no rate for that interval."""
    return [(t1, (v1 - v0) * 1e9 / (t1 - t0)) for (t0, v0), (t1, v1) in pairwise(points)
            if t1 > t0 and v1 >= v0]


def _values(rows: list[tuple[int, dict[str, float]]], spec: PlotSpec) -> Points:
    """The plotted value of each sample row: the sum of spec.metrics (absent when one part is),
    finite values only, and their rates for a counter."""
    pts: Points = []
    for tn, vals in rows:
        try:
            v = sum(vals[m] for m in spec.metrics)
        except KeyError:
            continue
        if isinstance(v, (int, float)) and math.isfinite(v):
            pts.append((tn, float(v)))
    return counter_rates(pts) if spec.rate else pts


def _is_scope(scope: str, wanted: str) -> bool:
    return scope == wanted or (wanted == "gpu" and is_gpu_scope(scope))


def plot_series(t: Timeline, spec: PlotSpec, order: list[str]) -> list[Series]:
    """The lines of one plot: one per worker in `order` with samples of spec.scope, or for a
    machine's counters one per (host, device), or for a per-process breakdown one per top
    process and one for the others (breakdown.py). Series without a single value are left
    out."""
    if spec.scope == "proc":
        return [Series(label, color, False, pts)
                for label, color, pts in process_lines(t, spec.metrics[0], spec.rank, order)]
    groups: dict[tuple[str, str], list[tuple[int, dict[str, float]]]] = {}
    for smp in t.samples:
        if _is_scope(smp.scope, spec.scope):
            groups.setdefault((smp.worker, smp.scope), []).append((smp.t_ns, smp.values))
    for rows in groups.values():
        rows.sort(key=lambda r: r[0])
    sources: list[tuple[str, int, bool, list[tuple[int, dict[str, float]]]]] = []
    if not spec.per_device:
        sources = [(wid, i, True, groups[(wid, spec.scope)]) for i, wid in enumerate(order)
                   if (wid, spec.scope) in groups]
    else:
        # Host and GPU counters are the machine's: every worker of a host reads the same ones,
        # so plot each device once, from the worker that sampled it most.
        host_of = {wid: (t.workers[wid].host if wid in t.workers else "") for wid in order}
        best: dict[tuple[str, str], tuple[str, int]] = {}
        for (wid, sc), rows in groups.items():
            k = (host_of.get(wid, ""), sc)
            if k not in best or len(rows) > best[k][1]:
                best[k] = (wid, len(rows))
        for i, ((host, sc), (wid, _)) in enumerate(sorted(best.items())):
            label = f"{host or wid} {sc}" if spec.scope == "gpu" else (host or wid)
            sources.append((label, len(order) + i, False, groups[(wid, sc)]))
    out = []
    for label, color, is_worker, rows in sources:
        pts = _values(rows, spec)
        if pts:
            out.append(Series(label, color, is_worker, pts))
    return out
