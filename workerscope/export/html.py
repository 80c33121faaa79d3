"""The self-contained HTML report: a per-worker Gantt, the resource plots on the Gantt's time axis,
the workers, deaths and per-function tables (html_tables.py). One file, inline CSS and JS,
nothing fetched: it opens from disk, offline.

Spans go in as columnar JSON arrays (~25-50 bytes a span) drawn on <canvas>: inline SVG costs
~95 B and ~5 s of Chromium load per 100k spans. Nothing is dropped without a word on the
page: spans narrower than half a pixel are drawn as 1-px bins, spans past MAX_SPANS are
summarised as bins (html_spans.py), series denser than a screen are min/max binned, and the
page says how many of each.

The page's JS leaves data-drawn / data-ink on each canvas, collects errors in
body[data-errors] and sets body[data-ready]="1" when drawn, so a headless browser can test it.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import zlib
from importlib import resources
from typing import Any

from ..timeline import Span, Timeline, in_start_order
from ..units import fmt_seconds, json_safe
from .attribution import DIED, Attribution, attribute, function_table, workers_table
from .causes import cause_lines, stragglers
from .creep import creep_lines, memory_creep
from .deaths import JOB_DIED, by_worker, deaths, figures, headline, memory_limits
from .html_spans import (
    Scene,
    attrs_table,
    errors,
    estimates,
    keep_longest,
    num,
    place,
    scene,
    span_bins,
    span_columns,
)
from .html_tables import (
    clip,
    deaths_html,
    esc,
    functions_html,
    header,
    iso,
    stacks_html,
    stacks_of,
    us,
    workers_html,
)
from .plotspec import PLOTS, plot_series

MAX_SPANS = 500_000  # spans embedded one by one; the shortest beyond this are binned
MAX_POINTS = 4_000  # points per plotted series; denser series are min/max binned
# Lanes per worker (lanes.py: a lane per depth, and more for spans that run beside others);
# spans past them share the last lane (the page says so).
MAX_LANES = 24


def to_html(timeline: Timeline, title: str = "workerscope report") -> str:
    """One self-contained HTML document showing `timeline`."""
    t = timeline
    attribution = attribute(t)
    wtable = workers_table(t)
    try:
        data, notices = _payload(t, attribution, wtable)
    except RecursionError:
        # A span's attrs nest deeper than json (and repr) recurse: drawn from copies cut at
        # units.MAX_DEPTH levels. Only then: bounding every span's attrs costs a walk of each.
        data, notices = _payload(_bounded_attrs(t), attribution, wtable)
    ftable = function_table(t, attribution)
    blob = json.dumps(data, separators=(",", ":"), allow_nan=False)
    # "<" only occurs inside JSON strings, where \u003c means the same: no "</script>" or
    # "<!--" can end the block early, whatever a span is named.
    blob = blob.replace("<", "\\u003c")
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
        f"<title>{esc(title)}</title><style>{_CSS}</style>",
        f"<script>{_JS_ERRORS}</script></head><body>",
        header(t, title, data, notices, creep_lines(memory_creep(t, attribution)),
               cause_lines(stragglers(t))),
        "<section><h2>Workers over time</h2>",
        "<p class=\"hint\">Wheel over any chart: zoom all charts around the cursor. Drag: pan. "
        "Double-click: reset. Hover: details.</p>",
        "<div id=\"stack\"><canvas id=\"gantt\"></canvas>",
        *(f"<canvas id=\"{p['id']}\" class=\"plot\"></canvas>" for p in data["plots"]),
        "<div id=\"cursor\"></div></div><p id=\"gantt-note\" class=\"note\"></p></section>",
        workers_html(t, wtable, data),
        deaths_html(t, data),
        stacks_html(t, data),
        functions_html(ftable),
        "<div id=\"tip\"></div>",
        f"<script type=\"application/json\" id=\"ws-data\">{blob}</script>",
        f"<script>{_JS}</script></body></html>\n",
    ]
    return "".join(parts)


# -- data ---------------------------------------------------------------------------------------
def _payload(t: Timeline, attribution: Attribution, wtable: list[dict[str, Any]]
             ) -> tuple[dict[str, Any], list[str]]:
    notices: list[str] = []
    spans = in_start_order(t.spans)
    sc = scene(t, spans)
    origin, order = sc.origin, sc.order
    lane, depth, lanes, squeezed = place(spans, sc, MAX_LANES)
    if squeezed:
        notices.append(f"{squeezed:,} spans would need more than {MAX_LANES} lanes of their "
                       f"worker (nested deeper, or running beside other spans) and are drawn "
                       f"in its lane {MAX_LANES}.")
    keep, binned, lane, depth = keep_longest(spans, lane, depth, MAX_SPANS)
    names: dict[str, int] = {}
    threads: dict[tuple[int, int], int] = {}
    cols = span_columns(keep, lane, depth, sc, names, threads)
    akeys, ascale, avals = estimates(keep, attribution)
    bins = span_bins(binned, sc)
    if binned:
        notices.append(_binned_notice(len(spans), len(keep), binned, bins))
    for m in t.marks:
        names.setdefault(m.name, len(names))
    dumps = stacks_of(t)
    dump_at = {id(m): k for k, m in enumerate(dumps)}
    plots, plot_notes = _plots(t, origin, order)
    notices.extend(plot_notes)
    span_us = max(us(sc.end, origin), 1)
    pad = span_us * 0.01
    data = {
        "origin_ns": origin, "end_us": us(sc.end, origin), "t0": -pad, "t1": span_us + pad,
        "start": iso(origin), "workers": _workers(t, sc, wtable, lanes), "names": list(names),
        # Hues from the name, so a function keeps its colour across reports; never the reds
        # (hue 340-20) that mean an error or a death.
        "hues": [20 + zlib.crc32(n.encode("utf-8", "replace")) % 320 for n in names],
        "threads": [list(k) for k in threads],
        "spans": cols, "errors": errors(keep), "attrs": attrs_table(keep),
        "jobDeaths": _job_deaths(t, keep), "deaths": _death_marks(t, sc),
        "akeys": akeys, "ascale": ascale, "avals": avals,
        "bins": bins, "binned": len(binned),
        # [worker, t, name, the dump of stacks it is (its place on the page), -1 for none]
        "marks": [[sc.widx[m.worker], us(m.t_ns, origin), names[m.name], dump_at.get(id(m), -1)]
                  for m in sorted(t.marks, key=lambda m: m.t_ns)],
        "dumps": [str((m.attrs or {}).get("reason", ""))[:200] for m in dumps],
        "plots": plots, "counts": [len(order), len(t.jobs), len(spans)],
    }
    return data, notices


def _binned_notice(total: int, kept: int, binned: list[tuple[Span, int]],
                   bins: dict[str, list[Any]]) -> str:
    shortest = max(s.duration_ns for s, _ in binned) / 1e9
    return (f"{total:,} spans: the {kept:,} longest (every job included) are drawn "
            f"one by one; the other {len(binned):,} (each {fmt_seconds(shortest)} or shorter) are "
            f"drawn as {len(bins['c']):,} grey bins, with counts on hover.")


def _workers(t: Timeline, sc: Scene, wtable: list[dict[str, Any]], lanes: dict[str, int]
             ) -> list[list[Any]]:
    """A row per worker: id, status, died, straggler, lanes, host, pid, its last event, how
    many notes, the death's headline and what the page tells of it."""
    straggler = {r["worker"]: r["straggler"] for r in wtable}
    killed_jobs = {j.worker for j in t.jobs if j.status in JOB_DIED}
    died_in = by_worker(t)
    rows = []
    for wid in sc.order:
        w = t.workers.get(wid)
        status = w.status if w else "unknown"
        death = died_in.get(wid)
        tag = headline(death.cause) if death else ""
        told = _death_lines(death.job.error, death.job.death) if death else []
        rows.append([wid, status, int(status in DIED or wid in killed_jobs),
                     int(bool(straggler.get(wid))), lanes[wid], w.host if w else "",
                     w.pid if w else 0, us(sc.last[wid], sc.origin), len(w.notes) if w else 0,
                     tag, told])
    return rows


