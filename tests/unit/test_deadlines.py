"""Deadlines and cadences of the sidecar loop, on made-up times."""

from __future__ import annotations

from workerscope.sidecar.deadlines import Deadlines, cadences


def test_unset_timer_is_due():
    """A timer never set is due at once; a set one from its time on."""
    d = Deadlines()
    assert d.due("tick", 0)
    d.set("tick", 100)
    assert not d.due("tick", 99) and d.due("tick", 100)


def test_advance_keeps_the_grid():
    """advance moves a timer one interval along its grid when it is not late."""
    d = Deadlines()
    d.set("tick", 1000)
    d.advance("tick", 100, now=1050)
    assert d.at("tick") == 1100


def test_advance_skips_overrun_intervals():
    """A sample that overran whole intervals skips them: the next tick stays on the grid, after now."""
    d = Deadlines()
    d.set("tick", 1000)
    d.advance("tick", 100, now=1350)
    assert d.at("tick") == 1400
    d.advance("tick", 100, now=1400)
    assert d.at("tick") == 1500


def test_next_wake_is_the_earliest():
    """next_wake is the earliest named timer, capped at the latest given."""
    d = Deadlines()
    d.set("tick", 500)
    d.set("heartbeat", 300)
    assert d.next_wake(["tick", "heartbeat"], latest=10_000) == 300
    assert d.next_wake(["tick"], latest=400) == 400
    assert d.next_wake([], latest=400) == 400


def test_cadences_from_the_interval():
    """Every derived cadence comes from the interval: rates, USS, the net look, edge sharing."""
    c = cadences(0.1)
    assert c.interval_ns == 100_000_000
    assert c.min_rate_ns == 50_000_000
    assert c.uss_every_ns == 10_000_000_000
    assert c.net_look_ns == 950_000_000
    assert c.share_max_ns == 20_000_000
    slow = cadences(20.0)
    assert slow.min_rate_ns == 50_000_000 and slow.uss_every_ns == 20_000_000_000
    assert cadences(0.04).min_rate_ns == 20_000_000
