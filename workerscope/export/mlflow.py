"""Log a Timeline's samples to MLflow, under workerscope/ with MLflow's own metric names.

A user of `mlflow.start_run(log_system_metrics=True)` finds the same charts
(cpu_utilization_percentage, system_memory_usage_megabytes, network_receive_megabytes,
gpu_0_utilization_percentage, ...), one step per sample, and more: workerscope's per-tree
metrics under tree/<metric> and the host's disk traffic. All of it goes under our own
prefix, `workerscope/`, never MLflow's `system/`: MLflow's monitor logs those keys with steps
of its own, and the two series would interleave under one name. Several workers (or a node
set) are named by machine and index, as MLflow's node_id does it, never by pid, so the names
are the same from run to run: workerscope/<node or host>/ for the machine's host and GPU
metrics (logged once per machine), workerscope/<node or host>/worker<k>/tree/ for each
worker's tree (k counts the machine's workers in the order they first sampled). Steps go on
from what the run already holds under a name, so logging twice into one run never repeats one.

Needs mlflow (`pip install 'workerscope[mlflow]'`), imported only here and only when called.
"""

from __future__ import annotations

from typing import Any

from ..errors import MissingExtraError, WorkerscopeError
from ..timeline import Sample, Timeline

PREFIX = "workerscope/"
BATCH = 1000  # MLflow takes at most 1000 metrics per log_batch call

# MLflow's megabytes are 10**6 bytes (its own system-metrics monitors divide by 1e6). These are
# MLflow's names and MLflow's units, so our charts line up with its own: not units.py's
# binary units, which are for what workerscope itself shows.
MEGABYTE = 1e6

# workerscope's per-tree metrics logged beside MLflow's names (bytes become MLflow's megabytes).
TREE = ("cpu_percent", "rss_bytes", "peak_rss_bytes", "uss_bytes", "read_bytes", "write_bytes",
        "num_procs", "num_threads", "gpu_mem_bytes", "gpu_util_percent")


def _mlflow_host(values: dict[str, float], first: dict[str, float],
                 last: Sample | None, t_ns: int) -> dict[str, float]:
    out: dict[str, float] = {}
    if "cpu_percent" in values:
        out["cpu_utilization_percentage"] = values["cpu_percent"]
    if "mem_used_bytes" in values:
        out["system_memory_usage_megabytes"] = values["mem_used_bytes"] / MEGABYTE
        if values.get("mem_total_bytes"):
            out["system_memory_usage_percentage"] = (
                100.0 * values["mem_used_bytes"] / values["mem_total_bytes"])
    # MLflow logs network traffic since monitoring began, in MB; disk traffic goes the same way,
    # and as a rate between samples.
    for ours, theirs in (("net_recv_bytes", "network_receive_megabytes"),
                         ("net_sent_bytes", "network_transmit_megabytes"),
                         ("disk_read_bytes", "disk_read_megabytes"),
                         ("disk_write_bytes", "disk_write_megabytes")):
        if ours in values and ours in first:
            out[theirs] = (values[ours] - first[ours]) / MEGABYTE
    out.update(_rates(values, last, t_ns, ("disk_read_bytes", "disk_write_bytes")))
    return out


def _rates(values: dict[str, float], last: Sample | None, t_ns: int,
           keys: tuple[str, ...]) -> dict[str, float]:
    """<key without _bytes>_megabytes_per_second since the previous sample of the same scope."""
    out: dict[str, float] = {}
    if last is None or t_ns <= last.t_ns:
        return out
    seconds = (t_ns - last.t_ns) / 1e9
    for key in keys:
        before = _mean(last.values).get(key)
        if key in values and before is not None:
            out[key.replace("_bytes", "_megabytes_per_second")] = (
                (values[key] - before) / MEGABYTE / seconds)
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


def _tree(values: dict[str, float], last: Sample | None, t_ns: int) -> dict[str, float]:
    out = {}
    for key in TREE:
        if key in values:
            name = key.replace("_bytes", "_megabytes")
            out[f"tree/{name}"] = values[key] / MEGABYTE if key.endswith("_bytes") else values[key]
    rates = _rates(values, last, t_ns, ("read_bytes", "write_bytes"))
    out.update({f"tree/{k}": v for k, v in rates.items()})
    return out


def _mean(values: dict[str, float]) -> dict[str, float]:
    """With samples_per_frame, log the mean of the readings as MLflow does, not the last."""
    return {k: values.get(f"{k}_mean", v) for k, v in values.items()
            if not k.endswith(("_min", "_mean", "_max"))}


