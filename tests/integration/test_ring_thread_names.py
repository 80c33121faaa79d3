"""Thread names take a bounded share of a span ring's names table: thousands of named threads
that record spans leave room for the span names that come after them."""

from __future__ import annotations

import threading

from workerscope import monitor, span, timed


@timed
def short_work(i):
    return i


def test_thousands_of_named_threads_leave_room_for_span_names(clean_env):
    """5,000 short-lived threads with long names each record a span: a span name first used
    after them is still recorded, some threads are named, and a note says the others' names
    were not (none says the names table is full)."""
    n = 5_000

    def one(i):
        short_work(i)

    with monitor(interval=0.5) as m:
        for i in range(n):
            th = threading.Thread(target=one, args=(i,), name=f"a-rather-long-thread-name-{i:05d}")
            th.start()
            th.join()
        with span("the span name after the threads"):
            pass
    t = m.timeline
    (w,) = t.workers.values()
    assert [s.name for s in t.spans].count("short_work") == n
    (after,) = [s for s in t.spans if s.name == "the span name after the threads"]
    assert not after.cut_short
    named = [v for v in t.threads.values() if v.startswith("a-rather-long-thread-name-")]
    assert 100 <= len(named) < n
    assert not [note for note in w.notes if "names table is full" in note]
    assert [note for note in w.notes if "thread" in note and "not recorded" in note]
