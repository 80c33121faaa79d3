"""The HTML report's Gantt data: where each span is drawn, and the spans as columnar arrays.

A span costs ~25-50 bytes on the page: its worker, lane, name and thread are small indices,
its start is the delta from the previous one's, its attrs a number into a table of distinct
texts, each resource estimate a short integer in one comma-separated column per key. html.py
puts these beside the plots and the tables; the limits (MAX_SPANS, MAX_LANES) are its own.
"""

from __future__ import annotations

import json
import math
from itertools import pairwise
from typing import Any, NamedTuple

from ..protocol import Status
from ..timeline import Span, Timeline
from ..units import BYTE_UNITS
from .attribution import Attribution
from .deaths import JOB_DIED, is_cut_short
from .html_tables import clip
from .lanes import layout

SPAN_BINS = 4_000  # time bins per lane for the spans beyond MAX_SPANS
MAX_TRACEBACK = 1_500  # characters of a failed span's traceback (its end) kept for the tooltip

# Attribution keys in tooltip order; any other key attribute() returns follows, sorted.
_ATTR_KEYS = ("cpu_s", "tree_cpu_s", "peak_rss_bytes", "rss_growth_bytes", "read_bytes",
              "write_bytes", "gpu_util_percent", "gpu_mem_bytes")


class Scene(NamedTuple):
    """What every part of the page is placed by."""

    origin: int  # the first event: the page's time 0
    end: int  # the last event
    order: list[str]  # the workers, top to bottom
    widx: dict[str, int]  # worker -> its index in `order`
    last: dict[str, int]  # worker -> its last span end or sample (`origin` if none)


def scene(t: Timeline, spans: list[Span]) -> Scene:
    """The Scene of `t`, whose spans sorted by start are `spans`."""
    origin, end = _bounds(t, spans)
    order = sorted(set(t.workers) | {s.worker for s in spans} | {s.worker for s in t.samples}
                   | {m.worker for m in t.marks})
    last = dict.fromkeys(order, origin)
    for s in spans:
        last[s.worker] = max(last[s.worker], s.end_ns)
    for smp in t.samples:
        last[smp.worker] = max(last[smp.worker], smp.t_ns)
    return Scene(origin, end, order, {w: i for i, w in enumerate(order)}, last)


def _bounds(t: Timeline, spans: list[Span]) -> tuple[int, int]:
    """The first and the last event of any kind: (0, 0) when there is none."""
    times = [s.start_ns for s in spans] + [s.end_ns for s in spans]
    times += [m.t_ns for m in t.marks] + [s.t_ns for s in t.samples]
    times += [j.start_ns for j in t.jobs] + [j.end_ns for j in t.jobs if j.end_ns is not None]
    return (min(times), max(times)) if times else (0, 0)


def place(spans: list[Span], sc: Scene, max_lanes: int
          ) -> tuple[list[int], list[int], dict[str, int], int]:
    """Each span's lane (the spans past `max_lanes` share the last), its nesting depth, how
    many lanes each worker needs, and how many spans share the last lane for want of room."""
    # Where each span is drawn to: a job still running runs on to its worker's last event.
    ends = [max(sc.last[s.worker], s.start_ns) if running(s) else s.end_ns for s in spans]
    placed = layout(spans, ends, max_lanes)
    squeezed = sum(n >= max_lanes for n in placed.lanes)
    lane = [min(n, max_lanes - 1) for n in placed.lanes]
    lanes = dict.fromkeys(sc.order, 1)
    for s, n in zip(spans, lane, strict=True):
        lanes[s.worker] = max(lanes[s.worker], n + 1)
    return lane, placed.depths, lanes, squeezed


def keep_longest(spans: list[Span], lane: list[int], depth: list[int], max_spans: int
                 ) -> tuple[list[Span], list[tuple[Span, int]], list[int], list[int]]:
    """At most `max_spans` spans drawn one by one: every job and the longest spans, with
    their lanes and depths; the rest, with their lanes, to be binned (span_bins)."""
    if len(spans) <= max_spans:
        return spans, [], lane, depth
    ranked = sorted(range(len(spans)),
                    key=lambda i: (spans[i].kind != "job", -spans[i].duration_ns))
    chosen = set(ranked[:max_spans])
    keep = [s for i, s in enumerate(spans) if i in chosen]
    binned = [(s, n) for i, (s, n) in enumerate(zip(spans, lane, strict=True)) if i not in chosen]
    return (keep, binned, [n for i, n in enumerate(lane) if i in chosen],
            [d for i, d in enumerate(depth) if i in chosen])


