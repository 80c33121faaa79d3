"""MLflow export against a real local tracking store, read back through MlflowClient."""

from __future__ import annotations

import time

import pytest

from workerscope import Timeline, monitor
from workerscope.errors import WorkerscopeError
from workerscope.timeline import Sample, Worker

mlflow = pytest.importorskip("mlflow")


@pytest.fixture
def tracking(tmp_path, monkeypatch):
    """A file tracking store in tmp_path (MLflow 3 wants an explicit opt-in for it)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = f"file:{tmp_path / 'mlruns'}"
    mlflow.set_tracking_uri(uri)
    yield mlflow.MlflowClient(uri)
    mlflow.set_tracking_uri(None)


def _steps_ok(client, run_id):
    """Every metric of the run has strictly increasing steps (no two values at one step)."""
    for key in client.get_run(run_id).data.metrics:
        steps = [m.step for m in client.get_metric_history(run_id, key)]
        assert steps == sorted(set(steps)), (key, steps)


def test_real_job_logs_under_our_own_namespace(clean_env, tracking):
    """A monitored job's samples land under workerscope/, with MLflow's metric names for the
    host and workerscope's for the tree, one step per sample."""
    from workerscope.export.mlflow import log_timeline

    with monitor(interval=0.05) as m:
        sum(i * i for i in range(2_000_000))
    exp = tracking.create_experiment("ws")
    run = tracking.create_run(exp)
    n = log_timeline(m.timeline, run_id=run.info.run_id, client=tracking)
    assert n > 0
    names = set(tracking.get_run(run.info.run_id).data.metrics)
    assert {"workerscope/cpu_utilization_percentage", "workerscope/system_memory_usage_megabytes",
            "workerscope/system_memory_usage_percentage", "workerscope/network_receive_megabytes",
            "workerscope/network_transmit_megabytes", "workerscope/tree/cpu_percent",
            "workerscope/tree/rss_megabytes"} <= names
    assert not any(name.startswith("system/") for name in names)
    history = tracking.get_metric_history(run.info.run_id, "workerscope/tree/rss_megabytes")
    tree = [s for s in m.timeline.samples if s.scope == "tree"]
    assert [h.step for h in history] == list(range(len(tree)))
    assert history[0].value == pytest.approx(tree[0].values["rss_bytes"] / 1e6)


def test_beside_mlflows_own_system_metrics(clean_env, tracking):
    """In a run with log_system_metrics=True, MLflow's own system/ series and ours never share
    a key, and every series keeps strictly increasing steps."""
    from workerscope.export.mlflow import log_timeline

    mlflow.set_system_metrics_sampling_interval(0.1)
    mlflow.set_system_metrics_samples_before_logging(1)
    try:
        with mlflow.start_run(log_system_metrics=True) as run:
            with monitor(interval=0.05) as m:
                sum(i * i for i in range(1_000_000))
            log_timeline(m.timeline)
            log_timeline(m.timeline)  # twice into one run: steps go on, never repeat
            deadline = time.monotonic() + 60
            while not any(k.startswith("system/")
                          for k in tracking.get_run(run.info.run_id).data.metrics):
                assert time.monotonic() < deadline, "MLflow's own monitor logged nothing"
                time.sleep(0.1)
    finally:
        mlflow.set_system_metrics_sampling_interval(None)
        mlflow.set_system_metrics_samples_before_logging(None)
    _steps_ok(tracking, run.info.run_id)
    history = tracking.get_metric_history(run.info.run_id, "workerscope/tree/rss_megabytes")
    tree = [s for s in m.timeline.samples if s.scope == "tree"]
    assert [h.step for h in history] == list(range(2 * len(tree)))


def _workers_timeline(pids, t0=10**18):
    """Two workers on one host and one on another, with tree, host, disk and GPU samples."""
    hosts = ("h1", "h1", "h2")
    t = Timeline(workers={f"w{p}": Worker(f"w{p}", host=h, pid=p) for p, h in zip(pids, hosts, strict=True)})
    for k in range(3):
        for order, p in enumerate(pids):
            at = t0 + k * 10**9 + order  # the first worker of a host samples first
            t.samples.append(Sample(f"w{p}", at, "tree", p, {"cpu_percent": 10.0 + k}))
            t.samples.append(Sample(f"w{p}", at, "host", None, {
                "cpu_percent": 5.0, "disk_read_bytes": 1e9 + k * 4e6,
                "disk_write_bytes": 2e9 + k * 1e6}))
            t.samples.append(Sample(f"w{p}", at, "gpu0", None, {"util_percent": 50.0 + k}))
    return t


