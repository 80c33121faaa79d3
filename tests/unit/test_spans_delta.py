"""The record's delta-coded spans frames (its fifth layout): whatever a spans frame holds, it
either comes back byte for byte or is kept as it came, and bytes that are not a coded frame
are refused with ValueError alone."""

from __future__ import annotations

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from workerscope import protocol, record

WID = protocol.worker_id("host-a", 100, 200)

# Values a record's fields may hold, the edges of msgpack's integers among them: a delta of
# two of them may not fit in 64 bits, and then the frame is kept as it came.
_INTS = st.one_of(st.integers(-2**63, 2**64 - 1),
                  st.sampled_from([0, 1, -1, 2**32, 2**63 - 1, 2**64 - 1, -2**63]))
_SCALARS = st.one_of(_INTS, st.none(), st.booleans(), st.text(max_size=8),
                     st.floats(allow_nan=False), st.binary(max_size=8))
_RECORD = st.one_of(
    st.lists(_SCALARS, min_size=0, max_size=13),  # any array, of any length
    st.builds(lambda k, j, i, p, n, s, e, t: [k, j, i, p, n, s, e, t, None, None, False, None],
              st.sampled_from([0, 1]), st.none() | _INTS, _INTS, st.none() | _INTS,
              st.text(max_size=6), _INTS, _INTS, _INTS),  # a span record's shape
    _SCALARS)


@settings(max_examples=600, deadline=None)
@given(st.lists(_RECORD, max_size=30), st.dictionaries(st.text(max_size=5), _SCALARS, max_size=3))
def test_a_spans_frame_comes_back_byte_for_byte_or_is_kept(records, extra):
    frame = protocol.encode_frame(protocol.SPANS, WID, 7, {"pid": 1, **extra,
                                                           "records": records})
    coded = record.delta_spans(frame)
    if coded is not None:
        assert len(coded) <= len(frame)
        assert record.undelta_spans(coded) == frame


@settings(max_examples=300, deadline=None)
@given(st.lists(st.builds(lambda i, s, d: [0, 1, i, None, "s", s, s + d, 5, None, None, False,
                                           None],
                          st.integers(0, 2**50), st.integers(10**15, 10**15 + 10**12),
                          st.integers(0, 10**9)), min_size=2, max_size=40))
def test_a_sidecars_spans_frame_is_always_coded_and_smaller(records):
    """Span records as a sidecar sends them (nanosecond times, 8-byte ids): always coded."""
    frame = protocol.encode_frame(protocol.SPANS, WID, 7, {"pid": 1, "records": records})
    coded = record.delta_spans(frame)
    assert coded is not None and len(coded) < len(frame)
    assert record.undelta_spans(coded) == frame


@settings(max_examples=600, deadline=None)
@given(st.one_of(st.binary(max_size=200),
                 st.builds(lambda body: msgpack.packb([1, "spans", "w", 0, body],
                                                      use_bin_type=True),
                           st.one_of(_SCALARS, st.dictionaries(st.text(max_size=8),
                                                               _RECORD, max_size=3)))))
def test_bytes_not_coded_by_the_writer_are_refused_with_value_error(data):
    try:
        out = record.undelta_spans(data)
    except ValueError:
        return
    assert isinstance(out, bytes)
