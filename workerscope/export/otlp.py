"""OpenTelemetry: a Timeline sent to a collector over OTLP/HTTP (protobuf, gzip), built with the
official opentelemetry-proto messages (the `otlp` extra).

    workerscope export run.wsc --otlp http://collector:4318      send_otlp(timeline, url)

Traces: each job is a trace of its own, the job its root span (SPAN_KIND_INTERNAL), its
`@timed` spans under it by their parent links; `code.function.name` names the function, an
error is the span's status with an `exception` event (`exception.type`, `exception.message`,
`exception.stacktrace`), a span cut short by its process's death has status ERROR and a
`workerscope.cut_short` event, a job's death (`Job.death`) a `workerscope.death` event. Ids are
derived from the worker, process, job and span ids, so the same run sent twice gives the same
ids. Metrics (semantic conventions' names, cumulative sums and gauges at each sample's time):
`process.cpu.time` (s, `cpu.mode` user/system), `process.memory.usage` (By),
`process.disk.io` (By, `disk.io.direction` read/write), `process.thread.count`,
`process.context_switches` (`process.context_switch_type` voluntary/involuntary); per process
(`process.pid`) and for the whole tree, told apart by `workerscope.scope` ("proc", "tree").
Resource attributes per worker: `service.name` (settable), `host.name`, `process.pid`,
`workerscope.worker.id`.

Sending: requests of at most BATCH spans or points; each retried on 429, 502, 503, 504 and on
connection errors, with backoff (0.5 s doubling to 8 s, at most `retries` times, a
Retry-After honoured up to 30 s); what still fails is counted in the result, never raised
(the run's own data stays where it was).
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import math
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import MissingExtraError
from ..timeline import Job, Sample, Span, Timeline
from ..units import json_safe

log = logging.getLogger("workerscope")

BATCH = 5_000  # spans or data points a request
RETRY_STATUS = frozenset({429, 502, 503, 504})
MAX_BACKOFF_S = 8.0
MAX_RETRY_AFTER_S = 30.0
GZIP_LEVEL = 1  # a third of level 9's size already; 9 costs 4x the CPU for a few % more
WARN_EVERY = 100  # failed requests: the first is logged, then every WARN_EVERY-th
MAX_SERIES = 65_536  # cumulative series whose start a live sender keeps
# (metric, unit, kind, [(sample key, attributes)]): kind "sum" (cumulative) or "gauge".
METRICS: tuple[tuple[str, str, str, list[tuple[str, dict[str, str]]]], ...] = (
    ("process.cpu.time", "s", "sum",
     [("cpu_user_s", {"cpu.mode": "user"}), ("cpu_system_s", {"cpu.mode": "system"})]),
    ("process.memory.usage", "By", "gauge", [("rss_bytes", {})]),
    ("process.disk.io", "By", "sum",
     [("read_bytes", {"disk.io.direction": "read"}), ("write_bytes", {"disk.io.direction": "write"})]),
    ("process.thread.count", "{thread}", "gauge", [("num_threads", {})]),
    ("process.context_switches", "{context_switch}", "sum",
     [("ctx_switches_voluntary", {"process.context_switch_type": "voluntary"}),
      ("ctx_switches_involuntary", {"process.context_switch_type": "involuntary"})]),
)


@dataclass
class Sent:
    """What a send did: requests made and failed (after their retries), spans and points
    sent, and the last error."""

    requests: int = 0
    failed: int = 0
    spans: int = 0
    points: int = 0
    spans_dropped: int = 0
    points_dropped: int = 0
    last_error: str | None = None


def _protos() -> tuple[Any, Any, Any, Any, Any, Any]:
    try:
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
        from opentelemetry.proto.common.v1 import common_pb2
        from opentelemetry.proto.metrics.v1 import metrics_pb2
        from opentelemetry.proto.resource.v1 import resource_pb2
        from opentelemetry.proto.trace.v1 import trace_pb2
    except ImportError as err:
        raise MissingExtraError("OTLP needs opentelemetry-proto: pip install "
                                "'workerscope[otlp]'") from err
    return trace_service_pb2, metrics_service_pb2, common_pb2, trace_pb2, metrics_pb2, resource_pb2


def ready() -> None:
    _protos()


def _id(size: int, *parts: object) -> bytes:
    """A stable id of `size` bytes for these parts (never all zeros, which OTLP forbids)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=size).digest()
    return digest if any(digest) else b"\x01" + digest[1:]


