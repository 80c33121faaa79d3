"""Saving never fails on data that was accepted: attrs nested past any depth, attrs with keys
that are not strings, NaN and infinities, times before 1970, pids, tids and ids past int64. Each
format writes such a timeline, the .json parses in a strict JSON parser, the .wsc loads back."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from factories import T0, S, job, job_span, mark, sample, span, timeline, worker

from workerscope.export.pftrace import SPARE_ID
from workerscope.timeline import load
from workerscope.units import CUT, MAX_DEPTH, json_safe

BIG = 2**64 - 1  # the largest integer a frame (msgpack) carries


def _deep(levels: int) -> dict[str, Any]:
    top: dict[str, Any] = {}
    d = top
    for _ in range(levels):
        d["a"] = {}
        d = d["a"]
    d["a"] = "bottom"
    return top


def _depth(value: Any) -> int:
    """Levels of nested containers in a parsed JSON value."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _strict(text: str) -> Any:
    """What JSON.parse reads: NaN and Infinity are not JSON."""
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def _hostile(keys: bool = True) -> Any:
    """A timeline with all of it; `keys`: attrs with keys that are not strings too."""
    nan = {"nan": math.nan, "inf": math.inf, "ninf": -math.inf, "list": [math.nan, 1.5]}
    odd: dict[Any, Any] = {(1, 2): 3, 4: {5: "five"}, None: True} if keys else {}
    w = worker("h:1:2", pid=1)
    big = worker("g:9:2", pid=BIG)
    early = job(worker="h:1:2", id=1, start_ns=-5 * S, end_ns=-4 * S, status="error", error="e")
    huge = job(worker="g:9:2", id=BIG, start_ns=T0, end_ns=T0 + S, pid=BIG, tid=BIG,
               status="killed", error="killed by SIGKILL", death={"signal": 9})
    spans = [job_span(early), job_span(huge),
             span(worker="h:1:2", job=1, id=2, parent=1, start_ns=-5 * S, end_ns=-4 * S,
                  attrs={"deep": _deep(1_000), **nan, **odd}),
             span(worker="g:9:2", job=BIG, id=BIG - 1, parent=BIG, start_ns=T0, end_ns=T0 + S,
                  pid=BIG, tid=BIG, attrs={"deep": [_deep(200)], **odd}),
             span(worker="h:1:2", id=3, start_ns=-2**62, end_ns=T0, tid=2**63)]
    marks = [mark(worker="h:1:2", t_ns=-5 * S, attrs={"deep": _deep(500), **nan, **odd}),
             mark(worker="h:1:2", t_ns=-4 * S, pid=-4),
             mark(worker="g:9:2", t_ns=T0, pid=BIG, tid=BIG)]
    samples = [sample(worker="g:9:2", t_ns=T0, scope="proc", pid=BIG, cpu_percent=5.0),
               sample(worker="g:9:2", t_ns=T0 + S, scope="thread", pid=BIG, tid=BIG,
                      cpu_percent=5.0),
               sample(worker="h:1:2", t_ns=-5 * S, scope="tree", pid=1, cpu_percent=50.0)]
    return timeline(workers=[w, big], jobs=[early, huge], spans=spans, marks=marks,
                    samples=samples, processes={("g:9:2", BIG): "huge"},
                    threads={("g:9:2", BIG, BIG): "t"})


def test_json_safe_bounds_depth_and_writes_what_json_cannot():
    """json_safe cuts containers past MAX_DEPTH with a marker and a short repr of the rest,
    makes keys strings and writes NaN and infinities as JavaScript names them."""
    out = json_safe({"deep": _deep(1_000), (1, 2): [math.nan, math.inf, -math.inf, b"x"]})
    assert out["(1, 2)"] == ["NaN", "Infinity", "-Infinity", "b'x'"]
    d, levels = out, 0
    while isinstance(d, dict):
        d, levels = d.get("deep", d.get("a")), levels + 1
    assert levels == MAX_DEPTH and isinstance(d, str) and d.startswith(CUT) and "'a'" in d
    assert len(d) < 300
    assert _strict(json.dumps(out, allow_nan=False))


