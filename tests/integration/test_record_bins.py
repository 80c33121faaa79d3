"""A record of any length loads in bounded memory: past load()'s max_sample_bytes, each series is
folded into time bins, keeping the last value of cumulative counters, the mean of rates and
the max of memory, so totals stay exact and no memory peak is lost."""

from __future__ import annotations

import logging
import tracemalloc

import pytest

from workerscope import load, protocol
from workerscope.record import RecordWriter

MB = 1 << 20
STEP_NS = 10_000_000  # a sample every 10 ms
SPIKE = 12_345  # the one sample where the tree's memory peaks


def _write_record(path: str, workers: int, samples: int) -> None:
    """A record as a driver writes it: each worker's hello, one job, `samples` samples of a
    tree and one process, the job's end and a bye; frames through the real encoder."""
    writer = RecordWriter(path)
    anchor = [1_700_000_000_000_000_000, 1_000_000_000]
    for w in range(workers):
        wid = protocol.worker_id("host-a", 100 + w, 200 + w)
        seq = iter(range(1, samples + 10))

        def send(kind: str, body: dict, wid: str = wid, seq=seq) -> None:
            assert writer.append(protocol.encode_frame(kind, wid, next(seq), body))

        send(protocol.HELLO, {"host": "host-a", "pid": 100 + w, "anchor": anchor,
                              "interval": STEP_NS / 1e9})
        t0 = anchor[1]
        send(protocol.JOB_START, {"job": 1, "name": f"job{w}", "t": t0, "pid": 100 + w})
        for i in range(samples):
            tree = {"cpu_user_s": 0.005 * i, "cpu_percent": 50.0 + 20.0 * (i % 2),
                    "rss_bytes": 900 * MB if i == SPIKE else 100 * MB + w,
                    "write_bytes": 4096 * i}
            send(protocol.SAMPLE, {"t": t0 + i * STEP_NS, "tree": tree,
                                   "procs": [[100 + w, dict(tree)]]})
        send(protocol.JOB_END, {"job": 1, "t": t0 + samples * STEP_NS, "status": "ok"})
        send(protocol.BYE, {"status": "exited"})
    writer.close()


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("bins") / "long.wsc")
    _write_record(path, workers=2, samples=20_000)  # 80,000 samples, 200 s a worker
    return path


def test_a_long_record_loads_binned_within_its_budget(record, caplog):
    """Past its sample budget a record loads binned, with a warning and a note per worker; the
    totals, the one peak and the first samples survive as they came."""
    with caplog.at_level(logging.WARNING, logger="workerscope.record"):
        t = load(record, max_sample_bytes=2_000 * 800)
    assert 0 < len(t.samples) <= 2_000
    assert "samples binned" in caplog.text and "max_sample_bytes=None" in caplog.text
    for wid, w in t.workers.items():
        assert any("80,000 read" in n for n in w.notes), w.notes
        tree = sorted((s for s in t.samples if s.worker == wid and s.scope == "tree"),
                      key=lambda s: s.t_ns)
        assert len(tree) >= 100  # still a curve, not a handful of points
        # The cumulative counters' last values are exact: the totals do not move.
        assert tree[-1].values["cpu_user_s"] == pytest.approx(0.005 * 19_999)
        assert tree[-1].values["write_bytes"] == 4096 * 19_999
        assert [s.values["cpu_user_s"] for s in tree] == sorted(s.values["cpu_user_s"]
                                                               for s in tree)
        # The one sample of 900 MiB survives as its bin's max.
        assert max(s.values["rss_bytes"] for s in tree) == 900 * MB
        assert sum(s.values["rss_bytes"] == 900 * MB for s in tree) == 1
        # Each series keeps its first sample as it came (where its counters start).
        assert tree[0].values["cpu_user_s"] == 0.0 and tree[0].values["cpu_percent"] == 50.0
        # CPU %: 50 and 70 alternate; each bin holds their mean, never a max of 70.
        for s in tree[1:]:
            assert 55.0 <= s.values["cpu_percent"] <= 65.0
        procs = [s for s in t.samples if s.worker == wid and s.scope == "proc"]
        assert max(s.values["rss_bytes"] for s in procs) == 900 * MB
    assert {j.status for j in t.jobs} == {"ok"}