def span_columns(keep: list[Span], lane: list[int], depth: list[int], sc: Scene,
                 names: dict[str, int], threads: dict[tuple[int, int], int]) -> dict[str, Any]:
    """The spans drawn one by one as columns; `names` and `threads` get the numbers of the
    names and the (pid, tid) that the columns refer to."""
    starts = [round((s.start_ns - sc.origin) / 1000) for s in keep]
    flags, lengths = _flags(keep, sc)
    cols = {
        "w": [sc.widx[s.worker] for s in keep],
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
    return cols


def _flags(keep: list[Span], sc: Scene) -> tuple[list[int], list[float]]:
    """Each span's flags and drawn length (in us)."""
    lengths = [dur_us(s.end_ns - s.start_ns) for s in keep]
    # 1 error, 2 job, 4 a job its worker died in, 8 still running, 16 cut short by a death
    flags = [(s.error is not None) | (s.kind == "job") << 1 | is_cut_short(s) << 4 for s in keep]
    for i, s in enumerate(keep):
        if s.kind == "job" and (s.attrs or {}).get("status") in JOB_DIED:
            flags[i] |= 4
        elif running(s):  # still open: drawn up to its worker's last event
            flags[i] |= 8
            lengths[i] = dur_us(max(sc.last[s.worker] - s.start_ns, 0))
    return flags, lengths


def errors(keep: list[Span]) -> list[list[Any]]:
    """[index, text] of each failed span."""
    return [[i, _error_text(s)] for i, s in enumerate(keep) if s.error is not None]


def attrs_table(keep: list[Span]) -> dict[str, list[Any]]:
    """Attrs (a job's are its status and light-mode stats) as a table of distinct texts and,
    per span that has any, the delta of its index and its text's number. A failed span's
    traceback goes with its error instead."""
    texts: dict[str, int] = {}
    shown = [(i, _shown_attrs(s)) for i, s in enumerate(keep)]
    having = [(i, texts.setdefault(clip(_attrs_text(a)), len(texts))) for i, a in shown if a]
    return {"i": [b[0] - a[0] for a, b in pairwise([(0, 0), *having])],
            "x": [x for _, x in having], "texts": list(texts)}


def estimates(keep: list[Span], attribution: Attribution) -> tuple[list[str], list[Any], list[str]]:
    """The attribution keys shown, how each is stored (_attr_scale) and each one's column."""
    seen = {k for a in attribution.values() for k in a}
    akeys = [k for k in _ATTR_KEYS if k in seen] + sorted(seen - set(_ATTR_KEYS))
    arows = [attribution.get((s.worker, s.pid, s.id)) or {} for s in keep]
    walls = [max(s.end_ns - s.start_ns, 1) / 1e9 for s in keep]
    ascale = [_attr_scale(k) for k in akeys]
    avals = [_attr_column(arows, k, scale, walls) for k, scale in zip(akeys, ascale, strict=True)]
    return akeys, ascale, avals


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
            out.append(str(num(v)))
        else:
            out.append(str(round(v * 100 / wall) if scale == "wall" else round(v / scale)))
    return ",".join(out)


def span_bins(binned: list[tuple[Span, int]], sc: Scene) -> dict[str, list[Any]]:
    """The spans not drawn one by one, as a count and a total length per (worker, lane,
    time bin)."""
    out: dict[str, list[Any]] = {k: [] for k in "wdtlc"}
    if not binned:
        return out
    origin = sc.origin
    width = max((sc.end - origin) / SPAN_BINS, 1.0)
    acc: dict[tuple[int, int, int], list[int]] = {}
    for s, d in binned:
        b = int((s.start_ns - origin) / width)
        cell = acc.setdefault((sc.widx[s.worker], d, b), [0, 0])
        cell[0] += 1
        cell[1] += s.duration_ns
    for (w, d, b), (count, total) in sorted(acc.items(), key=lambda kv: kv[0][2]):
        out["w"].append(w)
        out["d"].append(d)
        out["t"].append(round(b * width / 1000))
        out["l"].append(max(round(width / 1000), 1))
        out["c"].append([count, dur_us(total)])
    return out


# -- small helpers ------------------------------------------------------------------------------
def running(s: Span) -> bool:
    """A job still open: drawn up to its worker's last event."""
    return s.kind == "job" and (s.attrs or {}).get("status") == Status.RUNNING


def dur_us(ns: int) -> float:
    # Whole microseconds, except short spans, which keep nanoseconds to show "412 ns".
    return ns / 1000 if ns < 10_000 else round(ns / 1000)


def num(v: Any) -> Any:
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
