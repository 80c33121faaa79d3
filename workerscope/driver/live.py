"""What a live view shows of each worker, kept up to date cheaply as frames arrive.

Only the latest values stay in memory (the full record is the Timeline's business): each
worker's last tree sample, GPU use, open jobs, last span and count of failed jobs, and the
durations of the last KEEP_JOBS jobs, against which a running job is judged a straggler by
the one rule every view uses, `workerscope.timeline.is_straggler`. CPU and GPU use show only
for a running worker. Not thread-safe: the Subscriber calls it under its lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import protocol
from ..builder import MAX_NAME, bounded_text
from ..protocol import Status
from ..timeline import Worker, is_straggler, straggler_limit

# Durations of this many most recent jobs make the median a running job is judged against.
KEEP_JOBS = 1000
# Of a worker's last tree sample, what rows and the /metrics exporter show.
TREE_KEYS = ("cpu_percent", "rss_bytes", "peak_rss_bytes", "cpu_user_s", "cpu_system_s",
             "read_bytes", "write_bytes", "num_procs", "num_threads")
ENDED = frozenset(str(s) for s in protocol.JOB_END_STATUSES)


@dataclass
class WorkerLive:
    """The latest of one worker, as frames told it."""

    tree: dict[str, float] = field(default_factory=dict)  # the last tree sample's values
    gpu_util: float | None = None  # mean util_percent over the GPUs of the last sample
    jobs: dict[int, tuple[str, float]] = field(default_factory=dict)  # id -> (name, started)
    span: str | None = None  # the name of the last span (or mark) recorded
    inside: dict[int, str] = field(default_factory=dict)  # job -> the span it is in now
    failed_jobs: int = 0  # jobs that ended otherwise than ok
    ended: dict[str, int] = field(default_factory=dict)  # jobs ended, by status
    gpu_mem: float | None = None  # GPU memory in use over the last sample's GPUs (_gpu_memory)


class LiveState:
    """Live state of every worker, and the durations of recent jobs."""

    def __init__(self, keep_jobs: int = KEEP_JOBS) -> None:
        self.workers: dict[str, WorkerLive] = {}
        self.job_seconds: deque[float] = deque(maxlen=keep_jobs)

    def note(self, frame: protocol.Frame, now: float) -> bool:
        """Fold in one frame that the TimelineBuilder has already checked, received at `now`
        (monotonic seconds). True for a job_end that ended a job open here (not one of a job
        never started, or ended already: those end nothing)."""
        b = frame.body
        w = self.workers.setdefault(frame.worker, WorkerLive())
        if frame.kind == protocol.SAMPLE:
            if b.get("tree"):
                # What the rows read, not the whole map: a tree sample of 55,000 keys would
                # stay here for the worker's life.
                w.tree = {k: b["tree"][k] for k in TREE_KEYS if k in b["tree"]}
            utils = [float(v["util_percent"]) for _, v in b.get("gpus", ()) if "util_percent" in v]
            if utils:
                w.gpu_util = sum(utils) / len(utils)
            mem = _gpu_memory(b.get("gpus", ()))
            if mem is not None:
                w.gpu_mem = mem
        elif frame.kind == protocol.JOB_START:
            w.jobs[_job_id(b)] = (bounded_text(b.get("name"), MAX_NAME), now)
        elif frame.kind == protocol.JOB_END:
            started = w.jobs.pop(_job_id(b), None)
            if started is None:
                return False
            self.job_seconds.append(now - started[1])
            status = str(b.get("status", Status.OK))
            if status != Status.OK:
                w.failed_jobs += 1
            key = status if status in ENDED else "other"  # a bounded set of labels
            w.ended[key] = w.ended.get(key, 0) + 1
            return True
        elif frame.kind == protocol.SPANS and b.get("records"):
            w.span = str(protocol.SpanRecord(*b["records"][-1]).name)  # an older one: shorter
        elif frame.kind == protocol.HEARTBEAT:
            w.inside = _spans_open(b.get("spans_open"))
        return False

    def stragglers(self, now: float) -> list[tuple[str, int, float, float]]:
        """Running jobs that cross the straggler rule now: (worker, job, seconds running, the
        time the rule puts the line at). The line is worked out once for all of them."""
        limit = straggler_limit(self.job_seconds)
        if limit is None:
            return []
        return [(wid, job, now - t0, limit) for wid, w in self.workers.items()
                for job, (_, t0) in w.jobs.items() if now - t0 > limit]

    def forget(self, wid: str) -> None:
        self.workers.pop(wid, None)

    def open_jobs(self, wid: str) -> int:
        w = self.workers.get(wid)
        return 0 if w is None else len(w.jobs)

    def rows(self, workers: Mapping[str, Worker], states: Mapping[str, str],
             lost: Mapping[str, int], dropped: Mapping[str, int],
             now: float) -> list[dict[str, object]]:
        """One row per worker, sorted by id: see Subscriber.live()."""
        done = list(self.job_seconds)
        rows: list[dict[str, object]] = []
        for wid, worker in sorted(workers.items()):
            w = self.workers.get(wid) or WorkerLive()
            running = max((now - t0 for _, t0 in w.jobs.values()), default=None)
            # CPU and GPU use are rates of the present: a worker with no job running is not
            # sampled, and its last reading says nothing of now. RSS is a level: it stays.
            busy = states.get(wid) == Status.RUNNING
            rows.append({
                "worker": wid, "host": worker.host, "pid": worker.pid,
                "status": states.get(wid, ""),
                "job": ", ".join(name for name, _ in w.jobs.values()) or None,
                # the span a running job is in now, else the last one recorded
                "span": next((w.inside[j] for j in w.jobs if j in w.inside), w.span),
                "cpu_percent": w.tree.get("cpu_percent") if busy else None,
                "rss_bytes": w.tree.get("rss_bytes"),
                "gpu_util_percent": w.gpu_util if busy else None,
                "failed_jobs": w.failed_jobs, "lost": lost.get(wid, 0),
                "dropped": dropped.get(wid, 0), "running_s": running,
                "straggler": running is not None and is_straggler(running, done),
            })
        return rows


MAX_OPEN = 64  # open jobs a heartbeat may name a span of
MAX_SPAN_NAME = 200


def _spans_open(value: Any) -> dict[int, str]:
    """A heartbeat's [[job, span name], ...], from an untrusted frame: what is well formed,
    bounded; nothing where it is not."""
    out: dict[int, str] = {}
    if not isinstance(value, list):
        return out
    for item in value[:MAX_OPEN]:
        if (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int)
                and not isinstance(item[0], bool) and isinstance(item[1], str)):
            out[item[0]] = item[1][:MAX_SPAN_NAME]
    return out


def _gpu_memory(rows: Any) -> float | None:
    """GPU memory in use over a sample's gpus rows (checked by the builder): a GPU in MIG mode
    counts its instances' rows ("0/mig1"), not its own (the whole board's, other tenants'
    instances included), so nothing is counted twice."""
    boards: dict[int, float] = {}
    instances: dict[int, float] = {}
    for key, values in rows:
        if "mem_used_bytes" not in values:
            continue
        if isinstance(key, str):  # INDEX/migGI
            gpu = int(key.partition("/")[0])
            instances[gpu] = instances.get(gpu, 0.0) + float(values["mem_used_bytes"])
        else:
            boards[int(key)] = float(values["mem_used_bytes"])
    boards.update(instances)
    return sum(boards.values()) if boards else None


def _job_id(body: dict[str, Any]) -> int:
    # The builder has read this field with int() already, so this cannot fail here.
    return int(body["job"])
