"""tree_sums: the tree's sums over its members' readings, without a process."""

from __future__ import annotations

from workerscope.sidecar.tree import READING_FIELDS, Reading, tree_sums


def reading(rss: int = 100, io: int | None = 10, ctx: int | None = 1, fds: int | None = 3,
            uss: float | None = 50.0, user: float = 1.0, system: float = 0.5) -> Reading:
    return (user, system, rss, 1, rss + 1, io, io, io, io, ctx, ctx, fds, uss, uss)


def test_sums_every_value():
    """Each value of a reading is summed under its name in READING_FIELDS."""
    sums = tree_sums([reading(rss=100), reading(rss=200)], slow=True, uss=True)
    assert set(sums) == set(READING_FIELDS)
    assert sums["cpu_user_s"] == 2.0 and sums["cpu_system_s"] == 1.0
    assert sums["rss_bytes"] == 300 and sums["num_threads"] == 2 and sums["peak_rss_bytes"] == 302
    assert sums["read_bytes"] == 20 and sums["ctx_switches_voluntary"] == 2
    assert sums["num_fds"] == 6 and sums["uss_bytes"] == 100.0


def test_a_value_one_member_lacks_has_no_total():
    """A member without a value (None: unreadable, or not on this kernel) leaves the tree without it."""
    sums = tree_sums([reading(io=5), reading(io=None)])
    assert "read_bytes" not in sums and "write_chars" not in sums
    assert sums["rss_bytes"] == 200 and sums["num_fds"] == 6


def test_tier_values_only_on_their_tier():
    """Context switches and fds only on a slow tick, USS and PSS only on a USS tick."""
    regular = tree_sums([reading()], slow=False, uss=False)
    assert not {"ctx_switches_voluntary", "num_fds", "uss_bytes", "pss_bytes"} & set(regular)
    assert "read_chars" in regular
    slow = tree_sums([reading()], slow=True, uss=False)
    assert "num_fds" in slow and "uss_bytes" not in slow
    uss = tree_sums([reading()], slow=False, uss=True)
    assert "uss_bytes" in uss and "num_fds" not in uss


def test_a_tier_value_missing_off_its_tier_costs_nothing():
    """A member whose slow-tier values are None still gives every-tick totals."""
    sums = tree_sums([reading(ctx=None, fds=None), reading()], slow=False, uss=False)
    assert sums["rss_bytes"] == 200 and sums["read_chars"] == 20


def test_no_members():
    """With no reading there is no total (the carried CPU is the tree's to add)."""
    assert tree_sums([]) == {}
