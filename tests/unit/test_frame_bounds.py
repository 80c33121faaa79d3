"""What a frame leaves in the driver's memory is bounded in bytes, whatever its fields hold."""

from __future__ import annotations

from factories import frame

from workerscope import protocol
from workerscope.builder import MAX_NAME, TimelineBuilder
from workerscope.driver.live import LiveState


def _fold(builder, live, data):
    f = protocol.decode_frame(data)
    builder.add(f)
    live.note(f, 0.0)


def test_open_job_names_and_tree_samples_are_bounded():
    """A job with a 1 MB name keeps at most MAX_NAME characters of it, in the live builder
    and the live rows; a 55,000-key tree sample keeps only what the rows show."""
    builder, live = TimelineBuilder(keep=False), LiveState()
    _fold(builder, live, frame("hello", worker="h:1:2", body={
        "host": "h", "pid": 1, "anchor": [10**18, 0]}))
    _fold(builder, live, frame("job_start", worker="h:1:2", seq=1, body={
        "job": 1, "name": "x" * 1_000_000, "t": 5, "pid": 1, "tid": 1}))
    tree = {f"k{i}": 1.0 for i in range(55_000)} | {"rss_bytes": 5.0, "cpu_percent": 7.0}
    _fold(builder, live, frame("sample", worker="h:1:2", seq=2, body={"t": 6, "tree": tree}))
    [(_, job)] = builder.snapshot()[1]
    assert len(job["name"]) == MAX_NAME
    w = live.workers["h:1:2"]
    assert all(len(name) <= MAX_NAME for name, _ in w.jobs.values())
    assert w.tree == {"rss_bytes": 5.0, "cpu_percent": 7.0}


def test_a_huge_boot_id_is_refused():
    """A hello whose boot id is 500 KB is malformed, not kept."""
    import pytest

    from workerscope.errors import ProtocolError

    builder = TimelineBuilder(keep=False)
    with pytest.raises(ProtocolError, match="boot id"):
        builder.add(protocol.decode_frame(frame("hello", worker="h:1:2", body={
            "host": "h", "pid": 1, "anchor": [10**18, 0], "boot_id": "b" * 500_000})))
    assert not builder.t.workers.get("h:1:2") or builder.t.workers["h:1:2"].boot_id is None
