"""MLflow export against a real local tracking store, read back through MlflowClient."""

from __future__ import annotations

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


def test_real_job_logs_mlflow_system_metric_names(clean_env, tracking):
    """A monitored job's samples land under MLflow's system/ names and tree metrics, with steps."""
    from workerscope.export.mlflow import log_timeline

    with monitor(interval=0.05) as m:
        sum(i * i for i in range(2_000_000))
    exp = tracking.create_experiment("ws")
    run = tracking.create_run(exp)
    n = log_timeline(m.timeline, run_id=run.info.run_id, client=tracking)
    assert n > 0
    names = set(tracking.get_run(run.info.run_id).data.metrics)
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes",
            "system/system_memory_usage_percentage", "system/network_receive_megabytes",
            "system/network_transmit_megabytes", "system/tree/cpu_percent",
            "system/tree/rss_megabytes"} <= names
    history = tracking.get_metric_history(run.info.run_id, "system/tree/rss_megabytes")
    tree = [s for s in m.timeline.samples if s.scope == "tree"]
    assert [h.step for h in history] == list(range(len(tree)))
    assert history[0].value == pytest.approx(tree[0].values["rss_bytes"] / 1e6)


def test_gpus_and_node_prefix(tracking):
    """GPU metrics follow MLflow's gpu_<i>_ names; several workers get node prefixes."""
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
    assert names == {"system/node_0/gpu_0_utilization_percentage",
                     "system/node_0/gpu_0_memory_usage_megabytes",
                     "system/node_0/gpu_0_memory_usage_percentage",
                     "system/node_0/gpu_0_power_usage_watts",
                     "system/h2-2/cpu_utilization_percentage"}
    hist = tracking.get_metric_history(run.info.run_id, "system/node_0/gpu_0_utilization_percentage")
    assert [h.value for h in hist] == [50.0, 51.0, 52.0]
    assert tracking.get_metric_history(
        run.info.run_id, "system/node_0/gpu_0_memory_usage_percentage")[0].value == 25.0


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