def test_names_carry_no_pids_and_are_stable_across_runs():
    """Workers are named by machine and index, not pid: two runs of the same shape log the
    same names; host and GPU metrics come once per machine."""
    from workerscope.export.mlflow import metrics

    first = {name for name, *_ in metrics(_workers_timeline([101, 102, 201]))}
    second = {name for name, *_ in metrics(_workers_timeline([7001, 7002, 9001]))}
    assert first == second
    assert not any(str(p) in name for name in first for p in (101, 102, 201))
    assert {"workerscope/h1/worker0/tree/cpu_percent", "workerscope/h1/worker1/tree/cpu_percent",
            "workerscope/h2/worker0/tree/cpu_percent", "workerscope/h1/cpu_utilization_percentage",
            "workerscope/h2/gpu_0_utilization_percentage"} <= first
    rows = metrics(_workers_timeline([101, 102, 201]))
    pairs = [(name, step) for name, _, _, step in rows]
    assert len(pairs) == len(set(pairs)), "one value per name and step"


def test_disk_rates_and_totals():
    """Host disk counters become MB/s between samples and MB since the first, as MLflow logs
    network traffic."""
    from workerscope.export.mlflow import metrics

    rows = metrics(_workers_timeline([1, 2, 3]))
    series = {}
    for name, value, _, step in rows:
        series.setdefault(name, []).append((step, value))
    assert series["workerscope/h1/disk_read_megabytes_per_second"] == [
        (1, pytest.approx(4.0)), (2, pytest.approx(4.0))]
    assert series["workerscope/h1/disk_write_megabytes"] == [
        (0, 0.0), (1, pytest.approx(1.0)), (2, pytest.approx(2.0))]


def test_gpus_and_node_prefix(tracking):
    """GPU metrics follow MLflow's gpu_<i>_ names; workers are grouped by their node."""
    from workerscope.export.mlflow import log_timeline

    t = Timeline(workers={"a": Worker("a", host="h1", pid=1, node="node_0"),
                          "b": Worker("b", host="h2", pid=2)})
    for k in range(3):
        t.samples.append(Sample("a", 10**18 + k * 10**9, "gpu0",  None,
                                {"util_percent": 50.0 + k, "mem_used_bytes": 2e9,
                                 "mem_total_bytes": 8e9, "power_w": 300.0}))
        t.samples.append(Sample("b", 10**18 + k * 10**9, "host", None, {"cpu_percent": 10.0 * k}))
    with mlflow.start_run() as run:
        log_timeline(t)
    names = set(tracking.get_run(run.info.run_id).data.metrics)
    assert names == {"workerscope/node_0/gpu_0_utilization_percentage",
                     "workerscope/node_0/gpu_0_memory_usage_megabytes",
                     "workerscope/node_0/gpu_0_memory_usage_percentage",
                     "workerscope/node_0/gpu_0_power_usage_watts",
                     "workerscope/h2/cpu_utilization_percentage"}
    hist = tracking.get_metric_history(run.info.run_id,
                                       "workerscope/node_0/gpu_0_utilization_percentage")
    assert [h.value for h in hist] == [50.0, 51.0, 52.0]
    assert tracking.get_metric_history(
        run.info.run_id, "workerscope/node_0/gpu_0_memory_usage_percentage")[0].value == 25.0


def test_no_run_is_a_clear_error(tracking):
    """Without an active run or run_id, the error says how to give one."""
    from workerscope.export.mlflow import log_timeline

    with pytest.raises(WorkerscopeError, match="start_run"):
        log_timeline(Timeline())


def test_workers_sharing_a_node_get_distinct_names():
    """Two workers under one node id do not log one metric name twice per step."""
    from workerscope.export.mlflow import metrics

    t = Timeline(workers={"a": Worker("a", host="h", pid=1, node="n0"),
                          "b": Worker("b", host="h", pid=2, node="n0")})
    for wid in "ab":
        t.samples.append(Sample(wid, 10**18, "tree", 1, {"cpu_percent": 5.0, "cpu_percent_mean": 7.0}))
    rows = metrics(t)
    names = [(name, step) for name, _, _, step in rows]
    assert len(names) == len(set(names)) == 2
    assert {v for _, v, _, _ in rows} == {7.0}, "the mean of aggregated readings, as MLflow logs"
