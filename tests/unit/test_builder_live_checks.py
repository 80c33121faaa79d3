"""A driver's live builder (keep=False) builds no Span or Mark objects, yet refuses exactly the
spans and mark frames a record's builder (keep=True) refuses; and the short path most span
records take builds and refuses as the full check does: one frame's fields drawn from good
and bad values alike, both given it."""

from __future__ import annotations

from unittest import mock

from hypothesis import example, given, settings
from hypothesis import strategies as st

from workerscope import builder, protocol
from workerscope.builder import TimelineBuilder
from workerscope.errors import ProtocolError

WID = protocol.worker_id("host-a", 100, 200)
T = 1_700_000_000_000_000_000

# Times at the edges of what a worker's clock lets through.
EDGES = [T + 4 * 10**18, T - 4 * 10**18, 2**63 - 1, 2**63, -(2**63), 1 << 62, -1]
# Anything a frame's field might hold.
anything = st.one_of(st.integers(-(2**64), 2**64), st.booleans(), st.none(),
                     st.floats(allow_nan=True), st.text(max_size=3), st.binary(max_size=3),
                     st.lists(st.integers(), max_size=2),
                     st.dictionaries(st.integers(), st.integers(), max_size=2),
                     st.sampled_from(EDGES))


def mostly(value: object, other: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """value three times in four: most records are plain spans."""
    return st.integers(0, 3).flatmap(lambda i: st.just(value) if i else other)


# A good record, as a sidecar sends it (an older one's without the last one or two fields).
good = st.tuples(
    mostly(protocol.RECORD_SPAN, st.just(protocol.RECORD_MARK)),
    st.none() | st.integers(0, 9), st.integers(0, 2**40), st.none() | st.integers(0, 9),
    st.text(max_size=5), st.integers(T, T + 10**9), st.integers(T, T + 10**9),
    st.integers(0, 2**31),
    mostly(None, st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)),
    mostly(None, st.text(max_size=5)), mostly(False, st.just(True)),
    st.none() | st.integers(0, 10**9),
).flatmap(lambda r: st.sampled_from([list(r), list(r), list(r), list(r[:11]), list(r[:10])]))


@st.composite
def records(draw: st.DrawFn) -> list[object]:
    """A good record with none, one or two of its fields (or its length) made bad."""
    rec = draw(good)
    if not draw(st.integers(0, 3)):  # one of its times at an edge
        rec[draw(st.sampled_from([5, 6]))] = draw(st.sampled_from(EDGES))
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(rec)))
        if at == len(rec):
            rec = [*rec, draw(anything)] if draw(st.booleans()) else rec[:-3]
        else:
            rec[at] = draw(anything)
    return rec


@settings(max_examples=1000, deadline=None)
@given(st.lists(records(), max_size=3), st.sampled_from([protocol.SPANS, protocol.MARK]),
       st.just(100) | anything)
def test_the_live_builder_refuses_what_the_record_s_refuses(recs, kind, pid):
    frame = protocol.Frame(kind, WID, 0, {"pid": pid, "records": recs,
                                          "threads": [[100, "MainThread"]]})
    outcomes = []
    for keep in (True, False):
        try:
            TimelineBuilder(keep=keep).add(frame)
            outcomes.append(None)
        except ProtocolError:
            outcomes.append("refused")
    assert outcomes[0] == outcomes[1], (outcomes, recs)


def _plain(start: object, end: object, cpu: object = None) -> list[object]:
    return [protocol.RECORD_SPAN, 1, 5, None, "f", start, end, 7, None, None, False, cpu]


@settings(max_examples=1000, deadline=None)
@given(st.lists(records(), max_size=3), st.just(100) | anything, st.booleans())
@example([_plain(T, 2**63)], 100, False)  # an end past int64
@example([_plain(T, T + 4 * 10**18)], 100, True)  # an end a century past the worker's anchor
@example([_plain(T - 4 * 10**18, T)], 100, True)
@example([_plain(T, T + 10, 1.5)], 100, False)  # a CPU time that is not a count
@example([_plain(T, T + 10, 10**6)], 100, True)  # more CPU than the span's time
def test_plain_spans_checked_without_a_record_object_build_what_the_full_check_builds(
        recs, pid, anchored):
    """Most span records take a short path (builder._plain_span): it refuses what the full
    check (_record, _wall) refuses, and builds the same spans, on a worker's clock or none."""
    frames = [protocol.Frame(protocol.SPANS, WID, 1, {"pid": pid, "records": recs})]
    if anchored:
        frames.insert(0, protocol.Frame(protocol.HELLO, WID, 0, {
            "host": "host-a", "pid": 100, "anchor": [T + 5 * 10**9, T - 10**9]}))
    built = []
    for short in (True, False):
        b = TimelineBuilder()
        try:
            if not short:
                with mock.patch.object(builder, "_plain_span", lambda rec, clock: None):
                    for f in frames:
                        b.add(f)
            else:
                for f in frames:
                    b.add(f)
            built.append(b.t.spans)
        except ProtocolError:
            built.append("refused")
    assert built[0] == built[1], recs
