"""Save a Timeline by extension. Each format is built by its own exporter (imported only when
that format is asked for) and written through a temporary file and a rename."""

from __future__ import annotations

import json
import os

from ..timeline import Timeline, register_format, write_atomic


def _json(timeline: Timeline, path: str) -> str:
    from .chrome import to_chrome

    # default=repr: span attrs may hold anything (bytes, numpy values); never fail on them.
    data = json.dumps(to_chrome(timeline), separators=(",", ":"), default=repr).encode()
    return write_atomic(path, data)


def _html(timeline: Timeline, path: str) -> str:
    from .html import to_html

    return write_atomic(path, to_html(timeline).encode())


def _csv(timeline: Timeline, path: str) -> str:
    from .csv import to_csv

    return write_atomic(path, to_csv(timeline).encode())


def _png(timeline: Timeline, path: str) -> str:
    from .plots import save_png

    return save_png(timeline, path)


for _ext, _writer in ((".json", _json), (".html", _html), (".csv", _csv), (".png", _png)):
    register_format(_ext, _writer)


def save(timeline: Timeline, path: str | os.PathLike[str]) -> str:
    """Timeline.save with every format registered: the call for code inside the package."""
    return timeline.save(path)
