"""max_workers bounds the workers a driver holds in memory, not the workers of its life:
workers that are gone make room for new ones (issue: a key holder, or merely a long run of
short-lived workers such as Lithops functions, filled max_workers and every real worker after
was refused for the rest of the driver's life)."""

from __future__ import annotations

import subprocess
import sys

from helpers import eventually
from jobs import spanner_script
from test_security import Sender

from workerscope import Subscriber


def test_workers_that_said_bye_make_room_and_keep_their_data(clean_env):
    """Five real workers, one after another, into a driver with room for two: none refused,
    every one's job and spans in the timeline, wait(byes=5) returns, and the driver's memory
    holds two of them at most."""
    script = spanner_script(50)
    with Subscriber(max_workers=2) as sub:
        for n in range(5):
            subprocess.run([sys.executable, "-c", script, sub.endpoint], check=True, timeout=120)
            assert sub.wait(byes=n + 1, timeout=60), (n, sub.refused, sub.states())
            assert len(sub.received) <= 2 and len(sub.states()) <= 2
        assert sub.refused["workers"] == 0, sub.refused
        assert sub.let_go == 3
        t = sub.timeline()
        # No store of the driver holds more than the two workers it has room for.
        st = sub._state
        owners = (sub._rx, st, st.builder, st.builder.t, st.live, st.replies, st.replies.clocks,
                  st.notes)
        held = {k if isinstance(k, str) else k[0] for owner in owners
                for store in vars(owner).values() if isinstance(store, (dict, set))
                for k in store if (k if isinstance(k, str) else
                                   (k[0] if isinstance(k, tuple) and k else None)) in t.workers}
        assert 0 < len(held) <= 2, held
    assert len(t.workers) == 5, list(t.workers)
    assert len(t.jobs) == 5 and all(j.status == "ok" for j in t.jobs), t.jobs
    spans = {}
    for s in t.spans:
        if s.name.endswith("tick"):
            spans[s.worker] = spans.get(s.worker, 0) + 1
    assert sorted(spans.values()) == [50] * 5, spans
    # What the driver learnt of each worker (its clock, its state) is in the record too.
    assert all(w.status == "exited" for w in t.workers.values()), t.workers


def test_a_key_holder_filling_max_workers_holds_only_the_slots_of_its_live_connections(
        clean_env):
    """A key holder says hello under max_workers ids, keeping one connection open and closing
    the others: once those have been silent for stale_after, real workers get in; the id of
    the connection still open keeps its slot (a sidecar stopped in a debugger is not let go)."""
    with Subscriber(max_workers=3, stale_after=1.0) as sub:
        held = Sender(sub.endpoint)
        held.hello("held:1:1")
        for k in range(2):
            s = Sender(sub.endpoint)
            s.hello(f"gone:{k}:1")
            assert eventually(lambda k=k: f"gone:{k}:1" in sub.received)
            s.close()
        try:
            assert eventually(lambda: len(sub.received) == 3)
            # Before stale_after, the closed connections' ids still hold their slots.
            assert eventually(lambda: {s for w, s in sub.states().items()
                                        if w.startswith("gone:")} == {"stale"})
            script = spanner_script(20)
            for n in range(3):
                subprocess.run([sys.executable, "-c", script, sub.endpoint], check=True,
                               timeout=120)
                assert sub.wait(byes=n + 1, timeout=60), (n, sub.refused, sub.states())
            assert sub.refused["workers"] == 0, sub.refused
            # The first real worker took a closed connection's slot; each next one the slot
            # of the real worker before it (those that said bye go first); the open one stays.
            assert "held:1:1" in sub.received and sub.let_go == 3, (sub.received, sub.let_go)
            assert sum(not w.startswith(("held:", "gone:")) for w in sub.received) == 1
            t = sub.timeline()
        finally:
            held.close()
    assert sum(j.status == "ok" for j in t.jobs) == 3
