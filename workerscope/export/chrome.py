"""Chrome trace event JSON (opens in ui.perfetto.dev and chrome://tracing).

`ts` and `dur` are microseconds relative to the trace start: epoch values would lose precision
in Perfetto's UI. The epoch origin lives in otherData. Slices on one thread must nest; spans
that overlap without nesting (async tasks on one event loop) go out as async b/e events.
Counters are grouped and named by counters.py. For traces past a few hundred thousand spans,
pftrace.py writes Perfetto's own format at a tenth of the size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..timeline import Job, Span, Timeline, in_start_order
from ..units import json_safe
from .attribution import NOT_FAILED, Attribution, attribute
from .counters import counter_groups, counter_metrics, counter_name, group_values
from .deaths import is_cut_short
from .stacks import mark_args


def _us(t_ns: int, origin: int) -> float:
    return round((t_ns - origin) / 1000.0, 3)


def _pid_map(t: Timeline) -> dict[tuple[str, int], int]:
    """Real pids where they are unique; pids of different hosts that collide get new numbers."""
    host_of = {wid: w.host for wid, w in t.workers.items()}
    keys: set[tuple[str, int]] = set()
    for s in t.spans:
        keys.add((host_of.get(s.worker, ""), s.pid))
    for smp in t.samples:
        if smp.pid is not None:
            keys.add((host_of.get(smp.worker, ""), smp.pid))
    for w in t.workers.values():
        keys.add((w.host, w.pid))
    out: dict[tuple[str, int], int] = {}
    used: set[int] = set()
    spare = 1 << 22  # above Linux's pid_max default
    for host, pid in sorted(keys):
        if pid in used:
            spare += 1
            out[(host, pid)] = spare
        else:
            out[(host, pid)] = pid
            used.add(pid)
    return out


def split_nested(spans: list[Span]) -> tuple[list[Span], list[Span]]:
    """Split one thread's spans into those that nest properly and those that overlap."""
    nested, overlapping = [], []
    stack: list[Span] = []
    for s in in_start_order(spans):
        while stack and stack[-1].end_ns <= s.start_ns:
            stack.pop()
        if stack and s.end_ns > stack[-1].end_ns:
            overlapping.append(s)
            continue
        nested.append(s)
        stack.append(s)
    return nested, overlapping


def to_chrome(t: Timeline, attribution: Attribution | None = None) -> dict[str, Any]:
    """The trace as a dict ready for json.dump. Each span's args carry its attrs, error, job,
    worker and its resource attribution (cpu_s, peak_rss_bytes, ...; see attribution.py);
    `cut_short: true` on a span its process's death ended; a job's slice and its failure
    instant carry `death`, the figures of how its worker died (Job.death)."""
    attribution = attribute(t) if attribution is None else attribution
    origin = t.start_ns or 0
    host_of = {wid: w.host for wid, w in t.workers.items()}
    pids = _pid_map(t)

    def pid_of(worker: str, pid: int) -> int:
        return pids.get((host_of.get(worker, ""), pid), pid)

    events = _names(t, host_of, pid_of)
    events += _span_events(t, attribution, origin, pid_of)
    events += [{"ph": "i", "s": "t", "name": m.name, "pid": pid_of(m.worker, m.pid), "tid": m.tid,
                "ts": _us(m.t_ns, origin), "args": mark_args(m)} for m in t.marks]
    events += _failed_jobs(t, origin, pid_of)
    events.extend(_counters(t, origin, pid_of))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "workerscope",
            "origin_unix_ns": origin,
            "workers": {wid: {"host": w.host, "node": w.node, "pid": w.pid, "status": w.status,
                              "frames": w.frames, "lost": w.lost, "dropped": w.dropped}
                        for wid, w in t.workers.items()},
            "remapped_pids": {f"{h}:{pid}": new for (h, pid), new in pids.items() if new != pid},
        },
    }


