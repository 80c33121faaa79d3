"""A Timeline as pandas DataFrames (Timeline.to_pandas), for analysis in a notebook.

One frame per kind of record, one row per record: spans (with the resource estimates that
attribution.py gives each span), samples (wide: one column per metric, as the CSV), jobs (with
how a worker died inside one: `died` and the `death_*` figures), marks and workers. Times are
UTC timestamps (`start`, `end`, `t`), and seconds since the timeline's start (`start_s`,
`t_s`). pandas is optional: imported only here, only when called.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Sequence
from typing import Any

from ..timeline import Timeline, Worker
from .attribution import attribute
from .deaths import cause, is_cut_short

SPAN_COLUMNS = ["worker", "job", "id", "parent", "name", "kind", "start", "end", "start_s",
                "duration_s", "pid", "tid", "thread", "error", "cut_short", "attrs"]
SAMPLE_COLUMNS = ["worker", "host", "t", "t_s", "t_ns", "scope", "pid", "process"]
JOB_COLUMNS = ["worker", "id", "name", "status", "start", "end", "start_s", "duration_s",
               "error", "died", "pid", "tid"]
MARK_COLUMNS = ["worker", "job", "name", "t", "t_s", "pid", "tid", "attrs"]


def _pandas() -> Any:
    try:
        # By name: pandas is optional, and type-checking this module needs none of its stubs.
        return importlib.import_module("pandas")
    except ImportError as err:
        raise ImportError("Timeline.to_pandas() needs pandas: pip install pandas") from err


def to_pandas(t: Timeline) -> dict[str, Any]:
    """{"spans", "samples", "jobs", "marks", "workers"} -> pandas.DataFrame."""
    pd = _pandas()
    origin = t.start_ns or 0

    def stamps(ns: Sequence[int | None]) -> Any:
        return pd.to_datetime(pd.Series(ns, dtype="Int64"), unit="ns", utc=True)

    def seconds(ns: Sequence[int | None]) -> list[float | None]:
        return [None if x is None else (x - origin) / 1e9 for x in ns]

    # spans, with each span's estimates as columns
    a = attribute(t)
    estimates = [a.get((s.worker, s.pid, s.id), {}) for s in t.spans]
    keys = sorted({k for e in estimates for k in e})
    starts, ends = [s.start_ns for s in t.spans], [s.end_ns for s in t.spans]
    spans: dict[str, Any] = {
        "worker": [s.worker for s in t.spans], "job": [s.job for s in t.spans],
        "id": [s.id for s in t.spans], "parent": [s.parent for s in t.spans],
        "name": [s.name for s in t.spans], "kind": [s.kind for s in t.spans],
        "start": stamps(starts), "end": stamps(ends), "start_s": seconds(starts),
        "duration_s": [s.duration_ns / 1e9 for s in t.spans],
        "pid": [s.pid for s in t.spans], "tid": [s.tid for s in t.spans],
        "thread": [t.threads.get((s.worker, s.pid, s.tid)) for s in t.spans],
        "error": [s.error for s in t.spans], "cut_short": [is_cut_short(s) for s in t.spans],
        "attrs": [s.attrs for s in t.spans],
        **{k: [e.get(k) for e in estimates] for k in keys},
    }

    # samples, wide
    metrics = sorted({k for s in t.samples for k in s.values})
    host = {wid: w.host for wid, w in t.workers.items()}
    times = [s.t_ns for s in t.samples]
    samples: dict[str, Any] = {
        "worker": [s.worker for s in t.samples], "host": [host.get(s.worker) for s in t.samples],
        "t": stamps(times), "t_s": seconds(times), "t_ns": times,
        "scope": [s.scope for s in t.samples], "pid": [s.pid for s in t.samples],
        "process": [t.processes.get((s.worker, s.pid)) if s.pid is not None else None
                    for s in t.samples],
        **{m: [s.values.get(m) for s in t.samples] for m in metrics},
    }

    # jobs, with their death figures and light-mode stats
    death_keys = sorted({k for j in t.jobs for k in (j.death or {})})
    stat_keys = sorted({k for j in t.jobs for k in (j.stats or {})})
    jstarts, jends = [j.start_ns for j in t.jobs], [j.end_ns for j in t.jobs]
    jobs: dict[str, Any] = {
        "worker": [j.worker for j in t.jobs], "id": [j.id for j in t.jobs],
        "name": [j.name for j in t.jobs], "status": [str(j.status) for j in t.jobs],
        "start": stamps(jstarts), "end": stamps(jends), "start_s": seconds(jstarts),
        "duration_s": [None if j.end_ns is None else (j.end_ns - j.start_ns) / 1e9
                       for j in t.jobs],
        "error": [j.error for j in t.jobs], "died": [cause(j) for j in t.jobs],
        "pid": [j.pid for j in t.jobs], "tid": [j.tid for j in t.jobs],
        **{f"death_{k}": [(j.death or {}).get(k) for j in t.jobs] for k in death_keys},
    }
    for k in stat_keys:
        jobs[k if k not in jobs else f"stats_{k}"] = [(j.stats or {}).get(k) for j in t.jobs]

    mtimes = [m.t_ns for m in t.marks]
    marks: dict[str, Any] = {
        "worker": [m.worker for m in t.marks], "job": [m.job for m in t.marks],
        "name": [m.name for m in t.marks], "t": stamps(mtimes),
        "t_s": seconds(mtimes), "pid": [m.pid for m in t.marks],
        "tid": [m.tid for m in t.marks], "attrs": [m.attrs for m in t.marks],
    }
    wrows = [dataclasses.asdict(w) for w in t.workers.values()]
    return {
        "spans": pd.DataFrame(spans, columns=[*SPAN_COLUMNS, *keys]),
        "samples": pd.DataFrame(samples, columns=[*SAMPLE_COLUMNS, *metrics]),
        "jobs": pd.DataFrame(jobs, columns=list(jobs)),
        "marks": pd.DataFrame(marks, columns=MARK_COLUMNS),
        "workers": pd.DataFrame(wrows, columns=[f.name for f in dataclasses.fields(Worker)]),
    }
