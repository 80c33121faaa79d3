"""Spans with large attributes and tracebacks still reach the driver: the sidecar cuts span
frames by size, under the driver's frame cap, not only by a count of records."""

from __future__ import annotations

from workerscope import Subscriber, monitor, span


def test_big_spans_fit_under_the_frame_cap(clean_env):
    """2,000 spans with 8 KiB of attributes each (16 MiB in all) all arrive, none too big."""
    with Subscriber() as sub:
        with monitor(interval=0.5, endpoint=sub.endpoint):
            for i in range(2000):
                with span("big", blob="x" * 8192, i=i):
                    pass
        assert sub.wait(jobs=1, timeout=60)
        t = sub.timeline()
    assert sum(s.name == "big" for s in t.spans) == 2000
    assert all(w.lost == 0 for w in t.workers.values())