def _salted(salt: int, span: int) -> bytes:
    value = (salt ^ span) & 0xFFFF_FFFF_FFFF_FFFF
    return value.to_bytes(8, "big") if value else b"\x01" + bytes(7)


class _Ids:
    """The ids of one batch's spans, cheaply: a span's is its process's salt (a hash of worker
    and pid) XOR its ring id, so distinct within a process and stable across batches; a job's
    trace and span ids are hashed once a batch."""

    def __init__(self) -> None:
        self._salts: dict[tuple[str, int], int] = {}
        self._traces: dict[tuple[str, int | None], bytes] = {}
        self._jobs: dict[tuple[str, int | None], bytes] = {}

    def salt(self, worker: str, pid: int) -> int:
        salt = self._salts.get((worker, pid))
        if salt is None:
            salt = self._salts[(worker, pid)] = int.from_bytes(_id(8, worker, pid, "span"), "big")
        return salt

    def span(self, worker: str, pid: int, span: int) -> bytes:
        return _salted(self.salt(worker, pid), span)

    def trace(self, worker: str, job: int | None) -> bytes:
        key = (worker, job)
        found = self._traces.get(key)
        if found is None:
            found = self._traces[key] = _id(16, worker, job)
        return found

    def job(self, worker: str, job: int | None) -> bytes:
        key = (worker, job)
        found = self._jobs.get(key)
        if found is None:
            found = self._jobs[key] = _job_span(worker, job)
        return found


def _value(common: Any, v: object) -> Any:
    out = common.AnyValue()
    if isinstance(v, bool):
        out.bool_value = v
    elif isinstance(v, int) and -(1 << 63) <= v < (1 << 63):
        out.int_value = v
    elif isinstance(v, float):
        out.double_value = v
    elif isinstance(v, str):
        out.string_value = v.encode("utf-8", "replace").decode("utf-8")
    else:
        import json

        out.string_value = json.dumps(json_safe(v), ensure_ascii=False)
    return out


def _attrs(common: Any, items: dict[str, object]) -> list[Any]:
    return [common.KeyValue(key=str(k), value=_value(common, v)) for k, v in items.items()
            if v is not None]


def _resource(protos: tuple[Any, ...], t: Timeline, worker: str, service: str) -> Any:
    _, _, common, _, _, resource_pb2 = protos
    w = t.workers.get(worker)
    return resource_pb2.Resource(attributes=_attrs(common, {
        "service.name": service, "host.name": w.host if w else None,
        "process.pid": w.pid if w else None, "workerscope.worker.id": worker,
        "workerscope.node": w.node if w else None}))


def _span(protos: tuple[Any, ...], trace_id: bytes, span_id: bytes, parent: bytes | None,
          name: str, start: int, end: int, attrs: dict[str, object], error: str | None,
          events: list[tuple[str, int, dict[str, object]]]) -> Any:
    _, _, common, trace_pb2, _, _ = protos
    status = trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_ERROR, message=error) \
        if error else trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_UNSET)
    return trace_pb2.Span(
        trace_id=trace_id, span_id=span_id, parent_span_id=parent or b"", name=name,
        kind=trace_pb2.Span.SPAN_KIND_INTERNAL, start_time_unix_nano=max(start, 0),
        end_time_unix_nano=max(end, start, 0), attributes=_attrs(common, attrs), status=status,
        events=[trace_pb2.Span.Event(name=n, time_unix_nano=max(at, 0),
                                     attributes=_attrs(common, a)) for n, at, a in events])


