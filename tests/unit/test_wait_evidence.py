"""The evidence a straggler's cause needs, parsed from the kernel's own texts (cpu.stat of both
cgroup versions, PSI, schedstat), and the verdict's rule where the evidence does not single one
cause out (export/causes.judge)."""

from __future__ import annotations

from workerscope import cgroup
from workerscope.export import causes
from workerscope.export.causes import Evidence, judge
from workerscope.sidecar.tree import run_delay

V1 = b"nr_periods 40\nnr_throttled 12\nthrottled_time 850000000\nnr_bursts 0\nburst_time 0\n"
V2 = (b"usage_usec 1000\nuser_usec 800\nsystem_usec 200\nnr_periods 40\nnr_throttled 12\n"
      b"throttled_usec 850000\nnr_bursts 0\nburst_usec 0\n")


def test_cpu_stat_says_the_same_throttling_on_both_cgroup_versions():
    for text, version in ((V1, 1), (V2, 2)):
        got = cgroup.parse_cpu_stat(text, version)
        assert got == {"cgroup_cpu_periods": 40, "cgroup_cpu_throttled_periods": 12,
                       "cgroup_cpu_throttled_s": 0.85}, (version, got)


def test_pressure_totals_are_seconds():
    text = (b"some avg10=1.00 avg60=0.50 avg300=0.10 total=2500000\n"
            b"full avg10=0.00 avg60=0.00 avg300=0.00 total=125\n")
    assert cgroup.parse_pressure(text) == (2.5, 0.000125)
    assert cgroup.parse_pressure(b"some avg10=0.00 total=7\n") == (7e-06, None)
    assert cgroup.parse_pressure(b"garbage total=x\n") == (None, None)


def test_run_delay_is_the_second_field_and_none_where_unkept():
    assert run_delay(b"123456 2500000000 7\n") == 2.5
    assert run_delay(b"0 0 0\n") is None
    assert run_delay(b"") is None


def _evidence(**kw: float) -> Evidence:
    base = dict(jobs=1, wall_s=1.0, cpu_user_s=0.8, cpu_system_s=0.0, run_delay_s=0.05,
                children_run_delay_s=0.0,
                other_threads_cpu_s=0.0, other_threads=0, process_cpu_s=0.8, throttled_s=0.0,
                throttled_periods=0.0, memory_stall_s=0.0, io_stall_s=0.0, major_faults=0.0,
                storage_bytes=0.0, blkio_delay_s=0.0, memory_use=None, gpu_util=None,
                sm_clock_mhz=None)
    base.update(kw)
    return Evidence(**base)  # type: ignore[arg-type]


def test_two_causes_of_a_size_name_none_and_show_both():
    """Half its extra time computing more, half waiting for a CPU: no clear cause, with both."""
    peers = [_evidence() for _ in range(5)]
    cause, _, candidates = judge(_evidence(wall_s=2.0, cpu_user_s=1.3, run_delay_s=0.55,
                                           process_cpu_s=1.3), peers)
    assert cause is None
    assert {c for c, _, _ in candidates[:2]} == {causes.CODE_PATH, causes.CPU_STARVED}


def test_a_peer_as_fast_as_the_rest_names_nothing_it_lacks():
    peers = [_evidence() for _ in range(5)]
    cause, because, _ = judge(_evidence(wall_s=3.0, cpu_user_s=0.8, throttled_s=2.0,
                                        throttled_periods=20, run_delay_s=2.05), peers)
    assert cause == causes.THROTTLED and "2 s" in because


def test_twice_the_jobs_at_the_peers_pace_is_more_jobs_not_slower_code():
    peers = [_evidence() for _ in range(5)]
    twice = _evidence(jobs=2, wall_s=2.0, cpu_user_s=1.6, run_delay_s=0.1, process_cpu_s=1.6)
    cause, because, _ = judge(twice, peers)
    assert cause == causes.MORE_JOBS and "2 jobs against 1" in because


def test_throttled_time_counts_no_more_than_its_thread_did_not_run():
    """A cgroup throttled over many CPUs (40 s of CPU time held) accounts for at most the
    time its job thread spent not running."""
    peers = [_evidence() for _ in range(5)]
    cause, _, candidates = judge(_evidence(wall_s=3.0, throttled_s=40.0, run_delay_s=2.1),
                                 peers)
    assert cause == causes.THROTTLED
    assert dict((c, sec) for c, sec, _ in candidates)[causes.THROTTLED] <= 2.1


def test_jobs_without_samples_get_no_cause():
    """Four workers whose jobs no sample covers (light mode, a lost sidecar): the straggler
    is told, with no cause made up from the missing figures."""
    from workerscope.protocol import Status
    from workerscope.timeline import Job, Timeline, Worker

    t = Timeline(workers={f"w{i}": Worker(f"w{i}") for i in range(4)},
                 jobs=[Job(f"w{i}", 1, "job", 0, (5 if i == 3 else 1) * 10**9, Status.OK, None,
                           100 + i, 100 + i) for i in range(4)])
    (found,) = causes.stragglers(t)
    assert found.worker == "w3" and found.cause is None and not found.candidates
    assert "no samples cover its jobs" in found.text


def test_more_cpu_over_every_function_alike_is_no_code_path():
    """Twice the CPU in the same calls as the peers' (a busy sibling hyperthread): no slower
    code path; the same extra in a function the peers never call is one."""
    peers = [_evidence(functions={"compute": 0.4, "scan": 0.4}, calls={"compute": 1, "scan": 1})
             for _ in range(5)]
    spread = _evidence(wall_s=1.8, cpu_user_s=1.6, process_cpu_s=1.6,
                       functions={"compute": 0.8, "scan": 0.8}, calls={"compute": 1, "scan": 1})
    cause, _, candidates = judge(spread, peers)
    assert cause is None and dict((c, s) for c, s, _ in candidates)[causes.CODE_PATH] == 0
    hot = _evidence(wall_s=1.8, cpu_user_s=1.6, process_cpu_s=1.6,
                    functions={"compute": 1.2, "scan": 0.4}, calls={"compute": 1, "scan": 1})
    assert judge(hot, peers)[0] is None
    one = _evidence(wall_s=1.8, cpu_user_s=1.6, process_cpu_s=1.6,
                    functions={"compute": 0.4, "scan": 0.4, "extra": 0.8},
                    calls={"compute": 1, "scan": 1, "extra": 1})
    assert judge(one, peers)[0] == causes.CODE_PATH
