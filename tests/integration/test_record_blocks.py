"""The compressed record: each round of the writer is one block of a deflate stream, so a
long run costs tens of bytes a frame, everything written is readable at once, a record cut
inside its last block loads up to the block before, and a damaged block costs the rest of its
stream, no more. Records of the earlier layouts still load, and a resumed one keeps its own."""

from __future__ import annotations

import logging
import os

from workerscope import load, protocol, record
from workerscope.record import RecordReader, RecordWriter

ANCHOR = [1_700_000_000_000_000_000, 1_000_000_000]
WID = protocol.worker_id("host-a", 100, 200)
ROUNDS = 20
SAMPLES = 50  # a round's


def _frames() -> list[list[bytes]]:
    """A worker's hello and job start, ROUNDS rounds of SAMPLES samples of a tree and four
    processes (as a sidecar's), and its job's end and bye: the frames of each round."""
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
        rounds.append(batch)
    end = ANCHOR[1] + (ROUNDS * SAMPLES + 1) * 10**7
    rounds.append([frame(protocol.JOB_END, {"job": 1, "t": end, "status": "ok"}),
                   frame(protocol.BYE, {"status": "exited"})])
    return rounds


def _write(path: str, rounds: list[list[bytes]], compress: bool = True) -> list[int]:
    """The rounds through the real writer, each flushed as the writer's own rounds are; the
    file's length after each."""
    writer = RecordWriter(path, compress=compress)
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
    assert reader.version == 3 and reader.damaged == 0 and reader.torn == 0


def test_a_record_killed_mid_block_loads_up_to_its_last_whole_block(tmp_path, caplog):
    """Cut inside its last block (a driver killed while writing it): every frame of the
    blocks before loads, the torn block is said, nothing is called damaged."""
    rounds = _frames()
    path = str(tmp_path / "z.wsc")
    ends = _write(path, rounds)
    cut = (ends[-3] + ends[-2]) // 2  # inside the last round of samples
    with open(path, "r+b") as f:
        f.truncate(cut)
    caplog.set_level(logging.WARNING)
    t = load(path)
    assert len(t.samples) == (ROUNDS - 1) * SAMPLES * 5
    notes = t.workers[WID].notes
    assert any("torn entry" in n for n in notes) and not any("damaged" in n for n in notes)
    reader = RecordReader(path)
    assert len(list(reader)) == sum(map(len, rounds[:-2]))
    assert reader.torn == cut - ends[-3] and reader.damaged == 0


def test_a_damaged_block_costs_the_rest_of_its_stream_only(tmp_path, monkeypatch):
    """One byte changed in a block: that block and the others of its stream are skipped
    and said; the next stream's blocks load, and the job still ends ok."""
    monkeypatch.setattr(record, "STREAM_BYTES", 1)  # a stream a block: the worst case 2
    rounds = _frames()
    path = str(tmp_path / "z.wsc")
    ends = _write(path, rounds)
    monkeypatch.setattr(record, "STREAM_BYTES", 8 * 1024 * 1024)
    _flip(path, (ends[4] + ends[5]) // 2)  # inside round 5's block
    t = load(path)
    assert len(t.samples) == (ROUNDS - 1) * SAMPLES * 5
    assert [(j.name, j.status) for j in t.jobs] == [("j", "ok")]
    assert any("damaged" in n for n in t.workers[WID].notes)
    reader = RecordReader(path)
    list(reader)
    assert reader.damaged == 1 and reader.skipped == ends[5] - ends[4]


def test_blocks_after_a_damaged_one_in_its_stream_are_skipped_not_misread(tmp_path):
    """In one stream, a block that cannot be read takes the stream's later blocks with it:
    they are counted as damaged, never inflated from a wrong history."""
    rounds = _frames()
    path = str(tmp_path / "z.wsc")
    ends = _write(path, rounds)  # one stream: well under STREAM_BYTES
    _flip(path, (ends[2] + ends[3]) // 2)  # inside round 3's block
    reader = RecordReader(path)
    entries = list(reader)
    assert len(entries) == sum(map(len, rounds[:3]))
    assert reader.damaged == len(rounds) - 3 and reader.skipped == ends[-1] - ends[2]


def test_a_resumed_record_keeps_its_layout(tmp_path):
    """A record of layout 2 goes on as it is; one of layout 3 in blocks; both load whole."""
    rounds = _frames()
    for compress, version in ((False, 2), (True, 3)):
        path = str(tmp_path / f"r{version}.wsc")
        _write(path, rounds[:5], compress=compress)
        writer = RecordWriter(path, resume=True)
        for batch in rounds[5:]:
            for frame in batch:
                assert writer.append(frame)
        writer.close()
        reader = RecordReader(path)
        assert len(list(reader)) == sum(map(len, rounds)) and reader.version == version
        assert reader.damaged == 0
        assert [(j.name, j.status) for j in load(path).jobs] == [("j", "ok")]
