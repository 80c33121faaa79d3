"""The live terminal view of `workerscope listen --live`: one row per worker, redrawn in place.

Plain text and ANSI cursor moves only, so it works over ssh and in any terminal. Every cell is
made printable (units.printable): ids, statuses, job and span names are what the workers sent.
"""

from __future__ import annotations

from typing import Any

from ..protocol import Status
from ..units import fmt_bytes, fmt_percent, fmt_seconds, printable, short_worker

CLEAR = "\x1b[H\x1b[2J"


def _now(r: dict[str, Any], key: str) -> str:
    """A reading that describes the present: CPU and GPU use of a running worker only. A worker
    that ended (or went silent) keeps its last frame's reading, which is not what it uses now."""
    return fmt_percent(r.get(key)) if r.get("status") == Status.RUNNING else ""


def render(rows: list[dict[str, Any]], endpoint: str, width: int = 100, jobs: int = 0) -> str:
    """The screen for these Subscriber.live() rows. A `failed` column (and count in the
    heading) when the rows carry `failed_jobs`."""
    failed = [r["failed_jobs"] for r in rows if isinstance(r.get("failed_jobs"), int)]
    head = f"workerscope listen: {len(rows)} worker(s), {jobs} job(s) ended"
    if failed:
        head += f", {sum(failed)} failed"
    cols = ["worker", "status", "job / last span", "cpu", "rss", "gpu", *(
        ["failed"] if failed else []), "lost", "running", ""]
    table = []
    for r in rows:
        job = printable(str(r["job"] or "-"))
        if r["span"]:
            job = f"{job} / {printable(str(r['span']))}"
        table.append([printable(c) for c in [
            short_worker(str(r["worker"])), str(r["status"]), job[:32],
            _now(r, "cpu_percent"),
            fmt_bytes(r["rss_bytes"]),
            _now(r, "gpu_util_percent"),
            *([str(r.get("failed_jobs", "-"))] if failed else []),
            str(r["lost"]) + (f" (+{r['dropped']} dropped)" if r["dropped"] else ""),
            fmt_seconds(r["running_s"]),
            "STRAGGLER" if r["straggler"] else "",
        ]])
    right = {cols.index(c) for c in ("cpu", "rss", "gpu", "failed", "lost", "running")
             if c in cols}
    widths = [max([len(c)] + [len(row[i]) for row in table]) for i, c in enumerate(cols)]
    # The endpoint on a line of its own, never cut at the width: it is there to be copied
    # whole (its keys included); the terminal wraps it.
    lines = [head[:width], f"endpoint: {endpoint}", ""]
    for row in [cols, *table]:
        cells = (cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
                 for i, cell in enumerate(row))
        lines.append("  ".join(cells).rstrip()[:width])
    return "\n".join(lines) + "\n"
