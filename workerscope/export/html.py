"""The self-contained HTML report: a per-worker Gantt, six resource plots on the Gantt's time axis,
the per-function and workers tables. One file, inline CSS and JS, nothing fetched: it opens from
disk, offline.

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
import datetime
import html
import json
import math
import zlib
from typing import Any

from ..timeline import Span, Timeline
from .attribution import attribute, function_table, workers_table

MAX_SPANS = 500_000  # spans embedded one by one; the shortest beyond this are binned
SPAN_BINS = 4_000  # time bins per lane for the spans beyond MAX_SPANS
MAX_POINTS = 4_000  # points per plotted series; denser series are min/max binned
MAX_LANES = 24  # depth lanes per worker; deeper spans share the last lane (the page says so)
MAX_ROWS = 300  # rows of the per-function table
MAX_TEXT = 2_000  # characters of one span's attrs or error kept for the tooltip

# Attribution keys in tooltip order; any other key attribute() returns follows, sorted.
_ATTR_KEYS = ("cpu_s", "tree_cpu_s", "peak_rss_bytes", "rss_growth_bytes", "read_bytes",
              "write_bytes", "gpu_util_percent", "gpu_mem_bytes")
_KILLED = ("killed", "sidecar_lost")


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
        f"<title>{_esc(title)}</title><style>{_CSS}</style>",
        f"<script>{_JS_ERRORS}</script></head><body>",
        _header(t, title, data, notices),
        "<section><h2>Workers over time</h2>",
        "<p class=\"hint\">Wheel over any chart: zoom all charts around the cursor. Drag: pan. "
        "Double-click: reset. Hover: details.</p>",
        "<div id=\"stack\"><canvas id=\"gantt\"></canvas>",
        *(f"<canvas id=\"{p['id']}\" class=\"plot\"></canvas>" for p in data["plots"]),
        "<div id=\"cursor\"></div></div><p id=\"gantt-note\" class=\"note\"></p></section>",
        _workers_html(t, wtable, data),
        _functions_html(ftable),
        "<div id=\"tip\"></div>",
        f"<script type=\"application/json\" id=\"ws-data\">{blob}</script>",
        f"<script>{_JS}</script></body></html>\n",
    ]
    return "".join(parts)


# -- data ---------------------------------------------------------------------------------------
def _payload(t: Timeline, attribution: dict, wtable: list[dict[str, Any]]
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
    killed_jobs = {j.worker for j in t.jobs if j.status == "killed"}
    last = dict.fromkeys(order, origin)
    for s in spans:
        last[s.worker] = max(last[s.worker], s.end_ns)
    for smp in t.samples:
        last[smp.worker] = max(last[smp.worker], smp.t_ns)

    depth = _depths(spans)
    deep = sum(d >= MAX_LANES for d in depth)
    if deep:
        notices.append(f"{deep:,} spans nested deeper than {MAX_LANES} levels are drawn in "
                       f"their worker's lane {MAX_LANES}.")
    lanes = dict.fromkeys(order, 1)
    for s, d in zip(spans, depth):
        lanes[s.worker] = max(lanes[s.worker], min(d, MAX_LANES - 1) + 1)

    keep, binned = spans, []
    if len(spans) > MAX_SPANS:
        # Keep every job and the longest spans; the rest become per-lane time bins.
        ranked = sorted(range(len(spans)),
                        key=lambda i: (spans[i].kind != "job", -spans[i].duration_ns))
        chosen = set(ranked[:MAX_SPANS])
        keep = [s for i, s in enumerate(spans) if i in chosen]
        binned = [(s, d) for i, (s, d) in enumerate(zip(spans, depth)) if i not in chosen]
        depth = [d for i, d in enumerate(depth) if i in chosen]

    names: dict[str, int] = {}
    threads: dict[tuple[int, int], int] = {}
    starts = [round((s.start_ns - origin) / 1000) for s in keep]
    cols = {
        "w": [widx[s.worker] for s in keep],
        "d": [min(d, MAX_LANES - 1) for d in depth],
        "n": [names.setdefault(s.name, len(names)) for s in keep],
        # deltas of the sorted starts: a few digits each
        "t": [b - a for a, b in zip([0] + starts, starts)],
        "l": [_dur_us(s.end_ns - s.start_ns) for s in keep],
        "f": [(s.error is not None) | (s.kind == "job") << 1 for s in keep],
        "h": [threads.setdefault((s.pid, s.tid), len(threads)) for s in keep],
    }
    for i, s in enumerate(keep):
        status = s.kind == "job" and (s.attrs or {}).get("status")
        if status == "killed":
            cols["f"][i] |= 4
        elif status == "running":  # still open: drawn up to its worker's last event
            cols["f"][i] |= 8
            cols["l"][i] = _dur_us(max(last[s.worker] - s.start_ns, 0))
    errors = [[i, _clip(s.error)] for i, s in enumerate(keep) if s.error is not None]
    # Attrs (a job's are its status and light-mode stats) as a table of distinct texts and,
    # per span that has any, the delta of its index and its text's number.
    texts: dict[str, int] = {}
    having = [(i, texts.setdefault(_clip(_attrs_text(s.attrs)), len(texts)))
              for i, s in enumerate(keep) if s.attrs]
    attrs = {"i": [b[0] - a[0] for a, b in zip([(0, 0)] + having, having)],
             "x": [x for _, x in having], "texts": list(texts)}
    seen = {k for a in attribution.values() for k in a}
    akeys = [k for k in _ATTR_KEYS if k in seen] + sorted(seen - set(_ATTR_KEYS))
    arows = [attribution.get((s.worker, s.pid, s.id)) or {} for s in keep]
    walls = [max(s.end_ns - s.start_ns, 1) / 1e9 for s in keep]
    ascale = [_attr_scale(k) for k in akeys]
    avals = [_attr_column(arows, k, scale, walls) for k, scale in zip(akeys, ascale)]

    bins = _span_bins(binned, origin, end, widx)
    if binned:
        shortest = max(s.duration_ns for s, _ in binned) / 1e9
        notices.append(
            f"{len(spans):,} spans: the {len(keep):,} longest (every job included) are drawn "
            f"one by one; the other {len(binned):,} (each {_fmt_s(shortest)} or shorter) are "
            f"drawn as {len(bins['c']):,} grey bins, with counts on hover.")
    for m in t.marks:
        names.setdefault(m.name, len(names))

    workers = []
    for wid in order:
        w = t.workers.get(wid)
        status = w.status if w else "unknown"
        workers.append([wid, status, int(status in _KILLED or wid in killed_jobs),
                        int(bool(straggler.get(wid))), lanes[wid], w.host if w else "",
                        w.pid if w else 0, _us(last[wid], origin), len(w.notes) if w else 0])

    plots, plot_notes = _plots(t, origin, order)
    notices.extend(plot_notes)
    span_us = max(_us(end, origin), 1)
    pad = span_us * 0.01
    data = {
        "origin_ns": origin, "end_us": _us(end, origin), "t0": -pad, "t1": span_us + pad,
        "start": _iso(origin), "workers": workers, "names": list(names),
        "hues": [zlib.crc32(n.encode("utf-8", "replace")) % 360 for n in names],
        "threads": [list(k) for k in threads],
        "spans": cols, "errors": errors, "attrs": attrs,
        "akeys": akeys, "ascale": ascale, "avals": avals,
        "bins": bins, "binned": len(binned),
        "marks": [[widx[m.worker], _us(m.t_ns, origin), names[m.name]]
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
        return 104857.6
    if key.endswith("_bytes"):
        return 1024
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
                                 for v, w in zip(vals, walls)])
            else:
                text = ",".join(["" if v is None else f"{v / scale:.0f}" for v in vals])
            if "n" not in text:  # no "inf" or "nan"
                return text
        except (TypeError, ValueError):
            pass
    out: list[str] = []
    for v, wall in zip(vals, walls):
        if v is None or not isinstance(v, (int, float)) or not math.isfinite(v):
            out.append("")
        elif scale is None:
            out.append(str(_num(v)))
        else:
            out.append(str(round(v * 100 / wall) if scale == "wall" else round(v / scale)))
    return ",".join(out)


def _depths(spans: list[Span]) -> list[int]:
    """Depth of each span in its parent chain; a job is 0, a span with no known parent sits
    under its job (1) or at 0 when it has none."""
    key = {(s.worker, s.pid, s.id): i for i, s in enumerate(spans) if s.kind == "job"}
    key.update({(s.worker, s.pid, s.id): i for i, s in enumerate(spans) if s.kind != "job"})
    job = {(s.worker, s.job): i for i, s in enumerate(spans) if s.kind == "job"}
    parent: list[int | None] = []
    for i, s in enumerate(spans):
        p = None
        if s.kind != "job":
            if s.parent is not None:
                p = key.get((s.worker, s.pid, s.parent))
            if p is None and s.job is not None:
                p = job.get((s.worker, s.job))
        parent.append(None if p == i else p)
    depth = [-1] * len(spans)
    for i in range(len(spans)):
        if depth[i] >= 0:
            continue
        path, j = [], i
        while j is not None and depth[j] == -1:
            depth[j] = -2  # on the path: a cycle in damaged data stops here
            path.append(j)
            j = parent[j]
        base = depth[j] if j is not None and depth[j] >= 0 else -1
        for k in reversed(path):
            base += 1
            depth[k] = base
    return depth


def _span_bins(binned: list[tuple[Span, int]], origin: int, end: int,
               widx: dict[str, int]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {k: [] for k in "wdtlc"}
    if not binned:
        return out
    width = max((end - origin) / SPAN_BINS, 1.0)
    acc: dict[tuple[int, int, int], list[int]] = {}
    for s, d in binned:
        b = int((s.start_ns - origin) / width)
        cell = acc.setdefault((widx[s.worker], min(d, MAX_LANES - 1), b), [0, 0])
        cell[0] += 1
        cell[1] += s.duration_ns
    for (w, d, b), (count, total) in sorted(acc.items(), key=lambda kv: kv[0][2]):
        out["w"].append(w)
        out["d"].append(d)
        out["t"].append(round(b * width / 1000))
        out["l"].append(max(round(width / 1000), 1))
        out["c"].append([count, _dur_us(total)])
    return out


# Plots: (id, title, unit, scope, metrics summed, rate of a cumulative counter, one per host)
_PLOTS = (
    ("plot-cpu", "CPU (tree)", "%", "tree", ("cpu_percent",), False, False),
    ("plot-mem", "RSS (tree)", "B", "tree", ("rss_bytes",), False, False),
    ("plot-io", "Disk IO (tree)", "B/s", "tree", ("read_bytes", "write_bytes"), True, False),
    ("plot-net", "Network (host)", "B/s", "host", ("net_sent_bytes", "net_recv_bytes"), True,
     True),
    ("plot-gpu", "GPU util", "%", "gpu", ("util_percent",), False, True),
    ("plot-gpumem", "GPU memory", "B", "gpu", ("mem_used_bytes",), False, True),
)


def _plots(t: Timeline, origin: int, order: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    groups: dict[tuple[str, str], list[tuple[int, dict[str, float]]]] = {}
    for smp in t.samples:
        groups.setdefault((smp.worker, smp.scope), []).append((smp.t_ns, smp.values))
    for rows in groups.values():
        rows.sort(key=lambda r: r[0])
    host_of = {wid: (t.workers[wid].host if wid in t.workers else "") for wid in order}
    plots, notes = [], []
    for pid, title, unit, scope, metrics, rate, per_device in _PLOTS:
        sources: list[tuple[str, int, list[tuple[int, dict[str, float]]]]] = []
        if not per_device:
            sources = [(wid, i, groups[(wid, scope)]) for i, wid in enumerate(order)
                       if (wid, scope) in groups]
        else:
            # Host and GPU counters are the machine's: every worker of a host reads the same
            # ones, so plot each device once, from the worker that sampled it most.
            best: dict[tuple[str, str], tuple[str, int]] = {}
            for (wid, sc), rows in groups.items():
                if sc == scope or (scope == "gpu" and sc.startswith("gpu") and sc[3:].isdigit()):
                    k = (host_of.get(wid, ""), sc)
                    if k not in best or len(rows) > best[k][1]:
                        best[k] = (wid, len(rows))
            for i, ((host, sc), (wid, _)) in enumerate(sorted(best.items())):
                label = f"{host or wid} {sc}" if scope == "gpu" else (host or wid)
                sources.append((label, len(order) + i, groups[(wid, sc)]))
        series, total, kept = [], 0, 0
        for label, color, rows in sources:
            pts = _points(rows, metrics, rate)
            if not pts:
                continue
            total += len(pts)
            pts = _thin(pts)
            kept += len(pts)
            ts, vs, prev = [], [], 0
            for tn, v in pts:
                u = _us(tn, origin)
                ts.append(u - prev)
                prev = u
                vs.append(_num(v))
            series.append({"label": label, "c": color, "t": ts, "v": vs})
        note = ""
        if kept < total:
            note = f"{total:,} points drawn as {kept:,} (min/max per bin)"
            notes.append(f"{title}: {note}.")
        what = f"{scope}{'<i>' if scope == 'gpu' else ''}.{'+'.join(metrics)}"
        empty = f"no data: no {what} samples" + (" (a rate needs two)" if rate else "")
        plots.append({"id": pid, "title": title, "unit": unit, "series": series, "note": note,
                      "empty": empty})
    return plots, notes


def _points(rows: list[tuple[int, dict[str, float]]], metrics: tuple[str, ...],
            rate: bool) -> list[tuple[int, float]]:
    pts = []
    for tn, values in rows:
        try:
            v = sum(values[m] for m in metrics)  # one missing part: the sum is absent
        except KeyError:
            continue
        if isinstance(v, (int, float)) and math.isfinite(v):
            pts.append((tn, float(v)))
    if not rate:
        return pts
    out = []
    for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
        if t1 > t0 and v1 >= v0:  # a counter that went back (reset) gives no rate
            out.append((t1, (v1 - v0) * 1e9 / (t1 - t0)))
    return out


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
def _us(t_ns: int, origin: int) -> int:
    return round((t_ns - origin) / 1000)


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


def _clip(text: str) -> str:
    text = str(text)
    if len(text) <= MAX_TEXT:
        return text
    return f"{text[:MAX_TEXT]}… ({len(text) - MAX_TEXT:,} more characters)"


def _esc(value: Any) -> str:
    """Text for HTML: escaped, and any lone surrogate made printable so the page encodes."""
    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return html.escape(text, quote=True)


def _iso(t_ns: int) -> str:
    dt = datetime.datetime.fromtimestamp(t_ns / 1e9, tz=datetime.timezone.utc)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fmt_s(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    if x < 1e-6:
        return f"{x * 1e9:.0f} ns"
    if x < 1e-3:
        return f"{x * 1e6:.3g} µs"
    if x < 1:
        return f"{x * 1e3:.3g} ms"
    if x < 1000:
        return f"{x:.3g} s"
    return f"{x:,.0f} s"


def _fmt_bytes(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(x) < 1024:
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.3g} {unit}"
        x /= 1024
    return f"{x:.3g} TiB"


# -- HTML parts ---------------------------------------------------------------------------------
def _header(t: Timeline, title: str, data: dict[str, Any], notices: list[str]) -> str:
    nw, nj, ns = data["counts"]
    dur = data["end_us"] / 1e6
    end_iso = _iso(data["origin_ns"] + data["end_us"] * 1000)
    when = f"{_esc(data['start'])} → {_esc(end_iso)} ({_esc(_fmt_s(dur) if dur else '0 s')})"
    if not (nw or t.marks or t.jobs):
        when = "an empty timeline: nothing was recorded"
    out = [f"<header><h1>{_esc(title)}</h1>",
           f"<p class=\"meta\">{when} · <b>{nw:,}</b> workers · <b>{nj:,}</b> jobs"
           f" · <b>{ns:,}</b> spans · {len(t.marks):,} marks · {len(t.samples):,} samples</p>"]
    noted = [(wid, w) for wid, w in sorted(t.workers.items()) if w.notes or w.errors]
    if noted:
        out.append("<details open><summary>Worker notes</summary><ul class=\"notes\">")
        for wid, w in noted:
            for n in w.notes:
                out.append(f"<li><code>{_esc(wid)}</code>: {_esc(n)}</li>")
            for e in w.errors:
                out.append(f"<li class=\"bad\"><code>{_esc(wid)}</code>: error: {_esc(e)}</li>")
        out.append("</ul></details>")
    if notices:
        out.append("<ul class=\"notices\">")
        out.extend(f"<li>{_esc(n)}</li>" for n in notices)
        out.append("</ul>")
    out.append("</header>")
    return "".join(out)


def _workers_html(t: Timeline, wtable: list[dict[str, Any]], data: dict[str, Any]) -> str:
    first: dict[str, int] = {}
    for s in t.spans:
        first[s.worker] = min(first.get(s.worker, s.start_ns), s.start_ns)
    for smp in t.samples:
        first[smp.worker] = min(first.get(smp.worker, smp.t_ns), smp.t_ns)
    last_us = {w[0]: w[7] for w in data["workers"]}
    origin = data["origin_ns"]
    out = ["<section><h2>Workers</h2><table class=\"tbl\"><thead><tr><th>worker</th><th>host</th>"
           "<th>pid</th><th>exit status</th><th>jobs</th><th>failed</th><th>frames lost</th>"
           "<th>dropped</th><th>job time</th><th>active</th><th>straggler</th></tr></thead><tbody>"]
    for r in wtable:
        wid = r["worker"]
        active = (last_us.get(wid, 0) - _us(first[wid], origin)) / 1e6 if wid in first else None
        bad = r["status"] in _KILLED or r["failed_jobs"]
        cls = " class=\"bad\"" if bad else (" class=\"slow\"" if r["straggler"] else "")
        out.append(
            f"<tr{cls}><td><code>{_esc(wid)}</code></td><td>{_esc(r['host'])}</td>"
            f"<td class=\"num\">{_esc(r['pid'])}</td><td>{_esc(r['status'])}</td>"
            f"<td class=\"num\">{r['jobs']:,}</td><td class=\"num\">{r['failed_jobs']:,}</td>"
            f"<td class=\"num\">{r['lost']:,}</td><td class=\"num\">{r['dropped']:,}</td>"
            f"<td class=\"num\">{_esc(_fmt_s(r['busy_s']))}</td>"
            f"<td class=\"num\">{_esc(_fmt_s(active))}</td>"
            f"<td>{'⚠ straggler' if r['straggler'] else ''}</td></tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def _functions_html(rows: list[dict[str, Any]]) -> str:
    out = ["<section><h2>Functions</h2><p class=\"hint\">One row per span name; self = wall "
           "time minus time in child spans; CPU and peak RSS are estimates attributed from "
           "the samples around each span.</p><table class=\"tbl\"><thead><tr><th>name</th>"
           "<th>kind</th><th>calls</th><th>total</th><th>self</th><th>mean</th><th>p50</th>"
           "<th>p95</th><th>max</th><th>CPU</th><th>peak RSS</th><th>errors</th></tr></thead>"
           "<tbody>"]
    for r in rows[:MAX_ROWS]:
        cls = " class=\"bad\"" if r["errors"] else ""
        out.append(
            f"<tr{cls}><td><code>{_esc(r['name'])}</code></td><td>{_esc(r['kind'])}</td>"
            f"<td class=\"num\">{r['calls']:,}</td>"
            + "".join(f"<td class=\"num\">{_esc(_fmt_s(r[k]))}</td>"
                      for k in ("total_s", "self_s", "mean_s", "p50_s", "p95_s", "max_s", "cpu_s"))
            + f"<td class=\"num\">{_esc(_fmt_bytes(r['peak_rss_bytes']))}</td>"
            f"<td class=\"num\">{r['errors']:,}</td></tr>")
    out.append("</tbody></table>")
    if len(rows) > MAX_ROWS:
        rest = rows[MAX_ROWS:]
        out.append(f"<p class=\"note\">{len(rest):,} more names not listed "
                   f"({sum(r['calls'] for r in rest):,} calls, "
                   f"{_esc(_fmt_s(sum(r['total_s'] for r in rest)))} in total); the Chrome "
                   f"trace export has every span.</p>")
    out.append("</section>")
    return "".join(out)


_CSS = """
*{box-sizing:border-box}
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 18px 40px;
color:#1d2330;background:#fff}
h1{font-size:20px;margin:14px 0 2px}h2{font-size:15px;margin:22px 0 6px}
.meta{margin:0 0 6px;color:#444}.hint,.note{color:#666;margin:2px 0 6px;font-size:12px}
.notes,.notices{margin:4px 0;padding-left:20px}.notices li{color:#8a5a00}
.bad,.bad td{color:#b00020}tr.slow td{background:#fff4e0}
#stack{position:relative;width:100%;min-width:640px;user-select:none}
#stack canvas{display:block;cursor:crosshair}
#stack canvas.plot{margin-top:2px;border-top:1px solid #e3e6eb}
#cursor{position:absolute;top:0;bottom:0;width:1px;background:rgba(0,0,0,.35);display:none;
pointer-events:none}
#tip{position:fixed;z-index:10;display:none;max-width:460px;background:#fffffb;
border:1px solid #999;border-radius:4px;padding:6px 8px;font-size:12px;
box-shadow:0 2px 8px rgba(0,0,0,.2);pointer-events:none;white-space:pre-wrap;word-break:break-word}
#tip .h{font-weight:600}#tip .e{color:#b00020}#tip .k{color:#555}
.tbl{border-collapse:collapse;font-size:12px}
.tbl th,.tbl td{border-bottom:1px solid #e3e6eb;padding:3px 8px;text-align:left;vertical-align:top}
.tbl th{position:sticky;top:0;background:#f4f6f9}.tbl td.num{text-align:right;white-space:nowrap}
.tbl code{word-break:break-all}
"""

# Installed first, so an error anywhere later (the data, the drawing) is on the page for a test.
_JS_ERRORS = """
(function(){function add(m){var b=document.body||document.documentElement;
b.dataset.errors=(b.dataset.errors?b.dataset.errors+"\\n":"")+m;}
window.__wsError=add;
window.onerror=function(m,src,line,col){add(String(m)+" (line "+line+":"+col+")");};
window.addEventListener("unhandledrejection",function(e){add("unhandled rejection: "+
String(e.reason));});})();
"""

_JS = r"""
(function () {
"use strict";
const D = JSON.parse(document.getElementById("ws-data").textContent);
const LEFT = 210, RIGHT = 14, AXIS = 22, BG_ALT = "#f3f5f8", RED = "#d00000";
const FONT = "10px system-ui,sans-serif", BOLD = "bold 11px system-ui,sans-serif";
const body = document.body, tip = document.getElementById("tip");
const stack = document.getElementById("stack"), cursorLine = document.getElementById("cursor");
const report = window.__wsError || function () {};

// ---- spans: columns -> typed arrays. Flags: 1 error, 2 job, 4 killed job, 8 still running ----
const S = D.spans, N = S.n.length, W = D.workers, NW = W.length;
// W[w]: [id, status, killed, straggler, lanes, host, pid, last event (us), notes]
const sw = Int32Array.from(S.w), sd = Int32Array.from(S.d), sn = Int32Array.from(S.n);
const sf = Int32Array.from(S.f), sh = Int32Array.from(S.h);
const ss = new Float64Array(N), se = new Float64Array(N);
{
  let acc = 0;
  for (let i = 0; i < N; i++) { acc += S.t[i]; ss[i] = acc; se[i] = acc + S.l[i]; }
}
// Lanes: one per (worker, depth); each lane's spans in start order, for hit tests.
const laneOff = new Int32Array(NW + 1);
for (let w = 0; w < NW; w++) laneOff[w + 1] = laneOff[w] + W[w][4];
const NL = laneOff[NW];
const laneStart = new Int32Array(NL + 1), laneIdx = new Int32Array(N);
const laneMax = new Float64Array(NL);
for (let i = 0; i < N; i++) laneStart[laneOff[sw[i]] + sd[i] + 1]++;
for (let l = 0; l < NL; l++) laneStart[l + 1] += laneStart[l];
{
  const next = laneStart.slice(0, NL);
  for (let i = 0; i < N; i++) {
    const l = laneOff[sw[i]] + sd[i];
    laneIdx[next[l]++] = i;
    laneMax[l] = Math.max(laneMax[l], se[i] - ss[i]);
  }
}
const errOf = new Map(D.errors), attrOf = new Map();
{
  let i = 0;
  D.attrs.i.forEach((d, j) => { i += d; attrOf.set(i, D.attrs.texts[D.attrs.x[j]]); });
}
let avals = null;  // the attribution columns, split on the first hover
function attrCode(j, i) {
  if (!avals) avals = D.avals.map(col => col.split(","));
  const s = avals[j][i];
  return s === "" || s === undefined ? null : +s;
}
const color = D.hues.map(h => "hsl(" + h + ",58%,62%)");
const jobColor = D.hues.map(h => "hsl(" + h + ",35%,83%)");
const B = D.bins, NB = B.c.length;
const seriesColor = c => "hsl(" + ((c * 137.508) % 360).toFixed(1) + ",65%,42%)";
const endOf = i => (sf[i] & 8) ? Math.max(se[i], W[sw[i]][7]) : se[i];

// ---- the view (us since the origin), shared by every canvas ----
let v0 = D.t0, v1 = D.t1;

// ---- formatting ----
function fmtDur(us) {
  if (us < 1) return (us * 1000).toFixed(0) + " ns";
  if (us < 1000) return +us.toPrecision(3) + " µs";
  if (us < 1e6) return +(us / 1e3).toPrecision(4) + " ms";
  return +(us / 1e6).toPrecision(4) + " s";
}
function fmtBytes(b) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, x = Math.abs(b);
  while (x >= 1024 && i < u.length - 1) { x /= 1024; i++; }
  return (b < 0 ? "-" : "") + (i ? +x.toPrecision(3) : x.toFixed(0)) + " " + u[i];
}
function fmtVal(v, unit) {
  if (unit === "%") return +v.toPrecision(3) + " %";
  if (unit === "B") return fmtBytes(v);
  if (unit === "B/s") return fmtBytes(v) + "/s";
  return String(v);
}
function fmtAttr(k, v) {
  if (/_bytes$/.test(k)) return fmtBytes(v);
  if (/_percent$/.test(k)) return v.toFixed(1) + " %";
  if (/_s$/.test(k)) return fmtDur(v * 1e6);
  return String(v);
}
function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
  return p * (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10);
}
function niceBytes(raw) {  // 1, 2, 5, 10... of the unit fmtBytes prints: 256 MiB, not 268 MB
  let u = 1;
  while (raw >= 512 * u) u *= 1024;
  return u * niceStep(raw / u);
}
function tickLabel(t, step) {
  const dec = Math.max(0, Math.min(6, -Math.floor(Math.log10(step / 1e6) + 1e-9)));
  return (t / 1e6).toFixed(dec) + " s";
}

// ---- canvases ----
function setup(el, height, w) {
  const dpr = Math.max(1, window.devicePixelRatio || 1);
  el.width = Math.round(w * dpr);
  el.height = Math.round(height * dpr);
  el.style.width = w + "px";
  el.style.height = height + "px";
  const g = el.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  return { el: el, g: g, w: w, h: height, dpr: dpr };
}
const X = (c, t) => LEFT + (t - v0) * (c.w - LEFT - RIGHT) / (v1 - v0);
const T = (c, x) => v0 + (x - LEFT) * (v1 - v0) / (c.w - LEFT - RIGHT);

// Pixels the data primitives covered: counted before the backgrounds go in underneath.
function ink(c, x, y, w, h) {
  const d = c.dpr, img = c.g.getImageData(Math.round(x * d), Math.round(y * d),
    Math.max(1, Math.round(w * d)), Math.max(1, Math.round(h * d))).data;
  let n = 0;
  for (let i = 3; i < img.length; i += 4) if (img[i]) n++;
  return n;
}
function under(c, fn) {
  c.g.save();
  c.g.globalCompositeOperation = "destination-over";
  fn(c.g);
  c.g.restore();
}
// Vertical grid lines from y0 to y1 (labels null), or tick labels centred at y = labels.
function timeGrid(c, g, y0, y1, labels) {
  const step = niceStep((v1 - v0) / Math.max(2, (c.w - LEFT) / 110));
  g.font = FONT; g.textAlign = "center"; g.textBaseline = "middle";
  for (let t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
    const x = Math.round(X(c, t)) + 0.5;
    if (x < LEFT || x > c.w - RIGHT) continue;
    if (labels === null) { g.fillStyle = "#e6e9ee"; g.fillRect(x - 0.5, y0, 1, y1 - y0); }
    else { g.fillStyle = "#555"; g.fillText(tickLabel(t, step), x, labels); }
  }
}
function clip(text, px, g) {
  if (g.measureText(text).width <= px) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) {
    const m = (lo + hi + 1) >> 1;
    if (g.measureText(text.slice(0, m) + "…").width <= px) lo = m; else hi = m - 1;
  }
  return lo ? text.slice(0, lo) + "…" : "";
}

// ---- Gantt layout: a band per worker, a lane per depth ----
const laneH = Math.max(3, Math.min(16, Math.floor(1100 / Math.max(NL, 1))));
const bandY = new Float64Array(NW + 1), bandH = new Float64Array(NW);
const laneY = new Float64Array(NL);
{
  let y = AXIS + 4;
  for (let w = 0; w < NW; w++) {
    const lanes = W[w][4];
    bandH[w] = Math.max(lanes * laneH, 16);
    bandY[w] = y;
    const pad = (bandH[w] - lanes * laneH) / 2;
    for (let d = 0; d < lanes; d++) laneY[laneOff[w] + d] = y + pad + d * laneH;
    y += bandH[w] + 2;
  }
  bandY[NW] = y;
}
const ganttH = Math.max(bandY[NW] + 6, 80);
let gantt = null, stats = {};

function drawGantt(counting) {
  const c = gantt, g = c.g, x0 = LEFT, x1 = c.w - RIGHT;
  const k = (x1 - x0) / (v1 - v0), lh = Math.max(laneH - 1, 2);
  const lastBin = new Int32Array(NL).fill(-1), labels = [];
  let drawn = 0, tiny = 0, bins = 0, inView = 0, style = "";
  const fill = s => { if (s !== style) { style = s; g.fillStyle = s; } };  // each set is parsed
  g.clearRect(0, 0, c.w, c.h);
  g.save();
  g.beginPath(); g.rect(x0, AXIS, x1 - x0, c.h - AXIS); g.clip();
  for (let i = 0; i < N; i++) {
    const a = ss[i];
    if (a > v1) break;  // spans are sorted by start
    const f = sf[i], b = endOf(i);
    if (b < v0) continue;
    inView++;
    const l = laneOff[sw[i]] + sd[i], y = laneY[l], col = (f & 2) ? jobColor[sn[i]] : color[sn[i]];
    let p0 = x0 + (a - v0) * k, p1 = x0 + (b - v0) * k;
    if (p1 - p0 < 0.5) {  // counted, and drawn as one 1-px bin per lane and pixel column
      tiny++;
      const px = Math.floor(Math.max(p0, x0));
      if (lastBin[l] !== px) {
        lastBin[l] = px; fill((f & 1) ? RED : col); g.fillRect(px, y, 1, lh); bins++;
      }
      continue;
    }
    p0 = Math.max(p0, x0 - 2); p1 = Math.min(p1, x1 + 2);
    fill(col);
    g.fillRect(p0, y, p1 - p0, lh);
    if (f & 8) {  // still running: hatched
      fill("rgba(255,255,255,.55)");
      for (let x = p0 + 4; x < p1; x += 8) g.fillRect(x, y, 3, lh);
    }
    if (f & 5) {  // an error, or a killed job (dashed, with a cross where it ended)
      g.strokeStyle = RED; g.lineWidth = 1.5;
      if (f & 4) g.setLineDash([4, 2]);
      g.strokeRect(p0 + 0.75, y + 0.75, Math.max(p1 - p0 - 1.5, 0.5), lh - 1.5);
      g.setLineDash([]);
      if ((f & 4) && se[i] <= v1) labels.push([x0 + (se[i] - v0) * k, y + lh / 2, "✖", RED, 0]);
    }
    if (p1 - p0 > 30 && lh >= 9) {
      const lx = Math.max(p0, x0);
      labels.push([lx + 3, y + lh / 2, D.names[sn[i]], "#15181e", p1 - lx - 6]);
    }
    drawn++;
  }
  g.fillStyle = "#8a94a6";
  for (let j = 0; j < NB; j++) {  // spans summarised in Python (past MAX_SPANS)
    const a = B.t[j], b = a + B.l[j];
    if (b < v0 || a > v1) continue;
    const p0 = x0 + (a - v0) * k, p1 = x0 + (b - v0) * k;
    g.fillRect(p0, laneY[laneOff[B.w[j]] + B.d[j]], Math.max(p1 - p0, 1), lh);
    drawn++;
  }
  g.textBaseline = "middle";
  if (!NW) {
    g.fillStyle = "#8a94a6"; g.font = "13px system-ui,sans-serif"; g.textAlign = "center";
    g.fillText("no spans or workers in this timeline", (x0 + x1) / 2, (AXIS + c.h) / 2);
    drawn = 1;
  }
  for (const [x, y, text, col, room] of labels) {
    g.fillStyle = col;
    if (!room) {
      g.font = "bold 12px system-ui,sans-serif"; g.textAlign = "center"; g.fillText(text, x, y);
    } else {
      g.font = FONT; g.textAlign = "left";
      const s = clip(text, room, g);
      if (s) g.fillText(s, x, y);
    }
  }
  g.fillStyle = "#1d2330";
  for (const m of D.marks) {  // marks: small triangles on their worker's band
    if (m[1] < v0 || m[1] > v1) continue;
    const x = x0 + (m[1] - v0) * k, y = bandY[m[0]];
    g.beginPath(); g.moveTo(x - 3, y); g.lineTo(x + 3, y); g.lineTo(x, y + 5); g.fill();
  }
  g.fillStyle = RED;
  for (let w = 0; w < NW; w++) {  // a killed worker: a red bar where its timeline stops
    const x = x0 + (W[w][7] - v0) * k;
    if (W[w][2] && x >= x0 && x <= x1) g.fillRect(x - 1, bandY[w], 3, bandH[w]);
  }
  g.restore();
  if (counting) c.el.dataset.ink = String(ink(c, x0, AXIS, x1 - x0, c.h - AXIS));
  under(c, g => {
    timeGrid(c, g, AXIS, c.h, null);
    for (let w = 0; w < NW; w++) {
      g.fillStyle = W[w][2] ? "#fde8e8" : W[w][3] ? "#fff1d6" : (w % 2 ? BG_ALT : "#fff");
      g.fillRect(0, bandY[w] - 1, c.w, bandH[w] + 2);
    }
    g.fillStyle = "#fff"; g.fillRect(0, 0, c.w, c.h);
  });
  g.fillStyle = "#fff"; g.fillRect(0, 0, c.w, AXIS);
  timeGrid(c, g, 0, AXIS, AXIS / 2);
  g.fillStyle = "#c9ced6"; g.fillRect(LEFT - 1, 0, 1, c.h); g.fillRect(0, AXIS - 1, c.w, 1);
  g.textAlign = "left"; g.textBaseline = "middle";
  for (let w = 0; w < NW; w++) {  // worker labels, with what went wrong
    const cy = bandY[w] + Math.min(bandH[w], 16) / 2;
    let tag = W[w][2] ? (W[w][1] === "sidecar_lost" ? " ✖ sidecar lost" : " ✖ killed") : "";
    if (W[w][3]) tag += " ⚠ straggler";
    g.font = BOLD;
    const tw = tag ? g.measureText(tag).width : 0;
    g.font = "11px system-ui,sans-serif"; g.fillStyle = "#1d2330";
    const label = clip(W[w][0], LEFT - 10 - tw, g);
    g.fillText(label, 5, cy);
    if (tag) {
      const lx = 5 + g.measureText(label).width;
      g.font = BOLD; g.fillStyle = W[w][2] ? "#c00000" : "#b26b00"; g.fillText(tag, lx, cy);
    }
  }
  stats = { drawn: drawn, tiny: tiny, bins: bins, inView: inView };
  c.el.dataset.drawn = String(drawn + bins);
}

// ---- plots ----
const PH = 132, PT = 8, PB = 20;
const plots = D.plots.map(p => ({
  spec: p, c: null,
  series: p.series.map(s => {
    const t = new Float64Array(s.t.length);
    let acc = 0;
    for (let i = 0; i < t.length; i++) { acc += s.t[i]; t[i] = acc; }
    return { label: s.label, color: seriesColor(s.c), t: t, v: s.v };
  }),
}));
function lastLE(t, x) {
  let lo = 0, hi = t.length - 1, r = -1;
  while (lo <= hi) {
    const m = (lo + hi) >> 1;
    if (t[m] <= x) { r = m; lo = m + 1; } else hi = m - 1;
  }
  return r;
}

function drawPlot(p, counting) {
  const c = p.c, g = c.g, x0 = LEFT, x1 = c.w - RIGHT, y0 = PT, y1 = c.h - PB, unit = p.spec.unit;
  let ymax = 0, drawn = 0;
  // per series, the points in view plus one either side, so lines run to the edges
  const ranges = p.series.map(s => {
    const a = Math.max(lastLE(s.t, v0), 0), b = Math.min(lastLE(s.t, v1) + 1, s.t.length - 1);
    for (let i = a; i <= b; i++) if (s.v[i] > ymax) ymax = s.v[i];
    return [a, b];
  });
  const any = ranges.some(([a, b]) => b >= a);
  if (!(ymax > 0)) ymax = 1;
  const ystep = (unit === "%" ? niceStep : niceBytes)(ymax / 3);
  ymax = Math.ceil(ymax / ystep) * ystep;
  const k = (x1 - x0) / (v1 - v0), ky = (y1 - y0) / ymax;
  g.clearRect(0, 0, c.w, c.h);
  g.save();
  g.beginPath(); g.rect(x0, y0 - 1, x1 - x0, y1 - y0 + 2); g.clip();
  if (!any) {
    g.fillStyle = "#8a94a6"; g.font = "13px system-ui,sans-serif";
    g.textAlign = "center"; g.textBaseline = "middle";
    const msg = p.series.length ? "no data in this time range" : p.spec.empty;
    g.fillText(msg, (x0 + x1) / 2, (y0 + y1) / 2);
    drawn = 1;
  }
  g.lineWidth = 1.4; g.lineJoin = "round";
  p.series.forEach((s, j) => {
    const [a, b] = ranges[j];
    g.strokeStyle = s.color; g.fillStyle = s.color;
    g.beginPath();
    for (let i = a; i <= b; i++) {
      const x = x0 + (s.t[i] - v0) * k, y = y1 - s.v[i] * ky;
      if (i > a) g.lineTo(x, y); else g.moveTo(x, y);
    }
    g.stroke();
    if (a === b) g.fillRect(x0 + (s.t[a] - v0) * k - 2, y1 - s.v[a] * ky - 2, 4, 4);
    drawn += b - a + 1;
  });
  g.restore();
  if (counting) c.el.dataset.ink = String(ink(c, x0, y0, x1 - x0, y1 - y0));
  under(c, g => {
    timeGrid(c, g, y0, y1, null);
    g.fillStyle = "#e6e9ee";
    if (any) {
      for (let v = 0; v <= ymax + 1e-9; v += ystep) {
        g.fillRect(x0, Math.round(y1 - v * ky), x1 - x0, 1);
      }
    }
    g.fillStyle = "#fff"; g.fillRect(0, 0, c.w, c.h);
  });
  g.fillStyle = "#c9ced6"; g.fillRect(LEFT - 1, 0, 1, c.h);
  g.fillStyle = "#fff"; g.fillRect(0, y1 + 1, c.w, PB - 1);
  timeGrid(c, g, 0, 0, y1 + PB / 2 + 1);
  g.textBaseline = "middle"; g.textAlign = "right"; g.font = FONT; g.fillStyle = "#555";
  if (any) for (let v = 0; v <= ymax + 1e-9; v += ystep) {
    g.fillText(fmtVal(v, unit), LEFT - 6, Math.min(Math.max(y1 - v * ky, y0 + 5), y1 - 4));
  }
  g.textAlign = "left"; g.font = "bold 12px system-ui,sans-serif"; g.fillStyle = "#1d2330";
  g.fillText(p.spec.title, 5, y0 + 6);
  g.font = FONT;
  const rows = Math.floor((y1 - y0 - 18) / 13);
  const shown = p.series.length > rows ? rows - 1 : p.series.length;
  for (let j = 0; j < shown; j++) {  // the legend, as far as it fits
    const y = y0 + 24 + j * 13, s = p.series[j];
    g.fillStyle = s.color; g.fillRect(6, y - 4, 9, 8);
    g.fillStyle = "#333"; g.fillText(clip(s.label, 115, g), 19, y);
  }
  if (shown < p.series.length) {
    g.fillStyle = "#666";
    g.fillText("+" + (p.series.length - shown) + " more (hover)", 6, y0 + 24 + shown * 13);
  }
  if (p.spec.note) {
    g.fillStyle = "#8a5a00"; g.textAlign = "right"; g.fillText(p.spec.note, x1 - 2, y0 + 6);
  }
  c.el.dataset.drawn = String(drawn);
}

// ---- drawing everything ----
const note = document.getElementById("gantt-note");
const num = n => n.toLocaleString("en-US");
// counting: also count each canvas's inked pixels (data-ink), which costs as much as drawing;
// while zooming and panning that waits until the view has been still for a moment.
function drawAll(counting) {
  const t0 = performance.now();
  const jobs = [["gantt", drawGantt], ...plots.map(p => [p.spec.id, c => drawPlot(p, c)])];
  for (const [name, fn] of jobs) {
    try { fn(counting); } catch (e) { report(name + ": " + (e && e.stack || e)); }
  }
  const step = niceStep(Math.max(v1 - v0, 1) / 10);
  let s = "Showing " + tickLabel(Math.max(v0, 0), step) + " – " +
    tickLabel(Math.min(v1, D.end_us), step) + " of " + fmtDur(D.end_us) + ". " +
    num(stats.inView) + " of " + num(N) + " spans in view: " + num(stats.drawn) + " drawn";
  if (stats.tiny) {
    s += "; " + num(stats.tiny) + " narrower than ½ px drawn as " + num(stats.bins) +
      " 1-px bins (zoom in to separate them)";
  }
  if (D.binned) s += "; " + num(D.binned) + " more spans summarised as " + num(NB) + " grey bins";
  if (!N && !NB) s = "No spans in this timeline";
  note.textContent = s + ". (" + Math.round(performance.now() - t0) + " ms)";
}
let pending = false, settle = 0;
function redraw() {
  if (!pending) {
    pending = true;
    requestAnimationFrame(() => { pending = false; drawAll(false); });
  }
  clearTimeout(settle);
  settle = setTimeout(() => drawAll(true), 400);
}
function layout() {
  // One width for every canvas, or the time axes would not line up. Sizing the canvases can
  // make the page tall enough to grow a scrollbar, which narrows it: then size them again.
  for (let pass = 0; pass < 2; pass++) {
    const w = Math.max(stack.clientWidth, 640);
    gantt = setup(document.getElementById("gantt"), ganttH, w);
    for (const p of plots) p.c = setup(document.getElementById(p.spec.id), PH, w);
    if (Math.max(stack.clientWidth, 640) === w) break;
  }
}

// ---- hover: text only, through textContent ----
function line(parent, text, cls) {
  const d = document.createElement("div");
  d.textContent = text;
  if (cls) d.className = cls;
  parent.appendChild(d);
}
function showTip(ev, fill) {
  tip.replaceChildren();
  fill(tip);
  tip.style.display = "block";
  const r = tip.getBoundingClientRect();
  let x = ev.clientX + 14, y = ev.clientY + 14;
  if (x + r.width > window.innerWidth - 4) x = ev.clientX - r.width - 14;
  if (y + r.height > window.innerHeight - 4) y = Math.max(4, ev.clientY - r.height - 14);
  tip.style.left = x + "px";
  tip.style.top = y + "px";
}
function hideTip() { tip.style.display = "none"; cursorLine.style.display = "none"; }
// The shortest span of lane l within tol of time t, and how many are there.
function spanAt(l, t, tol) {
  let lo = laneStart[l], hi = laneStart[l + 1] - 1, r = lo - 1;
  while (lo <= hi) {
    const m = (lo + hi) >> 1;
    if (ss[laneIdx[m]] <= t + tol) { r = m; lo = m + 1; } else hi = m - 1;
  }
  let best = -1, bestLen = Infinity, near = 0;
  for (let m = r, n = 0; m >= laneStart[l] && n < 20000; m--, n++) {
    const i = laneIdx[m];
    if (ss[i] < t - tol - laneMax[l]) break;
    const e = endOf(i);
    if (e >= t - tol) { near++; if (e - ss[i] < bestLen) { best = i; bestLen = e - ss[i]; } }
  }
  return [best, near];
}
function workerTip(el, wk) {
  line(el, wk[0], "h");
  line(el, "host " + wk[5] + " · pid " + wk[6] + " · status " + wk[1]);
  if (wk[2]) line(el, "killed or lost: its timeline ends early", "e");
  if (wk[3]) line(el, "straggler: job time well above its peers'", "e");
  if (wk[8]) line(el, wk[8] + " note(s): see the top of the page", "k");
}
function spanTip(el, i, wk, near) {
  const f = sf[i], th = D.threads[sh[i]];
  line(el, D.names[sn[i]], "h");
  line(el, ((f & 2) ? "job" : "span") + " · " + fmtDur(endOf(i) - ss[i]) +
    ((f & 8) ? " (still running)" : "") + " · starts +" + fmtDur(Math.max(ss[i], 0)) +
    " · depth " + sd[i]);
  line(el, "worker " + wk[0] + " · pid " + th[0] + " · tid " + th[1]);
  if (errOf.has(i)) line(el, "error: " + errOf.get(i), "e");
  if (f & 4) line(el, "killed: the worker died during this job", "e");
  if (attrOf.has(i)) line(el, "attrs: " + attrOf.get(i), "k");
  const parts = [];
  D.akeys.forEach((key, j) => {
    const code = attrCode(j, i), scale = D.ascale[j];
    if (code === null) return;
    if (scale === "wall") {
      const cpu = fmtDur(code / 100 * (se[i] - ss[i]));
      const of = /cpu/.test(key) ? " % of one core)" : " % of its wall time)";
      parts.push(key + " ≈ " + cpu + " (" + code + of);
    } else parts.push(key + " ≈ " + fmtAttr(key, scale === null ? code : code * scale));
  });
  if (parts.length) line(el, "estimated from the samples around it:", "k");
  for (const p of parts) line(el, "  " + p);
  if (near > 1) line(el, (near - 1) + " more span(s) under the cursor in this lane; zoom in", "k");
}
function ganttHover(ev, c, x, y) {
  let w = -1;
  for (let j = 0; j < NW && w < 0; j++) if (y >= bandY[j] - 1 && y < bandY[j] + bandH[j] + 1) w = j;
  if (w < 0) return hideTip();
  const wk = W[w];
  if (x < LEFT) return showTip(ev, el => workerTip(el, wk));
  const d = Math.floor((y - bandY[w] - (bandH[w] - wk[4] * laneH) / 2) / laneH);
  if (d < 0 || d >= wk[4]) return hideTip();
  const l = laneOff[w] + d, t = T(c, x), tol = 3 * (v1 - v0) / (c.w - LEFT - RIGHT);
  const [i, near] = spanAt(l, t, tol);
  if (i >= 0) return showTip(ev, el => spanTip(el, i, wk, near));
  for (let j = 0; j < NB; j++) {
    if (laneOff[B.w[j]] + B.d[j] !== l || t < B.t[j] || t > B.t[j] + B.l[j]) continue;
    return showTip(ev, el => {
      line(el, num(B.c[j][0]) + " short spans summarised here", "h");
      line(el, "total " + fmtDur(B.c[j][1]) + " · " + wk[0]);
    });
  }
  hideTip();
}
function plotHover(ev, p, x) {
  const t = T(p.c, x), vals = [];
  for (const s of p.series) {
    const i = lastLE(s.t, t), n = s.t.length;
    // past a series' last point only as far as its last step: a worker that ended says nothing
    const gap = n > 1 ? s.t[n - 1] - s.t[n - 2] : 0;
    if (i >= 0 && (i < n - 1 || t - s.t[i] <= gap)) vals.push([s.v[i], s.label]);
  }
  vals.sort((a, b) => b[0] - a[0]);
  showTip(ev, el => {
    line(el, p.spec.title + " at +" + fmtDur(Math.max(t, 0)), "h");
    if (!vals.length) line(el, p.series.length ? "no sample here" : p.spec.empty, "k");
    for (const [v, label] of vals.slice(0, 12)) line(el, label + ": " + fmtVal(v, p.spec.unit));
    if (vals.length > 12) line(el, "… " + (vals.length - 12) + " more", "k");
  });
}

// ---- zoom and pan: one view for all canvases ----
let drag = null;
function attach(el, plot) {
  const c = () => (plot ? plot.c : gantt);
  const pos = ev => {
    const r = el.getBoundingClientRect();
    return [ev.clientX - r.left, ev.clientY - r.top];
  };
  el.addEventListener("wheel", ev => {
    const [x] = pos(ev);
    if (x < LEFT) return;
    ev.preventDefault();
    const t = T(c(), x), f = Math.exp(Math.max(-1, Math.min(1, ev.deltaY * 0.0015)));
    let a = t - (t - v0) * f, b = t + (v1 - t) * f;
    if (b - a < 1) { a = t - 0.5; b = t + 0.5; }  // 1 us across at most
    v0 = a; v1 = b;
    redraw();
  }, { passive: false });
  el.addEventListener("mousedown", ev => {
    if (pos(ev)[0] < LEFT) return;
    drag = { x: ev.clientX, v0: v0, v1: v1, c: c() };
    ev.preventDefault();
  });
  el.addEventListener("dblclick", () => { v0 = D.t0; v1 = D.t1; redraw(); });
  el.addEventListener("mousemove", ev => {
    if (drag) return;
    const [x, y] = pos(ev), inside = x >= LEFT && x <= c().w - RIGHT;
    cursorLine.style.display = inside ? "block" : "none";
    cursorLine.style.left = x + "px";
    if (!plot) ganttHover(ev, gantt, x, y); else if (inside) plotHover(ev, plot, x); else hideTip();
  });
  el.addEventListener("mouseleave", hideTip);
}
window.addEventListener("mousemove", ev => {
  if (!drag) return;
  const dt = (ev.clientX - drag.x) * (drag.v1 - drag.v0) / (drag.c.w - LEFT - RIGHT);
  v0 = drag.v0 - dt; v1 = drag.v1 - dt;
  hideTip();
  redraw();
});
window.addEventListener("mouseup", () => { drag = null; });
let resizing = 0;
window.addEventListener("resize", () => {
  clearTimeout(resizing);
  resizing = setTimeout(() => { layout(); drawAll(true); }, 100);
});

layout();
attach(gantt.el, null);
for (const p of plots) attach(p.c.el, p);
drawAll(true);  // synchronously: the page is complete when this script ends
body.dataset.ready = "1";
})();
"""
