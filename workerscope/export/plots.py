"""PNG plots: the six resource plots and the Gantt on one time axis, in one figure.

Needs matplotlib (`pip install 'workerscope[plots]'`), imported only here and only when called.
"""

from __future__ import annotations

import os
import zlib
from typing import Any

from ..errors import WorkerscopeError
from ..timeline import Timeline

PLOTS = [  # (title, scope, metric or metrics, as a rate?, scale, unit)
    ("CPU (tree)", "tree", ("cpu_percent",), False, 1.0, "% of a core"),
    ("Memory (tree RSS)", "tree", ("rss_bytes",), False, 1e-6, "MB"),
    ("Disk IO (tree)", "tree", ("read_bytes", "write_bytes"), True, 1e-6, "MB/s"),
    ("Network (host)", "host", ("net_sent_bytes", "net_recv_bytes"), True, 1e-6, "MB/s"),
    ("GPU utilisation", "gpu", ("util_percent",), False, 1.0, "%"),
    ("GPU memory", "gpu", ("mem_used_bytes",), False, 1e-9, "GB"),
]


def _lines(t: Timeline, scope: str, metrics: tuple[str, ...], rate: bool,
           origin: int) -> dict[str, tuple[list[float], list[float]]]:
    """label -> (seconds, values) for each worker (and GPU) that has the metric."""
    groups: dict[str, list[tuple[int, float]]] = {}
    for s in t.samples:
        if (s.scope == scope or (scope == "gpu" and s.scope.startswith("gpu"))) and all(
                m in s.values for m in metrics):
            label = s.worker.split(":")[0] + ":" + s.worker.split(":")[1] if ":" in s.worker else s.worker
            if scope == "gpu":
                label += f" {s.scope}"
            groups.setdefault(label, []).append((s.t_ns, sum(s.values[m] for m in metrics)))
    out = {}
    for label, rows in groups.items():
        rows.sort()
        if rate:
            rows = [(t1, max(v1 - v0, 0) / ((t1 - t0) / 1e9)) for (t0, v0), (t1, v1)
                    in zip(rows, rows[1:]) if t1 > t0]
        out[label] = ([(ts - origin) / 1e9 for ts, _ in rows], [v for _, v in rows])
    return out


def figure(t: Timeline) -> Any:
    """A matplotlib Figure: the Gantt on top, the six plots under it, x shared."""
    try:
        # A Figure with its own Agg canvas: no pyplot, so the user's backend is left alone.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise WorkerscopeError(
            "PNG plots need matplotlib: pip install 'workerscope[plots]'") from err
    origin = t.start_ns or 0
    workers = sorted(t.workers)
    fig = Figure(figsize=(12, 3 + 2.2 * 7))
    FigureCanvasAgg(fig)
    axes = fig.subplots(7, 1, sharex=True,
                        gridspec_kw={"height_ratios": [max(2, len(workers) * 0.6)] + [1] * 6})
    gantt = axes[0]
    for row, wid in enumerate(workers):
        depth_of: dict[int, int] = {}
        # One broken_barh per (lane, colour): a million spans are a few collections, not a
        # million artists.
        lanes: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for s in sorted((s for s in t.spans if s.worker == wid), key=lambda s: s.start_ns):
            depth = depth_of.get(s.parent, -1) + 1 if s.parent is not None else 0
            depth_of[s.id] = depth
            color = "tab:red" if s.error else f"C{zlib.crc32(s.name.encode()) % 10}"
            lanes.setdefault((depth, color), []).append(
                ((s.start_ns - origin) / 1e9, (s.end_ns - s.start_ns) / 1e9))
        for (depth, color), bars in lanes.items():
            gantt.broken_barh(bars, (row + depth * 0.18 - 0.09, 0.18), facecolors=color,
                              edgecolor="none")
        if t.workers[wid].status in ("killed", "sidecar_lost"):
            gantt.text(0, row, "✗ " + t.workers[wid].status, color="tab:red", va="center")
    gantt.set_ylim(-0.5, max(len(workers), 1) - 0.5 + 0.18 * 4)
    gantt.set_yticks(range(len(workers)))
    gantt.set_yticklabels([":".join(w.split(":")[:2]) for w in workers], fontsize=8)
    gantt.invert_yaxis()
    gantt.set_title("Spans per worker")
    for ax, (title, scope, metrics, rate, scale, unit) in zip(axes[1:], PLOTS):
        lines = _lines(t, scope, metrics, rate, origin)
        for label, (xs, ys) in sorted(lines.items()):
            ax.plot(xs, [y * scale for y in ys], label=label, linewidth=1)
        if not lines:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center",
                    color="grey")
        elif len(lines) <= 8:
            ax.legend(fontsize=7, loc="upper right")
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(unit, fontsize=8)
    axes[-1].set_xlabel("seconds since start")
    fig.tight_layout()
    return fig


def save_png(t: Timeline, path: str | os.PathLike) -> str:
    """Write the figure as a PNG. Returns the path."""
    figure(t).savefig(os.fspath(path), dpi=100)
    return os.fspath(path)
