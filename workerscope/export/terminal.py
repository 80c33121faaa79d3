"""Terminal views: a Gantt per worker in Unicode blocks, summary tables, the live frame log.

Pure functions of a Timeline (or a frame) that return text. Width is a parameter (the CLI passes
the terminal's); colour only when asked (the CLI asks only on a TTY). Every text that came from
a worker (names, errors, notes, ids) goes through units.printable where a line is put together:
in _table's cells, _wrap's phrases, the Gantt's labels and frame_line's line; so the only
escape sequences that reach the terminal are this view's own colours.
"""

from __future__ import annotations

import bisect
import re
import textwrap
from collections.abc import Callable
from typing import Any

from .. import protocol
from ..protocol import Status
from ..timeline import Job, Span, Timeline, in_start_order
from ..units import fmt_bytes, fmt_percent, fmt_seconds, printable, short_worker
from .attribution import (
    DIED,
    Attribution,
    attribute,
    cpu_basis,
    cpu_mark,
    function_table,
    workers_table,
)
from .causes import cause_lines, stragglers
from .creep import creep_lines, memory_creep
from .deaths import Death, by_worker, deaths, figures, is_cut_short
from .lanes import layout
from .overhead import cost_text, costs, summary
from .stacks import stacks_text

LEVELS = " ▁▂▃▄▅▆▇█"
_VALUE = re.compile(r"(\d) (B|KiB|MiB|GiB|TiB|ns|µs|ms|s)\b")
RED, DIM, RESET = "\x1b[31m", "\x1b[2m", "\x1b[0m"
_NAMED = 3  # workers named beside a note that several gave


def gantt(t: Timeline, width: int = 80, color: bool = False) -> str:
    """One row of spans and one row of tree CPU per worker, over the whole timeline.

    Span row: █ inside a span, ░ inside a job but no span, space idle, ▓ inside a span cut
    short by its process's death, ✗ where a worker died (killed, OOM-killed, sidecar lost),
    ! where a span failed; jobs that ran at once in threads of the worker get a row each
    ("lane 2", ...). CPU row: tree cpu_percent scaled to the peak of all workers.
    """
    start, end = t.start_ns, t.end_ns
    if start is None or end is None:
        return "(empty timeline)\n"
    cpu_by_worker = _tree_cpu(t)
    peak_cpu = max((v for rows in cpu_by_worker.values() for _, v in rows), default=0.0)
    scale = max(100.0, peak_cpu)
    cpu_label = f"  cpu (█ = {fmt_percent(scale)})"  # what a full block stands for
    label_w = min(28, max([len(printable(short_worker(w))) + 9 for w in t.workers]
                          + [len(cpu_label)]))
    ax = _Axis(start, end, max(width - label_w - 3, 10))
    zero = fmt_seconds(0)
    lines = [f"{'':<{label_w}} |{zero}{fmt_seconds(ax.span_ns / 1e9):>{ax.cols - len(zero)}}|"]
    died_in = by_worker(t)
    # Each worker's spans and jobs, gathered in one pass: a scan of every span per worker
    # cost workers x spans (three quarters of a 16-worker report's time).
    spans_of: dict[str, list[Span]] = {}
    for s in t.spans:
        spans_of.setdefault(s.worker, []).append(s)
    jobs_of: dict[str, list[Job]] = {}
    for j in t.jobs:
        jobs_of.setdefault(j.worker, []).append(j)
    for wid in sorted(t.workers):
        w = t.workers[wid]
        status = w.status if w.status != Status.RUNNING else ""
        rows = _span_rows(spans_of.get(wid, []), jobs_of.get(wid, []), w.status, ax,
                          died_in.get(wid))
        for k, row in enumerate(rows):
            text = "".join(row)
            if color:
                text = text.replace("✗", f"{RED}✗{RESET}").replace("!", f"{RED}!{RESET}")
            label = (printable(f"{short_worker(wid)} {status}") if k == 0
                     else f"{_LANE_2[:-1]}{k + 1}")
            lines.append(f"{label[:label_w]:<{label_w}} |{text}|")
        cpu = _cpu_row(sorted(cpu_by_worker.get(wid, [])), ax, scale)
        if color:
            cpu = f"{DIM}{cpu}{RESET}"
        lines.append(f"{cpu_label:<{label_w}} |{cpu}|")
    return "\n".join(lines) + "\n"


