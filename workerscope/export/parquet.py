"""Parquet: a Timeline as a folder of one file per table, for DuckDB, polars and pandas as they
are (`timeline.save("run.parquet")`, through pyarrow: the `parquet` extra).

    run.parquet/workers.parquet   a row per worker: id, host, node, pid, status, frame counts
    run.parquet/jobs.parquet      a row per job: times (ns), duration_s, status, queue time
    run.parquet/spans.parquet     a row per span: times (ns), duration_s, cpu_s, attrs (JSON)
    run.parquet/marks.parquet     a row per mark, attrs (JSON)
    run.parquet/samples.parquet   the samples in long form: worker, t_ns, scope, pid, tid,
                                  metric, value (a row per value)

Times are integers on the timeline's clock (Unix ns); durations are float seconds. Each table
is written in row groups of ROW_GROUP rows, so a long timeline never needs a second copy of
itself in memory. The folder is written beside the target under a name of its own and renamed
into place (an earlier one of ours moved aside first: a reader sees the old folder, the new
one, or for an instant none, never half of one). Read the tables one file at a time:
`pandas.read_parquet("run.parquet")` would read the folder as one dataset of five tables.

    duckdb.sql("SELECT name, sum(duration_s) FROM 'run.parquet/spans.parquet' GROUP BY name")
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import MissingExtraError, OutputPathError
from ..timeline import Timeline
from ..units import json_safe

ROW_GROUP = 262_144
TABLES = ("workers", "jobs", "spans", "marks", "samples")


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as err:
        raise MissingExtraError("saving .parquet needs pyarrow: pip install "
                               "'workerscope[parquet]'") from err
    return pyarrow


def ready() -> None:
    _pyarrow()


def _attrs(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(json_safe(value), ensure_ascii=False)


def _schemas(pa: Any) -> dict[str, Any]:
    s, i64, f64, b = pa.string(), pa.int64(), pa.float64(), pa.bool_()
    return {
        "workers": pa.schema([("worker", s), ("host", s), ("node", s), ("pid", i64),
                              ("status", s), ("frames", i64), ("lost", i64), ("dropped", i64),
                              ("spans_lost", i64), ("clock_offset_ns", i64)]),
        "jobs": pa.schema([("worker", s), ("job", i64), ("name", s), ("start_ns", i64),
                           ("end_ns", i64), ("duration_s", f64), ("status", s), ("error", s),
                           ("pid", i64), ("tid", i64), ("submitted_ns", i64), ("queued_s", f64)]),
        "spans": pa.schema([("worker", s), ("job", i64), ("id", i64), ("parent", i64),
                            ("name", s), ("start_ns", i64), ("end_ns", i64), ("duration_s", f64),
                            ("pid", i64), ("tid", i64), ("kind", s), ("error", s),
                            ("cut_short", b), ("cpu_s", f64), ("attrs", s)]),
        "marks": pa.schema([("worker", s), ("job", i64), ("name", s), ("t_ns", i64),
                            ("pid", i64), ("tid", i64), ("attrs", s)]),
        "samples": pa.schema([("worker", s), ("t_ns", i64), ("scope", s), ("pid", i64),
                              ("tid", i64), ("metric", s), ("value", f64)]),
    }


def _rows(t: Timeline, table: str) -> Iterator[tuple[Any, ...]]:
    if table == "workers":
        for w in t.workers.values():
            yield (w.id, w.host, w.node, w.pid, str(w.status), w.frames, w.lost, w.dropped,
                   w.spans_lost, w.clock_offset_ns)
    elif table == "jobs":
        for j in t.jobs:
            yield (j.worker, j.id, j.name, j.start_ns, j.end_ns,
                   None if j.end_ns is None else (j.end_ns - j.start_ns) / 1e9, str(j.status),
                   j.error, j.pid, j.tid, j.submitted_ns,
                   None if j.queued_ns is None else j.queued_ns / 1e9)
    elif table == "spans":
        for s in t.spans:
            yield (s.worker, s.job, s.id, s.parent, s.name, s.start_ns, s.end_ns,
                   s.duration_ns / 1e9, s.pid, s.tid, s.kind, s.error, s.cut_short,
                   None if s.cpu_ns is None else s.cpu_ns / 1e9, _attrs(s.attrs))
    elif table == "marks":
        for m in t.marks:
            yield (m.worker, m.job, m.name, m.t_ns, m.pid, m.tid, _attrs(m.attrs))
    else:
        for smp in t.samples:
            for metric, value in smp.values.items():
                yield (smp.worker, smp.t_ns, smp.scope, smp.pid, smp.tid, metric, float(value))


def _groups(rows: Iterable[tuple[Any, ...]], width: int) -> Iterator[list[list[Any]]]:
    """Rows as columns, ROW_GROUP rows at a time."""
    cols: list[list[Any]] = [[] for _ in range(width)]
    n = 0
    yielded = False
    for row in rows:
        for col, value in zip(cols, row, strict=True):
            col.append(value)
        n += 1
        if n == ROW_GROUP:
            yield cols
            yielded = True
            cols, n = [[] for _ in range(width)], 0
    if n or not yielded:  # the rest, or one empty group for an empty table (its schema)
        yield cols


INT64 = (-(1 << 63), (1 << 63) - 1)


def _column(pa: Any, values: list[Any], kind: Any) -> Any:
    """A column of one type; where a value does not fit it (an id past int64, a name with a
    lone surrogate: accepted data a save must not fail on), the column again with those
    values made to fit: None for the number, the text with the character replaced."""
    try:
        return pa.array(values, type=kind)
    except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError):
        if pa.types.is_integer(kind):
            return pa.array([v if isinstance(v, int) and INT64[0] <= v <= INT64[1] else None
                             for v in values], type=kind)
        if pa.types.is_string(kind):
            return pa.array([None if v is None else
                             str(v).encode("utf-8", "replace").decode("utf-8") for v in values],
                            type=kind)
        raise


def write_table(pa: Any, path: str, schema: Any, rows: Iterable[tuple[Any, ...]]) -> int:
    """One table into one Parquet file, a row group at a time; the number of rows."""
    total = 0
    with pa.parquet.ParquetWriter(path, schema) as out:
        for cols in _groups(rows, len(schema)):
            batch = pa.RecordBatch.from_arrays(
                [_column(pa, col, field.type) for col, field in zip(cols, schema, strict=True)],
                schema=schema)
            out.write_batch(batch, row_group_size=ROW_GROUP)
            total += batch.num_rows
    return total


def write_folder(path: str, fill: Callable[[str], object]) -> str:
    """Make the folder `path` through a fresh one beside it (`fill(tmp)` writes its files),
    renamed into place. An earlier folder there is replaced only where it holds nothing but
    TABLES (a folder of this module's); any other is refused, never deleted."""
    target = os.path.abspath(path)
    if os.path.islink(target) or (os.path.lexists(target) and not os.path.isdir(target)):
        raise OutputPathError(f"cannot write {path!r}: it is there and is not a folder")
    if os.path.isdir(target):
        extra = set(os.listdir(target)) - {f"{name}.parquet" for name in TABLES}
        if extra:
            raise OutputPathError(f"cannot write {path!r}: a folder is there with other files "
                                  f"in it ({', '.join(sorted(extra)[:3])}); not replaced")
    folder, base = os.path.split(target)
    tmp = tempfile.mkdtemp(prefix=f".{base}.tmp", dir=folder)  # new, 0700, a name of its own
    old: str | None = None
    try:
        fill(tmp)  # into a folder only this user can enter: no link planted in it
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        if os.path.isdir(target):
            old = tempfile.mkdtemp(prefix=f".{base}.old", dir=folder)
            os.replace(target, os.path.join(old, base))
        try:
            os.replace(tmp, target)
        except OSError:
            if old is not None:  # the earlier folder back where it was
                os.replace(os.path.join(old, base), target)
            raise
    finally:
        for leftover in (tmp, old):
            if leftover is not None and os.path.isdir(leftover):
                shutil.rmtree(leftover, ignore_errors=True)
    return path


def write_parquet(t: Timeline, path: str) -> str:
    """Timeline.save for .parquet: the folder of TABLES."""
    pa = _pyarrow()
    schemas = _schemas(pa)

    def fill(folder: str) -> None:
        for table in TABLES:
            write_table(pa, os.path.join(folder, f"{table}.parquet"), schemas[table],
                        _rows(t, table))

    return write_folder(path, fill)
