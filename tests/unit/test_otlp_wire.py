"""Plain spans go from a spans frame's records straight to OTLP's wire format (SpanWire): each
span those bytes make, read back with opentelemetry-proto, is the span the message path
(Span objects, trace_spans) makes of the same records, ids, links, times and attributes."""

from __future__ import annotations

import pytest
from factories import S, span_record

pytest.importorskip("opentelemetry.proto")

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from workerscope import protocol
from workerscope.builder import TimelineBuilder
from workerscope.export import otlp

ANCHOR = (1_700_000_000 * S, 5 * S)  # wall, monotonic
GEN = 1 << 40  # span ids carry their ring's generation above the job ids


def _records() -> list[list]:
    rows = [
        span_record(job=3, id=GEN + 1, parent=3, name="outer", start_ns=6 * S, end_ns=7 * S),
        span_record(job=3, id=GEN + 2, parent=GEN + 1, name="inner", start_ns=6 * S + 5,
                    end_ns=6 * S + 900_000),
        span_record(job=3, id=GEN + 3, parent=None, name="loose", start_ns=6 * S, end_ns=6 * S),
        span_record(job=None, id=GEN + 4, parent=None, name="nojob", start_ns=8 * S,
                    end_ns=9 * S, tid=77),
        span_record(job=None, id=GEN + 5, parent=GEN + 4, name="nojob-child", start_ns=8 * S,
                    end_ns=8 * S + 1),
        span_record(job=4, id=GEN + 6, parent=4, name="x" * 300, start_ns=6 * S,
                    end_ns=6 * S + 2, tid=9),
    ]
    out = [list(r) for r in rows]  # cpu_ns (the last field): not measured
    out[1][-1] = 123_456  # measured: becomes workerscope.cpu_s
    out[5][-1] = 10 * S  # more than the span's time: cut to it
    return out


def _builder() -> TimelineBuilder:
    b = TimelineBuilder(keep=True)
    b.add(protocol.Frame(protocol.HELLO, "w", 0, {"host": "h", "pid": 42,
                                                   "anchor": list(ANCHOR)}))
    return b


def test_the_wire_spans_are_the_message_spans():
    body = {"pid": 42, "records": _records(), "threads": []}
    shift = 1234  # the worker's clock ahead of the driver's
    # The message path: Span objects, moved onto the driver's clock, then trace_spans.
    slow = _builder()
    slow.add(protocol.Frame(protocol.SPANS, "w", 1, body))
    t = TimelineBuilder.finish(slow.snapshot(), {"w": shift})
    protos = otlp._protos()
    want = {s.name: s for _, s in otlp.trace_spans(t, protos, live=True)}
    # The wire path, then one request of its entries, read back whole.
    fast = _builder()
    pid, plain, rest = fast.plain_records("w", body)
    assert pid == 42 and rest is None and len(plain) == len(want) == 6
    wire = otlp.SpanWire(protos)
    wire.add("w", pid, plain, shift)
    entries, count = wire.take()
    assert count == 6 and wire.take() == ({}, 0)
    sc = trace_pb2.ScopeSpans.FromString(b"".join(entries["w"]))
    got = {s.name: s for s in sc.spans}
    assert got == want
    assert got["inner"].parent_span_id == got["outer"].span_id
    assert got["outer"].parent_span_id == otlp._job_span("w", 3)
    assert got["loose"].parent_span_id == otlp._job_span("w", 3)
    assert got["nojob"].parent_span_id == b"" and got["nojob-child"].parent_span_id == \
        got["nojob"].span_id
    assert got["outer"].start_time_unix_nano == ANCHOR[0] + S - shift
    cpu = {a.key: a.value.double_value for a in got["inner"].attributes}["workerscope.cpu_s"]
    assert cpu == pytest.approx(123_456 / 1e9)


def test_records_with_attrs_errors_or_cuts_and_marks_are_left_to_the_builder():
    rows = _records()[:2]
    rows.append(list(span_record(job=3, id=GEN + 9, name="bad", start_ns=6 * S, end_ns=7 * S,
                                 error="ValueError: x")))
    rows.append(list(span_record(job=3, id=GEN + 10, name="tagged", start_ns=6 * S,
                                 end_ns=7 * S, attrs={"k": 1})))
    rows.append(list(span_record(kind=protocol.RECORD_MARK, job=3, name="m", start_ns=6 * S)))
    _, plain, rest = _builder().plain_records("w", {"pid": 42, "records": rows})
    assert [p[3] for p in plain] == ["outer", "inner"]
    assert rest is not None and [r[4] for r in rest["records"]] == ["bad", "tagged"]


@pytest.mark.parametrize("bad", [
    ["not", "a", "record"],
    list(span_record(id=1, start_ns=True)),  # a bool is no time
    list(span_record(id=1, start_ns=10**30)),  # outside int64
    list(span_record(id=1, start_ns=ANCHOR[1] + 200 * 365 * 86_400 * S)),  # 2 centuries
    [*list(span_record(id=1))[:-1], -1],  # cpu_ns
    [*list(span_record(id=1))[:-2], "yes", None],  # cut_short
])
def test_a_malformed_record_takes_nothing_of_its_frame(bad):
    rows = [*_records(), bad]
    with pytest.raises(protocol.ProtocolError):
        _builder().plain_records("w", {"pid": 42, "records": rows})


def test_a_request_of_wire_entries_reads_back_as_one_export_request():
    """The sender's hand-made envelope (resource spans, scope spans) is the message's."""
    protos = otlp._protos()
    fast = _builder()
    pid, plain, _ = fast.plain_records("w", {"pid": 42, "records": _records()})
    wire = otlp.SpanWire(protos)
    wire.add("w", pid, plain, 0)
    posted: list[bytes] = []
    sender = otlp.OtlpSender("http://127.0.0.1:9", "svc", live=True)
    sender._post = lambda path, body: posted.append(body) or True  # type: ignore[method-assign]
    t, _ = fast.snapshot()
    sender.send(t, wire.take())
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(posted[0])
    (rs,) = request.resource_spans
    attrs = {a.key: a.value for a in rs.resource.attributes}
    assert attrs["service.name"].string_value == "svc" and attrs["process.pid"].int_value == 42
    (ss,) = rs.scope_spans
    assert ss.scope.name == "workerscope" and len(ss.spans) == 6
    assert sender.sent.spans == 6
