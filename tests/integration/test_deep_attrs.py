"""Span attrs nested a thousand levels deep neither kill the sidecar nor fail a save."""

from __future__ import annotations

import pytest

from workerscope import load, monitor, span
from workerscope.protocol import Status
from workerscope.units import CUT


def _deep(levels: int) -> dict:
    top = inner = {}
    for _ in range(levels):
        inner["a"] = {}
        inner = inner["a"]
    return top


def test_deep_attrs_reach_the_timeline_cut_and_every_format_saves(clean_env, tmp_path):
    """A span with attrs 1,000 levels deep: the sidecar lives (it died of a RecursionError
    sizing the frame), the span arrives with its attrs cut at a bounded depth, and the
    timeline saves as .wsc (and loads back), .json, .html and .pftrace."""
    with monitor(interval=0.5) as m, span("deep", v=_deep(1000)):
        pass
    t = m.timeline
    assert all(w.status != Status.SIDECAR_LOST for w in t.workers.values())
    [deep] = [s for s in t.spans if s.name == "deep"]
    level, depth = deep.attrs["v"], 0
    while isinstance(level, dict):
        level, depth = level["a"], depth + 1
    assert depth < 64 and isinstance(level, str) and level.startswith(CUT)
    assert [s.name for s in load(t.save(tmp_path / "t.wsc")).spans].count("deep") == 1
    for ext in (".json", ".html"):
        t.save(tmp_path / f"t{ext}")
    pytest.importorskip("perfetto")
    t.save(tmp_path / "t.pftrace")
