"""The sidecar's aggregation (samples_per_frame): N readings in, one frame of last/min/mean/max
out, checked on hand-made readings."""

from __future__ import annotations

import pytest

from workerscope.sidecar.aggregate import Aggregator


def reading(t, cpu, rss, procs=(), **extra):
    """A sample body as the sidecar makes it: tree and host values, per-process rows."""
    return {"t": t, "tree": {"cpu_percent": cpu, "rss_bytes": rss},
            "host": {"mem_available_bytes": 1000 - t}, "procs": [list(p) for p in procs], **extra}


@pytest.mark.parametrize("n", [0, 1])
def test_one_per_frame_passes_each_reading_through(n):
    """With N <= 1 each reading is its own frame, returned at once and unchanged."""
    agg = Aggregator(n)
    body = reading(1, 50.0, 10)
    assert agg.add(body) is body
    assert agg.flush() is None


def test_a_frame_comes_every_nth_reading():
    """With N = 3 the first two readings give nothing and the third gives the frame; the next
    three start afresh."""
    agg = Aggregator(3)
    out = [agg.add(reading(t, 10.0 * t, t)) for t in range(1, 7)]
    assert [o is None for o in out] == [True, True, False, True, True, False]
    assert (out[2]["t"], out[2]["n"], out[2]["tree"]["rss_bytes_min"]) == (3, 3, 1)
    assert (out[5]["t"], out[5]["n"], out[5]["tree"]["rss_bytes_min"]) == (6, 3, 4)


def test_each_metric_is_last_min_mean_max():
    """Tree and host metrics keep their last value under their own name, plus _min, _mean and
    _max over the N readings; the frame's time is the last reading's."""
    agg = Aggregator(4)
    for t, cpu, rss in [(1, 20.0, 300), (2, 90.0, 100), (3, 10.0, 400), (4, 40.0, 200)]:
        frame = agg.add(reading(t, cpu, rss))
    assert frame["t"] == 4 and frame["n"] == 4
    assert frame["tree"] == {
        "cpu_percent": 40.0, "cpu_percent_min": 10.0, "cpu_percent_mean": 40.0,
        "cpu_percent_max": 90.0,
        "rss_bytes": 200, "rss_bytes_min": 100, "rss_bytes_mean": 250, "rss_bytes_max": 400,
    }
    assert frame["host"] == {"mem_available_bytes": 996, "mem_available_bytes_min": 996,
                             "mem_available_bytes_mean": 997.5, "mem_available_bytes_max": 999}


def test_a_metric_missing_from_some_readings_is_combined_over_the_others():
    """A metric a reading lacks (a rate on the first tick) is combined over the readings that
    have it, and its last value is the last one read."""
    agg = Aggregator(3)
    agg.add({"t": 1, "tree": {"rss_bytes": 5}})
    agg.add({"t": 2, "tree": {"rss_bytes": 7, "cpu_percent": 30.0}})
    frame = agg.add({"t": 3, "tree": {"rss_bytes": 6}})
    assert frame["tree"]["cpu_percent"] == 30.0
    assert (frame["tree"]["cpu_percent_min"], frame["tree"]["cpu_percent_mean"],
            frame["tree"]["cpu_percent_max"]) == (30.0, 30.0, 30.0)
    assert frame["tree"]["rss_bytes"] == 6 and frame["tree"]["rss_bytes_max"] == 7


def test_processes_are_combined_per_pid():
    """Per-process rows are combined pid by pid: over the readings that saw the process, or,
    for one seen only once, as it was read."""
    agg = Aggregator(3)
    agg.add(reading(1, 0.0, 0, procs=[(10, {"rss_bytes": 1}), (11, {"rss_bytes": 50})]))
    agg.add(reading(2, 0.0, 0, procs=[(10, {"rss_bytes": 3}), (11, {"rss_bytes": 70})]))
    frame = agg.add(reading(3, 0.0, 0, procs=[(10, {"rss_bytes": 2}), (12, {"rss_bytes": 9})]))
    procs = dict(frame["procs"])
    assert procs[10] == {"rss_bytes": 2, "rss_bytes_min": 1, "rss_bytes_mean": 2,
                         "rss_bytes_max": 3}
    assert procs[11] == {"rss_bytes": 70, "rss_bytes_min": 50, "rss_bytes_mean": 60,
                         "rss_bytes_max": 70}
    assert procs[12] == {"rss_bytes": 9}


def test_gpus_are_combined_per_device_and_absent_without_any():
    """GPU rows are combined per device; a frame of readings without GPUs has no gpus key."""
    agg = Aggregator(2)
    agg.add(reading(1, 0.0, 0, gpus=[[0, {"util_percent": 20}], [1, {"util_percent": 0}]]))
    frame = agg.add(reading(2, 0.0, 0, gpus=[[0, {"util_percent": 60}], [1, {"util_percent": 4}]]))
    gpus = dict(frame["gpus"])
    assert (gpus[0]["util_percent"], gpus[0]["util_percent_mean"], gpus[0]["util_percent_max"]) == (
        60, 40, 60)
    assert (gpus[1]["util_percent"], gpus[1]["util_percent_min"]) == (4, 0)
    agg.add(reading(3, 0.0, 0))
    assert "gpus" not in agg.add(reading(4, 0.0, 0))


def test_events_of_every_reading_are_kept_in_order():
    """new, gone and notes of all N readings are all sent, in the order they came; a frame
    where none came has none of those keys."""
    agg = Aggregator(3)
    agg.add(reading(1, 0.0, 0, new=[[10, 1, "python"]], notes=["gpu: none"]))
    agg.add(reading(2, 0.0, 0, new=[[11, 10, "sh"]], gone=[10]))
    frame = agg.add(reading(3, 0.0, 0, gone=[11]))
    assert frame["new"] == [[10, 1, "python"], [11, 10, "sh"]]
    assert frame["gone"] == [10, 11]
    assert frame["notes"] == ["gpu: none"]
    quiet = [agg.add(reading(t, 0.0, 0)) for t in (4, 5, 6)][-1]
    assert not {"new", "gone", "notes"} & set(quiet)


def test_flush_sends_what_has_gathered_and_starts_afresh():
    """flush() (a job's end) returns a frame of the readings gathered so far and empties the
    aggregator; with nothing gathered it returns None."""
    agg = Aggregator(5)
    assert agg.flush() is None
    agg.add(reading(1, 10.0, 1))
    agg.add(reading(2, 30.0, 2))
    frame = agg.flush()
    assert frame["n"] == 2 and frame["t"] == 2 and frame["tree"]["cpu_percent_mean"] == 20.0
    assert agg.flush() is None
    assert agg.add(reading(3, 0.0, 0)) is None, "a new count of five starts after a flush"


def test_a_single_reading_is_flushed_unchanged():
    """A flush of one reading sends it as it is, without _min/_mean/_max."""
    agg = Aggregator(5)
    body = reading(1, 10.0, 1)
    agg.add(body)
    assert agg.flush() is body
