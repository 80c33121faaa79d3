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
