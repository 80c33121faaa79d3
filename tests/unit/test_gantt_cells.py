"""The Gantt draws each span on every column it covers, however many spans share a column."""

from __future__ import annotations

from factories import span
from hypothesis import given, settings
from hypothesis import strategies as st

from workerscope.export.terminal import _Axis, _draw_spans

edges = st.tuples(st.integers(min_value=-50, max_value=1_050),
                  st.integers(min_value=0, max_value=300))


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=40), st.lists(st.tuples(edges, st.integers(0, 2),
                                                                  st.booleans(), st.booleans()),
                                                        max_size=40))
def test_each_span_is_drawn_on_each_column_it_covers(
        cols: int, drawn: list[tuple[tuple[int, int], int, bool, bool]]) -> None:
    """Spans in start order on three rows, over a 0 .. 1,000 ns axis: each row's cells are
    what drawing every span cell by cell gives (then the cut-short ones, then failed ends)."""
    ax = _Axis(0, 1_000, cols)
    rows = [[" "] * cols for _ in range(3)]
    spans = [(span(id=k, start_ns=a, end_ns=a + length, cut_short=cut,
                   error="E" if failed else None), r)
             for k, ((a, length), r, cut, failed) in enumerate(drawn)]
    spans.sort(key=lambda x: (x[0].start_ns, -x[0].end_ns))
    _draw_spans([(s, rows[r]) for s, r in spans], ax)
    want = [[" "] * cols for _ in range(3)]
    for cell, keep in (("█", lambda s: True), ("▓", lambda s: s.cut_short)):
        for s, r in spans:
            if keep(s):
                for c in range(ax.col(s.start_ns), ax.col(s.end_ns) + 1):
                    want[r][c] = cell
    for s, r in spans:
        if s.error:
            want[r][ax.col(s.end_ns)] = "!"
    assert rows == want
