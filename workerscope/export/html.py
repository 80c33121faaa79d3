"""The self-contained HTML report: a per-worker Gantt, the resource plots on the Gantt's time axis,
the workers, deaths and per-function tables (html_tables.py). One file, inline CSS and JS,
nothing fetched: it opens from disk, offline.

Spans go in as columnar JSON arrays (~25-50 bytes a span) drawn on <canvas>: inline SVG costs
~95 B and ~5 s of Chromium load per 100k spans (DESIGN.md, "HTML at scale"). Nothing is dropped
without a word on the page: spans narrower than half a pixel are drawn as 1-px bins, spans past
MAX_SPANS are summarised here as bins, series denser than a screen are min/max binned, and the
page says how many of each.

The page's JS leaves data-drawn / data-ink on each canvas, collects errors in
body[data-errors] and sets body[data-ready]="1" when drawn, so a headless browser can test it.
"""

from __future__ import annotations

import bisect
import json
import math
import zlib
from importlib import resources
from itertools import pairwise
from typing import Any

from ..protocol import Status
from ..timeline import Span, Timeline
from ..units import BYTE_UNITS, fmt_seconds
from .attribution import DIED, Attribution, attribute, function_table, workers_table
from .deaths import JOB_DIED, by_worker, deaths, figures, headline, is_cut_short, memory_limits
from .html_tables import clip, deaths_html, esc, functions_html, header, iso, us, workers_html
from .lanes import layout
from .plotspec import PLOTS, plot_series

MAX_SPANS = 500_000  # spans embedded one by one; the shortest beyond this are binned
SPAN_BINS = 4_000  # time bins per lane for the spans beyond MAX_SPANS
MAX_POINTS = 4_000  # points per plotted series; denser series are min/max binned
# Lanes per worker (lanes.py: a lane per depth, and more for spans that run beside others);
# spans past them share the last lane (the page says so).
MAX_LANES = 24
MAX_TRACEBACK = 1_500  # characters of a failed span's traceback (its end) kept for the tooltip

# Attribution keys in tooltip order; any other key attribute() returns follows, sorted.
_ATTR_KEYS = ("cpu_s", "tree_cpu_s", "peak_rss_bytes", "rss_growth_bytes", "read_bytes",
              "write_bytes", "gpu_util_percent", "gpu_mem_bytes")


