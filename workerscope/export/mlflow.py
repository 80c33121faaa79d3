"""Log a Timeline's samples to MLflow as system metrics, under MLflow's own names.

A user of `mlflow.start_run(log_system_metrics=True)` finds the same charts
(system/cpu_utilization_percentage, system/system_memory_usage_megabytes,
system/network_receive_megabytes, system/gpu_0_utilization_percentage, ...), one step per
sample, and more: workerscope's per-tree metrics under system/tree/<metric>. With several
workers (or a `node` set), each worker's metrics are prefixed by a node id the way MLflow's
node_id does it: system/<node>/cpu_utilization_percentage.

Needs mlflow (`pip install 'workerscope[mlflow]'`), imported only here and only when called.
"""

from __future__ import annotations

from typing import Any

from ..errors import WorkerscopeError
from ..timeline import Timeline

BATCH = 1000  # MLflow takes at most 1000 metrics per log_batch call

# MLflow's megabytes are 10**6 bytes (its own system-metrics monitors divide by 1e6). These are
# MLflow's names and MLflow's units, so our charts line up with its own: not units.py's
# binary units, which are for what workerscope itself shows.
MEGABYTE = 1e6

# workerscope's per-tree metrics logged beside MLflow's names (bytes become MLflow's megabytes).
TREE = ("cpu_percent", "rss_bytes", "peak_rss_bytes", "uss_bytes", "read_bytes", "write_bytes",
        "num_procs", "num_threads", "gpu_mem_bytes", "gpu_util_percent")


def _mlflow_host(values: dict[str, float], first: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    if "cpu_percent" in values:
        out["cpu_utilization_percentage"] = values["cpu_percent"]
    if "mem_used_bytes" in values:
        out["system_memory_usage_megabytes"] = values["mem_used_bytes"] / MEGABYTE
        if values.get("mem_total_bytes"):
            out["system_memory_usage_percentage"] = (
                100.0 * values["mem_used_bytes"] / values["mem_total_bytes"])
    # MLflow logs network traffic since monitoring began, in MB.
    for ours, theirs in (("net_recv_bytes", "network_receive_megabytes"),
                         ("net_sent_bytes", "network_transmit_megabytes")):
        if ours in values and ours in first:
            out[theirs] = (values[ours] - first[ours]) / MEGABYTE
    return out


def _mlflow_gpu(i: str, values: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    if "util_percent" in values:
        out[f"gpu_{i}_utilization_percentage"] = values["util_percent"]
    if "mem_used_bytes" in values:
        out[f"gpu_{i}_memory_usage_megabytes"] = values["mem_used_bytes"] / MEGABYTE
        if values.get("mem_total_bytes"):
            out[f"gpu_{i}_memory_usage_percentage"] = (
                100.0 * values["mem_used_bytes"] / values["mem_total_bytes"])
    if "power_w" in values:
        out[f"gpu_{i}_power_usage_watts"] = values["power_w"]
    return out


def _tree(values: dict[str, float]) -> dict[str, float]:
    out = {}
    for key in TREE:
        if key in values:
            name = key.replace("_bytes", "_megabytes")
            out[f"tree/{name}"] = values[key] / MEGABYTE if key.endswith("_bytes") else values[key]
    return out


def _mean(values: dict[str, float]) -> dict[str, float]:
    """With samples_per_frame, log the mean of the readings as MLflow does, not the last."""
    return {k: values.get(f"{k}_mean", v) for k, v in values.items()
            if not k.endswith(("_min", "_mean", "_max"))}


def metrics(t: Timeline, node_id: str | None = None) -> list[tuple[str, float, int, int]]:
    """(name, value, timestamp ms, step) for every metric MLflow would get."""
    nodes: dict[str, str | None] = {}
    for wid, w in t.workers.items():
        node = node_id or w.node
        if node is None and len(t.workers) > 1:
            node = f"{w.host}-{w.pid}"
        nodes[wid] = node
    prefix_of: dict[str, str] = {}
    for wid, node in nodes.items():
        name = node
        if node is not None and sum(n == node for n in nodes.values()) > 1:
            # Two workers under one node id would log one name twice per step.
            name = f"{node}-{t.workers[wid].pid}"
        prefix_of[wid] = "system/" + (f"{name}/" if name else "")
    out: list[tuple[str, float, int, int]] = []
    step: dict[tuple[str, str], int] = {}
    first_host: dict[str, dict[str, float]] = {}
    for s in sorted(t.samples, key=lambda s: s.t_ns):
        raw = _mean(s.values)
        if s.scope == "host":
            first = first_host.setdefault(s.worker, raw)
            values = _mlflow_host(raw, first)
        elif s.scope.startswith("gpu"):
            values = _mlflow_gpu(s.scope[3:], raw)
        elif s.scope == "tree":
            values = _tree(raw)
        else:
            continue
        key = (s.worker, s.scope)
        n = step.get(key, 0)
        step[key] = n + 1
        prefix = prefix_of.get(s.worker, "system/")
        out.extend((prefix + name, float(v), s.t_ns // 1_000_000, n) for name, v in values.items())
    return out


def log_timeline(timeline: Timeline, run_id: str | None = None, client: Any = None,
                 node_id: str | None = None) -> int:
    """Log the timeline's samples to an MLflow run (the active one if run_id is None).
    Returns how many metric values were logged."""
    try:
        import mlflow
        from mlflow.entities import Metric
    except ImportError as err:
        raise WorkerscopeError("MLflow export needs mlflow: pip install 'workerscope[mlflow]'") from err
    if client is None:
        client = mlflow.MlflowClient()
    if run_id is None:
        run = mlflow.active_run()
        if run is None:
            raise WorkerscopeError("no run_id given and no active MLflow run: start one with "
                                   "mlflow.start_run() or pass run_id=")
        run_id = run.info.run_id
    rows = metrics(timeline, node_id)
    for i in range(0, len(rows), BATCH):
        client.log_batch(run_id, metrics=[Metric(name, value, ts, step)
                                          for name, value, ts, step in rows[i:i + BATCH]])
    return len(rows)
