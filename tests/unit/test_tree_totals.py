"""TreeTotals: the tree's sums over its members' readings, without a process."""

from __future__ import annotations

from workerscope.sidecar.tree import Reading, TreeTotals


def reading(rss: int = 100, io: int | None = 10, ctx: int | None = 1, fds: int | None = 3,
            uss: float | None = 50.0, user: float = 1.0, system: float = 0.5) -> Reading:
    return Reading(user, system, rss, 1, rss + 1, io, io, io, io, ctx, ctx, fds, uss, uss)


def test_sums_every_value():
    """Each of Reading's values is summed under its name; CPU times start from the carried ones."""
    totals = TreeTotals(start_user=2.0, start_system=1.0)
    totals.add(reading(rss=100))
    totals.add(reading(rss=200))
    sums = totals.sums(slow=True, uss=True)
    assert sums["cpu_user_s"] == 4.0 and sums["cpu_system_s"] == 2.0
    assert sums["rss_bytes"] == 300 and sums["num_threads"] == 2 and sums["peak_rss_bytes"] == 302
    assert sums["read_bytes"] == 20 and sums["ctx_switches_voluntary"] == 2
    assert sums["num_fds"] == 6 and sums["uss_bytes"] == 100.0


def test_a_value_one_member_lacks_has_no_total():
    """A member without a value (None: unreadable, or not on this kernel) leaves the tree without it."""
    totals = TreeTotals()
    totals.add(reading(io=5))
    totals.add(reading(io=None))
    sums = totals.sums()
    assert "read_bytes" not in sums and "write_chars" not in sums
    assert sums["rss_bytes"] == 200


def test_tier_values_only_on_their_tier():
    """Context switches and fds only on a slow tick, USS and PSS only on a USS tick."""
    totals = TreeTotals()
    totals.add(reading())
    sums = totals.sums(slow=False, uss=False)
    assert not {"ctx_switches_voluntary", "num_fds", "uss_bytes", "pss_bytes"} & set(sums)
    assert "read_chars" in sums


def test_no_members():
    """With no reading, only the carried CPU times are there."""
    assert TreeTotals(1.0, 2.0).sums() == {"cpu_user_s": 1.0, "cpu_system_s": 2.0}