def to_html(timeline: Timeline, title: str = "workerscope report") -> str:
    """One self-contained HTML document showing `timeline`."""
    t = timeline
    attribution = attribute(t)
    wtable = workers_table(t)
    data, notices = _payload(t, attribution, wtable)
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
        header(t, title, data, notices),
        "<section><h2>Workers over time</h2>",
        "<p class=\"hint\">Wheel over any chart: zoom all charts around the cursor. Drag: pan. "
        "Double-click: reset. Hover: details.</p>",
        "<div id=\"stack\"><canvas id=\"gantt\"></canvas>",
        *(f"<canvas id=\"{p['id']}\" class=\"plot\"></canvas>" for p in data["plots"]),
        "<div id=\"cursor\"></div></div><p id=\"gantt-note\" class=\"note\"></p></section>",
        workers_html(t, wtable, data),
        deaths_html(t, data),
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
    spans = sorted(t.spans, key=lambda s: (s.start_ns, -s.end_ns))
    times = [s.start_ns for s in spans] + [s.end_ns for s in spans]
    times += [m.t_ns for m in t.marks] + [s.t_ns for s in t.samples]
    times += [j.start_ns for j in t.jobs] + [j.end_ns for j in t.jobs if j.end_ns is not None]
    origin, end = (min(times), max(times)) if times else (0, 0)

    order = sorted(set(t.workers) | {s.worker for s in spans} | {s.worker for s in t.samples}
                   | {m.worker for m in t.marks})
    widx = {w: i for i, w in enumerate(order)}
    straggler = {r["worker"]: r["straggler"] for r in wtable}
    killed_jobs = {j.worker for j in t.jobs if j.status in JOB_DIED}
    died_in = by_worker(t)
    last = dict.fromkeys(order, origin)
    for s in spans:
        last[s.worker] = max(last[s.worker], s.end_ns)
    for smp in t.samples:
        last[smp.worker] = max(last[smp.worker], smp.t_ns)

    # Where each span is drawn to: a job still running runs on to its worker's last event.
    ends = [max(last[s.worker], s.start_ns) if _running(s) else s.end_ns for s in spans]
    placed = layout(spans, ends, MAX_LANES)
    lane, depth = placed.lanes, placed.depths
    squeezed = sum(n >= MAX_LANES for n in lane)
    if squeezed:
        notices.append(f"{squeezed:,} spans would need more than {MAX_LANES} lanes of their "
                       f"worker (nested deeper, or running beside other spans) and are drawn "
                       f"in its lane {MAX_LANES}.")
    lane = [min(n, MAX_LANES - 1) for n in lane]
    lanes = dict.fromkeys(order, 1)
    for s, n in zip(spans, lane, strict=True):
        lanes[s.worker] = max(lanes[s.worker], n + 1)

    keep, binned = spans, []
    if len(spans) > MAX_SPANS:
        # Keep every job and the longest spans; the rest become per-lane time bins.
        ranked = sorted(range(len(spans)),
                        key=lambda i: (spans[i].kind != "job", -spans[i].duration_ns))
        chosen = set(ranked[:MAX_SPANS])
        keep = [s for i, s in enumerate(spans) if i in chosen]
        binned = [(s, n) for i, (s, n) in enumerate(zip(spans, lane, strict=True))
                  if i not in chosen]
        lane = [n for i, n in enumerate(lane) if i in chosen]
        depth = [d for i, d in enumerate(depth) if i in chosen]

    names: dict[str, int] = {}
    threads: dict[tuple[int, int], int] = {}
    starts = [round((s.start_ns - origin) / 1000) for s in keep]
    lengths = [_dur_us(s.end_ns - s.start_ns) for s in keep]
    # 1 error, 2 job, 4 a job its worker died in, 8 still running, 16 cut short by a death
    flags = [(s.error is not None) | (s.kind == "job") << 1 | is_cut_short(s) << 4 for s in keep]
    for i, s in enumerate(keep):
        if s.kind == "job" and (s.attrs or {}).get("status") in JOB_DIED:
            flags[i] |= 4
        elif _running(s):  # still open: drawn up to its worker's last event
            flags[i] |= 8
            lengths[i] = _dur_us(max(last[s.worker] - s.start_ns, 0))
    cols = {
        "w": [widx[s.worker] for s in keep],
        "d": lane,
        "n": [names.setdefault(s.name, len(names)) for s in keep],
        # deltas of the sorted starts: a few digits each
        "t": [b - a for a, b in pairwise([0, *starts])],
        "l": lengths,
        "f": flags,
        "h": [threads.setdefault((s.pid, s.tid), len(threads)) for s in keep],
    }
    if lane != depth:  # spans ran beside others: their depth, for the tooltip, is not the lane
        cols["e"] = depth
    errors = [[i, _error_text(s)] for i, s in enumerate(keep) if s.error is not None]
    # Attrs (a job's are its status and light-mode stats) as a table of distinct texts and,
    # per span that has any, the delta of its index and its text's number. A failed span's
    # traceback goes with its error instead.
    texts: dict[str, int] = {}
    shown = [(i, _shown_attrs(s)) for i, s in enumerate(keep)]
    having = [(i, texts.setdefault(clip(_attrs_text(a)), len(texts))) for i, a in shown if a]
    attrs = {"i": [b[0] - a[0] for a, b in pairwise([(0, 0), *having])],
             "x": [x for _, x in having], "texts": list(texts)}
    seen = {k for a in attribution.values() for k in a}
    akeys = [k for k in _ATTR_KEYS if k in seen] + sorted(seen - set(_ATTR_KEYS))
    arows = [attribution.get((s.worker, s.pid, s.id)) or {} for s in keep]
    walls = [max(s.end_ns - s.start_ns, 1) / 1e9 for s in keep]
    ascale = [_attr_scale(k) for k in akeys]
    avals = [_attr_column(arows, k, scale, walls) for k, scale in zip(akeys, ascale, strict=True)]

    bins = _span_bins(binned, origin, end, widx)
    if binned:
        shortest = max(s.duration_ns for s, _ in binned) / 1e9
        notices.append(
            f"{len(spans):,} spans: the {len(keep):,} longest (every job included) are drawn "
            f"one by one; the other {len(binned):,} (each {fmt_seconds(shortest)} or shorter) are "
            f"drawn as {len(bins['c']):,} grey bins, with counts on hover.")
    for m in t.marks:
        names.setdefault(m.name, len(names))

    workers = []
    for wid in order:
        w = t.workers.get(wid)
        status = w.status if w else "unknown"
        death = died_in.get(wid)
        tag = headline(death.cause) if death else ""
        told = _death_lines(death.job.error, death.job.death) if death else []
        workers.append([wid, status, int(status in DIED or wid in killed_jobs),
                        int(bool(straggler.get(wid))), lanes[wid], w.host if w else "",
                        w.pid if w else 0, us(last[wid], origin), len(w.notes) if w else 0,
                        tag, told])
    # The jobs a worker died in: their figures for the job's tooltip, and the moment drawn
    # on every plot (with the tree's last RSS on the memory plot).
    span_at = {(s.worker, s.pid, s.id): i for i, s in enumerate(keep) if s.kind == "job"}
    job_deaths = [[span_at[k], _death_lines(None, d.job.death)] for d in deaths(t)
                  if (k := (d.worker, d.job.pid, d.job.id)) in span_at]
    death_marks = [[us(d.t_ns, origin), widx[d.worker], headline(d.cause),
                    _num((d.job.death or {}).get("last_tree_rss_bytes"))]
                   for d in deaths(t) if d.worker in widx]

    plots, plot_notes = _plots(t, origin, order)
    notices.extend(plot_notes)
    span_us = max(us(end, origin), 1)
    pad = span_us * 0.01
    data = {
        "origin_ns": origin, "end_us": us(end, origin), "t0": -pad, "t1": span_us + pad,
        "start": iso(origin), "workers": workers, "names": list(names),
        # Hues from the name, so a function keeps its colour across reports; never the reds
        # (hue 340-20) that mean an error or a death.
        "hues": [20 + zlib.crc32(n.encode("utf-8", "replace")) % 320 for n in names],
        "threads": [list(k) for k in threads],
        "spans": cols, "errors": errors, "attrs": attrs,
        "jobDeaths": job_deaths, "deaths": death_marks,
        "akeys": akeys, "ascale": ascale, "avals": avals,
        "bins": bins, "binned": len(binned),
        "marks": [[widx[m.worker], us(m.t_ns, origin), names[m.name]]
                  for m in sorted(t.marks, key=lambda m: m.t_ns)],
        "plots": plots, "counts": [len(order), len(t.jobs), len(spans)],
    }
    return data, notices


