"""A driver's live builder (keep=False) builds no Span or Mark objects, yet refuses exactly the
spans and mark frames a record's builder (keep=True) refuses: one frame's fields drawn from
good and bad values alike, both builders given it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workerscope import protocol
from workerscope.builder import TimelineBuilder
from workerscope.errors import ProtocolError

WID = protocol.worker_id("host-a", 100, 200)
T = 1_700_000_000_000_000_000

# Anything a frame's field might hold.
anything = st.one_of(st.integers(-(2**64), 2**64), st.booleans(), st.none(),
                     st.floats(allow_nan=True), st.text(max_size=3), st.binary(max_size=3),
                     st.lists(st.integers(), max_size=2),
                     st.dictionaries(st.integers(), st.integers(), max_size=2))
# A good record, as a sidecar sends it (an older one's without the last one or two fields).
good = st.tuples(
    st.sampled_from([protocol.RECORD_SPAN, protocol.RECORD_MARK]),
    st.none() | st.integers(0, 9), st.integers(0, 2**40), st.none() | st.integers(0, 9),
    st.text(max_size=5), st.integers(T, T + 10**9), st.integers(T, T + 10**9),
    st.integers(0, 2**31), st.none() | st.dictionaries(st.text(max_size=3), st.integers(),
                                                       max_size=2),
    st.none() | st.text(max_size=5), st.booleans(), st.none() | st.integers(0, 10**9),
).flatmap(lambda r: st.sampled_from([list(r), list(r[:11]), list(r[:10])]))


@st.composite
def records(draw: st.DrawFn) -> list[object]:
    """A good record with none, one or two of its fields (or its length) made bad."""
    rec = draw(good)
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
