"""How every view names a worker's death and a span cut short by it.

The sidecar's evidence is in the Timeline (docs/METRICS.md, "How a worker's death is named"):
a job its worker died in has status `killed` or `oom_killed`, an error text, and `Job.death`,
the figures behind the text. A span still open when its process died ends at the death and is
marked cut short. This module turns those into the short words (`oom`, `SIGKILL`, `exit 3`)
and the figures ("cgroup limit 64 MiB") that the terminal, the HTML report, the PNG and the
trace all show the same way.
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

from ..protocol import Status
from ..timeline import Job, Span, Timeline
from ..units import fmt_bytes, fmt_signal, short_worker

# A job in one of these ended because its worker died inside it.
JOB_DIED = (Status.KILLED, Status.OOM_KILLED)

_SIGNAL_TEXT = re.compile(r"\bkilled by (SIG[A-Z0-9]+)")
_EXIT_TEXT = re.compile(r"\bwith status (\d+)")


def is_cut_short(span: Span) -> bool:
    """The span was still open when its process died (it ends at the death)."""
    # getattr: older records (and timelines built before the field existed) have no flag.
    return bool(getattr(span, "cut_short", False))


def cause(job: Job) -> str:
    """What the job's worker died of, in a word or two: "oom", "SIGKILL", "exit 3",
    "unknown"; "" when it did not die in this job. From Job.death where the sidecar sent it,
    else from the status and the error text (timelines older than Job.death)."""
    if job.status not in JOB_DIED:
        return ""
    death = job.death or {}
    what = death.get("cause")
    if what == "oom" or job.status == Status.OOM_KILLED:
        return "oom"
    if isinstance(death.get("signal"), int) and what in ("signal", None):
        return fmt_signal(death["signal"]) + (" (core)" if death.get("core_dumped") else "")
    if what == "exit" and isinstance(death.get("exit_status"), int):
        return f"exit {death['exit_status']}"
    text = job.error or ""
    if m := _SIGNAL_TEXT.search(text):
        return m.group(1)
    if "exited" in text and (m := _EXIT_TEXT.search(text)):
        return f"exit {m.group(1)}"
    return "unknown"


def headline(word: str) -> str:
    """The cause as a tag on a worker: "OOM-killed", "killed (SIGKILL)", "exited (3)"."""
    if word == "oom":
        return "OOM-killed"
    if word.startswith("exit "):
        return f"exited ({word[5:]})"
    if word in ("", "unknown"):
        return "died"
    return f"killed ({word})"


# (key, label) of the byte figures, in the order they are told.
_BYTES = (("cgroup_limit_bytes", "cgroup limit"), ("cgroup_peak_bytes", "cgroup peak"),
          ("last_rss_bytes", "last RSS"), ("peak_rss_bytes", "peak RSS"),
          ("last_tree_rss_bytes", "tree RSS"), ("cgroup_usage_bytes", "cgroup usage after"),
          ("gpu_peak_mem_bytes", "GPU memory peak"))


def figures(death: dict[str, Any] | None) -> list[str]:
    """The figures of Job.death as short phrases, each unit formatted as every view does:
    ["cgroup limit 64 MiB", "last RSS 83.5 MiB", ..., "kernel log: Killed process ..."]."""
    if not death:
        return []
    out: list[str] = []
    if isinstance(death.get("signal"), int):
        out.append(f"signal {fmt_signal(death['signal'])}"
                   + (" (core dumped)" if death.get("core_dumped") else ""))
    if isinstance(death.get("exit_status"), int):
        out.append(f"exit status {death['exit_status']}")
    for key, label in _BYTES:
        if isinstance(death.get(key), (int, float)):
            out.append(f"{label} {fmt_bytes(death[key])}")
    if death.get("oom_kills"):
        out.append(f"OOM kills in its cgroup: {death['oom_kills']}")
    out += _gpu_figures(death)
    for key, label in (("kernel_log", "kernel log"), ("kernel_log_error", "kernel log unread"),
                       ("gpu_accounting", "GPU"), ("note", "note")):
        if death.get(key):
            out.append(f"{label}: {death[key]}")
    return out


def _gpu_figures(death: dict[str, Any]) -> list[str]:
    """NVML's accounting of the dead process on each GPU, and the Xid errors of the job."""
    out: list[str] = []
    lifetime = death.get("gpu_lifetime")
    for one in lifetime if isinstance(lifetime, list) else ():
        if isinstance(one, dict) and isinstance(one.get("device"), str):
            parts = [f"{k} {one[k]}%" for k in ("util_percent",) if isinstance(one.get(k), int)]
            if isinstance(one.get("peak_mem_bytes"), int):
                parts.insert(0, f"peak {fmt_bytes(one['peak_mem_bytes'])}")
            out.append(f"{one['device'][:20]} over its life: {', '.join(parts) or 'ran there'}")
    xids = death.get("gpu_xids")
    for x in xids if isinstance(xids, list) else ():
        if isinstance(x, dict) and isinstance(x.get("xid"), int):
            out.append(f"GPU Xid {x['xid']} on {str(x.get('device', '?'))[:20]}")
    return out


class Death(NamedTuple):
    """A worker's death inside a job."""

    worker: str
    job: Job
    cause: str  # cause(job)
    t_ns: int  # when: the job's end, which the sidecar set at the death


def deaths(t: Timeline) -> list[Death]:
    """Every job a worker died inside, in time order."""
    out = []
    for j in t.jobs:
        if j.status in JOB_DIED:
            out.append(Death(j.worker, j, cause(j), j.end_ns if j.end_ns is not None
                             else j.start_ns))
    out.sort(key=lambda d: d.t_ns)
    return out


def by_worker(t: Timeline) -> dict[str, Death]:
    """Each worker's (last) death inside a job."""
    return {d.worker: d for d in deaths(t)}


def memory_limits(t: Timeline) -> list[tuple[float, str]]:
    """(bytes, label) of each distinct cgroup memory limit worth a line on a memory plot:
    those of the jobs a worker died in, and a limit (host cgroup_mem_limit_bytes) that the
    worker's tree came within half of: a far-off limit would flatten the plot and say nothing."""
    limits: dict[float, set[str]] = {}
    for wid, d in by_worker(t).items():
        v = (d.job.death or {}).get("cgroup_limit_bytes")
        if isinstance(v, (int, float)) and v > 0:
            limits.setdefault(float(v), set()).add(wid)
    sampled: dict[str, float] = {}
    peak: dict[str, float] = {}
    for smp in t.samples:
        if smp.scope == "host" and "cgroup_mem_limit_bytes" in smp.values:
            sampled[smp.worker] = smp.values["cgroup_mem_limit_bytes"]
        elif smp.scope == "tree" and "rss_bytes" in smp.values:
            peak[smp.worker] = max(peak.get(smp.worker, 0.0), smp.values["rss_bytes"])
    for wid, v in sampled.items():
        if math.isfinite(v) and v > 0 and peak.get(wid, 0.0) >= v / 2:
            limits.setdefault(float(v), set()).add(wid)
    out = []
    for v, who in sorted(limits.items()):
        whom = short_worker(next(iter(who))) if len(who) == 1 else f"{len(who)} workers"
        out.append((v, f"cgroup limit {fmt_bytes(v)} ({whom})"))
    return out
