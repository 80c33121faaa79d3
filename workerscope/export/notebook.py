"""A Timeline in Jupyter: its HTML report, inline (Timeline._repr_html_).

The report goes in a sandboxed <iframe srcdoc>: its styles, ids and script stay out of the
notebook's page, so two timelines in one notebook do not clash, and the notebook's styles do
not reach the report. Scripts may run in the frame (the report draws on canvas); nothing else
is allowed to it.
"""

from __future__ import annotations

import html

from ..timeline import Timeline
from .html import to_html

HEIGHT_PX = 900  # the frame's first height; the reader can drag its corner


def inline_html(timeline: Timeline, title: str = "workerscope report") -> str:
    """An <iframe> holding the whole report of `timeline`."""
    # Escaped whole, so no markup of the report reaches the notebook's page as such (the
    # report's JSON is columnar: this adds ~1 %).
    doc = html.escape(to_html(timeline, title=title), quote=True)
    return (f"<iframe srcdoc=\"{doc}\" sandbox=\"allow-scripts\" "
            f"title=\"{html.escape(title, quote=True)}\" "
            f"style=\"box-sizing:border-box;width:100%;height:{HEIGHT_PX}px;"
            "border:1px solid #d0d4da;"
            "resize:vertical;overflow:auto\"></iframe>")
