"""Frame bodies have one schema each, in protocol.py; what a frame says is checked as it enters."""

from __future__ import annotations

import pytest

import workerscope
from workerscope import protocol
from workerscope.builder import TimelineBuilder
from workerscope.errors import ProtocolError
from workerscope.protocol import Status
from workerscope.sidecar.aggregate import Aggregator
from workerscope.timeline import Timeline


def _frame(kind, body, seq=0, worker="h:1:2"):
    return protocol.decode_frame(protocol.encode_frame(kind, worker, seq, body))


def _started():
    b = TimelineBuilder()
    b.add(_frame(protocol.HELLO, {"host": "h", "pid": 1, "anchor": [10**18, 0]}))
    b.add(_frame(protocol.JOB_START, {"job": 1, "name": "j", "t": 5, "pid": 1, "tid": 1}, 1))
    return b


def test_a_job_end_with_an_unknown_status_is_refused():
    """A job_end whose status is not a job status is a malformed frame, never a job's status."""
    b = _started()
    with pytest.raises(ProtocolError, match="status"):
        b.add(_frame(protocol.JOB_END, {"job": 1, "t": 9, "status": "<b>pwned</b>",
                                        "error": None}, 2))
    b.add(_frame(protocol.JOB_END, {"job": 1, "t": 9, "status": "error", "error": "E"}, 3))
    [job] = b.timeline().jobs
    assert job.status is Status.ERROR


def test_a_bye_with_an_unknown_status_is_refused():
    """A bye's status must be a worker's end status (exited, ended, killed, sidecar_lost)."""
    b = _started()
    with pytest.raises(ProtocolError, match="status"):
        b.add(_frame(protocol.BYE, {"t": 9, "status": "ok", "dropped": 0}, 2))


def test_decoded_kinds_and_loaded_statuses_are_enum_members():
    """A decoded frame's kind is a FrameKind; a loaded record's status is a Status."""
    assert _frame("hello", {"host": "h", "pid": 1, "anchor": [0, 0]}).kind is protocol.HELLO
    b = _started()
    b.add(_frame(protocol.JOB_END, {"job": 1, "t": 9, "status": "ok", "error": None}, 2))
    again = Timeline.from_dict(protocol.decode_blob(protocol.encode_blob(b.timeline().to_dict())))
    assert again.jobs[0].status is Status.OK
    assert again.workers["h:1:2"].status is Status.IDLE


def test_one_frame_size_limit():
    """The limit a frame is decoded with is the one the wire enforces."""
    from workerscope import transport

    assert transport.MAX_FRAME_BYTES == protocol.MAX_FRAME_BYTES == 1 << 20


def test_sample_sections_cover_the_sample_schema():
    """Every section of SampleBody (but its time and count) says how it aggregates."""
    assert set(protocol.SAMPLE_SECTIONS) == set(protocol.SampleBody.__annotations__) - {"t", "n"}


def test_the_aggregator_keeps_every_section():
    """samples_per_frame=2 keeps each section the schema names, combined by its rule."""
    body = {"t": 1, "tree": {"rss_bytes": 1.0}, "host": {"load_1m": 1.0},
            "sidecar": {"cpu_s": 1.0}, "procs": [[7, {"rss_bytes": 1.0}]],
            "gpus": [[0, {"util_percent": 5.0}]], "threads": [[7, 8, {"cpu_user_s": 1.0}]],
            "new": [[7, 1, "x"]], "gone": [9], "notes": ["n"]}
    agg = Aggregator(2)
    assert agg.add(dict(body)) is None
    out = agg.add({**body, "t": 2, "tree": {"rss_bytes": 3.0}})
    assert out is not None
    assert set(out) == set(body) | {"n"}
    assert out["tree"] == {"rss_bytes": 3.0, "rss_bytes_min": 1.0, "rss_bytes_max": 3.0,
                           "rss_bytes_mean": 2.0}
    assert out["new"] == [[7, 1, "x"], [7, 1, "x"]]


def test_the_aggregator_refuses_a_section_the_schema_lacks():
    """A section no schema names is an error at once, not dropped without a word."""
    agg = Aggregator(2)
    agg.add({"t": 1, "cgroup": {"x": 1.0}})
    with pytest.raises(ValueError, match="cgroup"):
        agg.add({"t": 2, "cgroup": {"x": 2.0}})


def test_the_package_lists_its_names():
    """dir(workerscope) shows the public names: records, Status, the errors, the entry points."""
    names = dir(workerscope)
    for name in ("profiled", "monitor", "timed", "span", "mark", "Subscriber", "Timeline",
                 "load", "Span", "Job", "Worker", "Sample", "Mark", "Status",
                 "WorkerscopeError", "ConfigError", "FileFormatError", "UsageError"):
        assert name in names
        assert getattr(workerscope, name) is not None
    assert "TYPE_CHECKING" not in names
