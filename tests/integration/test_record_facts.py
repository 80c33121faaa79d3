"""The driver's facts in its record: written when they change, notes bounded, every entry
within the record's entry limit, so a flood of notes neither fills the disk nor hides the
workers that come after it."""

from __future__ import annotations

import os
import time

import pytest
import zmq
from helpers import eventually

from workerscope import Subscriber, load, monitor, protocol
from workerscope.record import FACTS, RecordReader
from workerscope.transport import dealer

ENTRY_LIMIT = 64 * 2**20  # record._MAX_ENTRY: past it a reader takes the entry for a torn tail
NOTE = 63_000  # characters: 16 notes make a bye frame just under the 1 MiB frame cap


def _hello(host: str, pid: int) -> dict[str, object]:
    return {"host": host, "pid": pid, "sidecar_pid": pid + 1, "boot_id": f"boot-of-{host}",
            "anchor": [time.time_ns(), time.monotonic_ns()]}


def _facts_after_frames(path: str) -> bool:
    """Whether the last whole entry of the record is the driver's facts."""
    tags = [e.tag for e in RecordReader(path)]
    return bool(tags) and tags[-1] == FACTS


def _growth(sub: Subscriber, path: str, ticks: int = 3) -> int:
    """Bytes the record grew by over `ticks` of the driver's facts cadence (1 s each), the
    driver receiving nothing meanwhile."""
    sub.flush()
    start = os.path.getsize(path)
    deadline = time.monotonic() + ticks * 1.0 + 0.3  # a tick more than `ticks` at most
    eventually(lambda: time.monotonic() >= deadline, timeout=ticks + 5.0)
    sub.flush()
    return os.path.getsize(path) - start


@pytest.mark.timeout(300)
def test_bye_notes_neither_fill_the_record_nor_hide_a_later_worker(clean_env, tmp_path):
    """A worker saying bye 72 times with 1 MiB of new notes each: the record grows by at most
    256 KiB in 3 s once the frames are in (it grew ~70 MB a second: every worker's notes
    were rewritten each second), no entry passes the entry limit (a 70 MB facts entry made
    the reader stop there), the flooder keeps at most 64 KiB of notes, and a real worker's
    job that came after is in timeline(), in load() of the record, and after close."""
    path = str(tmp_path / "run.wsc")
    wid = "otherhost:4242:4243"
    byes = 72
    with Subscriber(record=path) as sub:
        ctx = zmq.Context()
        sock = dealer(ctx, sub.endpoint)
        try:
            sock.send(protocol.encode_frame(protocol.HELLO, wid, 0, _hello("otherhost", 4242)))
            for seq in range(1, byes + 1):
                notes = [f"{seq:03d}-{i:02d} " + "n" * NOTE for i in range(16)]
                sock.send(protocol.encode_frame(protocol.BYE, wid, seq,
                                                {"status": "exited", "notes": notes}))
            assert eventually(lambda: sub.received.get(wid, 0) == byes + 1), sub.received
        finally:
            sock.close(0)
            ctx.term()
        with monitor(interval=0.05, endpoint=sub.endpoint, name="after the notes"):
            sum(range(1000))
        assert sub.wait(jobs=1, timeout=60)
        grew = _growth(sub, path)
        print(f"record grew {grew} B in 3 facts ticks after the flood")
        assert grew <= 256 * 1024, f"the record grew {grew} B in 3 s with nothing received"
        live = sub.timeline()
        assert [j.name for j in live.jobs] == ["after the notes"]
        assert sum(map(len, live.workers[wid].notes)) <= 64 * 1024
    reader = RecordReader(path)
    sizes = [(e.tag, len(e.data)) for e in reader]
    assert max(size for tag, size in sizes if tag == FACTS) <= ENTRY_LIMIT
    assert reader.torn == 0
    for t in (sub.timeline(), load(path)):
        assert [j.name for j in t.jobs] == ["after the notes"]
        assert [j.status for j in t.jobs] == ["ok"]
        notes = t.workers[wid].notes
        assert sum(map(len, notes)) <= 64 * 1024, f"{sum(map(len, notes))} characters of notes"
        assert any("not kept" in n for n in notes), "the worker's notes say they were cut"
        assert not any("torn" in n for w in t.workers.values() for n in w.notes)


@pytest.mark.timeout(300)
def test_quiet_workers_add_nothing_to_the_record(clean_env, tmp_path):
    """300 workers that said hello and then nothing: once their hellos are in, 3 s of the
    driver's facts cadence add at most 2 KiB to the record (each tick rewrote every
    worker's facts, ~150 B a worker a second); the facts still load: every worker is idle."""
    path = str(tmp_path / "quiet.wsc")
    count = 300
    with Subscriber("ipc://", record=path) as sub:
        ctx = zmq.Context()
        socks = []
        try:
            for i in range(count):
                sock = dealer(ctx, sub.endpoint)
                socks.append(sock)
                wid = f"quiet{i}:{1000 + i}:{2000 + i}"
                sock.send(protocol.encode_frame(protocol.HELLO, wid, 0,
                                                _hello(f"quiet{i}", 1000 + i)))
            assert eventually(lambda: len(sub.received) == count), len(sub.received)
            # The first tick after the hellos writes their facts; the ones after find no change.
            assert eventually(lambda: sub.flush() >= 0 and _facts_after_frames(path))
            grew = _growth(sub, path)
        finally:
            for sock in socks:
                sock.close(0)
            ctx.term()
    print(f"record grew {grew} B in 3 facts ticks, {count} quiet workers")
    assert grew <= 2048, f"{grew} B in 3 s from {count} workers that sent nothing"
    t = load(path)
    assert len(t.workers) == count
