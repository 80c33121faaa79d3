"""Save a Timeline by extension, and its notebook views. Each format is built by its own exporter
(imported only when that format is asked for) and written through a temporary file and a
rename; Timeline._repr_html_ and Timeline.to_pandas are registered here the same way."""

from __future__ import annotations

import os
from typing import Any

from ..timeline import VIEWS, Timeline, register_format, write_atomic


def _json(timeline: Timeline, path: str) -> str:
    from .chrome import to_json

    return write_atomic(path, to_json(timeline).encode())


def _pftrace(timeline: Timeline, path: str) -> str:
    from .pftrace import write_pftrace

    return write_pftrace(timeline, path)


def _html(timeline: Timeline, path: str) -> str:
    from .html import to_html

    return write_atomic(path, to_html(timeline).encode())


def _csv(timeline: Timeline, path: str) -> str:
    from .csv import to_csv

    return write_atomic(path, to_csv(timeline).encode())


def _png(timeline: Timeline, path: str) -> str:
    from .plots import save_png

    return save_png(timeline, path)


for _ext, _writer in ((".json", _json), (".pftrace", _pftrace), (".html", _html), (".csv", _csv),
                     (".png", _png)):
    register_format(_ext, _writer)


def _pftrace_ready() -> None:
    from .pftrace import trace_protos

    trace_protos()  # the perfetto package is there, or the error that says how to get it


register_format(".pftrace", _pftrace, _pftrace_ready)


def _parquet(timeline: Timeline, path: str) -> str:
    from .parquet import write_parquet

    return write_parquet(timeline, path)


def _parquet_ready() -> None:
    from .parquet import ready

    ready()  # pyarrow is there, or the error that says how to get it


register_format(".parquet", _parquet, _parquet_ready)


def _repr_html(timeline: Timeline) -> str:
    from .notebook import inline_html

    return inline_html(timeline)


def _to_pandas(timeline: Timeline) -> dict[str, Any]:
    from .frames import to_pandas

    return to_pandas(timeline)


# Timeline._repr_html_ (a notebook's inline view) and Timeline.to_pandas.
VIEWS.update(_repr_html_=_repr_html, to_pandas=_to_pandas)


def save(timeline: Timeline, path: str | os.PathLike[str]) -> str:
    """Timeline.save with every format registered: the call for code inside the package."""
    return timeline.save(path)
