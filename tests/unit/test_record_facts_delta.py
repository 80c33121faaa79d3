"""The driver's facts as the record holds them: deltas that merge back, entries within their
bound, notes within theirs; and records of the first layout still read."""

from __future__ import annotations

import struct

from factories import T0, S, frame

from workerscope.record import (
    FACTS,
    FACTS_ENTRY_BYTES,
    NOTE_CHARS,
    RECORD_MAGIC_V1,
    WORKER_NOTES_BYTES,
    Facts,
    NoteBudget,
    read_record,
)


def test_a_delta_merged_gives_the_facts_back():
    """since() holds what changed (a worker's notes: the new ones), None when nothing did;
    merged in order, the deltas are the facts."""
    first = Facts(states={"a": "running", "b": "idle"}, last_wall={"a": 1, "b": 2},
                  notes={"a": ["x"]})
    second = Facts(states={"a": "running", "b": "exited"}, last_wall={"a": 1, "b": 3},
                   notes={"a": ["x", "y"]}, closed_wall=9, not_kept={"a": 4})
    one = first.since(Facts())
    two = second.since(first)
    assert two is not None and two.states == {"b": "exited"} and two.notes == {"a": ["y"]}
    assert second.since(second) is None
    merged = Facts()
    for delta in (one, two):
        assert delta is not None
        merged.merge(Facts.decode(delta.encode()))
    assert merged == second


def test_facts_of_many_workers_are_cut_into_entries_within_the_bound():
    """10,000 workers with 1 KB of notes each: every entry within FACTS_ENTRY_BYTES, and
    merged they are the facts."""
    facts = Facts(notes={f"w{i}": ["n" * 1000] for i in range(10_000)},
                  last_wall={f"w{i}": i for i in range(10_000)}, closed_wall=5)
    parts = facts.encode_parts()
    assert len(parts) > 1 and max(map(len, parts)) <= FACTS_ENTRY_BYTES
    merged = Facts()
    for part in parts:
        merged.merge(Facts.decode(part))
    assert merged == facts


def test_notes_are_kept_within_their_budget_and_say_so():
    """A worker's notes past WORKER_NOTES_BYTES, each cut at NOTE_CHARS, end in one note
    that says the rest were not kept; kept notes stay the list's start as notes come."""
    budget = NoteBudget()
    notes = [f"{i} " + "n" * 5000 for i in range(100)]
    first = list(budget.keep("w", notes[:3]))
    kept = budget.keep("w", notes)
    assert kept[:len(first)] == first
    assert all(len(n) <= NOTE_CHARS + 10 for n in kept[:-1])
    assert sum(len(n.encode()) for n in kept[:-1]) <= WORKER_NOTES_BYTES
    assert "not kept" in kept[-1]
    assert budget.keep("w", [*notes, "more"]) == kept


def test_all_workers_share_one_budget():
    """Past the budget of all workers, a worker's notes are one note saying so."""
    budget = NoteBudget(per_worker=100, total=150)
    assert budget.keep("a", ["a" * 90]) == ["a" * 90]
    kept = budget.keep("b", ["b" * 90])
    assert len(kept) == 1 and "not kept" in kept[0]


def test_a_record_of_the_first_layout_still_loads(tmp_path):
    """A record as the first layout wrote it (no seed, no checksums, whole facts entries, the
    last applied) loads: its frames, and its last facts."""
    wid = "h:1:2"
    frames = [frame("hello", worker=wid, host="h", pid=1, anchor=[T0, 5 * S]),
              frame("bye", worker=wid, seq=1, status="exited")]
    facts = [Facts(states={wid: "running"}, notes={wid: ["old"]}),
             Facts(states={wid: "exited"}, notes={wid: ["new"]}, closed_wall=T0 + S)]
    body = b"".join(struct.pack("<cI", tag, len(data)) + data
                    for tag, data in [*((b"F", f) for f in frames),
                                      *((FACTS, f.encode()) for f in facts)])
    path = tmp_path / "old.wsc"
    path.write_bytes(RECORD_MAGIC_V1 + body)
    t = read_record(path)
    assert t.workers[wid].status == "exited"
    assert "new" in t.workers[wid].notes and "old" not in t.workers[wid].notes
