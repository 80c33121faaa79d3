"""A Timeline in a notebook: it shows itself as its HTML report, and to_pandas() gives its spans,
samples and jobs as DataFrames (issue 14, "Zero-code use where users already are")."""

from __future__ import annotations

import sys
from html.parser import HTMLParser

import pytest
from test_deaths import MIB, OOM, OOM_DEATH, death_timeline

from workerscope.export.html import to_html
from workerscope.timeline import Timeline


class _Frames(HTMLParser):
    """The attributes of each <iframe> in an HTML fragment (values unescaped)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.frames: list[dict[str, str | None]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "iframe":
            self.frames.append(dict(attrs))


def test_repr_html_is_the_report_in_an_isolated_frame():
    """Jupyter's _repr_html_ gives one sandboxed iframe whose document is the whole report:
    its styles and ids cannot clash with the notebook's, or with a second timeline's."""
    t = death_timeline()
    out = t._repr_html_()
    (frame,) = _Frames(out).frames
    assert frame["srcdoc"] == to_html(t)
    assert frame["sandbox"] == "allow-scripts"
    assert "width:100%" in (frame.get("style") or "")
    assert "<script" not in out.replace(frame["srcdoc"], "")  # nothing runs in the notebook


def test_repr_html_of_an_empty_timeline():
    """An empty timeline shows its (empty) report too."""
    (frame,) = _Frames(Timeline()._repr_html_()).frames
    assert "an empty timeline" in frame["srcdoc"]


def test_to_pandas_gives_spans_samples_and_jobs():
    """to_pandas() returns DataFrames with one row per record, times as UTC timestamps and
    seconds, the attribution estimates on spans, wide metrics on samples, and each job's death
    figures."""
    pd = pytest.importorskip("pandas")
    t = death_timeline()
    frames = t.to_pandas()
    assert {"spans", "samples", "jobs", "marks", "workers"} <= set(frames)
    spans, samples, jobs = frames["spans"], frames["samples"], frames["jobs"]
    assert len(spans) == len(t.spans) and len(samples) == len(t.samples)
    assert len(jobs) == len(t.jobs)
    assert str(spans["start"].dtype).startswith("datetime64") and spans["start"].dt.tz is not None
    grow = spans[(spans["name"] == "grow") & (spans["worker"] == OOM)].iloc[0]
    assert grow["duration_s"] == pytest.approx(3.0) and bool(grow["cut_short"])
    assert grow["peak_growth_bytes"] > 0
    parse = spans[spans["name"] == "parse"].iloc[0]
    assert parse["error"] == "ValueError: bad row 7" and "traceback" in parse["attrs"]
    tree = samples[(samples["scope"] == "tree") & (samples["worker"] == OOM)]
    assert tree["rss_bytes"].max() == pytest.approx(100 * MIB)
    assert pd.isna(samples[samples["scope"] == "host"]["rss_bytes"]).all()
    oom = jobs[jobs["worker"] == OOM].iloc[0]
    assert oom["status"] == "oom_killed" and oom["died"] == "oom"
    assert oom["death_cgroup_limit_bytes"] == OOM_DEATH["cgroup_limit_bytes"]
    assert set(frames["workers"]["status"]) == {"killed", "exited"}


def test_to_pandas_of_an_empty_timeline_has_the_columns():
    """An empty timeline gives empty frames that still have their columns."""
    pytest.importorskip("pandas")
    frames = Timeline().to_pandas()
    assert len(frames["spans"]) == 0 and {"name", "start", "duration_s"} <= set(frames["spans"])
    assert {"worker", "t", "scope"} <= set(frames["samples"])


def test_to_pandas_without_pandas_says_how_to_get_it(monkeypatch):
    """Without pandas, to_pandas raises ImportError naming the package to install."""
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install pandas"):
        death_timeline().to_pandas()
