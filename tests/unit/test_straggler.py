"""The one straggler rule, workerscope.timeline.is_straggler, and the driver's live rows
that use it."""

from __future__ import annotations

from workerscope import protocol
from workerscope.driver.live import LiveState
from workerscope.timeline import Worker, is_straggler


def test_fewer_than_three_peers_never_make_a_straggler():
    """With under three peers nothing is a straggler, however slow."""
    assert not is_straggler(1_000.0, [])
    assert not is_straggler(1_000.0, [1.0])
    assert not is_straggler(1_000.0, [1.0, 1.0])


def test_three_peers_are_enough():
    """Three peers are enough to judge: far over the median is a straggler."""
    assert is_straggler(1_000.0, [1.0, 1.0, 1.0])


def test_exactly_one_and_a_half_times_the_median_is_not_a_straggler():
    """At exactly 1.5x the median a worker is not a straggler: the rule is strictly over."""
    assert not is_straggler(15.0, [10.0, 10.0, 10.0])


def test_just_over_one_and_a_half_times_the_median_is_a_straggler():
    """Just above 1.5x the median a worker is a straggler."""
    assert is_straggler(15.001, [10.0, 10.0, 10.0])


def test_median_zero_never_makes_a_straggler():
    """When the median is 0 (jobs too quick to measure) nothing is a straggler."""
    assert not is_straggler(5.0, [0.0, 0.0, 0.0])
    assert not is_straggler(5.0, [0.0, 0.0, 7.0])


def test_even_count_uses_the_mean_of_the_middle_two():
    """With an even number of peers the median is the mean of the middle two (5 of 2,4,6,8)."""
    assert not is_straggler(7.5, [8.0, 2.0, 6.0, 4.0])
    assert is_straggler(7.6, [8.0, 2.0, 6.0, 4.0])


def test_the_worker_itself_may_be_among_its_peers():
    """A worker's own value counts among its peers: one slow of three is still a straggler."""
    assert is_straggler(100.0, [1.0, 1.0, 100.0])


def test_factor_can_be_changed():
    """A factor of 2 moves the line to twice the median."""
    assert not is_straggler(19.0, [10.0, 10.0, 10.0], factor=2.0)
    assert is_straggler(21.0, [10.0, 10.0, 10.0], factor=2.0)


def _job(kind: str, job: int, name: str = "j") -> protocol.Frame:
    body: dict[str, object] = {"job": job, "name": name, "t": 0, "pid": 1}
    return protocol.Frame(kind, "w", 0, body)


def _rows(live: LiveState, now: float) -> list[dict[str, object]]:
    return live.rows({"w": Worker("w", host="h", pid=1)}, {"w": "running"}, {}, {}, now)


def test_live_rows_flag_a_running_job_past_the_rule():
    """A running job older than 1.5x the median of the jobs done is flagged, not before."""
    live = LiveState()
    for i in range(3):  # three jobs of 10 s each
        live.note(_job(protocol.JOB_START, i), now=100.0 * i)
        live.note(_job(protocol.JOB_END, i), now=100.0 * i + 10)
    live.note(_job(protocol.JOB_START, 9, "slow"), now=1_000.0)
    (row,) = _rows(live, now=1_015.0)
    assert row["job"] == "slow" and row["running_s"] == 15.0 and not row["straggler"]
    (row,) = _rows(live, now=1_015.5)
    assert row["straggler"]


def test_live_rows_need_three_jobs_done_to_flag():
    """With two jobs done, no running job is flagged, however long it runs."""
    live = LiveState()
    for i in range(2):
        live.note(_job(protocol.JOB_START, i), now=0.0)
        live.note(_job(protocol.JOB_END, i), now=1.0)
    live.note(_job(protocol.JOB_START, 9), now=0.0)
    (row,) = _rows(live, now=1_000.0)
    assert not row["straggler"]


def test_live_rows_of_an_idle_worker_are_never_stragglers():
    """A worker with no job running has no running time and is not a straggler."""
    live = LiveState()
    for i in range(3):
        live.note(_job(protocol.JOB_START, i), now=0.0)
        live.note(_job(protocol.JOB_END, i), now=1.0)
    (row,) = _rows(live, now=1_000.0)
    assert row["running_s"] is None and row["job"] is None and not row["straggler"]
