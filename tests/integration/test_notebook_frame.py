"""The inline report of a notebook (Timeline._repr_html_) in a real browser: its charts take
the frame's whole width. A notebook page runs an output's document before it lays the output
out, so the report's script first ran in a frame of no width yet: its charts were drawn at
their 640 px minimum, about half a wide cell, and were redrawn only by a timer a frame off
screen may not run (seen in a notebook executed by nbconvert, opened in Chromium)."""

from __future__ import annotations

import html
import re

import pytest
from factories import job, job_span, sample, timeline, worker
from perfetto_ui import Browser

from workerscope.export.notebook import inline_html

pytestmark = pytest.mark.browser

# Tells the notebook page, from inside the report's sandboxed frame (which nothing outside
# can read), how wide the charts and the frame are each time the frame's width settles.
PROBE = ("<script>new ResizeObserver(() => requestAnimationFrame(() => parent.postMessage("
         "[parseInt(document.getElementById('gantt').style.width), "
         "document.getElementById('stack').clientWidth], '*')))"
         ".observe(document.getElementById('stack'))</script>")


def _page() -> str:
    """A notebook page's output area (a flex row: the prompt, the output beside it) holding
    the inline report, laid out only once the frame's document has run, as a notebook attaches
    an output; it keeps the last widths the frame said."""
    j = job(start_ns=0, end_ns=2_000_000_000)
    t = timeline(workers=[worker()], jobs=[j], spans=[job_span(j)],
                 samples=[sample(t_ns=k * 100_000_000, values={"rss_bytes": 1e8 + k})
                          for k in range(21)])
    frame = inline_html(t)
    doc = re.search(r'srcdoc="([^"]*)"', frame).group(1)
    probed = html.escape(html.unescape(doc).replace("</body>", PROBE + "</body>"), quote=True)
    return ("<!DOCTYPE html><html><body style='margin:0'>"
            "<div id='out' style='display:none'><div style='display:flex'>"
            "<div style='flex:0 0 90px'>Out[1]:</div>"
            f"<div style='flex:1 1 auto;min-width:0'>{frame.replace(doc, probed)}</div>"
            "</div></div><script>window.widths = null;"
            "addEventListener('message', e => { window.widths = e.data; });"
            "setTimeout(() => { document.getElementById('out').style.display = 'block'; }, 300)"
            "</script></body></html>")


def test_the_charts_fill_a_wide_notebook_cell(tmp_path):
    path = tmp_path / "notebook.html"
    path.write_text(_page(), encoding="utf-8")
    with Browser(path.as_uri(), tmp_path / "chromium-profile", window="1400,1000") as b:
        # The frame's own redraw on a width change waits 100 ms; give it well over that.
        b.wait_for("window.widths && window.widths[1] > 0 && window.widths", timeout=60)
        widths = b.evaluate("new Promise(r => setTimeout(() => r(window.widths), 1000))")
    chart, frame = widths
    assert frame > 1100, "the frame is as wide as the cell"
    assert chart == frame, f"charts {chart} px wide in a frame of {frame} px"
