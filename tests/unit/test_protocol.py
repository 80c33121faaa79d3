"""The wire format: round trips, and untrusted bytes that raise ProtocolError and nothing else."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workerscope import protocol
from workerscope.errors import ProtocolError


def test_frame_round_trip():
    """A frame decodes to the kind, worker, seq and body it was encoded with."""
    data = protocol.encode_frame(protocol.SAMPLE, "host:1:2", 7, {"t": 5, "tree": {"rss_bytes": 3}})
    frame = protocol.decode_frame(data)
    assert frame == protocol.Frame("sample", "host:1:2", 7, {"t": 5, "tree": {"rss_bytes": 3}})


@pytest.mark.parametrize("payload, why", [
    (b"", "not a msgpack"),
    (b"\xc1", "not a msgpack"),
    (msgpack.packb({"a": 1}), "5-item array"),
    (msgpack.packb([2, "sample", "w", 0, {}]), "version"),
    (msgpack.packb([1, "bogus", "w", 0, {}]), "unknown frame kind"),
    (msgpack.packb([1, "sample", "", 0, {}]), "worker id"),
    (msgpack.packb([1, "sample", "w", -1, {}]), "seq"),
    (msgpack.packb([1, "sample", "w", True, {}]), "seq"),
    (msgpack.packb([1, "sample", "w", 0, []]), "body"),
    (msgpack.packb([1, "sample", "w", 0, {1: 2}]), "not a msgpack"),  # strict_map_key
])
def test_bad_frames_raise_protocol_error(payload, why):
    """Each kind of malformed frame is refused with a ProtocolError that says what is wrong."""
    with pytest.raises(ProtocolError, match=why):
        protocol.decode_frame(payload)


def test_oversized_frame_refused_before_decoding():
    """A frame over the size cap is refused without being unpacked."""
    with pytest.raises(ProtocolError, match="exceeds"):
        protocol.decode_frame(b"\x00" * (protocol.MAX_FRAME_BYTES + 1))


def test_huge_declared_length_does_not_allocate():
    """An array header claiming 2**32-1 items in a tiny frame fails fast, allocating nothing big."""
    with pytest.raises(ProtocolError):
        protocol.decode_frame(b"\xdd\xff\xff\xff\xff")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_random_bytes_only_raise_protocol_error(data):
    """Fuzz: any bytes either decode to a valid Frame or raise ProtocolError."""
    try:
        frame = protocol.decode_frame(data)
    except ProtocolError:
        return
    assert isinstance(frame.body, dict)


def test_pipe_reader_reassembles_split_messages():
    """Messages split at every byte boundary come out whole and in order."""
    data = protocol.encode_pipe("job_start", {"job": 1}) + protocol.encode_pipe("close", {})
    reader = protocol.PipeReader()
    out = []
    for i in range(len(data)):
        out += reader.feed(data[i:i + 1])
    assert out == [("job_start", {"job": 1}), ("close", {})]
    assert reader.pending == 0


def test_pipe_reader_refuses_bad_messages():
    """A pipe message of an unknown kind, or one declaring an absurd length, is refused."""
    with pytest.raises(ProtocolError):
        protocol.PipeReader().feed(protocol.encode_pipe("nonsense", {}))
    with pytest.raises(ProtocolError, match="exceeds"):
        protocol.PipeReader().feed(b"\xff\xff\xff\xff")


class Index:
    def __index__(self):
        return 7


def test_unknown_objects_become_plain_values_never_pickles():
    """Values msgpack cannot carry become numbers (numpy-style scalars) or their repr."""
    import pathlib

    data = protocol.encode_frame(protocol.SAMPLE, "w", 0, {
        "path": pathlib.PurePosixPath("/x"), "n": Index(), "s": {1}, "o": object()})
    body = protocol.decode_frame(data).body
    assert body["path"] == "PurePosixPath('/x')" and body["n"] == 7 and body["s"] == [1]
    assert body["o"].startswith("<object object at")
    assert b"pickle" not in data and b"\x80\x04" not in data


def test_span_frames_of_wide_characters_stay_within_the_frame_limit():
    """Records whose names, errors and attrs are 4-byte UTF-8 characters: each frame they
    are cut into stays within the budget in bytes, not characters (at 4 bytes a character
    the frames came to 1 MiB and more, past MAX_FRAME_BYTES, and would be dropped)."""
    from factories import span_record

    wide = "\U0001F600" * 2000  # 2,000 characters, 8,000 bytes
    records = [span_record(id=i, name=wide, error=wide, attrs={"k": wide}, job=1)
               for i in range(400)]
    sizes = [len(protocol.encode_frame(kind, "w", 0, body))
             for kind, body, _ in protocol.span_bodies(7, records, [])]
    assert len(sizes) > 1
    assert max(sizes) <= protocol.SPAN_FRAME_BUDGET * 1.1, max(sizes)


_RECORD = st.builds(
    lambda kind, job, name, attrs, error: (kind, job, name, attrs, error),
    st.sampled_from([protocol.RECORD_SPAN, protocol.RECORD_MARK]), st.sampled_from([None, 1, 2]),
    st.sampled_from(["a", "step", "\U0001F600" * 40, "n" * 3000]),
    st.sampled_from([None, None, None, {"k": "v" * 500}]), st.sampled_from([None, None, "E: x"]))


@settings(max_examples=300, deadline=None)
@given(fields=st.lists(_RECORD, max_size=80), budget=st.integers(1, 20_000),
       most=st.sampled_from([1, 3, 7, protocol.MAX_RECORDS_PER_FRAME]))
def test_span_frames_are_cut_greedily_within_the_budget(fields, budget, most):
    """Each kind and job's records in order, over frames that each take the records that
    follow while their estimated bytes fit the budget and the record bound, and at least
    one: no frame could have taken the next record too. The threads go with the first frame
    of each run."""
    from factories import span_record

    records = [span_record(kind=k, job=j, id=i, name=n, attrs=a, error=e)
               for i, (k, j, n, a, e) in enumerate(fields)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(protocol, "MAX_RECORDS_PER_FRAME", most)
        frames = list(protocol.span_bodies(7, records, [[1, "main"]], budget))
    if not records:  # one frame names the threads, for no job
        assert frames == [(protocol.SPANS, {"pid": 7, "records": [], "threads": [[1, "main"]]},
                           None)]
        return
    runs: dict[tuple[int, int | None], list[list[protocol.SpanRecord]]] = {}
    for kind, body, job in frames:
        assert body["pid"] == 7
        got = body["records"]
        assert got and {(r.kind, r.job) for r in got} == {
            (protocol.RECORD_MARK if kind == protocol.MARK else protocol.RECORD_SPAN, job)}
        run = runs.setdefault((got[0].kind, job), [])
        assert body["threads"] == ([] if run else [[1, "main"]])
        run.append(got)
    for (kind, job), run in runs.items():
        assert [r for chunk in run for r in chunk] == [
            r for r in records if (r.kind, r.job) == (kind, job)]
        for chunk, after in zip(run, [*run[1:], None], strict=True):
            used = sum(map(protocol._record_size, chunk))
            assert len(chunk) <= most and (len(chunk) == 1 or used <= budget)
            if after is not None:  # the next record did not fit
                assert len(chunk) == most or used + protocol._record_size(after[0]) > budget


# -- the bound on arrays and maps in one frame ----------------------------------------------
def _spans_frame(records: int) -> bytes:
    recs = [[0, 1, i, i - 1, "noop", 10**15 + i * 1000, 10**15 + i * 1000 + 500, 12345, None,
             None, False, None] for i in range(records)]
    return protocol.encode_frame(protocol.SPANS, "h:1:2", 5, {"pid": 1, "records": recs})


def test_a_frame_of_more_arrays_and_maps_than_the_bound_is_refused():
    """80,002 empty arrays in two lists, each list within the per-array bound: past MAX_ITEMS
    arrays and maps in all, refused (1 byte each: 80 KB would be ~5 MB of Python lists)."""
    n = 40_001
    data = protocol.encode_frame(protocol.SPANS, "h:1:2", 5, {"a": [[]] * n, "b": [[]] * n})
    assert protocol._COUNT_ABOVE < len(data) < protocol.MAX_FRAME_BYTES
    with pytest.raises(ProtocolError, match="arrays and maps"):
        protocol.decode_frame(data)
    at_bound = protocol.encode_frame(protocol.SPANS, "h:1:2", 5,
                                     {"a": [[]] * 32_000, "b": [[]] * 32_000})
    assert len(protocol.decode_frame(at_bound).body["a"]) == 32_000


def test_a_large_frame_decodes_as_msgpack_does():
    """A spans frame of 3,450 records (~134 KB, past the size where containers are counted)
    and one whose bytes hold many container markers inside a bin value decode as unpackb."""
    for data in (_spans_frame(3450),
                 protocol.encode_frame(protocol.SPANS, "h:1:2", 5,
                                       {"blob": b"\x90\xdc\x80" * 30_000, "x": [[1], {"k": 2}]})):
        assert len(data) > protocol._COUNT_ABOVE
        want = msgpack.unpackb(data, raw=False, strict_map_key=True)
        got = protocol.decode_frame(data)
        assert [got.kind, got.worker, got.seq, got.body] == want[1:]