class _Axis:
    """The Gantt's time axis: `cols` columns from `start` to `end`."""

    def __init__(self, start: int, end: int, cols: int) -> None:
        self.start, self.end, self.cols = start, end, cols
        self.span_ns = max(end - start, 1)

    def col(self, ts: int) -> int:
        return min(self.cols - 1, max(0, (ts - self.start) * self.cols // self.span_ns))


def _tree_cpu(t: Timeline) -> dict[str, list[tuple[int, float]]]:
    """Each worker's tree cpu_percent samples, as (t_ns, value)."""
    cpu_by_worker: dict[str, list[tuple[int, float]]] = {}
    for smp in t.samples:
        if smp.scope == "tree" and "cpu_percent" in smp.values:
            cpu_by_worker.setdefault(smp.worker, []).append((smp.t_ns, smp.values["cpu_percent"]))
    return cpu_by_worker


def _span_rows(spans: list[Span], jobs: list[Job], status: Status, ax: _Axis,
               death: Death | None) -> list[list[str]]:
    """A worker's rows of cells, from its spans and jobs: its jobs, its spans over them, then
    where it died."""
    mine, row_of, job_row = _rows(spans)
    rows = [[" "] * ax.cols for _ in range(max(row_of, default=0) + 1)]
    for j in jobs:
        _fill(rows[job_row.get((j.pid, j.id), 0)], ax, j.start_ns, j.end_ns or ax.end, "░")
    _draw_spans([(s, rows[k]) for s, k in zip(mine, row_of, strict=True) if s.kind != "job"], ax)
    if death is not None:
        rows[job_row.get((death.job.pid, death.job.id), 0)][ax.col(death.t_ns)] = "✗"
    elif status in DIED:
        last = max((j.end_ns or ax.end for j in jobs), default=ax.end)
        rows[0][ax.col(last)] = "✗"
    return rows


def _fill(row: list[str], ax: _Axis, start_ns: int, end_ns: int, cell: str) -> None:
    for c in range(ax.col(start_ns), ax.col(end_ns) + 1):
        row[c] = cell


def _draw_spans(spans: list[tuple[Span, list[str]]], ax: _Axis) -> None:
    """Each span on its row; then, over the rest, the spans cut short (what was lost to a
    death must not be hidden), then a failed span's end. `spans` in start order: a span
    then draws only the columns of its row past those drawn already (the span that drew
    the last of them started no later, so it covers the rest of this one's), and a
    worker's thousands of calls in one column cost one column's drawing."""
    drawn: dict[int, int] = {}  # id(row) -> the last column drawn on it
    for s, row in spans:
        last = ax.col(s.end_ns)
        done = drawn.get(id(row), -1)
        if last > done:
            for c in range(max(ax.col(s.start_ns), done + 1), last + 1):
                row[c] = "█"
            drawn[id(row)] = last
    for s, row in spans:
        if is_cut_short(s):
            _fill(row, ax, s.start_ns, s.end_ns, "▓")
    for s, row in spans:
        if s.error:
            row[ax.col(s.end_ns)] = "!"


def _cpu_row(cpu_rows: list[tuple[int, float]], ax: _Axis, scale: float) -> str:
    """A worker's tree CPU as one block per column, sorted samples `cpu_rows` scaled to `scale`."""
    cpu_row = [" "] * ax.cols
    times = [ts for ts, _ in cpu_rows]
    for c in range(ax.cols):
        # cpu_percent describes the interval that ends at its sample: a column shows the
        # sample whose interval covers the column's middle.
        mid = ax.start + (2 * c + 1) * ax.span_ns // (2 * ax.cols)
        i = bisect.bisect_left(times, mid)
        if 0 < i < len(cpu_rows) or (i == 0 and cpu_rows and times[0] == mid):
            level = round(cpu_rows[i][1] / scale * (len(LEVELS) - 1))
            cpu_row[c] = LEVELS[max(1, min(level, len(LEVELS) - 1))]
    return "".join(cpu_row)


MAX_ROWS = 8  # span rows per worker in the Gantt; jobs beyond share the last
_LANE_2 = "  lane 2"  # the label of a worker's second row


def _rows(spans: list[Span]) -> tuple[list[Span], list[int], dict[tuple[int, int], int]]:
    """A worker's spans, sorted, the Gantt row of each, and the row of each job, by (pid, id). One
    row, unless jobs (or spans outside any job) ran at once, in threads: each gets a row of
    its own, the first free one (lanes.py), its spans on its row."""
    mine = in_start_order(spans)
    placed = layout(mine, limit=1_000)
    outer = sorted({placed.lanes[r] for r in placed.roots})
    rank = {lane: min(k, MAX_ROWS - 1) for k, lane in enumerate(outer)}
    row_of = [rank[placed.lanes[r]] for r in placed.roots]
    job_row = {(s.pid, s.id): k for s, k in zip(mine, row_of, strict=True) if s.kind == "job"}
    return mine, row_of, job_row


MIN_CLIPPED = 12  # a clipped column keeps at least this many characters


def _clip(text: str, room: int) -> str:
    return text if len(text) <= room else text[:max(room - 1, 0)] + "…"


def _table(headers: list[str], rows: list[list[str]], right: set[int], width: int | None = None,
           drop: tuple[int, ...] = (), clip: tuple[int, ...] = (),
           last: tuple[int, ...] = ()) -> str:
    """Columns two spaces apart, `right` ones right-aligned. Within `width`: the columns in
    `drop` are left out in that order while the table is too wide, then the cells of the
    columns in `clip` are cut short (with "…"), each to no less than MIN_CLIPPED, and as a
    last resort the columns in `last` are left out too. Cells are made printable first: an
    escape is measured, and cut, as the text it shows."""
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    keep = list(range(len(headers)))

    def total() -> int:
        return sum(widths[i] for i in keep) + 2 * (len(keep) - 1)

    if width is not None:
        for i in drop:
            if total() <= width:
                break
            keep.remove(i)
        for i in clip:
            if total() > width:
                widths[i] = max(widths[i] - (total() - width), MIN_CLIPPED, len(headers[i]))
        for i in last:
            if total() <= width:
                break
            keep.remove(i)

    def line(cells: list[str]) -> str:
        return "  ".join(_clip(cells[i], widths[i]).rjust(widths[i]) if i in right
                         else _clip(cells[i], widths[i]).ljust(widths[i]) for i in keep).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out) + "\n"


JOBS_SHOWN = 20  # rows of the jobs table by default (`report --jobs`)
STACKS_SHOWN = 3  # dumps of stacks the report shows whole (the last ones)


def jobs_table(t: Timeline, width: int | None = None, limit: int | None = JOBS_SHOWN) -> str:
    """One row per job; `died` names what its worker died of inside it (oom, SIGKILL,
    exit 3). Within `width`, long errors are cut short (the deaths section has them whole).
    Past `limit` jobs (None: no limit), the jobs that did not end ok come first, then the
    longest; a last line says how many were left out."""
    causes = {(d.worker, d.job.id, d.job.start_ns): d.cause for d in deaths(t)}
    shown = _jobs_shown(t.jobs, limit)
    queued = any(j.submitted_ns is not None for j in t.jobs)  # a column only where known
    rows = []
    for j in sorted(shown, key=lambda j: (j.worker, j.start_ns)):
        dur = None if j.end_ns is None else (j.end_ns - j.start_ns) / 1e9
        wait = [] if not queued else [
            "" if j.queued_ns is None else fmt_seconds(j.queued_ns / 1e9)]
        rows.append([short_worker(j.worker), str(j.id), j.name, j.status, *wait,
                     fmt_seconds(dur), causes.get((j.worker, j.id, j.start_ns), ""),
                     j.error or ""])
    heads = ["worker", "job", "name", "status", *(["queued"] if queued else []), "wall",
             "died", "error"]
    text = _table(heads, rows, {1, 4, 5} if queued else {1, 4}, width, clip=(6 + queued, 2, 0))
    share = queue_share(t)
    if share is not None:
        text += (f"  queued: {share[0]:.0%} of the jobs' time from submit to end was spent "
                 f"waiting to start ({fmt_seconds(share[1])} of {fmt_seconds(share[2])}, "
                 f"{share[3]:,} job(s) with a submit time)\n")
    left = len(t.jobs) - len(shown)
    if left:
        text += (f"  ... {left:,} more job(s), ended ok and shorter than those shown "
                 "(`workerscope report --jobs 0` lists every job)\n")
    return text


def queue_share(t: Timeline) -> tuple[float, float, float, int] | None:
    """(share, seconds queued, seconds from submit to end, jobs) over the ended jobs that
    carry a submit time (profiled.queued()); None where none does."""
    known = [j for j in t.jobs if j.queued_ns is not None and j.end_ns is not None]
    if not known:
        return None
    waited = sum(j.queued_ns or 0 for j in known) / 1e9
    whole = sum(max((j.end_ns or 0) - (j.submitted_ns or 0), 0) for j in known) / 1e9
    return (waited / whole if whole > 0 else 0.0), waited, whole, len(known)


def _jobs_shown(jobs: list[Job], limit: int | None) -> list[Job]:
    if limit is None or len(jobs) <= limit:
        return list(jobs)
    def length(j: Job) -> int:
        return (j.end_ns if j.end_ns is not None else j.start_ns) - j.start_ns
    ranked = sorted(jobs, key=lambda j: (j.status == Status.OK, -length(j)))
    return ranked[:limit]


GPU_IDLE_SHOWN = 10  # spans in the report's "top spans by GPU idle"
GPU_KEY = ("gpu busy: the tree's GPUs' busy share while the calls ran (its processes' SM "
           "shares, NVML's per-process samples); gpu idle: the GPU-seconds they sat idle then")
# What the function table's memory columns mean (attribution.function_table).
MEMORY_KEY = ["grew: the most RSS rose during one call (what the call allocated), within 10 %",
              "proc rss: the process's RSS peak while it ran (memory held before too)"]
# Said under the table when a call's growth has no figure (attribution's growth bounds).
UNKNOWN_GROWTH = ("grew -: its samples cannot tell its growth from its neighbours' (a call "
                  "shorter than the interval): a shorter interval can")
# What the cpu column is, and how good (attribution.py).
CPU_KEY = ("cpu: an estimate: the CPU read each sample (its thread's, where calls ran side by "
           "side in threads), split over the calls by time; off by up to one sample "
           "interval's CPU at each end of a call, so short calls that alternate with waits "
           "read low and the waits high")
CPU_MEASURED_KEY = ("cpu: measured: the CPU its thread used, read at each call's begin and end "
                    "(the span_cpu setting)")
CPU_MIXED_KEY = ("cpu: measured (span_cpu) but for the figures marked ~, which are estimates: "
                 + CPU_KEY.split(": ", 2)[2])


def functions_table(t: Timeline, attribution: Attribution | None = None,
                    width: int = 80) -> str:
    """One row per span name, and what its memory columns mean; a `cut` column (calls cut
    short by a death) when there were any."""
    rows = []
    table = function_table(t, attribution)
    cut = any(r["cut_short"] for r in table)
    gpu = any(r["gpu_idle_s"] is not None for r in table)
    basis = cpu_basis(table)
    for r in table:
        rows.append([r["name"] + (" (job)" if r["kind"] == "job" else ""), str(r["calls"]),
                     *(fmt_seconds(r[k]) for k in ("total_s", "mean_s", "p50_s", "p95_s",
                                                   "max_s", "self_s")),
                     cpu_mark(r, basis) + fmt_seconds(r["cpu_s"]),
                     fmt_bytes(r["peak_growth_bytes"]), fmt_bytes(r["peak_rss_bytes"]),
                     str(r["errors"]), *([str(r["cut_short"])] if cut else []),
                     *([fmt_percent(r["gpu_busy_percent"]), fmt_seconds(r["gpu_idle_s"])]
                       if gpu else [])])
    headers = ["function", "calls", "total", "mean", "p50", "p95", "max", "self", "cpu",
               "grew", "proc rss", "errors", *(["cut"] if cut else []),
               *(["gpu busy", "gpu idle"] if gpu else [])]
    # Too wide: first the statistics the others imply (mean beside p50, p95 beside max),
    # then self time, then long names are cut short; on a very narrow terminal, more go.
    text = _table(headers, rows, set(range(1, len(headers))), width, drop=(3, 5, 7),
                  clip=(0,), last=(6, 10, 4, 8))
    head = text.split("\n", 1)[0]
    key = {"estimated": CPU_KEY, "measured": CPU_MEASURED_KEY, "mixed": CPU_MIXED_KEY}.get(basis)
    shown = [key] if " cpu" in head and key else []
    if any(r["peak_rss_bytes"] is not None for r in table):
        shown += [k for k in MEMORY_KEY if k.split(":")[0] in head]  # a narrow table drops some
        if "grew" in head and any(r["peak_growth_bytes"] is None for r in table):
            shown.append(UNKNOWN_GROWTH)
    if "gpu busy" in head:
        shown.append(GPU_KEY)
    text += "\n".join(_wrap(shown, width, indent="")) + "\n" if shown else ""
    return text


def gpu_idle_section(t: Timeline, attribution: Attribution | None = None,
                     most: int = GPU_IDLE_SHOWN) -> str:
    """The spans (jobs left out) during which the tree's GPUs sat idle longest: where a GPU
    job waited on its loader or its CPU. "" where no span has a GPU figure."""
    attribution = attribute(t) if attribution is None else attribution
    ranked = sorted(((a["gpu_idle_s"], s) for s in t.spans if s.kind != "job"
                     for a in (attribution.get((s.worker, s.pid, s.id), {}),)
                     if a.get("gpu_idle_s")), key=lambda x: -x[0])[:most]
    if not ranked:
        return ""
    rows = [[s.name, short_worker(s.worker), fmt_seconds(s.duration_ns / 1e9), fmt_seconds(idle),
             fmt_percent(attribution[(s.worker, s.pid, s.id)]["gpu_busy_percent"])]
            for idle, s in ranked]
    return "top spans by GPU idle:\n" + _table(["span", "worker", "wall", "gpu idle", "gpu busy"],
                                                rows, {2, 3, 4}, clip=(0,))


def workers_text(t: Timeline, width: int | None = None) -> str:
    rows = []
    for r in workers_table(t):
        rows.append([short_worker(r["worker"]), r["status"], r["died"], str(r["jobs"]),
                     str(r["failed_jobs"]), fmt_seconds(r["busy_s"]), str(r["lost"]),
                     "straggler" if r["straggler"] else ""])
    return _table(["worker", "status", "died", "jobs", "failed", "busy", "lost", ""], rows,
                  {3, 4, 5, 6}, width, clip=(0,))


def cost_lines(t: Timeline, width: int = 80) -> str:
    """What workerscope used (its sidecars' CPU, RSS and cost a sample): over all workers,
    then each worker's when there are several; "" with no `sidecar` samples."""
    line = summary(t)
    if line is None:
        return ""
    out = _wrap([line], width, indent="")
    each = costs(t)
    if len(each) > 1:
        for wid, c in each.items():
            out.extend(_wrap([f"{short_worker(wid)}  {cost_text(c)}"], width, indent="  "))
    return "\n".join(out) + "\n"


def _key(t: Timeline, lanes: bool) -> str:
    """What the Gantt's symbols mean, those that it shows (`lanes`: it has a "lane 2" row)."""
    spans = [s for s in t.spans if s.kind != "job"]
    key = [("█", "span", bool(spans)), ("░", "job, no span", bool(t.jobs)),
           ("▓", "cut short by a death", any(is_cut_short(s) for s in spans)),
           ("!", "failed", any(s.error for s in spans)),
           ("✗", "died", bool(deaths(t)) or any(w.status in DIED for w in t.workers.values())),
           ("lane 2", "a job run beside the one above (another thread)", lanes)]
    return "  ".join(f"{sym} {what}" for sym, what, shown in key if shown)


def deaths_text(t: Timeline, width: int = 80) -> str:
    """Each death inside a job: worker, job, when, the cause, the error text and the figures
    behind it, wrapped to `width`."""
    out: list[str] = []
    start = t.start_ns or 0
    for d in deaths(t):
        out.append(printable(f"  {short_worker(d.worker)} job {d.job.id} {d.job.name} at "
                             f"{fmt_seconds((d.t_ns - start) / 1e9)}: {d.cause}"))
        if d.job.error:
            out.extend(_wrap([d.job.error], width))
        out.extend(_wrap(figures(d.job.death), width))
    return "deaths:\n" + "\n".join(out) + "\n" if out else ""


def _marks_section(t: Timeline, name: str, most: int,
                   lines: Callable[[dict[str, Any]], list[str]]) -> str:
    """The last `most` marks named `name` that carry attrs, each headed by its worker, job
    and time (`lines` of its attrs: the first ends the head, the rest are indented)."""
    marks = [m for m in t.marks if m.name == name and m.attrs]
    if not marks:
        return ""
    start = t.start_ns or 0
    out = []
    for m in sorted(marks, key=lambda m: m.t_ns)[-most:]:
        first, *rest = lines(m.attrs or {})
        out.append(printable(f"  {short_worker(m.worker)} job {m.job} at "
                             f"{fmt_seconds((m.t_ns - start) / 1e9)}{first}"))
        out.extend(printable(f"    {line}") for line in rest)
    more = len(marks) - most
    head = f"{name}:" if more <= 0 else f"{name} (the last {most} of {len(marks)}):"
    return head + "\n" + "\n".join(out) + "\n"


def allocations_section(t: Timeline, most: int = STACKS_SHOWN, sites: int = 5) -> str:
    """The allocation sites taken (marks named "allocations": at job ends and past the
    memory line, the allocations setting), the last `most` of them, their top `sites`."""
    def lines(a: dict[str, Any]) -> list[str]:
        return [f" ({a.get('reason', '')}): {fmt_bytes(a.get('traced_bytes'))} traced, peak "
                f"{fmt_bytes(a.get('peak_bytes'))}",
                *(f"{fmt_bytes(site.get('bytes')):>10} in {site.get('blocks', 0):,} blocks  "
                  f"{site.get('where', '')}" for site in (a.get("sites") or [])[:sites]
                  if isinstance(site, dict))]

    return _marks_section(t, protocol.ALLOCATIONS_MARK, most, lines)


def stacks_section(t: Timeline, most: int = STACKS_SHOWN) -> str:
    """The stacks taken (marks named "stacks": asked for, a straggler's, before an OOM kill, a
    crash's), the last `most` of them whole, each with its worker, job and time."""
    return _marks_section(t, protocol.STACKS_MARK, most,
                          lambda a: [":", *stacks_text(a).splitlines()])


def _wrap(phrases: list[str], width: int, indent: str = "    ") -> list[str]:
    """Phrases joined by " · " into lines of at most `width`, never broken inside a phrase
    that fits on a line ("83.5 MiB" stays whole). Each phrase is made printable first."""
    width = max(width, 20)
    lines: list[str] = []
    line = ""
    for p in map(printable, phrases):
        if line and len(line) + 3 + len(p) <= width:
            line += " · " + p
            continue
        if line:
            lines.append(line)
        if len(indent) + len(p) <= width:
            line = indent + p
        else:
            # A number keeps its unit: textwrap breaks only at ASCII whitespace.
            kept = _VALUE.sub("\\1\xa0\\2", p)
            *full, line = (x.replace("\xa0", " ") for x in textwrap.wrap(
                kept, width, initial_indent=indent, subsequent_indent=indent,
                break_on_hyphens=False))
            lines.extend(full)
    if line:
        lines.append(line)
    return lines


def report(t: Timeline, width: int = 80, color: bool = False,
           jobs: int | None = JOBS_SHOWN) -> str:
    """Everything: the Gantt and its key, workers, jobs (at most `jobs` rows; None: all),
    deaths and functions, and notes."""
    drawn = gantt(t, width, color)
    key = _key(t, f"\n{_LANE_2}" in drawn)
    parts = [drawn + ("\n".join(_wrap([key], width, "")) + "\n" if key else ""),
             workers_text(t, width) + cost_lines(t, width), jobs_table(t, width, jobs)]
    died = deaths_text(t, width)
    if died:
        parts.append(died)
    taken = stacks_section(t)
    if taken:
        parts.append(taken)
    allocated = allocations_section(t)
    if allocated:
        parts.append(allocated)
    slow = cause_lines(stragglers(t), short_worker)
    if slow:
        parts.append("stragglers:\n" + "".join(
            f"{line}\n" for c in slow for line in _wrap([c], width, "  ")))
    crept = creep_lines(memory_creep(t), short_worker)
    if crept:
        parts.append("memory creep:\n" + "".join(
            f"{line}\n" for c in crept for line in _wrap([c], width, "  ")))
    attribution = attribute(t)
    parts.append(functions_table(t, attribution, width=width))
    idle = gpu_idle_section(t, attribution)
    if idle:
        parts.append(idle)
    notes = [line for who, n in said_once(t, short_worker)
             for line in _wrap([f"{who}: {n}"], width, "  ")]
    if notes:
        parts.append("notes:\n" + "".join(f"{n}\n" for n in notes))
    return "\n".join(parts)


def said_once(t: Timeline, name: Callable[[str], str] = str) -> list[tuple[str, str]]:
    """Each worker note once, as (who said it, the note), in the order first said.

    Every sidecar on a machine without a GPU says so; with many workers the same line would
    bury the one that matters. A note said by more than one worker names how many (and the
    first few); one only one worker said names that worker, as before.
    """
    said: dict[str, list[str]] = {}
    for wid, w in sorted(t.workers.items()):
        for n in w.notes:
            who = said.setdefault(n, [])
            if wid not in who:
                who.append(wid)
    total, out = len(t.workers), []
    for n, who in said.items():
        if len(who) == 1:
            out.append((name(who[0]), n))
        elif len(who) == total:
            out.append((f"all {total} workers", n))
        else:
            first = ", ".join(name(w) for w in who[:_NAMED]) + (", …" if len(who) > _NAMED else "")
            out.append((f"{len(who)} of {total} workers ({first})", n))
    return out


def frame_line(frame: protocol.Frame) -> str:
    """One line of the live log that `workerscope listen` prints per frame, made printable:
    every value in it is the sender's."""
    return printable(_frame_text(frame))


def _frame_text(frame: protocol.Frame) -> str:
    b: dict[str, Any] = frame.body
    w = frame.worker
    if frame.kind == protocol.HELLO:
        return f"hello     {w}  pid {b.get('pid')} interval {b.get('interval')}s"
    if frame.kind == protocol.JOB_START:
        return f"job start {w}  #{b.get('job')} {b.get('name')}"
    if frame.kind == protocol.JOB_END:
        err = f" ({b.get('error')})" if b.get("error") else ""
        return f"job end   {w}  #{b.get('job')} {b.get('status')}{err}"
    if frame.kind == protocol.SAMPLE:
        tree = b.get("tree") or {}
        return (f"sample    {w}  cpu {fmt_percent(tree.get('cpu_percent'))} "
                f"rss {fmt_bytes(tree.get('rss_bytes'))} procs {tree.get('num_procs', '-')}")
    if frame.kind in (protocol.SPANS, protocol.MARK):
        return f"{frame.kind:<9} {w}  {len(b.get('records', []))} record(s)"
    if frame.kind == protocol.BYE:
        return f"bye       {w}  {b.get('status')}, {b.get('dropped', 0)} dropped at the sidecar"
    return f"{frame.kind:<9} {w}"
