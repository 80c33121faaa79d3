"""Live OTLP batches: a span sent before its job ended (its job and the job's own span in a
later request) still hangs from the job's span. A CI run once sent a job's `outer` spans a
cycle before the job's end, each with a parent id no span carried."""

from __future__ import annotations

import pytest
from factories import S, job, job_span, span, timeline

pytest.importorskip("opentelemetry.proto")

from workerscope.export import otlp


def _spans(t, live):
    protos = otlp._protos()
    return {s.name: s for _, s in otlp.trace_spans(t, protos, live=live)}


def test_a_top_level_span_sent_before_its_job_ended_links_to_the_job():
    j = job(id=3, name="etl", start_ns=0, end_ns=2 * S)
    top = span(job=3, id=(1 << 40) + 1, parent=3, name="outer", start_ns=S // 2, end_ns=S)
    child = span(job=3, id=(1 << 40) + 2, parent=(1 << 40) + 1, name="inner",
                 start_ns=S // 2, end_ns=S // 2 + 10)
    early = _spans(timeline(spans=[top, child]), live=True)  # the job still running
    late = _spans(timeline(jobs=[j], spans=[job_span(j)]), live=True)  # its end, a cycle on
    whole = _spans(timeline(jobs=[j], spans=[job_span(j), top, child]), live=False)
    root = late["etl"]
    assert early["outer"].parent_span_id == root.span_id == whole["etl"].span_id
    assert early["outer"].trace_id == root.trace_id
    assert early["inner"].parent_span_id == early["outer"].span_id
    assert whole["outer"].parent_span_id == root.span_id


def test_a_full_export_queue_still_takes_the_frames_that_anchor_and_end_jobs():
    """Dropped, a hello would leave its worker off the clock and a job_end its job open in
    the exporter for good: they have room of their own past the queue's bound."""
    from factories import frame

    from workerscope import protocol
    from workerscope.driver.otlp import LiveOtlp

    live = LiveOtlp("http://127.0.0.1:9", "t", dict, queue_bytes=4096, flush_s=3600)
    try:
        sample = frame(protocol.SAMPLE, body={"t": 0, "pad": "x" * 1000})
        while live.frames_dropped == 0:
            live.put(protocol.SAMPLE, sample)
        queued = live.frames
        for kind in (protocol.HELLO, protocol.JOB_START, protocol.JOB_END, protocol.BYE):
            live.put(kind, frame(kind, body={"t": 0}))
        assert live.frames == queued + 4 and live.frames_dropped == 1
        live.put(protocol.SAMPLE, sample)
        assert live.frames_dropped == 2
    finally:
        live._deadline = 0  # nothing to send: no retries at close
        live.close()
