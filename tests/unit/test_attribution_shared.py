"""Attribution's shared-times path (one bisect of a span's edge for all its process's series)
gives exactly what the general path (a bisect a series) gives, on any samples and any span."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from workerscope.export import attribution as a
from workerscope.export.growth import Memory
from workerscope.timeline import Sample, Span, Timeline

MB = 1024 * 1024

# Each sample reads every key or none of some: only a process whose series all have a value at
# each sample (or none at all) takes the shared path, and a test's samples must reach both.
KEYS = ("cpu_user_s", "cpu_system_s", "rss_bytes", "peak_rss_bytes", "read_bytes",
        "write_bytes", "gpu_mem_bytes", "gpu_util_percent")

values = st.floats(min_value=0, max_value=64 * 1024 * MB, allow_nan=False)
times = st.lists(st.integers(min_value=0, max_value=10_000), min_size=0, max_size=12)


@st.composite
def samples(draw: st.DrawFn) -> list[tuple[int, dict[str, float]]]:
    present = [k for k in KEYS if draw(st.booleans())]
    rows = [(t * 1_000_000, {k: draw(values) for k in present}) for t in sorted(draw(times))]
    return rows


@st.composite
def spans(draw: st.DrawFn) -> tuple[int, int]:
    start = draw(st.integers(min_value=-1_000, max_value=11_000)) * 1_000_000
    length = draw(st.integers(min_value=0, max_value=4_000)) * 1_000_000
    return start, start + draw(st.sampled_from([0, 1, 999_999])) + length


def short_spans(until_ms: int = 10_000) -> st.SearchStrategy[tuple[int, int]]:
    """Calls of up to 30 ms, most between two samples (the path of its own that such a span
    takes), some on a sample or across one; starting in [-10 ms, until_ms + 10 ms]."""
    starts = st.integers(min_value=-10_000, max_value=(until_ms + 10) * 1_000)
    return st.tuples(starts, st.integers(min_value=0, max_value=30_000)).map(
        lambda s: (s[0] * 1_000, (s[0] + s[1]) * 1_000))


@st.composite
def steady_samples(draw: st.DrawFn) -> list[tuple[int, dict[str, float]]]:
    """A process as a sidecar reads it, 100 ms apart: counters that only rise, an RSS that
    moves by a few MiB an interval (so growth figures are pinned), a high-water mark that
    rises above it now and then (a peak between two samples)."""
    n = draw(st.integers(min_value=2, max_value=12))
    steps = st.floats(min_value=-4 * MB, max_value=4 * MB, allow_nan=False)
    rows, cpu, io, rss, hwm = [], 0.0, 0.0, 64.0 * MB, 64.0 * MB
    for i in range(n):
        rss = max(rss + draw(steps), 0.0)
        hwm = max(hwm, rss + draw(st.sampled_from([0.0, 0.0, 1.0, 3.0])) * MB)
        cpu += draw(st.floats(min_value=0, max_value=0.1))
        io += draw(st.integers(min_value=0, max_value=1 << 20))
        rows.append((i * 100_000_000, {"cpu_user_s": cpu, "cpu_system_s": 0.0, "rss_bytes": rss,
                                       "peak_rss_bytes": hwm, "read_bytes": io,
                                       "write_bytes": io / 2}))
    return rows


def reversed_spans(until_ms: int = 10_000) -> st.SearchStrategy[tuple[int, int]]:
    """Spans that end before they start (a record may hold them: clocks that stepped back),
    mostly within one interval or two."""
    return short_spans(until_ms).map(lambda edges: (edges[1], edges[0]))


def _proc(rows: list[tuple[int, dict[str, float]]]) -> dict[str, a._Series]:
    return {"cpu": a._series(rows, a._cpu), "rss": a._series(rows, "rss_bytes"),
            "hwm": a._series(rows, "peak_rss_bytes"), "read": a._series(rows, "read_bytes"),
            "write": a._series(rows, "write_bytes"), "gpu_mem": a._series(rows, "gpu_mem_bytes"),
            "gpu_util": a._series(rows, "gpu_util_percent")}


def _same(x: dict[str, float], y: dict[str, float]) -> bool:
    return list(x) == list(y) and all(x[k] == y[k] for k in x)


@settings(max_examples=400, deadline=None)
@given(samples(), samples(), st.lists(spans() | short_spans() | reversed_spans(), min_size=1, max_size=6))
def test_shared_path_equals_the_general_one(rows: list[tuple[int, dict[str, float]]],
                                            tree_rows: list[tuple[int, dict[str, float]]],
                                            edges: list[tuple[int, int]]) -> None:
    p, tree, mem = _proc(rows), {"cpu": a._series(tree_rows, a._cpu)}, Memory.of(rows)
    shared = a._shared_times(rows, p, mem)
    assert shared is not None  # every sample here reads the same keys
    for k, (t0, t1) in enumerate(edges):
        span = Span("w", 1, k, None, "f", t0, t1, 10, 10)
        general, fast = a._one(span, p, tree, mem), a._one(span, p, tree, mem, shared)
        assert _same(general, fast), (general, fast)


@settings(max_examples=300, deadline=None)
@given(steady_samples(), steady_samples(), st.lists(short_spans(1_200) | reversed_spans(1_200), min_size=1,
                                                        max_size=12))
def test_shared_path_equals_the_general_one_on_steady_samples(
        rows: list[tuple[int, dict[str, float]]], tree_rows: list[tuple[int, dict[str, float]]],
        edges: list[tuple[int, int]]) -> None:
    """Short calls between a sidecar-like process's samples, where figures are pinned: the
    path such a call takes gives the general path's figures, the growth ones included."""
    test_shared_path_equals_the_general_one.hypothesis.inner_test(rows, tree_rows, edges)


def test_a_counters_delta_over_a_span_that_ends_before_it_starts_is_zero() -> None:
    """A span backwards in time inside one interval is not that interval's share: the
    counter's values at its edges, end minus start, as for any span (0 where it fell)."""
    series = a._Series([0, 100, 200], [0.0, 10.0, 0.0])
    assert a._delta(series, 150, 50) == max(series.at(50) - series.at(150), 0.0) == 0.0
    assert a._delta(series, 160, 120) == max(series.at(120) - series.at(160), 0.0)


def test_a_process_whose_samples_skip_a_key_takes_the_general_path() -> None:
    """A sample without rss_bytes: the series no longer share their times, and the figures
    are those of each series' own samples."""
    rows: list[tuple[int, dict[str, Any]]] = [
        (0, {"rss_bytes": 10 * MB, "cpu_user_s": 0.0, "cpu_system_s": 0.0}),
        (100_000_000, {"cpu_user_s": 0.1, "cpu_system_s": 0.0}),
        (200_000_000, {"rss_bytes": 30 * MB, "cpu_user_s": 0.2, "cpu_system_s": 0.0})]
    p = _proc(rows)
    assert a._shared_times(rows, p, Memory.of(rows)) is None
    t = Timeline()
    t.samples = [Sample("w", ts, "proc", 10, v) for ts, v in rows]
    t.spans = [Span("w", 1, 1, None, "f", 50_000_000, 150_000_000, 10, 10)]
    got = a.attribute(t)[("w", 10, 1)]
    assert abs(got["cpu_s"] - 0.1) < 1e-9  # the CPU series' own samples, 100 ms apart
    assert got["peak_rss_bytes"] == 10 * MB + 20 * MB * 0.75  # rss interpolated 0 .. 200 ms