def test_json_of_nan_attrs_parses_strictly(tmp_path):
    """NaN and infinities in span and mark attrs are written as strings, valid JSON."""
    t = timeline(spans=[span(start_ns=T0, attrs={"n": math.nan, "i": math.inf,
                                                 "l": [-math.inf], "ok": 1.5})],
                 marks=[mark(t_ns=T0, attrs={"n": math.nan})])
    with open(t.save(tmp_path / "t.json"), encoding="utf-8") as f:
        trace = _strict(f.read())
    (args,) = [e["args"] for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert args["n"] == "NaN" and args["i"] == "Infinity" and args["l"] == ["-Infinity"]
    assert args["ok"] == 1.5
    (margs,) = [e["args"] for e in trace["traceEvents"] if e.get("ph") == "i"]
    assert margs["n"] == "NaN"


@pytest.mark.parametrize("ext", [".json", ".html", ".pftrace", ".csv", ".wsc"])
def test_every_format_saves_a_hostile_timeline(tmp_path, ext):
    """Each format writes the timeline with all of it, without an error."""
    if ext == ".pftrace":
        pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    path = _hostile().save(tmp_path / f"t{ext}")
    with open(path, "rb") as f:
        text = f.read()
    assert text
    if ext == ".json":
        trace = _strict(text.decode())
        args = next(e["args"] for e in trace["traceEvents"]
                    if e.get("ph") in ("X", "b") and e["args"].get("nan") == "NaN")
        assert _depth(args) == MAX_DEPTH and args["(1, 2)"] == 3


def test_pftrace_of_a_hostile_timeline_reads_back():
    """The .pftrace parses with Perfetto's protos: pids past int32 and tids past int64 are
    numbered anew, a trace from before 1970 starts at 0, nested attrs are bounded JSON text,
    keys that are not strings are made strings."""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    import io

    from workerscope.export.pftrace import _write
    from workerscope.export.pftrace_packets import Writer

    buf = io.BytesIO()
    w = Writer(buf, pb)
    _write(_hostile(), w)
    w.flush()
    trace = pb.Trace.FromString(buf.getvalue())
    texts = [a.string_value for p in trace.packet for a in p.track_event.debug_annotations]
    assert any(x.count("{") >= MAX_DEPTH and CUT in x for x in texts)
    assert max(map(len, texts)) < 10_000
    names = [p.interned_data.debug_annotation_names for p in trace.packet]
    assert "(1, 2)" in {n.name for group in names for n in group}
    procs = {p.track_descriptor.process.pid: p.track_descriptor.process.process_name
             for p in trace.packet if p.track_descriptor.HasField("process")}
    assert procs[SPARE_ID] == f"worker g:{BIG} (huge)" and procs[1] == "worker h:1"
    threads = {(d.thread.pid, d.thread.tid) for p in trace.packet
               if (d := p.track_descriptor).HasField("thread")}
    assert {tid for _, tid in threads if tid >= SPARE_ID} == {SPARE_ID, SPARE_ID + 1}
    assert {pid for pid, _ in threads} == {1, SPARE_ID}
    assert {c.timestamp for p in trace.packet for c in p.clock_snapshot.clocks} == {0}
    ends: dict[int, int] = {}  # each sequence's last time: the sum of its deltas
    for p in trace.packet:
        if p.HasField("track_event"):
            ends[p.trusted_packet_sequence_id] = ends.get(p.trusted_packet_sequence_id, 0) + p.timestamp
    assert max(ends.values()) == T0 + S + 2**62  # the trace starts at -2**62


def test_wsc_round_trip(tmp_path):
    """A .wsc of the timeline loads back equal: deep attrs, NaN, ids past int64, early times."""
    t = _hostile(keys=False)
    back = load(t.save(tmp_path / "t.wsc"))
    assert len(back.spans) == len(t.spans) and len(back.marks) == len(t.marks)
    got = {(s.worker, s.id): s for s in back.spans}
    assert got[("g:9:2", BIG - 1)].pid == BIG and got[("h:1:2", 3)].start_ns == -2**62
    assert math.isnan(got[("h:1:2", 2)].attrs["nan"])


def test_wsc_with_keys_that_are_not_strings_loads_back(tmp_path):
    """A .wsc of attrs with keys that are not strings loads back."""
    load(_hostile().save(tmp_path / "t.wsc"))
