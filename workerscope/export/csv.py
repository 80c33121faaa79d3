"""Samples as CSV, one row per sample and scope, one column per metric (for pandas)."""

from __future__ import annotations

import csv
import io

from ..timeline import Timeline

FIXED = ["worker", "host", "t_unix_ns", "t_s", "scope", "pid"]


def to_csv(t: Timeline) -> str:
    """Wide CSV: the fixed columns, then every metric seen, sorted; empty where absent."""
    metrics = sorted({k for s in t.samples for k in s.values})
    origin = t.start_ns or 0
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(FIXED + metrics)
    for s in t.samples:
        w = t.workers.get(s.worker)
        out.writerow([s.worker, w.host if w else "", s.t_ns, f"{(s.t_ns - origin) / 1e9:.6f}",
                      s.scope, "" if s.pid is None else s.pid]
                     + [s.values.get(m, "") for m in metrics])
    return buf.getvalue()