def _exception(error: str, tb: object) -> dict[str, object]:
    kind, _, message = error.partition(": ")
    return {"exception.type": kind, "exception.message": message or None,
            "exception.stacktrace": tb if isinstance(tb, str) else None}


def _job_span(worker: str, job: int | None) -> bytes:
    return _id(8, worker, "job", job)


def trace_spans(t: Timeline, protos: tuple[Any, ...],
                live: bool = False) -> Iterator[tuple[str, Any]]:
    """(worker, OTLP span) of every job and span of the timeline. live: the timeline is a
    part of a run (a driver's latest frames), whose spans may come before their job ends."""
    jobs: dict[tuple[str, int], Job] = {(j.worker, j.id): j for j in t.jobs}
    # The spans that stand for a job (kind "job"): their children hang from the job's span.
    job_spans = {(s.worker, s.pid, s.id) for s in t.spans if s.kind == "job"}
    end_of_run = t.end_ns or 0
    for j in t.jobs:
        yield j.worker, _job_otlp(protos, j, end_of_run)
    ids = _Ids()
    plain = _Plain(protos)
    for s in t.spans:
        if s.kind == "job":
            continue  # the job's own span is above, from its Job
        # Ids from the worker and job alone: a span sent live, before its job ended (and so
        # in an earlier request than its job), links to it all the same.
        in_job = s.job is not None and (live or (s.worker, s.job) in jobs)
        trace = ids.trace(s.worker, s.job) if in_job else _id(16, s.worker, s.pid, "span", s.id)
        # A top-level span's parent is its job's own span, whose id is the job's (span ids
        # carry their ring's generation above GEN_SHIFT, so never equal a job's): known so
        # without the job's span, which a live batch may not hold yet.
        of_job = s.parent is not None and (s.parent == s.job
                                           or (s.worker, s.pid, s.parent) in job_spans)
        if s.parent is not None and not of_job:
            parent: bytes | None = ids.span(s.worker, s.pid, s.parent)
        elif in_job:
            parent = ids.job(s.worker, s.job)
        else:
            parent = None
        span_id = ids.span(s.worker, s.pid, s.id)
        if s.error or s.cut_short or s.attrs:
            yield s.worker, _span_otlp(protos, s, trace, span_id, parent)
        else:  # most spans: a copy of its function's template, ids and times set
            yield s.worker, plain.span(s, trace, span_id, parent)


def _template(protos: tuple[Any, ...], name: str, pid: int, tid: int) -> Any:
    """A plain span of this function, process and thread, without its ids and times."""
    common, trace = protos[2], protos[3]
    return trace.Span(name=name, kind=trace.Span.SPAN_KIND_INTERNAL,
                      attributes=_attrs(common, {"code.function.name": name, "process.pid": pid,
                                                 "thread.id": tid}),
                      status=trace.Status(code=trace.Status.STATUS_CODE_UNSET))


class _Plain:
    """Spans with no attrs, error or cut: each a copy of a template per (name, pid, tid) with
    its attributes and status built once (a tenth of building each anew)."""

    MAX = 4096  # templates kept

    def __init__(self, protos: tuple[Any, ...]) -> None:
        self._protos, self._trace = protos, protos[3]
        self._templates: dict[tuple[str, int, int], Any] = {}

    def span(self, s: Span, trace: bytes, span_id: bytes, parent: bytes | None) -> Any:
        key = (s.name, s.pid, s.tid)
        tmpl = self._templates.get(key)
        if tmpl is None:
            if len(self._templates) >= self.MAX:
                self._templates.clear()
            tmpl = self._templates[key] = _template(self._protos, s.name, s.pid, s.tid)
        out = self._trace.Span()
        out.CopyFrom(tmpl)
        out.trace_id = trace
        out.span_id = span_id
        if parent:
            out.parent_span_id = parent
        start = max(s.start_ns, 0)
        out.start_time_unix_nano = start
        out.end_time_unix_nano = max(s.end_ns, start)
        if s.cpu_ns is not None:
            out.attributes.add(key="workerscope.cpu_s").value.double_value = s.cpu_ns / 1e9
        return out


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited field (a message, bytes or a string) in protobuf's wire format."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def span_entry(span: Any) -> bytes:
    """A Span message as an entry of ScopeSpans.spans (field 2)."""
    return _field(2, span.SerializeToString())