def _attr_scale(key: str) -> Any:
    """How one attribution estimate is stored: short integers, since there is one per span per
    key. CPU seconds as % of one core over the span ("wall"), bytes in KiB (peaks in 0.1 MiB),
    percentages whole; anything else to 4 significant digits (None)."""
    if key.endswith("_s"):
        return "wall"
    if key in ("peak_rss_bytes", "gpu_mem_bytes"):
        return BYTE_UNITS["MiB"] / 10
    if key.endswith("_bytes"):
        return BYTE_UNITS["KiB"]
    if key.endswith("_percent"):
        return 1
    return None


def _attr_column(rows: list[dict[str, float]], key: str, scale: Any, walls: list[float]) -> str:
    """One key's estimates for every span, comma-separated, empty where absent: an absent
    value costs one byte instead of JSON's four ("null")."""
    vals = [a.get(key) for a in rows]
    if scale is not None:
        try:  # the fast path: 8 keys x 200k spans
            if scale == "wall":
                text = ",".join(["" if v is None else f"{v * 100 / w:.0f}"
                                 for v, w in zip(vals, walls, strict=True)])
            else:
                text = ",".join(["" if v is None else f"{v / scale:.0f}" for v in vals])
            if "n" not in text:  # no "inf" or "nan"
                return text
        except (TypeError, ValueError):
            text = ""  # an odd value somewhere: the careful loop below handles each one
    out: list[str] = []
    for v, wall in zip(vals, walls, strict=True):
        if v is None or not isinstance(v, (int, float)) or not math.isfinite(v):
            out.append("")
        elif scale is None:
            out.append(str(_num(v)))
        else:
            out.append(str(round(v * 100 / wall) if scale == "wall" else round(v / scale)))
    return ",".join(out)