def to_json(t: Timeline) -> str:
    """The trace as JSON text that every JSON parser reads (JSON.parse included).

    Span and mark args hold the user's attrs: NaN or infinities (not JSON, though Python
    writes them), keys json cannot write (tuples), containers nested past its recursion, any
    other object. The common trace has none and is written in one go; one that fails is
    written again with every event's args made safe by units.json_safe."""
    import json

    trace = to_chrome(t)
    try:
        # default=repr: bytes, numpy values and the like; never fail on them.
        return json.dumps(trace, separators=(",", ":"), default=repr, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        for event in trace["traceEvents"]:
            if "args" in event:
                event["args"] = json_safe(event["args"])
        return json.dumps(trace, separators=(",", ":"), default=repr, allow_nan=False)


def _names(t: Timeline, host_of: dict[str, str], pid_of: Callable[[str, int], int]
           ) -> list[dict[str, Any]]:
    """The "M" events: each process's name (a worker's root named after the worker when it
    has none), each worker's labels, each thread's name."""
    events: list[dict[str, Any]] = []
    named: set[int] = set()
    for (wid, pid), name in sorted(t.processes.items()):
        p = pid_of(wid, pid)
        if p not in named:
            named.add(p)
            events.append({"ph": "M", "name": "process_name", "pid": p, "tid": 0,
                           "args": {"name": f"{name} ({host_of.get(wid, '')}:{pid})"}})
    for w in t.workers.values():
        p = pid_of(w.id, w.pid)
        if p not in named:
            named.add(p)
            events.append({"ph": "M", "name": "process_name", "pid": p, "tid": 0,
                           "args": {"name": f"worker {w.host}:{w.pid}"}})
        events.append({"ph": "M", "name": "process_labels", "pid": p, "tid": 0,
                       "args": {"labels": f"{w.status}, {w.lost} frames lost"}})
    for (wid, pid, tid), name in sorted(t.threads.items()):
        events.append({"ph": "M", "name": "thread_name", "pid": pid_of(wid, pid), "tid": tid,
                       "args": {"name": name}})
    return events


def _span_events(t: Timeline, attribution: Attribution, origin: int,
                 pid_of: Callable[[str, int], int]) -> list[dict[str, Any]]:
    """Each thread's spans: "X" slices where they nest, async "b"/"e" pairs where not."""
    jobs = {(j.worker, j.pid, j.id): j for j in t.jobs}
    by_thread: dict[tuple[int, int], list[Span]] = {}
    for s in t.spans:
        by_thread.setdefault((pid_of(s.worker, s.pid), s.tid), []).append(s)
    events: list[dict[str, Any]] = []
    for (p, tid), group in by_thread.items():
        nested, overlapping = split_nested(group)
        for s in nested:
            events.append({"ph": "X", "name": s.name, "cat": s.kind, "pid": p, "tid": tid,
                           "ts": _us(s.start_ns, origin), "dur": _us(s.end_ns, s.start_ns),
                           "args": _span_args(s, attribution, jobs)})
        for s in overlapping:
            common = {"name": s.name, "cat": s.kind, "pid": p, "tid": tid,
                      "id2": {"local": f"{s.worker}:{s.id}"}}
            events.append({**common, "ph": "b", "ts": _us(s.start_ns, origin),
                           "args": _span_args(s, attribution, jobs)})
            events.append({**common, "ph": "e", "ts": _us(s.end_ns, origin)})
    return events


def _failed_jobs(t: Timeline, origin: int, pid_of: Callable[[str, int], int]
                 ) -> list[dict[str, Any]]:
    """A failed or killed job is also an instant on its process, easy to spot."""
    events: list[dict[str, Any]] = []
    for j in t.jobs:
        if j.status not in NOT_FAILED:
            end = j.end_ns if j.end_ns is not None else j.start_ns
            args: dict[str, Any] = {"error": j.error, "job": j.id}
            if j.death:
                args["death"] = j.death
            events.append({"ph": "i", "s": "p", "name": f"job {j.status}: {j.name}",
                           "pid": pid_of(j.worker, j.pid), "tid": j.tid or j.pid,
                           "ts": _us(end, origin), "args": args})
    return events


def span_args(s: Span, jobs: dict[tuple[str, int, int], Job]) -> dict[str, Any]:
    """A span's own arguments in either trace: its attrs, error, `cut_short: true` if its
    process's death ended it, and for a job's span the figures of how its worker died."""
    args: dict[str, Any] = dict(s.attrs or {})
    if s.error:
        args["error"] = s.error
    if is_cut_short(s):
        args["cut_short"] = True
    if s.kind == "job":
        job = jobs.get((s.worker, s.pid, s.id))
        if job is not None and job.death:
            args["death"] = job.death
    return args


def _span_args(s: Span, attribution: Attribution,
               jobs: dict[tuple[str, int, int], Job]) -> dict[str, Any]:
    args = span_args(s, jobs)
    if s.job is not None:
        args["job"] = s.job
    for key, value in attribution.get((s.worker, s.pid, s.id), {}).items():
        if value:  # zeros say nothing and cost ~20 bytes each, a million times over
            args[f"used.{key}"] = float(f"{value:.4g}")
    return args


# A machine's counters sit on a process of their own per host, numbered above the pids
# _pid_map hands out to colliding pids.
_HOST_PID = 1 << 23


def _counters(t: Timeline, origin: int, pid_of: Callable[[str, int], int]) -> list[dict[str, Any]]:
    """"C" events grouped as counters.py orders them: each process's tree.* and proc.* first,
    a thread's counters named with its tid, host.* and gpu<i>.* once per host on a process
    named after the host, cumulative counters as rates (`<scope>.<metric>/s`)."""
    workers, machines = counter_groups(t)
    events: list[dict[str, Any]] = []
    hosts = sorted({g.host for g in machines})
    host_pid = {h: _HOST_PID + i for i, h in enumerate(hosts)}
    for h, p in host_pid.items():
        events.append({"ph": "M", "name": "process_name", "pid": p, "tid": 0,
                       "args": {"name": f"host {h or 'localhost'}"}})
    for g in (*workers, *machines):
        if g.scope == "thread" and not counter_metrics(g):
            continue  # a thread whose CPU never moved (a pool's parked one): no tracks of 0s
        # A worker's tree without a root pid (its hello never came, or was refused) sits on
        # the worker's process 0, not on a host's.
        p = host_pid[g.host] if g in machines else pid_of(g.worker, g.pid or 0)
        for t_ns, values in group_values(g):
            ts = _us(t_ns, origin)
            for metric, value in values:
                events.append({"ph": "C", "name": counter_name(g.scope, metric, g.tid), "pid": p,
                               "ts": ts, "args": {"value": value}})
    return events
