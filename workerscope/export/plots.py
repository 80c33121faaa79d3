"""PNG plots: the resource plots (trees, their processes, host, GPUs) and the Gantt on one time
axis, in one figure.

Needs matplotlib (`pip install 'workerscope[plots]'`), imported only here and only when called.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import MissingExtraError
from ..timeline import Span, Timeline, in_start_order, write_atomic
from ..units import binary_scale, short_worker
from .attribution import DIED
from .breakdown import OTHERS
from .deaths import by_worker, deaths, headline, is_cut_short, memory_limits
from .lanes import layout
from .plotspec import PLOTS, plot_series

# Red marks errors and deaths only (report.js's RED): no function is ever filled with it.
ERROR_COLOR = "#d00000"
# One colour per function, the busiest first: tab10 without its red, then tab20's light tints
# without the light red. Functions past these share OTHER_COLOR (and the legend says so).
PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink",
           "tab:gray", "tab:olive", "tab:cyan", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5",
           "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5")
OTHER_COLOR = "#e2e4e8"
OTHERS_COLOR = "#8a94a6"  # the line summing the processes a breakdown does not draw
JOB_COLOR = "#dfe6f0"
MAX_LABELS = 80  # span names written on their bars, the widest first
LANE_H = 0.18  # height of one lane, in worker rows


def _colors(t: Timeline) -> dict[str, str]:
    """Function name -> its colour: the names with the most total time get the palette."""
    total: dict[str, int] = {}
    for s in t.spans:
        if s.kind != "job":
            total[s.name] = total.get(s.name, 0) + s.duration_ns
    ranked = sorted(total, key=lambda n: (-total[n], n))
    return {n: PALETTE[i] if i < len(PALETTE) else OTHER_COLOR for i, n in enumerate(ranked)}


def _ink(background: str) -> str:
    """Black or white text, whichever reads on `background`."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(background)
    return "#15181e" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def _gantt(ax: Any, t: Timeline, workers: list[str], origin: int) -> None:
    """Spans per worker, a lane per depth (more where spans ran at once): jobs pale, each
    function its colour, a failed span outlined in red, a span cut short by a death hatched;
    names on the wider bars; a legend."""
    colors = _colors(t)
    x_span = max(((t.end_ns or 0) - origin) / 1e9, 1e-9)
    labels: list[tuple[float, float, float, str, str]] = []  # (width, x, y, name, colour)
    for row, wid in enumerate(workers):
        labels += _bars(ax, t, wid, row, origin, colors)
    _names(ax, labels, x_span)
    _deaths(ax, t, workers, origin, x_span)
    _legend(ax, t, colors)


def _bars(ax: Any, t: Timeline, wid: str, row: int, origin: int, colors: dict[str, str]
          ) -> list[tuple[float, float, float, str, str]]:
    """One worker's spans on its row; returns a label for each: (width, x, y, name, colour)."""
    # One broken_barh per (lane, look): a million spans are a few collections, not a
    # million artists.
    lanes: dict[tuple[int, str, bool, bool], list[tuple[float, float]]] = {}
    labels = []
    spans: list[Span] = in_start_order(s for s in t.spans if s.worker == wid)
    # A lane per depth, and more for spans that ran beside others (lanes.py)
    for s, depth in zip(spans, layout(spans, limit=1_000).lanes, strict=True):
        color = JOB_COLOR if s.kind == "job" else colors[s.name]
        x, w = (s.start_ns - origin) / 1e9, s.duration_ns / 1e9
        lanes.setdefault((depth, color, s.error is not None, is_cut_short(s)), []).append(
            (x, w))
        labels.append((w, x, row + depth * LANE_H, s.name, color))
    for (depth, color, failed, cut), bars in lanes.items():
        ax.broken_barh(bars, (row + depth * LANE_H - LANE_H / 2, LANE_H), facecolors=color,
                       edgecolor=ERROR_COLOR if failed else ("#3a3f4b" if cut else "none"),
                       linewidth=1.2 if failed else 0.4, hatch="////" if cut else None)
    return labels


def _names(ax: Any, labels: list[tuple[float, float, float, str, str]], x_span: float) -> None:
    """Names on the widest bars, cut short to what fits."""
    for w, x, y, name, color in sorted(labels, reverse=True)[:MAX_LABELS]:
        room = int(w / x_span * 170)  # characters that fit: ~170 across the axis at 7 pt
        if room < 3:
            break
        text = name if len(name) <= room else name[:room - 1] + "…"
        ax.text(x + x_span * 0.002, y, text, fontsize=7, va="center", ha="left", clip_on=True,
                color=_ink(color))


