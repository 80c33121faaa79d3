"""A worker's notes from its frames are bounded in the builder too, the driver's live state
included (issue 21, finding 3): the record's notes had a budget, but the live builder took
every new note of every bye, so a worker saying bye again and again with 1 MiB of new notes
grew the driver by what it sent (8 x 300 byes: +2,566 MiB, past memory_ceiling's 2,265)."""

from __future__ import annotations

import pytest
from factories import frame as encoded

from workerscope import protocol
from workerscope.builder import TimelineBuilder
from workerscope.record import NOTE_CHARS, WORKER_NOTES_BYTES


def frame(kind: str, **kw: object) -> protocol.Frame:
    return protocol.decode_frame(encoded(kind, **kw))  # type: ignore[arg-type]


def _note_bytes(notes: list[str]) -> int:
    return sum(len(n.encode()) for n in notes)


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("kind", ["bye", "spans", "sample"])
def test_notes_of_frames_stay_within_the_worker_s_budget(keep, kind):
    b = TimelineBuilder(keep=keep)
    b.add(frame("hello", body={"host": "h", "pid": 1, "anchor": [0, 0]}))
    bodies = {"bye": lambda n: {"status": "exited", "notes": n},
              "spans": lambda n: {"pid": 1, "records": [], "notes": n},
              "sample": lambda n: {"t": 0, "notes": n}}
    for i in range(200):  # 200 frames of 100 new notes of 5,000 characters: ~100 MB
        b.add(frame(kind, seq=i + 1, body=bodies[kind]([f"{i}-{j}-" + "x" * 5_000
                                                       for j in range(100)])))
    notes = b.t.workers["w"].notes
    assert _note_bytes(notes) <= WORKER_NOTES_BYTES + 200, _note_bytes(notes)
    assert all(len(n) <= NOTE_CHARS + 10 for n in notes)
    if kind != "bye" and not keep:
        assert notes == []  # the live state keeps no spans or samples, nor their notes
    else:
        assert "not kept" in notes[-1]


def test_a_few_short_notes_are_all_kept_once():
    b = TimelineBuilder(keep=False)
    b.add(frame("hello", body={"host": "h", "pid": 1, "anchor": [0, 0]}))
    for i in range(3):
        b.add(frame("bye", seq=i + 1, body={"status": "exited", "notes": ["killed by SIGKILL",
                                                                           f"note {i}"]}))
    assert b.t.workers["w"].notes == ["killed by SIGKILL", "note 0", "note 1", "note 2"]
