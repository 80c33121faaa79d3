"""Memory growth per function, from a real sidecar's samples: a call is given only the growth
its samples pin to it, never a neighbour's."""

from __future__ import annotations

import time

import pytest

from workerscope import monitor, timed
from workerscope.export.attribution import attribute, function_table
from workerscope.export.terminal import functions_table

MB = 1024 * 1024
kept: list[bytearray] = []


@timed
def allocate_200mb() -> None:
    block = bytearray(200 * MB)
    block[::4096] = b"\x01" * (len(block) // 4096)  # touch every page: RSS, not just mappings
    kept.append(block)


@timed
def nap() -> None:
    time.sleep(0.3)


@pytest.mark.accuracy
def test_a_sleep_beside_an_allocation_is_not_blamed_for_it(clean_env):
    """At interval 0.5 the allocating call grew 200 MiB (10 %) or has no figure, the sleep
    after it ~0 or none; a call without a figure shows "-" and the table says why."""
    try:
        with monitor(interval=0.5) as m:
            allocate_200mb()
            nap()
        t = m.timeline
        rows = {r["name"]: r for r in function_table(t, attribute(t))}
    finally:
        kept.clear()
    grew = rows["allocate_200mb"]["peak_growth_bytes"]
    assert grew is None or abs(grew - 200 * MB) <= 20 * MB, grew / MB
    slept = rows["nap"]["peak_growth_bytes"]
    assert slept is None or slept < 5 * MB, slept / MB
    text = functions_table(t, width=200)
    if grew is None or slept is None:
        assert "-: " in text, text