def _prefixes(t: Timeline, node_id: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """Each worker's prefix for its machine's metrics and for its own: by node (or host) and
    the worker's index there, in the order the workers first sampled; never by pid."""
    first: dict[str, int] = {}
    for s in t.samples:
        if s.t_ns < first.get(s.worker, s.t_ns + 1):
            first[s.worker] = s.t_ns
    order = sorted(t.workers, key=lambda wid: (first.get(wid, 2**63), wid))
    machine = {wid: node_id or t.workers[wid].node or t.workers[wid].host for wid in order}
    several = node_id is not None or len(order) > 1 or any(t.workers[w].node for w in order)
    host: dict[str, str] = {}
    own: dict[str, str] = {}
    count: dict[str, int] = {}
    for wid in order:
        m = machine[wid]
        k = count[m] = count.get(m, -1) + 1
        host[wid] = f"{PREFIX}{m}/" if several else PREFIX
        own[wid] = f"{PREFIX}{m}/worker{k}/" if several else PREFIX
    return host, own


def metrics(t: Timeline, node_id: str | None = None) -> list[tuple[str, float, int, int]]:
    """(name, value, timestamp ms, step) for every metric logged; steps from 0 for each
    worker (or machine) and scope."""
    host_prefix, own_prefix = _prefixes(t, node_id)
    # A machine's host and GPU values, as every worker there reads them: from its first worker.
    source: dict[str, str] = {}
    for wid in host_prefix:  # in the workers' order
        source.setdefault(host_prefix[wid], wid)
    out: list[tuple[str, float, int, int]] = []
    step: dict[tuple[str, str], int] = {}
    first_host: dict[str, dict[str, float]] = {}
    last: dict[tuple[str, str], Sample] = {}
    for s in sorted(t.samples, key=lambda s: s.t_ns):
        raw = _mean(s.values)
        key = (s.worker, s.scope)
        machine_wide = s.scope == "host" or s.scope.startswith("gpu")
        if machine_wide and source.get(host_prefix.get(s.worker, PREFIX), s.worker) != s.worker:
            continue
        if s.scope == "host":
            first = first_host.setdefault(s.worker, raw)
            values = _mlflow_host(raw, first, last.get(key), s.t_ns)
        elif s.scope.startswith("gpu"):
            values = _mlflow_gpu(s.scope[3:].replace("/", "_"), raw)
        elif s.scope == "tree":
            values = _tree(raw, last.get(key), s.t_ns)
        else:
            continue
        last[key] = s
        n = step.get(key, 0)
        step[key] = n + 1
        prefix = (host_prefix if machine_wide else own_prefix).get(s.worker, PREFIX)
        out.extend((prefix + name, float(v), s.t_ns // 1_000_000, n) for name, v in values.items())
    return out


def _after_logged(client: Any, run_id: str, rows: list[tuple[str, float, int, int]]
                  ) -> list[tuple[str, float, int, int]]:
    """Rows with their steps moved past the last step the run holds under each name."""
    held = set(client.get_run(run_id).data.metrics)
    offset = {name: 1 + max((m.step for m in client.get_metric_history(run_id, name)), default=-1)
              for name in {r[0] for r in rows} & held}
    if not offset:
        return rows
    return [(name, value, ts, step + offset.get(name, 0)) for name, value, ts, step in rows]


def log_timeline(timeline: Timeline, run_id: str | None = None, client: Any = None,
                 node_id: str | None = None) -> int:
    """Log the timeline's samples to an MLflow run (the active one if run_id is None).
    Returns how many metric values were logged."""
    try:
        import mlflow
        from mlflow.entities import Metric
    except ImportError as err:
        raise MissingExtraError("MLflow export needs mlflow: pip install 'workerscope[mlflow]'") from err
    if client is None:
        client = mlflow.MlflowClient()
    if run_id is None:
        run = mlflow.active_run()
        if run is None:
            raise WorkerscopeError("no run_id given and no active MLflow run: start one with "
                                   "mlflow.start_run() or pass run_id=")
        run_id = run.info.run_id
    rows = _after_logged(client, run_id, metrics(timeline, node_id))
    for i in range(0, len(rows), BATCH):
        client.log_batch(run_id, metrics=[Metric(name, value, ts, step)
                                          for name, value, ts, step in rows[i:i + BATCH]])
    return len(rows)
