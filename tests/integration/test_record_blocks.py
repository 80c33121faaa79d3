"""The compressed record: each round of the writer is one block of a stream (Zstandard; zlib
in a record of the third layout, resumed), its spans frames delta-coded (the fifth layout),
so a long run costs tens of bytes a frame,
everything written is readable at once, a record cut inside its last block loads up to the
block before, and a damaged block costs the rest of its stream, no more. Records of the
earlier layouts still load, and a resumed one keeps its own."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import zlib

import msgpack
import pytest
from factories import span_record

from workerscope import load, protocol, record
from workerscope.record import RecordReader, RecordWriter

LAYOUTS = (3, 4, 5)  # the compressed ones: zlib, Zstandard, Zstandard with spans delta-coded

ANCHOR = [1_700_000_000_000_000_000, 1_000_000_000]
WID = protocol.worker_id("host-a", 100, 200)
ROUNDS = 20
SAMPLES = 50  # a round's
SPANS = 10  # a round's spans frame's


def _frames() -> list[list[bytes]]:
    """A worker's hello and job start, ROUNDS rounds of SAMPLES samples of a tree and four
    processes (as a sidecar's) and a spans frame of SPANS spans, and its job's end and bye:
    the frames of each round."""
    seq = iter(range(10**6))

    def frame(kind: str, body: dict[str, object]) -> bytes:
        return protocol.encode_frame(kind, WID, next(seq), body)

    rounds = [[frame(protocol.HELLO, {"host": "host-a", "pid": 100, "anchor": ANCHOR}),
               frame(protocol.JOB_START, {"job": 1, "name": "j", "t": ANCHOR[1], "pid": 100})]]
    for r in range(ROUNDS):
        batch = []
        for i in range(SAMPLES):
            n = r * SAMPLES + i
            procs = [[100 + k, {"cpu_percent": 25.0 + (n * 7 + k) % 13, "rss_bytes":
                                2**27 + 4096 * ((n * 31 + k) % 97), "cpu_user_s": n / 10}]
                     for k in range(4)]
            batch.append(frame(protocol.SAMPLE, {
                "t": ANCHOR[1] + (n + 1) * 10**7, "procs": procs,
                "tree": {"cpu_percent": 100.0 + n % 7, "rss_bytes": 2**29 + 4096 * n}}))
        t0 = ANCHOR[1] + r * SAMPLES * 10**7
        records = [span_record(job=1, id=2**40 + r * SPANS + k, name=f"step{k % 3}",
                               start_ns=t0 + k * 3_000_017 + (k * k * 7919) % 50_000,
                               end_ns=t0 + k * 3_000_017 + 1_000_000 + k * 37, tid=100)
                   for k in range(SPANS)]
        batch.append(frame(protocol.SPANS, {"pid": 100, "records": records}))
        rounds.append(batch)
    end = ANCHOR[1] + (ROUNDS * SAMPLES + 1) * 10**7
    rounds.append([frame(protocol.JOB_END, {"job": 1, "t": end, "status": "ok"}),
                   frame(protocol.BYE, {"status": "exited"})])
    return rounds


def _write(path: str, rounds: list[list[bytes]], compress: bool = True,
           layout: int = 5) -> list[int]:
    """The rounds through the real writer, each flushed as the writer's own rounds are; the
    file's length after each. layout 3 or 4: a record of that layout begun (its header, as
    the code before wrote it) and resumed, as a driver started again on it does."""
    old = {3: record.RECORD_MAGIC_V3, 4: record.RECORD_MAGIC_V4}.get(layout) if compress else None
    if old is not None:
        with open(path, "wb") as f:
            f.write(old + os.urandom(4))
    writer = RecordWriter(path, compress=compress, resume=old is not None)
    assert writer.layout == (layout if compress else 2)
    ends = []
    for batch in rounds:
        for frame in batch:
            assert writer.append(frame)
        ends.append(writer.flush())
    writer.close()
    return ends


def _flip(path: str, at: int) -> None:
    """One byte of the file changed."""
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0xFF]))


def _samples(t: object) -> list[tuple[int, str, object, dict[str, float]]]:
    return [(s.t_ns, s.scope, s.pid, s.values) for s in t.samples]  # type: ignore[attr-defined]


def test_a_compressed_record_is_small_and_loads_as_the_plain_one(tmp_path):
    """The same frames compressed and as they are: the same timeline, every sample and the
    job, in a fifth of the bytes or less (330 B a frame as they are, 52 compressed)."""
    rounds = _frames()
    frames = sum(map(len, rounds))
    small, plain = str(tmp_path / "z.wsc"), str(tmp_path / "plain.wsc")
    _write(small, rounds)
    _write(plain, rounds, compress=False)
    a, b = load(small), load(plain)
    assert _samples(a) == _samples(b) and len(a.samples) == ROUNDS * SAMPLES * 5
    assert [(j.name, j.status) for j in a.jobs] == [("j", "ok")]
    assert os.path.getsize(small) * 5 <= os.path.getsize(plain), (
        os.path.getsize(small) / frames, os.path.getsize(plain) / frames)
    reader = RecordReader(small)
    assert len(list(reader)) == frames and reader.frames == frames
    assert reader.version == 5 and reader.damaged == 0 and reader.torn == 0
    assert sorted(s.name for s in a.spans) == sorted(s.name for s in b.spans)
    assert len([s for s in a.spans if s.name.startswith("step")]) == ROUNDS * SPANS


def test_each_layout_is_smaller_than_the_one_before(tmp_path):
    """The same rounds in the third layout's zlib blocks, the fourth's Zstandard and the
    fifth's, its spans frames delta-coded: the same entries back, byte for byte, in fewer
    bytes each."""
    rounds = _frames()
    sizes = {}
    for layout in LAYOUTS:
        path = str(tmp_path / f"l{layout}.wsc")
        _write(path, rounds, layout=layout)
        reader = RecordReader(path)
        assert [e.data for e in reader] == [f for batch in rounds for f in batch]
        assert reader.version == layout
        sizes[layout] = os.path.getsize(path)
    assert sizes[5] < sizes[4] < sizes[3], sizes


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_record_killed_mid_block_loads_up_to_its_last_whole_block(tmp_path, caplog, layout):
    """Cut inside its last block (a driver killed while writing it): every frame of the
    blocks before loads, the torn block is said, nothing is called damaged."""
    rounds = _frames()
    path = str(tmp_path / "z.wsc")
    ends = _write(path, rounds, layout=layout)
    cut = (ends[-3] + ends[-2]) // 2  # inside the last round of samples
    with open(path, "r+b") as f:
        f.truncate(cut)
    caplog.set_level(logging.WARNING)
    t = load(path)
    assert len(t.samples) == (ROUNDS - 1) * SAMPLES * 5
    assert len([s for s in t.spans if s.name.startswith("step")]) == (ROUNDS - 1) * SPANS
    notes = t.workers[WID].notes
    assert any("torn entry" in n for n in notes) and not any("damaged" in n for n in notes)
    reader = RecordReader(path)
    assert len(list(reader)) == sum(map(len, rounds[:-2]))
    assert reader.torn == cut - ends[-3] and reader.damaged == 0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_damaged_block_costs_the_rest_of_its_stream_only(tmp_path, monkeypatch, layout):
    """One byte changed in a block: that block and the others of its stream are skipped
    and said; the next stream's blocks load, and the job still ends ok."""
    monkeypatch.setattr(record, "STREAM_BYTES", 1)  # a stream a block: the worst case 2
    rounds = _frames()
    path = str(tmp_path / "z.wsc")
    ends = _write(path, rounds, layout=layout)
    monkeypatch.setattr(record, "STREAM_BYTES", 8 * 1024 * 1024)
    _flip(path, (ends[4] + ends[5]) // 2)  # inside round 5's block
    t = load(path)
    assert len(t.samples) == (ROUNDS - 1) * SAMPLES * 5
    assert [(j.name, j.status) for j in t.jobs] == [("j", "ok")]
    assert any("damaged" in n for n in t.workers[WID].notes)
    reader = RecordReader(path)
    list(reader)
    assert reader.damaged == 1 and reader.skipped == ends[5] - ends[4]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_blocks_after_a_damaged_one_in_its_stream_are_skipped_not_misread(tmp_path, layout):
    """In one stream, a block that cannot be read takes the stream's later blocks with it:
    they are counted as damaged, never decompressed from a wrong history."""
    rounds = _frames()
    path = str(tmp_path / "z.wsc")
    ends = _write(path, rounds, layout=layout)  # one stream: well under STREAM_BYTES
    _flip(path, (ends[2] + ends[3]) // 2)  # inside round 3's block
    reader = RecordReader(path)
    entries = list(reader)
    assert len(entries) == sum(map(len, rounds[:3]))
    assert reader.damaged == len(rounds) - 3 and reader.skipped == ends[-1] - ends[2]


def test_a_resumed_record_keeps_its_layout(tmp_path):
    """A record of layout 2 goes on as it is; one of layout 3 in zlib blocks, of layout 4
    in Zstandard ones, of layout 5 with its spans frames delta-coded; each loads whole."""
    rounds = _frames()
    for compress, version in ((False, 2), (True, 3), (True, 4), (True, 5)):
        path = str(tmp_path / f"r{version}.wsc")
        _write(path, rounds[:5], compress=compress, layout=version)
        writer = RecordWriter(path, resume=True)
        assert writer.layout == version
        for batch in rounds[5:]:
            for frame in batch:
                assert writer.append(frame)
        writer.close()
        reader = RecordReader(path)
        assert len(list(reader)) == sum(map(len, rounds)) and reader.version == version
        assert reader.damaged == 0
        assert [(j.name, j.status) for j in load(path).jobs] == [("j", "ok")]


BOMB_READER = """
import resource, sys
from workerscope.record import RecordReader
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
reader = RecordReader(sys.argv[1])
entries = list(reader)
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(len(entries), reader.damaged, grew)
"""


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_block_that_decompresses_to_far_more_than_it_holds_costs_no_memory(tmp_path, layout):
    """A hostile record: one small block holding a whole entry and then 256 MiB of zeros. The
    reader takes the entry, finds no entry after it, and stops there, its stream damaged:
    its memory grows by a chunk or two, not by the bomb."""
    path = str(tmp_path / "bomb.wsc")
    with open(path, "wb") as f:
        f.write(record._MAGICS[layout] + os.urandom(4))
    writer = RecordWriter(path, resume=True)
    seed = writer._seed
    writer.close()
    assert seed is not None
    head = record._INNER.pack(record.FRAME, 1000) + bytes(1000)
    zeros = bytes(64 * 1024**2)
    if layout == 3:
        deflate = zlib.compressobj(9)
        data = deflate.compress(head) + b"".join(deflate.compress(zeros) for _ in range(4))
        data += deflate.flush()
    else:
        zstd = record._zstd()
        stream = zstd.ZstdCompressor()
        data = stream.compress(head) + b"".join(stream.compress(zeros) for _ in range(4))
        data += stream.flush()
    assert len(data) < 4 * 1024**2  # small on disk, under 1/256 of what it holds
    with open(path, "ab") as f:
        f.write(record._ENTRY.pack(record.STREAM, len(data),
                                   record._crc(seed, record.STREAM, len(data), data)) + data)
    out = subprocess.run([sys.executable, "-c", BOMB_READER, path], capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    entries, damaged, grew_kb = map(int, out)
    assert entries == 1 and damaged == 1
    assert grew_kb < 64 * 1024, f"reading the bomb grew the reader {grew_kb} KiB"


def test_a_stream_that_asks_for_a_larger_window_is_refused_not_allocated(tmp_path):
    """A Zstandard stream whose header asks for a 128 MiB window (a reader would allocate it)
    is damaged, not read; the blocks of a later stream still are."""
    rounds = _frames()
    path = str(tmp_path / "wide.wsc")
    _write(path, rounds[:2])
    size = os.path.getsize(path)
    zstd = record._zstd()
    wide = zstd.ZstdCompressor(options={zstd.CompressionParameter.window_log: 27})
    raw = b"".join(record._INNER.pack(record.FRAME, len(f)) + f for f in rounds[2])
    data = wide.compress(raw, zstd.ZstdCompressor.FLUSH_BLOCK)
    reader = RecordReader(path)
    list(reader)
    seed = reader._seed
    with open(path, "ab") as f:
        f.write(record._ENTRY.pack(record.STREAM, len(data),
                                   record._crc(seed, record.STREAM, len(data), data)) + data)
    writer = RecordWriter(path, resume=True)  # a new stream after it
    for frame in rounds[3]:
        assert writer.append(frame)
    writer.close()
    reader = RecordReader(path)
    entries = [e.data for e in reader]
    assert entries == [f for batch in (rounds[0], rounds[1], rounds[3]) for f in batch]
    assert reader.damaged == 1 and reader.skipped == record._ENTRY.size + len(data)
    assert size < os.path.getsize(path)


@pytest.mark.parametrize("enabled", [True, False])
def test_loading_a_record_leaves_the_cycle_collector_as_it_was(tmp_path, enabled):
    """load() pauses Python's cycle collector while it builds (a fifth of a big record's
    CPU), and puts it back as it found it: after a load, and after one that fails."""
    import gc

    path = str(tmp_path / "z.wsc")
    _write(path, _frames())
    empty = tmp_path / "empty.wsc"
    empty.write_bytes(b"")
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        assert load(path).samples
        assert gc.isenabled() is enabled
        with pytest.raises(record.FileFormatError):
            load(str(empty))
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_spans_frames_are_delta_coded_and_come_back_byte_for_byte(tmp_path):
    """In the fifth layout a spans frame goes in delta-coded (its ids and times small
    numbers): what the blocks hold shrinks, and the reader gives back every frame exactly
    as it came."""
    rounds = _frames()
    frames = [f for batch in rounds for f in batch]
    held = {}
    for layout in (4, 5):
        path = str(tmp_path / f"l{layout}.wsc")
        if layout == 4:
            with open(path, "wb") as f:
                f.write(record.RECORD_MAGIC_V4 + os.urandom(4))
        writer = RecordWriter(path, resume=layout == 4)
        assert writer.layout == layout
        for batch in rounds:
            for frame in batch:
                assert writer.append(frame)
            writer.flush()
        writer.close()
        held[layout] = writer.raw_bytes  # what its blocks hold, before compression
        assert [e.data for e in RecordReader(path)] == frames
    spans_bytes = sum(len(f) for f in frames if protocol.decode_frame(f).kind == protocol.SPANS)
    # Each spans frame's ids and times (5 and 9 bytes each as they came) took 1 to 4 bytes.
    assert held[4] - held[5] > spans_bytes // 5, (held, spans_bytes)


def test_a_spans_frame_not_packed_as_ours_is_kept_as_it_came(tmp_path):
    """A spans frame that would not come back byte for byte from msgpack as the driver packs
    (a float in 4 bytes, an int in more bytes than it needs) is kept as it came."""
    records = [list(span_record(job=1, id=2**40 + k, start_ns=10**12 + k * 10**6,
                                end_ns=10**12 + k * 10**6 + 5000, attrs={"x": 1.5}))
               for k in range(5)]
    single = msgpack.packb([protocol.VERSION, "spans", WID, 2, {"pid": 100, "records": records}],
                           use_bin_type=True, use_single_float=True)
    canonical = protocol.encode_frame(protocol.SPANS, WID, 2, {"pid": 100, "records": records})
    wide = canonical.replace(b"\x02\x82", b"\xcf" + (2).to_bytes(8, "big") + b"\x82", 1)
    assert protocol.decode_frame(wide).seq == 2 and len(wide) == len(canonical) + 8
    assert record.delta_spans(single) is None and record.delta_spans(wide) is None
    coded = record.delta_spans(canonical)
    assert coded is not None and len(coded) < len(canonical)
    assert record.undelta_spans(coded) == canonical
    path = str(tmp_path / "r.wsc")
    _write(path, [[single, canonical, wide]])
    assert [e.data for e in RecordReader(path)] == [single, canonical, wide]


def test_a_delta_coded_entry_that_does_not_decode_is_skipped_and_counted(tmp_path, monkeypatch):
    """An S entry that is not one the writer made (a damaged record) costs that frame alone:
    the reader skips it and counts it, and the block's other entries are read."""
    rounds = _frames()
    real = record.delta_spans
    made = []

    def bad_once(frame: bytes) -> bytes | None:
        if not made:
            made.append(frame)
            return b"\xc1"  # a byte msgpack never uses
        return real(frame)
    monkeypatch.setattr(record, "delta_spans", bad_once)
    path = str(tmp_path / "r.wsc")
    _write(path, rounds)
    reader = RecordReader(path)
    entries = [e.data for e in reader]
    frames = [f for batch in rounds for f in batch]
    assert entries == [f for f in frames if f != made[0]]
    assert reader.damaged == 1 and reader.skipped == 1 and reader.torn == 0
    t = load(path)
    assert len([s for s in t.spans if s.name.startswith("step")]) == (ROUNDS - 1) * SPANS
    assert any("damaged" in n for n in t.workers[WID].notes)
