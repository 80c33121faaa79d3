"""A span ring that fills says how big a ring would have held what it was asked to: real ring
files written by the worker's recorder, read by the sidecar's Rings as a sidecar reads them."""

from __future__ import annotations

import os
import re
import tempfile
import time

from workerscope import spanring
from workerscope.config import MOST_RING_RECORDS
from workerscope.sidecar.rings import Rings
from workerscope.worker import recorder

BURST = 5000  # spans written before the sidecar reads


def _burst(capacity: int, spans: int, final: bool = True) -> tuple[int, int, list[str]]:
    """`spans` spans written into a ring of `capacity` records, then one drain as the sidecar
    makes it: (spans read, records lost, notes)."""
    with tempfile.TemporaryDirectory() as d:
        w = recorder.Writer(d, capacity)
        try:
            rings = Rings(d, os.getpid())
            rings.jobs.start(1, os.getpid(), None, 0)
            nid = w.intern("burst")
            for _ in range(spans):
                seq = w.begin(nid, 0, 1234, 1, 0) & spanring.SEQ_MASK
                w.finish(seq, recorder.now_ns(), 1234)
            read, notes = 0, []
            for _, body, _ in rings.frames(None, final=final, now_ns=time.monotonic_ns()):
                read += len(body["records"])
                notes += body.get("notes", [])
            lost = rings.lost
            if not final:
                for _, body, _ in rings.frames(None, final=True, now_ns=time.monotonic_ns()):
                    notes += body.get("notes", [])
            return read, lost, notes
        finally:
            recorder.release(w)


def _sizing(notes: list[str]) -> list[str]:
    return [n for n in notes if "at its fullest" in n]


def test_a_full_rings_note_sizes_a_ring_that_holds_the_burst(clean_env):
    """5,000 spans into a 1,024-record ring before a read: 3,976 are overwritten, and the note
    says 5,000 waited, that 3,976 were lost, and a size of at least twice 5,000. A ring of the
    size it gives takes the same burst whole."""
    read, lost, notes = _burst(1024, BURST)
    assert (read, lost) == (1024, BURST - 1024)
    (note,) = _sizing(notes)
    assert f"at its fullest {BURST:,} records waited" in note
    assert f"ring of 1,024, and {BURST - 1024:,} were overwritten" in note
    want = int(re.search(r"WORKERSCOPE_RING_RECORDS=(\d+)", note).group(1))
    assert want == spanring.capacity_for(2 * BURST)
    assert "took in at most" not in note  # 1,024 records read: too few to time the reader
    read, lost, notes = _burst(want, BURST)
    assert (read, lost, _sizing(notes)) == (BURST, 0, [])


def test_a_ring_read_while_live_says_its_size_once_a_doubling(clean_env):
    """Said while the ring is live (a pool's worker never retires its ring), and then not
    again at its end when its peak has not moved."""
    read, lost, notes = _burst(1024, BURST, final=False)
    assert (read, lost) == (1024, BURST - 1024)
    assert len(_sizing(notes)) == 1


def test_no_ring_size_holds_a_burst_past_the_settings_bound():
    """A burst no setting can hold is said so, not sized past the bound."""
    note = spanring.ring_size_note(7, MOST_RING_RECORDS, 65_536, 10, 123_456.0)
    assert "no ring_records setting holds it" in note and "RING_RECORDS=" not in note
    assert "took in at most 123,456 records a second" in note
    fits = spanring.ring_size_note(7, 100_000, 65_536, 10, None)
    assert "WORKERSCOPE_RING_RECORDS=262144" in fits and "12 MiB" in fits
