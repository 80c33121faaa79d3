"""The live terminal view of `workerscope listen --live`: one row per worker, redrawn in place.

Plain text and ANSI cursor moves only, so it works over ssh and in any terminal.
"""

from __future__ import annotations

from typing import Any

from ..export.terminal import _fmt_bytes, _fmt_s, _short

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
            _short(str(r["worker"])), str(r["status"]), job[:32],
            "-" if r["cpu_percent"] is None else f"{r['cpu_percent']:.0f}%",
            _fmt_bytes(r["rss_bytes"]),
            "-" if r["gpu_util_percent"] is None else f"{r['gpu_util_percent']:.0f}%",
            str(r["lost"]) + (f" (+{r['dropped']} dropped)" if r["dropped"] else ""),
            _fmt_s(r["running_s"]) if r["running_s"] is not None else "-",
            "STRAGGLER" if r["straggler"] else "",
        ])
    widths = [max([len(c)] + [len(row[i]) for row in table]) for i, c in enumerate(cols)]
    lines = [head[:width], ""]
    for row in [cols] + table:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()[:width])
    return "\n".join(lines) + "\n"