# A span's ids and times, laid out as protobuf lays out Span's fields 1 (trace_id), 2
# (span_id), 4 (parent_span_id), 7 and 8 (start and end, fixed64): what differs from one
# span to the next of a function. Protobuf merges a message's fields in any order, so these
# bytes, then a template's (name, kind, attributes, status), are one Span.
_IDS = struct.Struct("<2s16s2s8sBQBQ")
_IDS_PARENT = struct.Struct("<2s16s2s8s2s8sBQBQ")
_CPU_ATTR = bytes(_field(9, _field(1, b"workerscope.cpu_s") + _field(2, b"\x21" + bytes(8))))
_CPU_HEAD = _CPU_ATTR[:-8]  # then the double, little-endian
_DOUBLE = struct.Struct("<d")
_TRACE_HEAD, _SPAN_HEAD, _PARENT_HEAD = b"\x0a\x10", b"\x12\x08", b"\x22\x08"
_START, _END = 7 << 3 | 1, 8 << 3 | 1
_U64 = (1 << 64) - 1
_MAX_LENGTH = 1 << 14
_LENGTHS = [_varint(n) for n in range(_MAX_LENGTH)]  # a span's length, as a varint


class SpanWire:
    """Plain spans (no attrs, error or cut) straight from a spans frame's records to OTLP
    entries, the wire bytes of ScopeSpans.spans: a Span object and a protobuf message a span
    cost ~10 us, these ~1 us. A function's name, kind, attributes and status are a template
    serialised once (per name, pid and thread, within TEMPLATE_BYTES); the ids follow
    trace_spans' rules (a span sent live links to its job by ids alone)."""

    TEMPLATE_BYTES = 8 * 1024 * 1024  # past it, the templates are made anew

    def __init__(self, protos: tuple[Any, ...]) -> None:
        self._protos = protos
        self._templates: dict[tuple[str, int, int], tuple[bytes, int]] = {}
        self._bytes = 0
        self.ids = _Ids()
        self.entries: dict[str, list[bytes]] = {}  # worker -> entries, taken by the sender
        self.count = 0

    def _template(self, name: str, pid: int, tid: int) -> tuple[bytes, int]:
        key = (name, pid, tid)
        found = self._templates.get(key)
        if found is None:
            if self._bytes > self.TEMPLATE_BYTES:
                self._templates.clear()
                self._bytes = 0
            body = _template(self._protos, name, pid, tid).SerializeToString()
            found = self._templates[key] = (body, len(body))
            self._bytes += len(body) + len(name) + 100
        return found

    def add(self, worker: str, pid: int, plain: list[tuple[Any, ...]], shift: int) -> None:
        """Records already checked (builder.plain_records): (job, id, parent, name, start,
        end, tid, cpu_ns), times wall ns on the worker's clock; `shift` moves them onto the
        driver's."""
        ids, out = self.ids, self.entries.setdefault(worker, [])
        salt = ids.salt(worker, pid)  # one process a frame: its ids hashed once
        jobs: dict[int, tuple[bytes, bytes]] = {}
        pack, pack_parent, lengths = _IDS.pack, _IDS_PARENT.pack, _LENGTHS
        templates = self._templates
        for job, sid, parent, name, begin, finish, tid, cpu in plain:
            found = templates.get((name, pid, tid))
            body, size = found if found is not None else self._template(name, pid, tid)
            value = (salt ^ sid) & _U64
            span_id = value.to_bytes(8, "big") if value else b"\x01" + bytes(7)
            start = max(begin - shift, 0)
            end = max(finish - shift, start)
            if job is None:
                trace = _id(16, worker, pid, "span", sid)
                head = pack(_TRACE_HEAD, trace, _SPAN_HEAD, span_id, _START, start, _END, end) \
                    if parent is None else \
                    pack_parent(_TRACE_HEAD, trace, _SPAN_HEAD, span_id, _PARENT_HEAD,
                                _salted(salt, parent), _START, start, _END, end)
            else:
                known = jobs.get(job)
                if known is None:
                    known = jobs[job] = (ids.trace(worker, job), ids.job(worker, job))
                up = known[1] if parent is None or parent == job else _salted(salt, parent)
                head = pack_parent(_TRACE_HEAD, known[0], _SPAN_HEAD, span_id, _PARENT_HEAD, up,
                                   _START, start, _END, end)
            if cpu is None:
                n = len(head) + size
                out.append(b"\x12" + (lengths[n] if n < _MAX_LENGTH else _varint(n)) + head
                           + body)
            else:
                n = len(head) + size + len(_CPU_ATTR)
                out.append(b"\x12" + (lengths[n] if n < _MAX_LENGTH else _varint(n)) + head
                           + body + _CPU_HEAD + _DOUBLE.pack(cpu / 1e9))
        self.count += len(plain)

    def take(self) -> tuple[dict[str, list[bytes]], int]:
        entries, count = self.entries, self.count
        self.entries, self.count = {}, 0
        return entries, count


