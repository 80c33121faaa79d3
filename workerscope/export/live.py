"""The live terminal view of `workerscope listen --live`: one row per worker, redrawn in place.

Plain text and ANSI cursor moves only, so it works over ssh and in any terminal.
"""

from __future__ import annotations

from typing import Any

from .units import fmt_bytes, fmt_percent, fmt_seconds, short_worker

CLEAR = "\x1b[H\x1b[2J"


def render(rows: list[dict[str, Any]], endpoint: str, width: int = 100, jobs: int = 0) -> str:
    """The screen for these Subscriber.live() rows."""
    head = f"workerscope listen on {endpoint}: {len(rows)} worker(s), {jobs} job(s) ended"
    cols = ["worker", "status", "job / last span", "cpu", "rss", "gpu", "lost", "running", ""]
    table = []
    for r in rows:
        job = r["job"] or "-"
        if r["span"]:
            job = f"{job} / {r['span']}"
        table.append([
            short_worker(str(r["worker"])), str(r["status"]), job[:32],
            fmt_percent(r["cpu_percent"]),
            fmt_bytes(r["rss_bytes"]),
            fmt_percent(r["gpu_util_percent"]),
            str(r["lost"]) + (f" (+{r['dropped']} dropped)" if r["dropped"] else ""),
            fmt_seconds(r["running_s"]),
            "STRAGGLER" if r["straggler"] else "",
        ])
    widths = [max([len(c)] + [len(row[i]) for row in table]) for i, c in enumerate(cols)]
    lines = [head[:width], ""]
    for row in [cols, *table]:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()[:width])
    return "\n".join(lines) + "\n"