def test_every_sample_without_a_budget(record):
    """With max_sample_bytes=None every sample loads, and no worker says it was binned."""
    t = load(record, max_sample_bytes=None)
    assert len(t.samples) == 80_000
    assert not any("binned" in n for w in t.workers.values() for n in w.notes)


def test_binned_loading_holds_far_less_memory(tmp_path):
    """Peak Python memory of a binned load is a small part of a whole one's, and it does not
    grow with the record's length."""
    peaks = {}
    for samples in (10_000, 40_000):
        path = str(tmp_path / f"r{samples}.wsc")
        _write_record(path, workers=1, samples=samples)
        for budget in (1_000 * 800, None):
            tracemalloc.start()
            try:
                load(path, max_sample_bytes=budget)
                peaks[samples, budget] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    assert peaks[40_000, 1_000 * 800] < peaks[40_000, None] / 10
    assert peaks[40_000, 1_000 * 800] < 2 * peaks[10_000, 1_000 * 800]


def test_report_bins_a_record_past_its_budget_and_keeps_all_with_0(record, tmp_path, capsys):
    """`report --max-sample-mib 1` bins, 0 keeps every sample, and a negative budget is refused."""
    from workerscope.cli import main

    out = tmp_path / "small.wsc"
    assert main(["report", record, "--max-sample-mib", "1", "--wsc", str(out)]) == 0
    small = load(out)
    assert 0 < len(small.samples) < 80_000
    assert all(any("binned" in n for n in w.notes) for w in small.workers.values())
    whole = tmp_path / "whole.wsc"
    assert main(["report", record, "--max-sample-mib", "0", "--wsc", str(whole)]) == 0
    assert len(load(whole).samples) == 80_000
    assert main(["report", record, "--max-sample-mib", "-1"]) != 0
    assert "--max-sample-mib" in capsys.readouterr().err


def test_bins_keep_each_metric_as_it_reads_and_short_series_do_not_starve_long_ones(tmp_path):
    """Per-core CPU and the sidecar's cost per sample are averaged (a max read 2x and 8x too
    high); available memory keeps its dip; a NaN spoils no bin; 2,000 processes of one
    sample each leave the long series a curve."""
    path = str(tmp_path / "mixed.wsc")
    writer = RecordWriter(path)
    wid = protocol.worker_id("host-a", 100, 200)
    seq = iter(range(1, 10**6))

    def send(kind: str, body: dict) -> None:
        assert writer.append(protocol.encode_frame(kind, wid, next(seq), body))

    anchor = [1_700_000_000_000_000_000, 1_000_000_000]
    t0 = anchor[1]
    send(protocol.HELLO, {"host": "host-a", "pid": 100, "anchor": anchor, "interval": 0.01})
    send(protocol.JOB_START, {"job": 1, "name": "mixed", "t": t0, "pid": 100})
    for i in range(20_000):
        body = {"t": t0 + i * STEP_NS,
                "tree": {"cpu_percent": float("nan") if i == 777 else 40.0, "rss_bytes": MB},
                "host": {"cpu_percent_core0": 100.0 * (i % 2),
                         "mem_available_bytes": 10 * MB if i == 15_000 else 1000 * MB},
                "sidecar": {"sample_cost_s": 0.001 if i % 2 else 0.003}}
        if i % 10 == 0:  # a short-lived process, seen once
            body["procs"] = [[1_000 + i, {"rss_bytes": MB}]]
        send(protocol.SAMPLE, body)
    send(protocol.JOB_END, {"job": 1, "t": t0 + 20_000 * STEP_NS, "status": "ok"})
    writer.close()
    budget = 4 * 2**20
    t = load(path, max_sample_bytes=budget)
    series = {scope: sorted((s for s in t.samples if s.scope == scope), key=lambda s: s.t_ns)
              for scope in ("tree", "host", "sidecar")}
    assert len(series["tree"]) >= 200, len(series["tree"])
    for s in series["tree"]:
        assert s.values["cpu_percent"] == 40.0  # the NaN left out, not the bin's mean spoiled
    for s in series["host"][2:-1]:  # whole bins: the first and last may hold a few
        assert 40.0 <= s.values["cpu_percent_core0"] <= 60.0
    assert min(s.values["mem_available_bytes"] for s in series["host"]) == 10 * MB
    for s in series["sidecar"][2:-1]:
        assert 0.0015 <= s.values["sample_cost_s"] <= 0.0025
    assert sum(s.scope == "proc" for s in t.samples) == 2_000  # each process's one sample