def _span_bins(binned: list[tuple[Span, int]], origin: int, end: int,
               widx: dict[str, int]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {k: [] for k in "wdtlc"}
    if not binned:
        return out
    width = max((end - origin) / SPAN_BINS, 1.0)
    acc: dict[tuple[int, int, int], list[int]] = {}
    for s, d in binned:
        b = int((s.start_ns - origin) / width)
        cell = acc.setdefault((widx[s.worker], d, b), [0, 0])
        cell[0] += 1
        cell[1] += s.duration_ns
    for (w, d, b), (count, total) in sorted(acc.items(), key=lambda kv: kv[0][2]):
        out["w"].append(w)
        out["d"].append(d)
        out["t"].append(round(b * width / 1000))
        out["l"].append(max(round(width / 1000), 1))
        out["c"].append([count, _dur_us(total)])
    return out


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
                vs.append(_num(v))
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
def _running(s: Span) -> bool:
    """A job still open: drawn up to its worker's last event."""
    return s.kind == "job" and (s.attrs or {}).get("status") == Status.RUNNING


def _dur_us(ns: int) -> float:
    # Whole microseconds, except short spans, which keep nanoseconds to show "412 ns".
    return ns / 1000 if ns < 10_000 else round(ns / 1000)


def _num(v: Any) -> Any:
    """A number to 4 significant digits (short JSON), None when absent or not finite."""
    if v is None or isinstance(v, bool):
        return None
    try:
        r = float(f"{v:.4g}")
    except (TypeError, ValueError):
        return None
    if r - r != 0:  # inf or nan
        return None
    return int(r) if r.is_integer() and abs(r) < 2**53 else r


# One encoder: json.dumps with options builds a new one per call, ~3 us a span.
_ATTRS_JSON = json.JSONEncoder(default=repr, ensure_ascii=False, sort_keys=True)


def _attrs_text(attrs: dict[str, Any]) -> str:
    try:
        return _ATTRS_JSON.encode(attrs)
    except (TypeError, ValueError):  # keys json cannot write (tuples, mixed types)
        return repr(attrs)


def _shown_attrs(s: Span) -> dict[str, Any] | None:
    """A span's attrs for its tooltip: a failed span's traceback is told with its error."""
    if s.attrs and s.error is not None and isinstance(s.attrs.get("traceback"), str):
        return {k: v for k, v in s.attrs.items() if k != "traceback"}
    return s.attrs


def _error_text(s: Span) -> str:
    """A failed span's error ("Type: message") and the end of its traceback, if it has one."""
    text = clip(str(s.error))
    tb = (s.attrs or {}).get("traceback")
    if isinstance(tb, str) and tb:
        # The end of a traceback names the failing line: keep that end.
        tail = tb if len(tb) <= MAX_TRACEBACK else "…" + tb[-MAX_TRACEBACK:]
        text += "\n" + tail.rstrip()
    return text


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


