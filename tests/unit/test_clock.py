"""The driver's clock offset maths (Cristian's method) on made-up numbers, no sockets."""

from __future__ import annotations

from workerscope.driver.clock import ClockEstimate, ClockSync, offset_sample


class FakeClock:
    """The driver's wall clock, set by hand."""

    def __init__(self, t: int = 0) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def test_offset_is_t1_minus_the_midpoint_of_t0_and_t2():
    """Sent at 1000, read 1650 over there, back at 1200: offset 1650 - 1100 = 550, trip 200."""
    assert offset_sample(1_000, 1_650, 1_200) == (550, 200)


def test_a_clock_behind_gives_a_negative_offset():
    """A worker whose clock runs behind the driver's has a negative offset."""
    assert offset_sample(1_000_000, 400_000, 1_000_200) == (-600_100, 200)


def test_odd_round_trip_rounds_the_midpoint_down():
    """Integer ns throughout: the midpoint of 0 and 3 is 1, so the offset is 100 - 1."""
    assert offset_sample(0, 100, 3) == (99, 3)
    e = ClockEstimate()
    e.add(0, 100, 3)
    assert e.error_ns == 1


def test_no_sample_means_no_error_bound():
    """Before any sample the offset is 0 and there is no error bound."""
    e = ClockEstimate()
    assert (e.offset_ns, e.delay_ns, e.error_ns, e.samples) == (0, None, None, 0)


def test_lowest_round_trip_wins_even_when_it_comes_last():
    """Of three samples the last, with the shortest round trip (40 ns), sets the offset."""
    e = ClockEstimate()
    assert e.add(0, 5_900, 1_000)  # offset 5400, trip 1000
    assert e.add(2_000, 7_100, 2_600)  # offset 4800, trip 600
    assert e.add(10_000, 15_020, 10_040)  # offset 5000, trip 40
    assert (e.offset_ns, e.delay_ns, e.samples) == (5_000, 40, 3)


def test_error_bound_is_half_the_best_round_trip():
    """The error bound is half the round trip of the sample kept, not of the last one."""
    e = ClockEstimate()
    e.add(10_000, 15_020, 10_040)
    e.add(20_000, 26_000, 20_500)
    assert e.error_ns == 20


def test_a_slower_later_sample_does_not_replace_the_best():
    """A later sample with a longer round trip is counted but not kept."""
    e = ClockEstimate()
    e.add(10_000, 15_020, 10_040)
    assert not e.add(20_000, 26_000, 20_500)  # offset 5750, trip 500
    assert (e.offset_ns, e.delay_ns, e.samples) == (5_000, 40, 2)


def test_an_equal_round_trip_keeps_the_first_sample():
    """Of two samples with the same round trip, the first stays."""
    e = ClockEstimate()
    e.add(0, 1_050, 100)
    assert not e.add(1_000, 2_090, 1_100)
    assert e.offset_ns == 1_000


def test_a_negative_round_trip_is_never_kept():
    """A round trip below zero (the driver's clock stepped back mid-ping) is counted, not kept."""
    e = ClockEstimate()
    e.add(0, 1_050, 100)
    assert not e.add(5_000, 9_000, 4_000)
    assert (e.offset_ns, e.delay_ns, e.samples) == (1_000, 100, 2)


def test_sync_pairs_a_pong_with_its_ping_on_the_fake_clock():
    """ping() reads t0 from the clock, pong() reads t2: a worker 250 ms ahead, 300 ns away."""
    clock = FakeClock(1_000)
    sync = ClockSync(now=clock)
    body = sync.ping("w")
    assert body == {"id": 1, "t0": 1_000}
    assert sync.offsets() == {"w": (0, None)}  # pinged, not answered yet
    clock.t = 1_300
    assert sync.pong("w", body["id"], 250_001_150)
    assert sync.offsets() == {"w": (250_000_000, 150)}


def test_sync_keeps_the_fastest_of_several_pings_in_flight():
    """Two pings in flight, answered out of order: the one with the shorter trip wins."""
    clock = FakeClock(0)
    sync = ClockSync(now=clock)
    slow = sync.ping("w")["id"]  # t0 = 0
    clock.t = 100
    fast = sync.ping("w")["id"]  # t0 = 100
    clock.t = 120
    assert sync.pong("w", fast, 1_110)  # trip 20: offset 1110 - 110 = 1000
    clock.t = 900
    assert sync.pong("w", slow, 1_200)  # trip 900: offset 750, not kept
    assert sync.offsets() == {"w": (1_000, 10)}
    assert sync.estimates["w"].samples == 2


def test_sync_ignores_pongs_to_no_ping_of_that_worker():
    """A pong with an unknown id, another worker's id, or a second answer is ignored."""
    clock = FakeClock(0)
    sync = ClockSync(now=clock)
    ping_id = sync.ping("a")["id"]
    assert not sync.pong("a", ping_id + 1, 5)
    assert not sync.pong("b", ping_id, 5)
    assert sync.pong("a", ping_id, 5)
    assert not sync.pong("a", ping_id, 5)
    assert sync.estimates["a"].samples == 1 and "b" not in sync.estimates


def test_sync_wants_samples_until_enough_pongs_came():
    """A worker is wanted for pinging until `wanted` of its pings were answered."""
    sync = ClockSync(now=FakeClock(0), wanted=2)
    assert sync.wants("w")
    sync.pong("w", sync.ping("w")["id"], 0)
    sync.ping("w")  # sent, not answered: still wanted
    assert sync.wants("w")
    sync.pong("w", sync.ping("w")["id"], 0)
    assert not sync.wants("w")


def test_sync_forgets_the_oldest_unanswered_pings():
    """Past max_pending pings in flight, the oldest is forgotten and its late pong ignored."""
    sync = ClockSync(now=FakeClock(0), max_pending=2)
    first, second, third = (sync.ping("w")["id"] for _ in range(3))
    assert not sync.pong("w", first, 0)
    assert sync.pong("w", second, 0) and sync.pong("w", third, 0)
