"""Terminal views: a Gantt per worker in Unicode blocks, summary tables, the live frame log.

Pure functions of a Timeline (or a frame) that return text. Width is a parameter (the CLI passes
the terminal's); colour only when asked (the CLI asks only on a TTY).
"""

from __future__ import annotations

import bisect
from typing import Any

from .. import protocol
from ..protocol import Status
from ..timeline import Timeline
from .attribution import DIED, Attribution, function_table, workers_table
from .units import fmt_bytes, fmt_percent, fmt_seconds, short_worker

LEVELS = " ▁▂▃▄▅▆▇█"
RED, DIM, RESET = "\x1b[31m", "\x1b[2m", "\x1b[0m"


def gantt(t: Timeline, width: int = 80, color: bool = False) -> str:
    """One row of spans and one row of tree CPU per worker, over the whole timeline.

    Span row: █ inside a span, ░ inside a job but no span, space idle, ✗ where a worker died,
    ! where a span failed. CPU row: tree cpu_percent scaled to the peak of all workers.
    """
    start, end = t.start_ns, t.end_ns
    if start is None or end is None:
        return "(empty timeline)\n"
    label_w = min(28, max((len(short_worker(w)) + 9 for w in t.workers), default=10))
    cols = max(width - label_w - 3, 10)
    span_ns = max(end - start, 1)

    def col(ts: int) -> int:
        return min(cols - 1, max(0, (ts - start) * cols // span_ns))

    cpu_by_worker: dict[str, list[tuple[int, float]]] = {}
    for smp in t.samples:
        if smp.scope == "tree" and "cpu_percent" in smp.values:
            cpu_by_worker.setdefault(smp.worker, []).append((smp.t_ns, smp.values["cpu_percent"]))
    peak_cpu = max((v for rows in cpu_by_worker.values() for _, v in rows), default=0.0)
    scale = max(100.0, peak_cpu)
    zero = fmt_seconds(0)
    axis = f"{'':<{label_w}} |{zero}{fmt_seconds(span_ns / 1e9):>{cols - len(zero)}}|"
    lines = [axis]
    for wid in sorted(t.workers):
        w = t.workers[wid]
        row = [" "] * cols
        for j in t.jobs:
            if j.worker == wid:
                for c in range(col(j.start_ns), col(j.end_ns if j.end_ns else end) + 1):
                    row[c] = "░"
        for s in t.spans:
            if s.worker == wid and s.kind != "job":
                for c in range(col(s.start_ns), col(s.end_ns) + 1):
                    row[c] = "█"
        for s in t.spans:
            if s.worker == wid and s.error and s.kind != "job":
                row[col(s.end_ns)] = "!"
        died = w.status in DIED or any(j.worker == wid and j.status == Status.KILLED
                                       for j in t.jobs)
        if died:
            last = max((j.end_ns or end for j in t.jobs if j.worker == wid), default=end)
            row[col(last)] = "✗"
        text = "".join(row)
        if color:
            text = text.replace("✗", f"{RED}✗{RESET}").replace("!", f"{RED}!{RESET}")
        status = w.status if w.status != Status.RUNNING else ""
        label = f"{short_worker(wid)} {status}"[:label_w]
        lines.append(f"{label:<{label_w}} |{text}|")
        cpu_row = [" "] * cols
        rows = sorted(cpu_by_worker.get(wid, []))
        times = [ts for ts, _ in rows]
        for c in range(cols):
            # cpu_percent describes the interval that ends at its sample: a column shows the
            # sample whose interval covers the column's middle.
            mid = start + (2 * c + 1) * span_ns // (2 * cols)
            i = bisect.bisect_left(times, mid)
            if 0 < i < len(rows) or (i == 0 and rows and times[0] == mid):
                level = round(rows[i][1] / scale * (len(LEVELS) - 1))
                cpu_row[c] = LEVELS[max(1, min(level, len(LEVELS) - 1))]
        cpu = "".join(cpu_row)
        if color:
            cpu = f"{DIM}{cpu}{RESET}"
        lines.append(f"{f'  cpu (max {fmt_percent(scale)})':<{label_w}} |{cpu}|")
    return "\n".join(lines) + "\n"


def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i])
                         for i, c in enumerate(cells)).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out) + "\n"


def jobs_table(t: Timeline) -> str:
    rows = []
    for j in sorted(t.jobs, key=lambda j: (j.worker, j.start_ns)):
        dur = None if j.end_ns is None else (j.end_ns - j.start_ns) / 1e9
        rows.append([short_worker(j.worker), str(j.id), j.name, j.status, fmt_seconds(dur),
                     j.error or ""])
    return _table(["worker", "job", "name", "status", "wall", "error"], rows, {1, 4})


def functions_table(t: Timeline, attribution: Attribution | None = None) -> str:
    rows = []
    for r in function_table(t, attribution):
        rows.append([r["name"] + (" (job)" if r["kind"] == "job" else ""), str(r["calls"]),
                     *(fmt_seconds(r[k]) for k in ("total_s", "mean_s", "p50_s", "p95_s",
                                                   "max_s", "self_s", "cpu_s")),
                     fmt_bytes(r["peak_rss_bytes"]), str(r["errors"])])
    return _table(["function", "calls", "total", "mean", "p50", "p95", "max", "self", "cpu",
                   "peak rss", "errors"], rows, set(range(1, 11)))


def workers_text(t: Timeline) -> str:
    rows = []
    for r in workers_table(t):
        rows.append([short_worker(r["worker"]), r["status"], str(r["jobs"]),
                     str(r["failed_jobs"]), fmt_seconds(r["busy_s"]), str(r["lost"]),
                     "straggler" if r["straggler"] else ""])
    return _table(["worker", "status", "jobs", "failed", "busy", "lost", ""], rows, {2, 3, 4, 5})


def report(t: Timeline, width: int = 80, color: bool = False) -> str:
    """Everything: the Gantt, workers, jobs and functions, and any notes."""
    parts = [gantt(t, width, color), workers_text(t), jobs_table(t), functions_table(t)]
    notes = [f"{short_worker(w.id)}: {n}" for w in t.workers.values() for n in w.notes]
    if notes:
        parts.append("notes:\n" + "".join(f"  {n}\n" for n in notes))
    return "\n".join(parts)


def frame_line(frame: protocol.Frame) -> str:
    """One line of the live log that `workerscope listen` prints per frame."""
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
