"""The reader's position in a ring's header: what a dead reader left unread is counted from it."""

from __future__ import annotations

import mmap

from workerscope import spanring
from workerscope.sidecar.rings import count_dead


def _ring(counter: int, read: int, open_: int = 0) -> mmap.mmap:
    mm = mmap.mmap(-1, spanring.layout(64)["size"])
    spanring.init_header(mm, 64, 1)
    q = memoryview(mm).cast("q")
    q[spanring.H_COUNTER], q[spanring.H_READ], q[spanring.H_READ_OPEN] = counter, read, open_
    q.release()
    return mm


def test_unread_counts_past_the_readers_position():
    """Records past H_READ are unread, with the spans open at that read."""
    assert spanring.unread(_ring(12, 5, 1)) == (7, 1)
    assert spanring.unread(_ring(3, 0)) == (3, 0)  # never drained: every record


def test_a_damaged_position_counts_every_record():
    """A position past the counter, or below 0 (a damaged header), leaves every record unread;
    a mapping that is not a ring counts nothing."""
    assert spanring.unread(_ring(4, 9, 2)) == (4, 0)
    assert spanring.unread(_ring(4, -1)) == (4, 0)
    assert spanring.unread(mmap.mmap(-1, 4096)) is None


def test_count_dead_counts_notes_and_removes(tmp_path):
    """count_dead counts each dead directory's unread records, notes them with the dead
    sidecar's pid, removes the directory, and skips entries not of that shape."""
    where = tmp_path / "workerscope-1-2-abc"
    where.mkdir()
    (where / "77.ring").write_bytes(bytes(_ring(10, 4)))
    lost, notes = count_dead([[str(where), 555], ["elsewhere", 1], "junk"])
    assert lost == 6
    assert notes == ["a sidecar (pid 555) died before it read 6 span record(s) of pid 77 "
                     "(spans_lost counts them): they are lost"]
    assert not where.exists()
