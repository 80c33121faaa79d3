"""tree_sums and tier_sums: the tree's sums over its members' readings, without a process."""

from __future__ import annotations

from workerscope.sidecar.tree import READING_FIELDS, TIER_FIELDS, Reading, Tier, tier_sums, tree_sums


def reading(rss: int = 100, io: int | None = 10, user: float = 1.0,
            system: float = 0.5) -> Reading:
    return (user, system, rss, 1, rss + 1, io, io, io, io)


def tier(ctx: int | None = 1, fds: int | None = 3, uss: float | None = 50.0,
         waits: int | None = 2) -> Tier:
    return (ctx, ctx, fds, waits, None if waits is None else waits / 10, None, uss, uss)


def test_sums_every_value():
    """Each value of a reading is summed under its name in READING_FIELDS."""
    sums = tree_sums([reading(rss=100), reading(rss=200)])
    assert set(sums) == set(READING_FIELDS)
    assert sums["cpu_user_s"] == 2.0 and sums["cpu_system_s"] == 1.0
    assert sums["rss_bytes"] == 300 and sums["num_threads"] == 2 and sums["peak_rss_bytes"] == 302
    assert sums["read_bytes"] == 20 and sums["write_chars"] == 20


def test_one_reading_as_it_is():
    """A tree of one process has that process's values, a missing one left out."""
    assert tree_sums([reading(rss=7)])["rss_bytes"] == 7
    assert "read_bytes" not in tree_sums([reading(io=None)])


def test_a_value_one_member_lacks_has_no_total():
    """A member without a value (None: unreadable, or not on this kernel) leaves the tree without it."""
    sums = tree_sums([reading(io=5), reading(io=None)])
    assert "read_bytes" not in sums and "write_chars" not in sums
    assert sums["rss_bytes"] == 200


def test_tier_values_only_on_their_tier():
    """Context switches and fds only on a slow tick, USS and PSS only on a USS tick."""
    both = tier_sums([tier(), tier()], slow=True, uss=True)
    assert set(both) == set(TIER_FIELDS) - {"blkio_delay_s"}  # unkept by either member
    assert both["num_fds"] == 6 and both["uss_bytes"] == 100.0 and both["major_faults"] == 4
    slow = tier_sums([tier(), tier()], slow=True, uss=False)
    assert slow["ctx_switches_voluntary"] == 2 and "uss_bytes" not in slow
    assert slow["run_delay_s"] == 0.4
    uss = tier_sums([tier(), tier()], slow=False, uss=True)
    assert "uss_bytes" in uss and "num_fds" not in uss


def test_a_tier_value_one_member_lacks_has_no_total():
    """A member whose status or smaps_rollup was unreadable leaves those totals out."""
    sums = tier_sums([tier(ctx=None, uss=None, waits=None), tier()], slow=True, uss=True)
    assert sums == {"num_fds": 6}


def test_no_members():
    """With no reading there is no total (the carried CPU is the tree's to add)."""
    assert tree_sums([]) == {}



def test_held_cpu_is_not_a_rate_above_the_trees_cpus():
    """Children that exit together leave the sum before their parent has reaped them: the total
    is held, then grows by all they used at once. That shows in the intervals that follow at
    most as all the CPUs the tree may use: four children on two CPUs once read 267 % (CI).
    The rates still add up to the total."""
    import os

    from workerscope.sidecar.tree import ProcessTree

    c = len(os.sched_getaffinity(0))  # the tree's root is this process
    tree = ProcessTree(os.getpid())
    try:
        ms = 1_000_000
        # 100 ms ticks; 0.3 s a CPU lands at the third (held since the first), then 0.1 more.
        totals = [10.0, 10.0, 10.0, 10.0 + 0.3 * c, 10.0 + 0.4 * c, 10.0 + 0.4 * c,
                  10.0 + 0.4 * c]
        rates = [tree._tree_values([reading(user=total, system=0.0)], None,
                                   k * 100 * ms).get("cpu_percent")
                 for k, total in enumerate(totals)]
        assert rates[0] is None  # no interval yet
        shown = [r for r in rates[1:] if r is not None]
        assert len(shown) == len(totals) - 1
        assert max(shown) <= 100.0 * c + 1e-9, shown
        assert abs(sum(r * 0.1 / 100 for r in shown) - 0.4 * c) < 1e-9, shown
    finally:
        tree.close()
