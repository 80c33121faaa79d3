"""PNG plots: the six resource plots and the Gantt on one time axis, in one figure.

Needs matplotlib (`pip install 'workerscope[plots]'`), imported only here and only when called.
"""

from __future__ import annotations

import os
import zlib
from typing import Any

from ..errors import WorkerscopeError
from ..timeline import Timeline
from .attribution import DIED
from .plotspec import PLOTS, plot_series
from .units import binary_scale, short_worker


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
        if t.workers[wid].status in DIED:
            gantt.text(0, row, "✗ " + t.workers[wid].status, color="tab:red", va="center")
    gantt.set_ylim(-0.5, max(len(workers), 1) - 0.5 + 0.18 * 4)
    gantt.set_yticks(range(len(workers)))
    gantt.set_yticklabels([short_worker(w) for w in workers], fontsize=8)
    gantt.invert_yaxis()
    gantt.set_title("Spans per worker")
    # The same lines as the HTML report's plots, workers and devices in the same order.
    order = sorted(set(t.workers) | {smp.worker for smp in t.samples})
    for ax, spec in zip(axes[1:], PLOTS, strict=True):
        lines = plot_series(t, spec, order)
        scale = binary_scale(spec.axis)
        for line in lines:
            ax.plot([(tn - origin) / 1e9 for tn, _ in line.points],
                    [v / scale for _, v in line.points],
                    label=short_worker(line.label) if line.worker else line.label, linewidth=1)
        if not lines:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center",
                    color="grey")
        elif len(lines) <= 8:
            ax.legend(fontsize=7, loc="upper right")
        ax.set_title(spec.title, fontsize=9)
        ax.set_ylabel(spec.axis, fontsize=8)
    axes[-1].set_xlabel("seconds since start")
    fig.tight_layout()
    return fig


def save_png(t: Timeline, path: str | os.PathLike[str]) -> str:
    """Write the figure as a PNG. Returns the path."""
    figure(t).savefig(os.fspath(path), dpi=100)
    return os.fspath(path)
