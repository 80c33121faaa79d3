"""Growth bounds: a call is given the growth its samples pin to it, and no figure otherwise."""

from __future__ import annotations

import pytest

from workerscope.export.attribution import attribute
from workerscope.timeline import Sample, Span, Timeline

MB = 1024 * 1024
MS = 1_000_000


def _timeline(samples: list[tuple[int, float, float]],
              spans: list[tuple[str, int, int]]) -> Timeline:
    """pid 10's (t ms, rss MiB, peak MiB) samples and (name, start ms, end ms) spans."""
    t = Timeline()
    t.samples = [Sample("w", ms * MS, "proc", 10, {"rss_bytes": r * MB, "peak_rss_bytes": p * MB})
                 for ms, r, p in samples]
    t.spans = [Span("w", 1, k, None, name, a * MS, b * MS, 10, 10)
               for k, (name, a, b) in enumerate(spans, 1)]
    return t


def _growth(t: Timeline) -> dict[str, float | None]:
    got = attribute(t)
    return {s.name: got[("w", 10, s.id)].get("peak_growth_bytes") for s in t.spans}


def test_calls_sharing_one_sample_interval_have_no_figure():
    """An allocation and a sleep between the same two samples: neither is given the 200 MiB
    (a time share gave most of it to the sleep)."""
    t = _timeline([(0, 20, 20), (500, 220, 220)], [("hog", 1, 100), ("nap", 100, 400)])
    assert _growth(t) == {"hog": None, "nap": None}


def test_growth_between_samples_inside_the_call_is_its_own():
    """Samples inside the call and quiet ones around it pin its growth; a sleep after it in
    a quiet interval grew ~0."""
    t = _timeline([(0, 20, 20), (100, 20, 20), (200, 220, 220), (300, 220, 220),
                   (600, 220, 220)], [("hog", 50, 250), ("nap", 300, 600)])
    got = _growth(t)
    assert got["hog"] == pytest.approx(200 * MB, rel=0.1)
    assert got["nap"] == pytest.approx(0, abs=MB)


def test_a_peak_the_high_water_mark_caught_inside_the_call_counts():
    """A peak freed again before the next sample, caught by the high-water mark between two
    samples inside the call, is the call's growth."""
    t = _timeline([(0, 20, 20), (100, 20, 20), (200, 20, 520), (300, 20, 520)],
                  [("spike", 100, 200)])
    assert _growth(t)["spike"] == pytest.approx(500 * MB)
