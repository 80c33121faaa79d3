"""CPU per function, from a real sidecar's thread readings, against the CPU the function's
thread really used; and the views say the figure is an estimate."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import burn

from workerscope import monitor, timed
from workerscope.export.attribution import attribute, function_table
from workerscope.export.html_tables import functions_html
from workerscope.export.terminal import functions_table

used: list[float] = []


@timed
def crunch() -> None:
    start = time.thread_time()
    burn(1.0)
    used.append(time.thread_time() - start)


@pytest.mark.accuracy
def test_a_function_gets_its_threads_cpu_while_another_thread_sleeps(clean_env):
    """A call burning 1 s of its thread's CPU beside a sleeping thread is credited within
    10 % of what time.thread_time() says it used; both views call the column an estimate."""
    used.clear()
    stop = threading.Event()
    with monitor(interval=0.1) as m:
        sleeper = threading.Thread(target=stop.wait, args=(30,))
        sleeper.start()
        try:
            crunch()
        finally:
            stop.set()
            sleeper.join()
    t = m.timeline
    rows = {r["name"]: r for r in function_table(t, attribute(t))}
    (truth,) = used
    assert rows["crunch"]["cpu_s"] == pytest.approx(truth, rel=0.1), (rows["crunch"], truth)
    assert "cpu: an estimate" in functions_table(t, width=200)
    assert "split over the calls by time" in functions_html(list(rows.values()))