def _job_otlp(protos: tuple[Any, ...], j: Job, end_of_run: int) -> Any:
    end = j.end_ns if j.end_ns is not None else end_of_run
    events = []
    if j.error:
        events.append(("exception", end, _exception(j.error, None)))
    if j.death:
        events.append(("workerscope.death", end, {str(k): v for k, v in j.death.items()}))
    attrs = {"code.function.name": j.name, "workerscope.job.status": str(j.status),
             "process.pid": j.pid, "thread.id": j.tid,
             "workerscope.queued_s": None if j.queued_ns is None else j.queued_ns / 1e9}
    return _span(protos, _id(16, j.worker, j.id), _job_span(j.worker, j.id), None, j.name,
                 j.start_ns, end, attrs, j.error if j.status != "ok" else None, events)


def _span_otlp(protos: tuple[Any, ...], s: Span, trace: bytes, span_id: bytes,
               parent: bytes | None) -> Any:
    attrs: dict[str, object] = {"code.function.name": s.name, "process.pid": s.pid,
                                "thread.id": s.tid}
    if s.cpu_ns is not None:
        attrs["workerscope.cpu_s"] = s.cpu_ns / 1e9
    for k, v in (s.attrs or {}).items():
        if k != "traceback":
            attrs[f"workerscope.attr.{k}"] = v
    events = []
    if s.error:
        events.append(("exception", s.end_ns,
                       _exception(s.error, (s.attrs or {}).get("traceback"))))
    if s.cut_short:
        events.append(("workerscope.cut_short", s.end_ns, {}))
    error = s.error or ("cut short: its process died" if s.cut_short else None)
    return _span(protos, trace, span_id, parent, s.name, s.start_ns, s.end_ns, attrs, error,
                 events)


Point = tuple[str, str, str, str, dict[str, object], int, int, float]


def metric_points(t: Timeline,
                  starts: dict[tuple[str, str, int | None], int] | None = None) -> Iterator[Point]:
    """(worker, metric, unit, kind, attributes, start, time, value) of each proc and tree
    sample value the semantic conventions name. starts: each series' start time, kept
    across calls by a live sender (a cumulative sum keeps its start)."""
    starts = {} if starts is None else starts
    for smp in sorted(t.samples, key=lambda s: s.t_ns):
        if smp.scope not in ("proc", "tree"):
            continue
        key = (smp.worker, smp.scope, smp.pid)
        start = starts.setdefault(key, smp.t_ns)
        yield from _points(smp, start)


