"""The HTML report's Gantt data, part by part: which spans are drawn one by one, where, and how."""

from __future__ import annotations

from workerscope.export.html_spans import keep_longest, place, scene, span_bins, span_columns
from workerscope.timeline import Job, Sample, Span, Timeline, Worker

S = 1_000_000_000


def one_worker() -> Timeline:
    """A worker with a short job holding a long span and a short one, then a running job."""
    w = "h:1:1"
    t = Timeline(workers={w: Worker(w, host="h", pid=1)})
    t.jobs = [Job(w, 1, "short", 0, S // 10, "ok", None, 1, 1),
              Job(w, 2, "open", 2 * S, None, "running", None, 1, 1)]
    t.spans = [Span(w, 1, 1, None, "short", 0, S // 10, 1, 1, {"status": "ok"}, None, "job"),
               Span(w, 1, 2, 1, "long", 0, S // 20, 1, 1),
               Span(w, 1, 3, 1, "tiny", S // 20, S // 20 + 10, 1, 1),
               Span(w, 2, 4, None, "open", 2 * S, 2 * S, 1, 1, {"status": "running"}, None,
                    "job")]
    t.samples = [Sample(w, 5 * S, "tree", 1, {"cpu_percent": 1.0})]
    t.sort()
    return t


def test_keep_longest_keeps_every_job_and_bins_the_shortest_with_their_lanes():
    """Past the limit, jobs are kept however short, then the longest spans; each span kept
    keeps its own lane and depth, and each binned span its lane."""
    t = one_worker()
    spans = sorted(t.spans, key=lambda s: (s.start_ns, -s.end_ns))
    lane, depth, lanes, squeezed = place(spans, scene(t, spans), 24)
    keep, binned, klane, kdepth = keep_longest(spans, lane, depth, 3)
    assert [s.name for s in keep] == ["short", "long", "open"]
    assert [(s.name, n) for s, n in binned] == [("tiny", 1)]
    assert klane == [0, 1, 0] and kdepth == [0, 1, 0]
    assert lanes == {"h:1:1": 2} and squeezed == 0
    assert keep_longest(spans, lane, depth, 4) == (spans, [], lane, depth)


def test_a_running_job_is_drawn_to_its_workers_last_event():
    """A job still running is drawn up to its worker's last sample and flagged 8."""
    t = one_worker()
    spans = sorted(t.spans, key=lambda s: (s.start_ns, -s.end_ns))
    sc = scene(t, spans)
    lane, depth, _, _ = place(spans, sc, 24)
    cols = span_columns(spans, lane, depth, sc, {}, {})
    i = [s.name for s in spans].index("open")
    assert cols["f"][i] == 2 | 8
    assert cols["l"][i] == 3 * S / 1000


def test_span_bins_count_and_total_per_lane_and_time_bin():
    """Binned spans are one cell per (worker, lane, bin) with their count and total length."""
    t = one_worker()
    spans = sorted(t.spans, key=lambda s: (s.start_ns, -s.end_ns))
    bins = span_bins([(spans[2], 1), (spans[2], 1)], scene(t, spans))
    assert bins["w"] == [0] and bins["d"] == [1] and bins["c"] == [[2, 0.02]]
    assert span_bins([], scene(t, spans)) == {k: [] for k in "wdtlc"}
