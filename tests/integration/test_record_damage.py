"""A damaged entry in the middle of a record is skipped and said; the entries after it are
read; only a record that ends inside its last entry is called torn."""

from __future__ import annotations

import logging
import struct

import pytest

from workerscope import load, protocol
from workerscope.record import RecordReader, RecordWriter

ANCHOR = [1_700_000_000_000_000_000, 1_000_000_000]
WID = protocol.worker_id("host-a", 100, 200)
SAMPLES = 10


def _write(path: str) -> list[bytes]:
    """A record as a driver writes it, through the real encoder and writer (its entries as
    they are, layout 2): a hello, a job with SAMPLES samples, its end and a bye. The
    frames, in order."""
    frames = [protocol.encode_frame(protocol.HELLO, WID, 0, {"host": "host-a", "pid": 100,
                                                            "anchor": ANCHOR})]
    frames.append(protocol.encode_frame(protocol.JOB_START, WID, 1,
                                        {"job": 1, "name": "j", "t": ANCHOR[1], "pid": 100}))
    for i in range(SAMPLES):
        frames.append(protocol.encode_frame(protocol.SAMPLE, WID, 2 + i, {
            "t": ANCHOR[1] + (i + 1) * 10**7, "tree": {"cpu_percent": 10.0 + i}}))
    frames.append(protocol.encode_frame(protocol.JOB_END, WID, 2 + SAMPLES, {
        "job": 1, "t": ANCHOR[1] + (SAMPLES + 1) * 10**7, "status": "ok"}))
    frames.append(protocol.encode_frame(protocol.BYE, WID, 3 + SAMPLES, {"status": "exited"}))
    writer = RecordWriter(path, compress=False)  # compressed blocks: test_record_blocks.py
    for frame in frames:
        assert writer.append(frame)
    writer.close()
    return frames


def _header_at(raw: bytes, frame: bytes) -> int:
    """Where the entry holding `frame` begins: its tag, then its length (little-endian)."""
    data = raw.index(frame)
    head = raw.rindex(b"F" + struct.pack("<I", len(frame)), max(0, data - 32), data)
    return head


def _damage(raw: bytearray, frame: bytes, how: str) -> None:
    at = _header_at(bytes(raw), frame)
    data = bytes(raw).index(frame)
    if how == "tag":  # the tag of one entry: its length still frames it
        raw[at] = ord("X")
    elif how == "text":  # one character of a key: still msgpack, a wrong sample
        key = bytes(raw).index(b"cpu_percent", data)
        raw[key] = ord("d")
    elif how == "length":  # its length: the framing of this one entry is lost
        raw[at + 1:at + 5] = struct.pack("<I", 40 * 2**20)
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["tag", "text", "length"])
def test_a_damaged_entry_in_the_middle_is_skipped_and_said(tmp_path, caplog, how):
    """One sample entry damaged (its tag, one byte of its text, its length): load() skips
    it, reads every entry after it (the job still ends ok, the bye is there, 9 of 10
    samples), says so in the worker's notes and the log, and calls nothing torn (a bad tag or
    length ended the read there, as "the driver stopped while writing it"; a changed byte was
    read as a sample of another metric)."""
    path = tmp_path / "run.wsc"
    frames = _write(str(path))
    raw = bytearray(path.read_bytes())
    _damage(raw, frames[5], how)
    path.write_bytes(bytes(raw))
    caplog.set_level(logging.WARNING)
    t = load(path)
    assert [(j.name, j.status) for j in t.jobs] == [("j", "ok")]
    assert t.workers[WID].status == "exited"
    tree = [s for s in t.samples if s.scope == "tree"]
    assert len(tree) == SAMPLES - 1
    assert all(set(s.values) == {"cpu_percent"} for s in tree)
    notes = t.workers[WID].notes
    assert any("damaged" in n for n in notes), notes
    assert not any("torn" in n for n in notes), notes
    assert "damaged" in caplog.text and "torn" not in caplog.text
    reader = RecordReader(path)
    assert len(list(reader)) == len(frames) - 1
    assert reader.torn == 0 and reader.damaged == 1


def test_a_record_cut_in_its_last_entry_is_still_torn(tmp_path, caplog):
    """A record that ends inside its last entry (a driver killed mid-write) is torn, as
    before: every whole entry read, the cut one said, nothing called damaged."""
    path = tmp_path / "run.wsc"
    frames = _write(str(path))
    raw = path.read_bytes()
    path.write_bytes(raw[:-3])
    t = load(path)
    assert [(j.name, j.status) for j in t.jobs] == [("j", "ok")]
    notes = t.workers[WID].notes
    assert any("torn entry" in n for n in notes) and not any("damaged" in n for n in notes)
    reader = RecordReader(path)
    assert len(list(reader)) == len(frames) - 1
    assert reader.torn > 0 and reader.damaged == 0
