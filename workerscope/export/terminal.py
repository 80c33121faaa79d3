"""Terminal views: a Gantt per worker in Unicode blocks, summary tables, the live frame log.

Pure functions of a Timeline (or a frame) that return text. Width is a parameter (the CLI passes
the terminal's); colour only when asked (the CLI asks only on a TTY).
"""

from __future__ import annotations

import bisect
import math
from typing import Any

from .. import protocol
from ..timeline import Timeline
from .attribution import function_table, workers_table

LEVELS = " ▁▂▃▄▅▆▇█"
DEAD = ("killed", "sidecar_lost")
RED, DIM, RESET = "\x1b[31m", "\x1b[2m", "\x1b[0m"


def _fmt_s(seconds: float | None) -> str:
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    if seconds >= 100:
        return f"{seconds:.0f}s"
    if seconds >= 1:
        return f"{seconds:.2f}s"
    return f"{seconds * 1000:.1f}ms"


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}TB"


def _short(worker_id: str) -> str:
    """host:pid of a worker id ([node/]host:pid:sidecar)."""
    parts = worker_id.split(":")
    return ":".join(parts[:2]) if len(parts) >= 2 else worker_id


def gantt(t: Timeline, width: int = 80, color: bool = False) -> str:
    """One row of spans and one row of tree CPU per worker, over the whole timeline.

    Span row: █ inside a span, ░ inside a job but no span, space idle, ✗ where a worker died,
    ! where a span failed. CPU row: tree cpu_percent scaled to the peak of all workers.
    """
    start, end = t.start_ns, t.end_ns
    if start is None or end is None:
        return "(empty timeline)\n"
    label_w = min(28, max((len(_short(w)) + 9 for w in t.workers), default=10))
    cols = max(width - label_w - 3, 10)
    span_ns = max(end - start, 1)

    def col(ts: int) -> int:
        return min(cols - 1, max(0, (ts - start) * cols // span_ns))

    cpu_by_worker: dict[str, list[tuple[int, float]]] = {}
    for s in t.samples:
        if s.scope == "tree" and "cpu_percent" in s.values:
            cpu_by_worker.setdefault(s.worker, []).append((s.t_ns, s.values["cpu_percent"]))
    peak_cpu = max((v for rows in cpu_by_worker.values() for _, v in rows), default=0.0)
    scale = max(100.0, peak_cpu)
    axis = f"{'':<{label_w}} |0s{_fmt_s(span_ns / 1e9):>{cols - 2}}|"
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
        died = w.status in DEAD or any(j.worker == wid and j.status == "killed" for j in t.jobs)
        if died:
            last = max((j.end_ns or end for j in t.jobs if j.worker == wid), default=end)
            row[col(last)] = "✗"
        text = "".join(row)
        if color:
            text = text.replace("✗", f"{RED}✗{RESET}").replace("!", f"{RED}!{RESET}")
        status = w.status if w.status != "running" else ""
        label = f"{_short(wid)} {status}"[:label_w]
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
        lines.append(f"{'  cpu (max ' + f'{scale:.0f}%)':<{label_w}} |{cpu}|")
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
        rows.append([_short(j.worker), str(j.id), j.name, j.status, _fmt_s(dur), j.error or ""])
    return _table(["worker", "job", "name", "status", "wall", "error"], rows, {1, 4})


def functions_table(t: Timeline, attribution: dict | None = None) -> str:
    rows = []
    for r in function_table(t, attribution):
        rows.append([r["name"] + (" (job)" if r["kind"] == "job" else ""), str(r["calls"]),
                     _fmt_s(r["total_s"]), _fmt_s(r["mean_s"]), _fmt_s(r["p50_s"]),
                     _fmt_s(r["p95_s"]), _fmt_s(r["max_s"]), _fmt_s(r["self_s"]),
                     "-" if r["cpu_s"] is None else f"{r['cpu_s']:.2f}s",
                     _fmt_bytes(r["peak_rss_bytes"]), str(r["errors"])])
    return _table(["function", "calls", "total", "mean", "p50", "p95", "max", "self", "cpu",
                   "peak rss", "errors"], rows, set(range(1, 11)))


def workers_text(t: Timeline) -> str:
    rows = []
    for r in workers_table(t):
        rows.append([_short(r["worker"]), r["status"], str(r["jobs"]), str(r["failed_jobs"]),
                     _fmt_s(r["busy_s"]), str(r["lost"]), "straggler" if r["straggler"] else ""])
    return _table(["worker", "status", "jobs", "failed", "busy", "lost", ""], rows, {2, 3, 4, 5})


def report(t: Timeline, width: int = 80, color: bool = False) -> str:
    """Everything: the Gantt, workers, jobs and functions, and any notes."""
    parts = [gantt(t, width, color), workers_text(t), jobs_table(t), functions_table(t)]
    notes = [f"{_short(w.id)}: {n}" for w in t.workers.values() for n in w.notes]
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
        cpu = tree.get("cpu_percent")
        cpu_s = "-" if cpu is None else f"{cpu:.0f}%"
        return (f"sample    {w}  cpu {cpu_s} rss {_fmt_bytes(tree.get('rss_bytes'))} "
                f"procs {tree.get('num_procs', '-')}")
    if frame.kind in (protocol.SPANS, protocol.MARK):
        return f"{frame.kind:<9} {w}  {len(b.get('records', []))} record(s)"
    if frame.kind == protocol.BYE:
        return f"bye       {w}  {b.get('status')}, {b.get('dropped', 0)} dropped at the sidecar"
    return f"{frame.kind:<9} {w}"