def _deaths(ax: Any, t: Timeline, workers: list[str], origin: int, x_span: float) -> None:
    """✗ and what it died of where a worker died in a job; at the start where it died
    outside one."""
    died = by_worker(t)
    for row, wid in enumerate(workers):
        if wid in died:
            d = died[wid]
            x = (d.t_ns - origin) / 1e9
            ax.text(x, row - LANE_H, "✗ " + headline(d.cause), color=ERROR_COLOR, va="center",
                    ha="right" if x > 0.8 * x_span else "left", fontsize=8, fontweight="bold")
        elif t.workers[wid].status in DIED:
            ax.text(0, row, "✗ " + t.workers[wid].status, color=ERROR_COLOR, va="center")


def _legend(ax: Any, t: Timeline, colors: dict[str, str]) -> None:
    """The functions' colours, and the looks that the Gantt shows."""
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=c, label=n) for n, c in colors.items() if c != OTHER_COLOR]
    if OTHER_COLOR in colors.values():
        handles.append(Patch(facecolor=OTHER_COLOR, label="other functions"))
    if any(s.kind == "job" for s in t.spans):
        handles.append(Patch(facecolor=JOB_COLOR, label="job"))
    if any(s.error is not None for s in t.spans):
        handles.append(Patch(facecolor="white", edgecolor=ERROR_COLOR, linewidth=1.2,
                             label="failed"))
    if any(is_cut_short(s) for s in t.spans):
        handles.append(Patch(facecolor="white", edgecolor="#3a3f4b", hatch="////",
                             label="cut short by a death"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7,
                  frameon=False, title="spans", title_fontsize=8)


def figure(t: Timeline) -> Any:
    """A matplotlib Figure: the Gantt on top, the plots (plotspec.PLOTS) under it, x shared."""
    try:
        # A Figure with its own Agg canvas: no pyplot, so the user's backend is left alone.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise MissingExtraError(
            "PNG plots need matplotlib: pip install 'workerscope[plots]'") from err
    origin = t.start_ns or 0
    workers = sorted(t.workers)
    fig = Figure(figsize=(12, 3 + 2.2 * (1 + len(PLOTS))))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1 + len(PLOTS), 1, sharex=True, gridspec_kw={
        "height_ratios": [max(2, len(workers) * 0.6)] + [1] * len(PLOTS)})
    gantt = axes[0]
    _gantt(gantt, t, workers, origin)
    gantt.set_ylim(-0.5, max(len(workers), 1) - 0.5 + LANE_H * 4)
    gantt.set_yticks(range(len(workers)))
    gantt.set_yticklabels([short_worker(w) for w in workers], fontsize=8)
    gantt.invert_yaxis()
    gantt.set_title("Spans per worker")
    # The same lines as the HTML report's plots, workers and devices in the same order.
    order = sorted(set(t.workers) | {smp.worker for smp in t.samples})
    for ax, spec in zip(axes[1:], PLOTS, strict=True):
        lines = plot_series(t, spec, order)
        scale = binary_scale(spec.axis)
        ax.set_prop_cycle(color=PALETTE)  # matplotlib's own cycle has red fourth
        for line in lines:
            ax.plot([(tn - origin) / 1e9 for tn, _ in line.points],
                    [v / scale for _, v in line.points],
                    label=short_worker(line.label) if line.worker else line.label, linewidth=1,
                    **({"color": OTHERS_COLOR, "linestyle": "--"} if line.color == OTHERS
                       else {}))
        if lines:  # as in the HTML report: deaths on every plot, cgroup limits on memory
            for d in deaths(t):
                ax.axvline((d.t_ns - origin) / 1e9, color=ERROR_COLOR, linestyle=":",
                           linewidth=1)
            if spec.id == "plot-mem":
                for v, label in memory_limits(t):
                    ax.axhline(v / scale, color=ERROR_COLOR, linestyle="--", linewidth=1)
                    ax.text(1.0, v / scale, label + " ", transform=ax.get_yaxis_transform(),
                            color=ERROR_COLOR, fontsize=7, ha="right", va="bottom")
            if len(lines) <= 8:
                ax.legend(fontsize=7, loc="upper right")
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center",
                    color="grey")
        ax.set_title(spec.title, fontsize=9)
        ax.set_ylabel(spec.axis, fontsize=8)
    axes[-1].set_xlabel("seconds since start")
    fig.tight_layout()
    return fig


def save_png(t: Timeline, path: str | os.PathLike[str]) -> str:
    """Write the figure as a PNG, through timeline.write_atomic as every save (a temporary
    file nobody can plant a link at, then a rename). Returns the path."""
    fig = figure(t)
    return write_atomic(os.fspath(path), lambda f: fig.savefig(f, format="png", dpi=100))