def _points(smp: Sample, start: int) -> Iterator[Point]:
    base: dict[str, object] = {"workerscope.scope": smp.scope, "process.pid": smp.pid}
    for metric, unit, kind, fields in METRICS:
        for key, extra in fields:
            value = smp.values.get(key)
            if value is not None:
                yield smp.worker, metric, unit, kind, {**base, **extra}, start, smp.t_ns, value


def _post(url: str, body: bytes, retries: int, timeout: float, sent: Sent,
          wait_for: Callable[[float], bool], deadline: float = math.inf) -> bool:
    """POST one request, retried; wait_for(s) sleeps between tries, True to give up; no try
    starts, or waits, past `deadline` (monotonic)."""
    data = gzip.compress(body, compresslevel=GZIP_LEVEL)
    delay = 0.5
    for attempt in range(retries + 1):
        left = deadline - time.monotonic()
        if left <= 0:
            sent.last_error = sent.last_error or f"{url}: not sent before the close deadline"
            break
        sent.requests += 1
        request = urllib.request.Request(url, data=data, method="POST", headers={
            "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
        wait = delay
        try:
            # The status says all we use: the body of the answer is never read.
            with urllib.request.urlopen(request, timeout=min(timeout, left)):
                pass
            return True
        except urllib.error.HTTPError as err:
            sent.last_error = f"{url}: HTTP {err.code}"
            if err.code not in RETRY_STATUS:
                break
            after = err.headers.get("Retry-After") if err.headers else None
            if after and after.strip().isdigit():
                wait = min(float(after), MAX_RETRY_AFTER_S)
        except (urllib.error.URLError, OSError) as err:
            sent.last_error = f"{url}: {err}"
        if attempt < retries:
            if wait_for(wait):
                break
            delay = min(delay * 2, MAX_BACKOFF_S)
    sent.failed += 1
    if sent.failed == 1 or sent.failed % WARN_EVERY == 0:  # a collector down for hours: not a flood
        log.warning("workerscope: OTLP export failed (%d requests so far, counted): %s",
                    sent.failed, sent.last_error)
    return False


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


class OtlpSender:
    """Sends timelines (a whole run, or a live driver's latest part of one) to the OTLP/HTTP
    collector at `url` (its base, e.g. http://localhost:4318: /v1/traces and /v1/metrics are
    added), counting in `sent` what it sent and what it gave up on."""

    def __init__(self, url: str, service: str = "workerscope", retries: int = 6,
                 timeout: float = 10.0, wait_for: Callable[[float], bool] = _sleep,
                 live: bool = False) -> None:
        self.protos = _protos()
        self.base = url.rstrip("/")
        self.service = service
        self.retries = retries
        self.timeout = timeout
        self.wait_for = wait_for
        self.live = live
        self.sent = Sent()
        self.deadline = math.inf  # monotonic: no request is tried past it (a live close)
        self.starts: dict[tuple[str, str, int | None], int] = {}

    def _post(self, path: str, body: bytes) -> bool:
        return _post(f"{self.base}{path}", body, self.retries, self.timeout, self.sent,
                     self.wait_for, self.deadline)

    def send(self, t: Timeline, wire: tuple[dict[str, list[bytes]], int] | None = None) -> None:
        """Send the timeline's jobs, spans and samples; `wire`: spans already in OTLP's wire
        format (SpanWire.take()), by worker, and how many."""
        resources: dict[str, Any] = {}

        def resource(worker: str) -> Any:
            if worker not in resources:
                resources[worker] = _resource(self.protos, t, worker, self.service)
            return resources[worker]

        self._send_spans(t, resource, wire)
        if len(self.starts) > MAX_SERIES:  # a day of short-lived processes: start afresh
            self.starts.clear()
        self._send_points(t, resource)

    def _send_spans(self, t: Timeline, resource: Callable[[str], Any],
                    wire: tuple[dict[str, list[bytes]], int] | None) -> None:
        common = self.protos[2]
        sent = self.sent
        batch: dict[str, list[bytes]] = {}
        count = 0
        scope = _field(1, common.InstrumentationScope(name="workerscope").SerializeToString())
        resources: dict[str, bytes] = {}

        def flush() -> None:
            # ExportTraceServiceRequest.resource_spans (1): ResourceSpans of resource (1) and
            # scope_spans (2), a ScopeSpans of scope (1) and the spans' entries (2).
            nonlocal count
            if not count:
                return
            parts = []
            for w, entries in batch.items():
                if w not in resources:
                    resources[w] = _field(1, resource(w).SerializeToString())
                parts.append(_field(1, resources[w] + _field(2, scope + b"".join(entries))))
            ok = self._post("/v1/traces", b"".join(parts))
            sent.spans += count if ok else 0
            sent.spans_dropped += 0 if ok else count
            batch.clear()
            count = 0

        for worker, span in trace_spans(t, self.protos, self.live):
            batch.setdefault(worker, []).append(span_entry(span))
            count += 1
            if count >= BATCH:
                flush()
        for worker, entries in (wire[0] if wire else {}).items():
            for at in range(0, len(entries), BATCH):
                part = entries[at:at + BATCH]
                batch.setdefault(worker, []).extend(part)
                count += len(part)
                if count >= BATCH:
                    flush()
        flush()

    def _send_points(self, t: Timeline, resource: Callable[[str], Any]) -> None:
        _, metrics_service, common, _, metrics_pb2, _ = self.protos
        sent = self.sent
        points: dict[tuple[str, str, str, str], list[Any]] = {}
        n = 0

        def flush() -> None:
            nonlocal n
            if not n:
                return
            by_worker: dict[str, list[Any]] = {}
            for (worker, metric, unit, kind), dps in points.items():
                m = metrics_pb2.Metric(name=metric, unit=unit)
                if kind == "sum":
                    m.sum.CopyFrom(metrics_pb2.Sum(
                        data_points=dps, is_monotonic=True,
                        aggregation_temporality=metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE))
                else:
                    m.gauge.CopyFrom(metrics_pb2.Gauge(data_points=dps))
                by_worker.setdefault(worker, []).append(m)
            request = metrics_service.ExportMetricsServiceRequest(resource_metrics=[
                metrics_pb2.ResourceMetrics(resource=resource(w), scope_metrics=[
                    metrics_pb2.ScopeMetrics(scope=common.InstrumentationScope(name="workerscope"),
                                             metrics=ms)]) for w, ms in by_worker.items()])
            ok = self._post("/v1/metrics", request.SerializeToString())
            sent.points += n if ok else 0
            sent.points_dropped += 0 if ok else n
            points.clear()
            n = 0

        made: dict[tuple[tuple[str, object], ...], list[Any]] = {}  # attributes, built once
        for worker, metric, unit, kind, attrs, start, at, value in metric_points(t, self.starts):
            key = tuple(attrs.items())
            kvs = made.get(key)
            if kvs is None:
                kvs = made[key] = _attrs(common, attrs)
            dp = metrics_pb2.NumberDataPoint(
                attributes=kvs,
                start_time_unix_nano=max(start, 0) if kind == "sum" else 0,
                time_unix_nano=max(at, 0), as_double=float(value))
            points.setdefault((worker, metric, unit, kind), []).append(dp)
            n += 1
            if n >= BATCH:
                flush()
        flush()


def send_otlp(t: Timeline, url: str, service: str = "workerscope", retries: int = 6,
              timeout: float = 10.0) -> Sent:
    """Send the timeline's spans and metrics to the OTLP/HTTP collector at `url` (its base,
    e.g. http://localhost:4318: /v1/traces and /v1/metrics are added)."""
    sender = OtlpSender(url, service, retries, timeout)
    sender.send(t)
    return sender.sent
