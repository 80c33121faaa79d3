"""Samples as CSV, one row per sample and scope, one column per metric (for pandas).

A text cell (worker, host, scope, a metric's name) that starts with = + - @, a tab or a CR gets
a leading single quote, so a spreadsheet shows it instead of running it as a formula (OWASP's
CSV injection advice); numbers are written as numbers, negative ones included.
"""

from __future__ import annotations

import csv
import io

from ..timeline import Timeline

FIXED = ["worker", "host", "t_unix_ns", "t_s", "scope", "pid"]
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_text(text: str) -> str:
    """A text cell as a spreadsheet shows it: quoted with a leading ' if it would be a formula."""
    return "'" + text if text.startswith(_FORMULA_START) else text


def to_csv(t: Timeline) -> str:
    """Wide CSV: the fixed columns, then every metric seen, sorted; empty where absent."""
    metrics = sorted({k for s in t.samples for k in s.values})
    origin = t.start_ns or 0
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(FIXED + [spreadsheet_text(m) for m in metrics])
    # Each worker's two text cells once, not once per sample.
    cells = {wid: (spreadsheet_text(wid), spreadsheet_text(w.host))
             for wid, w in t.workers.items()}
    for s in t.samples:
        worker, host = cells.get(s.worker) or (spreadsheet_text(s.worker), "")
        out.writerow([worker, host, s.t_ns, f"{(s.t_ns - origin) / 1e9:.6f}",
                      spreadsheet_text(s.scope), "" if s.pid is None else s.pid]
                     + [s.values.get(m, "") for m in metrics])  # numbers (builder._numbers)
    return buf.getvalue()
