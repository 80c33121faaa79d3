"""Fuzzing the three decoders of untrusted bytes: driver frames, the worker<->sidecar pipe and
the .wsc loader. Each may raise its own documented error and nothing else.

The run is bounded (max_examples) for the suite; WORKERSCOPE_FUZZ_EXAMPLES=N runs longer."""

from __future__ import annotations

import os

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workerscope import Timeline, load, protocol
from workerscope.builder import TimelineBuilder
from workerscope.errors import ProtocolError, WorkerscopeError
from workerscope.timeline import Span, Worker

EXAMPLES = int(os.environ.get("WORKERSCOPE_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# msgpack values of every shape, nested a little: what a hostile peer can put anywhere.
scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats()
           | st.text(max_size=20) | st.binary(max_size=20))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                      | st.dictionaries(st.text(max_size=10), inner, max_size=5), max_leaves=20)


def real_frames() -> list[bytes]:
    """A corpus of honest frames to mutate: every kind a sidecar sends."""
    w = "host:10:11"
    bodies = [
        (protocol.HELLO, {"host": "host", "pid": 10, "sidecar_pid": 11, "interval": 0.1,
                          "anchor": [1_700_000_000_000_000_000, 5_000], "boot_id": "b"}),
        (protocol.JOB_START, {"job": 1, "name": "job", "t": 6_000, "pid": 10, "tid": 10}),
        (protocol.SAMPLE, {"t": 7_000, "tree": {"cpu_percent": 50.0, "rss_bytes": 1 << 20},
                           "procs": [[10, {"rss_bytes": 1 << 20}]], "host": {"load_1m": 0.5},
                           "new": [[10, 1, "python"]], "gpus": [[0, {"util_percent": 3}]]}),
        (protocol.SPANS, {"pid": 10, "records": [[0, 1, 2, 1, "f", 6_100, 6_900, 10, None, None]],
                          "threads": [[10, "MainThread"]]}),
        (protocol.MARK, {"pid": 10, "records": [[1, 1, 3, 1, "m", 6_200, 6_200, 10, {"k": 1},
                                                 None]]}),
        (protocol.JOB_END, {"job": 1, "t": 8_000, "status": "ok", "error": None}),
        (protocol.HEARTBEAT, {"t": 8_500, "dropped": 0, "jobs": []}),
        (protocol.BYE, {"t": 9_000, "status": "exited", "samples": 1, "errors": []}),
    ]
    return [protocol.encode_frame(kind, w, seq, body) for seq, (kind, body) in enumerate(bodies)]


def fold(frames: list[bytes]) -> TimelineBuilder:
    """What the driver does with each frame: decode, fold, and keep going on ProtocolError."""
    builder = TimelineBuilder()
    for data in frames:
        try:
            builder.add(protocol.decode_frame(data))
        except ProtocolError:
            continue
    return builder


def test_the_corpus_is_accepted():
    """The honest frames fold into one job with its span, mark and sample."""
    t = fold(real_frames()).timeline()
    assert [j.name for j in t.jobs] == ["job"]
    assert {s.name for s in t.spans} == {"job", "f"}
    assert [m.name for m in t.marks] == ["m"]
    assert any(s.scope == "tree" for s in t.samples)


@FUZZ
@given(st.binary(max_size=512))
def test_decode_frame_raises_only_protocol_error_on_random_bytes(data):
    """Random bytes: a Frame or ProtocolError, never another exception."""
    try:
        protocol.decode_frame(data)
    except ProtocolError:
        pass


@FUZZ
@given(st.lists(values, min_size=0, max_size=6))
def test_decode_frame_raises_only_protocol_error_on_any_msgpack(msg):
    """Any msgpack array, of any length and contents, in a frame's place."""
    try:
        protocol.decode_frame(msgpack.packb(msg))
    except ProtocolError:
        pass


@FUZZ
@given(st.sampled_from(range(8)), st.text(max_size=12), values)
def test_builder_folds_any_body_or_raises_protocol_error(index, key, value):
    """A real frame with one body field replaced by anything: folding it raises only
    ProtocolError, and the timeline built afterwards can still be saved."""
    frames = real_frames()
    kind, worker, seq, body = msgpack.unpackb(frames[index])[1:]
    body[key if key else next(iter(body))] = value
    frames[index] = protocol.encode_frame(kind, worker, seq, body)
    builder = fold(frames)
    t = builder.timeline()
    msgpack.packb(t.to_dict(), use_bin_type=True, default=repr)


@FUZZ
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_pipe_reader_raises_only_protocol_error(chunks):
    """The pipe reader fed random chunks: messages or ProtocolError."""
    reader = protocol.PipeReader()
    for chunk in chunks:
        try:
            reader.feed(chunk)
        except ProtocolError:
            return


@FUZZ
@given(values)
def test_pipe_reader_on_any_msgpack_message(msg):
    """A well-framed pipe message whose payload is any msgpack value."""
    payload = msgpack.packb(msg)
    try:
        protocol.PipeReader().feed(len(payload).to_bytes(4, "big") + payload)
    except ProtocolError:
        pass


def _valid_wsc() -> dict[str, object]:
    t = Timeline()
    t.workers["h:1:2"] = Worker("h:1:2", host="h", pid=1)
    t.spans.append(Span("h:1:2", 1, 1, None, "job", 1_000, 2_000, 1, 1))
    d = t.to_dict()
    d["spans"] = [list(s) for s in d["spans"]]
    return d


@FUZZ
@given(st.sampled_from(["workers", "jobs", "spans", "marks", "samples", "processes",
                        "threads"]), values)
def test_wsc_loader_raises_only_workerscope_error(tmp_path_factory, part, value):
    """A .wsc whose sections hold anything: a Timeline or WorkerscopeError."""
    d = _valid_wsc()
    d[part] = value
    path = tmp_path_factory.mktemp("wsc") / "t.wsc"
    path.write_bytes(msgpack.packb(d, use_bin_type=True))
    try:
        load(path)
    except WorkerscopeError:
        pass


@pytest.mark.parametrize("cut", [0, 1, 7, 40])
def test_truncated_wsc_is_a_clear_error(tmp_path, cut):
    """A .wsc cut short (a zero-length file included) is a WorkerscopeError."""
    data = msgpack.packb(_valid_wsc(), use_bin_type=True)
    path = tmp_path / "t.wsc"
    path.write_bytes(data[:cut])
    with pytest.raises(WorkerscopeError):
        load(path)


@pytest.mark.parametrize("t", [2**64 - 1, 2**63, -(2**63), 10**30 // 10**12])
@pytest.mark.parametrize("ext", [".wsc", ".json", ".html", ".csv"])
def test_an_accepted_frame_never_makes_saving_fail(tmp_path, t, ext):
    """A sample, span and job end dated absurdly far away are clamped or dropped at decode
    and counted, so every format still saves what was accepted."""
    frames = real_frames()
    for index, field in ((2, "t"), (5, "t")):
        kind, worker, seq, body = msgpack.unpackb(frames[index])[1:]
        body[field] = t
        frames[index] = protocol.encode_frame(kind, worker, seq, body)
    kind, worker, seq, body = msgpack.unpackb(frames[3])[1:]
    body["records"][0][6] = t
    frames[3] = protocol.encode_frame(kind, worker, seq, body)
    timeline = fold(frames).timeline()
    path = timeline.save(tmp_path / f"t{ext}")
    assert os.path.getsize(path) > 0
    if ext == ".wsc":
        load(path)