def _job_deaths(t: Timeline, keep: list[Span]) -> list[list[Any]]:
    """The jobs a worker died in: the index of each one's span and its figures, for the
    job's tooltip."""
    span_at = {(s.worker, s.pid, s.id): i for i, s in enumerate(keep) if s.kind == "job"}
    return [[span_at[k], _death_lines(None, d.job.death)] for d in deaths(t)
            if (k := (d.worker, d.job.pid, d.job.id)) in span_at]


def _death_marks(t: Timeline, sc: Scene) -> list[list[Any]]:
    """Each death's moment, drawn on every plot (with the tree's last RSS on the memory
    plot)."""
    return [[us(d.t_ns, sc.origin), sc.widx[d.worker], headline(d.cause),
             num((d.job.death or {}).get("last_tree_rss_bytes"))]
            for d in deaths(t) if d.worker in sc.widx]


def _plots(t: Timeline, origin: int, order: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    plots, notes = [], []
    for spec in PLOTS:
        series, total, kept = [], 0, 0
        for line in plot_series(t, spec, order):
            total += len(line.points)
            pts = _thin(line.points)
            kept += len(pts)
            ts, vs, prev = [], [], 0
            for tn, v in pts:
                u = us(tn, origin)
                ts.append(u - prev)
                prev = u
                vs.append(num(v))
            series.append({"label": line.label, "c": line.color, "t": ts, "v": vs})
        note = ""
        if kept < total:
            note = f"{total:,} points drawn as {kept:,} (min/max per bin)"
            notes.append(f"{spec.title}: {note}.")
        what = f"{spec.scope}{'<i>' if spec.scope == 'gpu' else ''}.{'+'.join(spec.metrics)}"
        empty = f"no data: no {what} samples" + (" (a rate needs two)" if spec.rate else "")
        # Exact: the line is drawn where the limit is, not 4 digits near it.
        limits = [[int(v) if v.is_integer() else v, label]
                  for v, label in memory_limits(t)] if spec.id == "plot-mem" else []
        plots.append({"id": spec.id, "title": spec.title, "unit": spec.unit, "series": series,
                      "note": note, "empty": empty, "limits": limits})
    return plots, notes


def _thin(pts: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """At most MAX_POINTS points: the min and the max of each of MAX_POINTS/2 time bins."""
    if len(pts) <= MAX_POINTS:
        return pts
    t0, t1 = pts[0][0], pts[-1][0]
    nb = MAX_POINTS // 2
    width = max((t1 - t0) / nb, 1)
    out = []
    lo = 0
    times = [p[0] for p in pts]
    for b in range(nb):
        hi = bisect.bisect_left(times, t0 + (b + 1) * width) if b < nb - 1 else len(pts)
        chunk = pts[lo:hi]
        if chunk:
            a = min(chunk, key=lambda p: p[1])
            z = max(chunk, key=lambda p: p[1])
            out.extend(sorted({a, z}))
        lo = hi
    return out


# -- small helpers ------------------------------------------------------------------------------
def _bounded_attrs(t: Timeline) -> Timeline:
    """`t` with every span's attrs made safe for JSON (units.json_safe: nesting cut, keys made
    strings), the same records otherwise."""
    def safe(s: Span) -> Span:
        attrs = json_safe(s.attrs)
        return dataclasses.replace(s, attrs=attrs) if isinstance(attrs, dict) else s

    return dataclasses.replace(t, spans=[safe(s) if s.attrs else s for s in t.spans])


def _death_lines(error: str | None, death: dict[str, Any] | None) -> list[str]:
    """What the page tells of a death: the error text, then each figure."""
    return ([clip(error)] if error else []) + [clip(f) for f in figures(death)]


# The page's style and drawing code live beside this module as plain files (package data),
# read once; to_html inlines them, so the report still needs no network.
_CSS = resources.files(__package__).joinpath("report.css").read_text(encoding="utf-8")
_JS = resources.files(__package__).joinpath("report.js").read_text(encoding="utf-8")

# Installed first, so an error anywhere later (the data, the drawing) is on the page for a test.
_JS_ERRORS = """
(function(){function add(m){var b=document.body||document.documentElement;
b.dataset.errors=(b.dataset.errors?b.dataset.errors+"\\n":"")+m;}
window.__wsError=add;
window.onerror=function(m,src,line,col){add(String(m)+" (line "+line+":"+col+")");};
window.addEventListener("unhandledrejection",function(e){add("unhandled rejection: "+
String(e.reason));});})();
"""


