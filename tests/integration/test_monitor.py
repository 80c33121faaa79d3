"""The sidecar samples the worker's real process tree while a job runs, and streams it."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading

import helpers
import pytest
from helpers import CpuClock, burn_code

from workerscope import Subscriber, load, monitor, protocol, timed
from workerscope.worker import link as launcher


@timed
def burn(seconds):
    helpers.burn(seconds)


def test_samples_cover_tree_host_and_processes(clean_env):
    """A job with a child process yields tree, proc and host samples; the sidecar is left out."""
    with monitor(interval=0.05) as m:
        child = subprocess.Popen([sys.executable, "-c", burn_code(0.6)])
        child.wait()
    t = m.timeline
    (worker,) = t.workers.values()
    assert worker.pid == os.getpid()
    proc_pids = {s.pid for s in t.samples if s.scope == "proc"}
    assert os.getpid() in proc_pids and child.pid in proc_pids
    assert worker.sidecar_pid not in proc_pids
    tree = [s for s in t.samples if s.scope == "tree"]
    assert len(tree) >= 8
    most = max(s.values["num_procs"] for s in tree)
    assert most >= 2 and tree[-1].values["num_procs"] == most - 1, "the reaped child left"
    assert {"cpu_user_s", "cpu_system_s", "rss_bytes", "num_threads"} <= set(tree[-1].values)
    assert all("cpu_percent" in s.values for s in tree[1:-1]), "a rate on every regular tick"
    hosts = [s.values for s in t.samples if s.scope == "host"]
    # a per-core figure needs a clock tick on that core since the last reading: most have one
    assert sum("cpu_percent_core0" in h for h in hosts) >= len(hosts) // 2
    assert hosts[-1]["mem_available_bytes"] > 0 and "net_sent_bytes" in hosts[-1]
    assert t.processes[(worker.id, child.pid)] in ("python", "python3", os.path.basename(sys.executable))


@pytest.mark.accuracy
def test_one_busy_core_reads_about_100_percent(clean_env):
    """Burning one core for 1 s of CPU reads, in tree CPU % averaged over the burn, the share
    of a core the process really got (about 100 % on an idle machine) within 5 points."""
    clock = CpuClock()
    with monitor(interval=0.1) as m:
        clock.burn(1.0)
    read, truth, ticks = clock.tree_cpu_percent(m.timeline)
    assert ticks >= 5
    assert abs(read - truth) <= 5, (read, truth)


def test_ticks_do_not_drift(clean_env):
    """Samples fall on a fixed grid: after 20 ticks the last is within one tick of schedule."""
    with monitor(interval=0.05) as m:
        threading.Event().wait(1.0)
    times = [t for t, _ in m.timeline.series("tree", "num_procs")]
    steps = times[1:-1]
    drift = (steps[-1] - steps[0]) - (len(steps) - 1) * 50_000_000
    assert len(steps) >= 15
    assert abs(drift) < 25_000_000, drift


def test_one_sidecar_reused_across_jobs(clean_env):
    """Consecutive jobs in one process share one sidecar; each is its own job on the timeline."""
    pids = set()
    for i in range(3):
        with monitor(interval=0.5, name=f"job{i}") as m:
            pass
        (w,) = m.timeline.workers.values()
        pids.add(w.sidecar_pid)
        assert [j.name for j in m.timeline.jobs] == [f"job{i}"]
    assert len(pids) == 1


def test_spans_reach_the_driver_during_the_job(clean_env):
    """Span batches arrive at the Subscriber while the job is still running, not only at its end."""
    got_spans = threading.Event()

    def on_frame(frame):
        if frame.kind == protocol.SPANS and frame.body["records"]:
            got_spans.set()

    with Subscriber(on_frame=on_frame) as sub:
        with monitor(interval=0.5, endpoint=sub.endpoint):
            burn(0.01)
            arrived_during_job = got_spans.wait(10)
        assert arrived_during_job
        assert sub.wait(jobs=1, timeout=10)


def test_out_file_written_by_the_sidecar(clean_env, tmp_path):
    """monitor(out=...) leaves a .wsc file that loads back with the job and its spans."""
    out = tmp_path / "job.wsc"
    with monitor(interval=0.1, out=str(out)):
        burn(0.05)
    t = load(out)
    assert [j.status for j in t.jobs] == ["ok"]
    assert "burn" in {s.name for s in t.spans}


def test_close_all_makes_sidecar_say_bye(clean_env):
    """Closing the link makes the sidecar send bye (acknowledged) and exit."""
    clean_env.delenv("WORKERSCOPE_BYE_TIMEOUT", raising=False)  # the default: time for the ack
    with Subscriber() as sub:
        with monitor(interval=0.5, endpoint=sub.endpoint):
            pass
        link = next(iter(launcher._links.values()))
        launcher.close_all(wait=True)
        assert link.proc.returncode == 0
        assert sub.wait(byes=1, timeout=10)
        (w,) = sub.timeline().workers.values()
        assert w.status == "exited" and w.lost == 0


def test_samples_per_frame_aggregates(clean_env, samples):
    """samples_per_frame=5 sends one frame per 5 readings, with last/min/mean/max of each."""
    with monitor(interval=0.02, samples_per_frame=5, endpoint=samples.endpoint) as m:
        samples.wait(4)
        burn(0.1)
        samples.wait(2)
    frames = [s for s in m.timeline.samples if s.scope == "tree"]
    aggregated = [s.values for s in frames if "cpu_percent_max" in s.values]
    assert len(aggregated) >= 5
    for v in aggregated:
        assert v["cpu_percent_min"] <= v["cpu_percent_mean"] <= v["cpu_percent_max"]
        assert v["rss_bytes_min"] <= v["rss_bytes"] <= v["rss_bytes_max"]
    gaps = [b.t_ns - a.t_ns for a, b in itertools.pairwise(frames[1:-1])]
    assert min(gaps) >= 4 * 20_000_000, "one frame per five 20 ms readings"
