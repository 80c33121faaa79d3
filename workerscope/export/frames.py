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
from operator import attrgetter
from typing import Any

from ..timeline import Job, Timeline, Worker
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
    times = _Times(pd, t.start_ns or 0)
    spans, estimates = _spans(t, times)
    samples, metrics = _samples(t, times)
    jobs = _jobs(t, times)
    return {
        "spans": pd.DataFrame(spans, columns=[*SPAN_COLUMNS, *estimates]),
        "samples": pd.DataFrame(samples, columns=[*SAMPLE_COLUMNS, *metrics]),
        "jobs": pd.DataFrame(jobs, columns=list(jobs)),
        "marks": pd.DataFrame(_marks(t, times), columns=MARK_COLUMNS),
        "workers": pd.DataFrame([dataclasses.asdict(w) for w in t.workers.values()],
                                columns=[f.name for f in dataclasses.fields(Worker)]),
    }


class _Times:
    """Times in ns as every frame shows them: UTC timestamps, and seconds since `origin`."""

    def __init__(self, pd: Any, origin: int) -> None:
        self.pd, self.origin = pd, origin

    def stamps(self, ns: Sequence[int | None]) -> Any:
        return self.pd.to_datetime(self.pd.Series(ns, dtype="Int64"), unit="ns", utc=True)

    def seconds(self, ns: Sequence[int | None]) -> list[float | None]:
        return [None if x is None else (x - self.origin) / 1e9 for x in ns]


def _fields(rows: Sequence[Any], *names: str) -> dict[str, list[Any]]:
    """A column per attribute named, each record's value as it is."""
    return {n: list(map(attrgetter(n), rows)) for n in names}


def _spans(t: Timeline, times: _Times) -> tuple[dict[str, Any], list[str]]:
    """The spans' columns, each span's resource estimates included, and the estimates' keys."""
    a = attribute(t)
    estimates = [a.get((s.worker, s.pid, s.id), {}) for s in t.spans]
    keys = sorted({k for e in estimates for k in e})
    starts, ends = [s.start_ns for s in t.spans], [s.end_ns for s in t.spans]
    spans: dict[str, Any] = {
        **_fields(t.spans, "worker", "job", "id", "parent", "name", "kind"),
        "start": times.stamps(starts), "end": times.stamps(ends),
        "start_s": times.seconds(starts), "duration_s": [s.duration_ns / 1e9 for s in t.spans],
        **_fields(t.spans, "pid", "tid"),
        "thread": [t.threads.get((s.worker, s.pid, s.tid)) for s in t.spans],
        **_fields(t.spans, "error"), "cut_short": [is_cut_short(s) for s in t.spans],
        **_fields(t.spans, "attrs"),
        **{k: [e.get(k) for e in estimates] for k in keys},
    }
    return spans, keys


def _samples(t: Timeline, times: _Times) -> tuple[dict[str, Any], list[str]]:
    """The samples' columns, wide (a column per metric, as the CSV), and the metrics."""
    metrics = sorted({k for s in t.samples for k in s.values})
    host = {wid: w.host for wid, w in t.workers.items()}
    ns = [s.t_ns for s in t.samples]
    samples: dict[str, Any] = {
        "worker": [s.worker for s in t.samples], "host": [host.get(s.worker) for s in t.samples],
        "t": times.stamps(ns), "t_s": times.seconds(ns), "t_ns": ns,
        **_fields(t.samples, "scope", "pid"),
        "process": [t.processes.get((s.worker, s.pid)) if s.pid is not None else None
                    for s in t.samples],
        **{m: [s.values.get(m) for s in t.samples] for m in metrics},
    }
    return samples, metrics


def _jobs(t: Timeline, times: _Times) -> dict[str, Any]:
    """The jobs' columns, in order: with how a worker died inside one (`died`, `death_*`),
    then the light-mode stats (`stats_` before a name a column already has)."""
    death_keys = sorted({k for j in t.jobs for k in (j.death or {})})
    starts, ends = [j.start_ns for j in t.jobs], [j.end_ns for j in t.jobs]
    jobs: dict[str, Any] = {
        **_fields(t.jobs, "worker", "id", "name"), "status": [str(j.status) for j in t.jobs],
        "start": times.stamps(starts), "end": times.stamps(ends),
        "start_s": times.seconds(starts),
        "duration_s": [None if j.end_ns is None else (j.end_ns - j.start_ns) / 1e9
                       for j in t.jobs],
        **_fields(t.jobs, "error"), "died": [cause(j) for j in t.jobs],
        **_fields(t.jobs, "pid", "tid"),
        **{f"death_{k}": [(j.death or {}).get(k) for j in t.jobs] for k in death_keys},
    }
    _add_stats(jobs, t.jobs)
    return jobs


def _add_stats(columns: dict[str, Any], jobs: Sequence[Job]) -> None:
    """A column per light-mode stat, after the others: `stats_<name>` where a column is
    already named so."""
    for k in sorted({k for j in jobs for k in (j.stats or {})}):
        columns[k if k not in columns else f"stats_{k}"] = [(j.stats or {}).get(k) for j in jobs]


def _marks(t: Timeline, times: _Times) -> dict[str, Any]:
    ns = [m.t_ns for m in t.marks]
    return {**_fields(t.marks, "worker", "job", "name"), "t": times.stamps(ns),
            "t_s": times.seconds(ns), **_fields(t.marks, "pid", "tid", "attrs")}
