"""The Timeline: samples, spans, marks and jobs of many workers on one wall-clock ns axis.

Built from driver frames (`TimelineBuilder`), the same way in the sidecar (a job's own
timeline), in the worker (what `monitor().timeline` returns) and in the driver (all workers).
Each sidecar's monotonic timestamps are mapped to wall time through the (wall, monotonic)
anchor pair in its hello; the worker's spans use the worker's own pair.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from . import protocol
from .errors import ProtocolError, WorkerscopeError

FILE_VERSION = 1


@dataclass
class Worker:
    id: str
    host: str = ""
    node: str | None = None
    pid: int = 0
    sidecar_pid: int | None = None
    interval: float | None = None
    boot_id: str | None = None
    # running | exited | ended | killed | sidecar_lost; at a driver also stale (silent for
    # longer than stale_after) and dead (its processes are gone from this host, no bye)
    status: str = "running"
    frames: int = 0
    lost: int = 0
    dropped: int = 0
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the sidecar could not measure, once each
    clock_offset_ns: int = 0  # how far its clock ran ahead of the driver's (subtracted)
    clock_error_ns: int | None = None  # half the round trip of the best offset sample


@dataclass(frozen=True)
class Job:
    worker: str
    id: int
    name: str
    start_ns: int
    end_ns: int | None
    status: str  # running | ok | error | killed
    error: str | None
    pid: int
    tid: int | None
    stats: dict[str, float] | None = None  # light mode: the job's start/end counters


@dataclass(frozen=True)
class Span:
    worker: str
    job: int | None
    id: int
    parent: int | None
    name: str
    start_ns: int
    end_ns: int
    pid: int
    tid: int
    attrs: dict[str, Any] | None = None
    error: str | None = None
    kind: str = "span"  # span | job

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class Mark:
    worker: str
    job: int | None
    name: str
    t_ns: int
    pid: int
    tid: int
    attrs: dict[str, Any] | None = None


@dataclass(frozen=True)
class Sample:
    worker: str
    t_ns: int
    scope: str  # proc | tree | host
    pid: int | None  # the process for proc, the tree's root for tree, None for host
    values: dict[str, float]


@dataclass
class Timeline:
    workers: dict[str, Worker] = field(default_factory=dict)
    jobs: list[Job] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    # (worker, pid) -> process name; (worker, pid, tid) -> thread name
    processes: dict[tuple[str, int], str] = field(default_factory=dict)
    threads: dict[tuple[str, int, int], str] = field(default_factory=dict)

    # -- building ----------------------------------------------------------------------------
    @classmethod
    def from_frames(cls, frames: Iterable[bytes]) -> "Timeline":
        builder = TimelineBuilder()
        for data in frames:
            builder.add(protocol.decode_frame(data))
        return builder.timeline()

    @classmethod
    def merge(cls, *timelines: "Timeline") -> "Timeline":
        out = cls()
        for t in timelines:
            out.workers.update(t.workers)
            out.jobs.extend(t.jobs)
            out.spans.extend(t.spans)
            out.marks.extend(t.marks)
            out.samples.extend(t.samples)
            out.processes.update(t.processes)
            out.threads.update(t.threads)
        out.sort()
        return out

    def sort(self) -> None:
        self.jobs.sort(key=lambda j: j.start_ns)
        self.spans.sort(key=lambda s: (s.start_ns, -s.end_ns))
        self.marks.sort(key=lambda m: m.t_ns)
        self.samples.sort(key=lambda s: s.t_ns)

    # -- queries -----------------------------------------------------------------------------
    @property
    def start_ns(self) -> int | None:
        """The earliest time of anything in the timeline (sorted or not)."""
        times = [min((s.t_ns for s in self.samples), default=None),
                 min((s.start_ns for s in self.spans), default=None),
                 min((j.start_ns for j in self.jobs), default=None),
                 min((m.t_ns for m in self.marks), default=None)]
        return min((t for t in times if t is not None), default=None)

    @property
    def end_ns(self) -> int | None:
        """The latest time of anything in the timeline, job ends included."""
        times = [max((s.t_ns for s in self.samples), default=None),
                 max((s.end_ns for s in self.spans), default=None),
                 max((j.end_ns or j.start_ns for j in self.jobs), default=None),
                 max((m.t_ns for m in self.marks), default=None)]
        return max((t for t in times if t is not None), default=None)

    def series(self, scope: str, metric: str, worker: str | None = None,
               pid: int | None = None) -> list[tuple[int, float]]:
        """(t_ns, value) of one metric, e.g. series("tree", "cpu_percent")."""
        return [
            (s.t_ns, s.values[metric]) for s in self.samples
            if s.scope == scope and metric in s.values
            and (worker is None or s.worker == worker) and (pid is None or s.pid == pid)
        ]

    # -- files -------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> str:
        """Write by extension: .wsc (native msgpack), .json (Chrome/Perfetto trace), .html
        (self-contained report) or .csv (samples). Returns the path."""
        path = os.fspath(path)
        if path.endswith(".json"):
            import json

            from .export.chrome import to_chrome

            # default=repr: span attrs may hold anything (bytes, numpy values); never fail on them
            data = json.dumps(to_chrome(self), separators=(",", ":"), default=repr).encode()
        elif path.endswith(".wsc"):
            data = protocol.encode_blob(self.to_dict())
        elif path.endswith(".html"):
            from .export.html import to_html

            data = to_html(self).encode()
        elif path.endswith(".csv"):
            from .export.csv_samples import to_csv

            data = to_csv(self).encode()
        else:
            raise WorkerscopeError(f"unknown file type for {path!r}: use .wsc, .json, .html or .csv")
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # a reader never sees half a file
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": FILE_VERSION,
            "workers": [dataclasses.asdict(w) for w in self.workers.values()],
            # Field order as declared; plain tuples (astuple deep-copies every record, 40x slower).
            "jobs": [_row(j, _JOB_FIELDS) for j in self.jobs],
            "spans": [_row(s, _SPAN_FIELDS) for s in self.spans],
            "marks": [_row(m, _MARK_FIELDS) for m in self.marks],
            "samples": [(s.worker, s.t_ns, s.scope, s.pid, s.values) for s in self.samples],
            "processes": [[w, pid, name] for (w, pid), name in self.processes.items()],
            "threads": [[w, pid, tid, name] for (w, pid, tid), name in self.threads.items()],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Timeline":
        if not isinstance(d, dict) or d.get("version") != FILE_VERSION:
            raise WorkerscopeError("not a workerscope timeline of a version this release reads")
        try:
            return cls(
                workers={w["id"]: Worker(**w) for w in d["workers"]},
                jobs=[Job(*j) for j in d["jobs"]],
                spans=[Span(*s) for s in d["spans"]],
                marks=[Mark(*m) for m in d["marks"]],
                samples=[Sample(*s) for s in d["samples"]],
                processes={(w, pid): name for w, pid, name in d["processes"]},
                threads={(w, pid, tid): name for w, pid, tid, name in d["threads"]},
            )
        except (KeyError, TypeError, ValueError) as err:
            raise WorkerscopeError(f"damaged timeline file: {err!r}") from err


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))
_SPAN_FIELDS = tuple(f.name for f in dataclasses.fields(Span))
_MARK_FIELDS = tuple(f.name for f in dataclasses.fields(Mark))


def _row(record: Any, names: tuple[str, ...]) -> tuple:
    return tuple(getattr(record, n) for n in names)


def out_path(template: str, pid: int, job: int) -> str:
    """An `out` path with {pid}, {job} and {host} filled in, so workers and jobs that share one
    setting write files of their own."""
    import socket

    try:
        return template.format(pid=pid, job=job, host=socket.gethostname())
    except (KeyError, IndexError, ValueError) as err:
        raise WorkerscopeError(
            f"out path {template!r}: only {{pid}}, {{job}} and {{host}} may be filled in") from err


def load(path: str | os.PathLike) -> Timeline:
    """Read a timeline written by Timeline.save (.wsc)."""
    path = os.fspath(path)
    if not path.endswith(".wsc"):
        raise WorkerscopeError(
            f"{path!r}: load() reads workerscope's native .wsc files; a .json trace is for Perfetto"
        )
    with open(path, "rb") as f:
        data = f.read()
    try:
        raw = protocol.decode_blob(data, limit=None)
    except ProtocolError as err:
        raise WorkerscopeError(f"{path!r} is not a workerscope timeline: {err}") from err
    return Timeline.from_dict(raw)


def _opt(value: Any, kind: type) -> Any:
    """An optional field of an untrusted frame: None, or a value of `kind` (else ValueError)."""
    if value is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def _numbers(values: Any) -> dict[str, float]:
    """A metrics map from an untrusted frame: str keys, finite-or-not numbers, nothing else."""
    if not isinstance(values, dict):
        raise ValueError("metric values must be a map")
    for k, v in values.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise ValueError(f"metric {k!r} is not a number")
    return dict(values)


class TimelineBuilder:
    """Folds driver frames of any number of workers into one Timeline."""

    def __init__(self) -> None:
        self.t = Timeline()
        self._anchor: dict[str, tuple[int, int]] = {}
        self._boot_anchor: dict[str, tuple[int, int]] = {}
        self._open_jobs: dict[tuple[str, int], dict[str, Any]] = {}
        self._roots: dict[str, int] = {}

    def worker(self, wid: str) -> Worker:
        w = self.t.workers.get(wid)
        if w is None:
            w = self.t.workers[wid] = Worker(wid)
        return w

    def _set_anchor(self, wid: str, anchor: Any, boot_id: Any) -> None:
        wall, mono = (int(x) for x in anchor)
        if isinstance(boot_id, str) and boot_id:
            # Monotonic time is one clock for a whole host (per boot): every worker of that
            # host maps through the same pair, so their events line up exactly.
            wall, mono = self._boot_anchor.setdefault(boot_id, (wall, mono))
        self._anchor[wid] = (wall, mono)

    def _wall(self, wid: str, mono: Any) -> int:
        anchor = self._anchor.get(wid)
        if anchor is None:
            return int(mono)
        return int(mono) - anchor[1] + anchor[0]

    def add(self, frame: protocol.Frame) -> None:
        """Fold one frame in. A malformed body raises ProtocolError; nothing is half-added."""
        handler = getattr(self, f"_on_{frame.kind}", None)
        if handler is not None:
            try:
                handler(frame.worker, frame.body)
            except Exception as err:  # untrusted input: whatever broke, it is the frame's fault
                raise ProtocolError(
                    f"malformed {frame.kind} frame from {frame.worker}: {err!r}") from err
        self.worker(frame.worker).frames += 1

    def _on_hello(self, wid: str, b: dict[str, Any]) -> None:
        host, pid = str(b["host"]), int(b["pid"])
        node, boot = _opt(b.get("node"), str), _opt(b.get("boot_id"), str)
        sidecar_pid, interval = _opt(b.get("sidecar_pid"), int), _opt(b.get("interval"), float)
        self._set_anchor(wid, b["anchor"], boot)
        w = self.worker(wid)
        w.host, w.node, w.pid = host, node, pid
        w.sidecar_pid, w.interval, w.boot_id = sidecar_pid, interval, boot
        self._roots[wid] = w.pid

    def _on_job_start(self, wid: str, b: dict[str, Any]) -> None:
        if wid not in self._anchor and b.get("anchor"):
            self._set_anchor(wid, b["anchor"], None)
        tid = b.get("tid")
        job = {"id": int(b["job"]), "name": str(b["name"]), "start": self._wall(wid, b["t"]),
               "pid": int(b["pid"]), "tid": None if tid is None else int(tid)}
        self._open_jobs[(wid, job["id"])] = job

    def _on_job_end(self, wid: str, b: dict[str, Any]) -> None:
        job = self._open_jobs.pop((wid, int(b["job"])), None)
        if job is None:
            return  # its start was lost: the seq gap is already counted
        end = self._wall(wid, b["t"])
        stats = b.get("stats")
        _append_job(self.t, wid, job, end, str(b.get("status", "ok")), b.get("error"),
                    _numbers(stats) if stats else None)

    def _on_sample(self, wid: str, b: dict[str, Any]) -> None:
        t = self._wall(wid, b["t"])
        root = self._roots.get(wid)
        names = {int(pid): str(name) for pid, _, name in b.get("new", ())}
        new: list[Sample] = []
        if b.get("tree"):
            new.append(Sample(wid, t, "tree", root, _numbers(b["tree"])))
        for pid, values in b.get("procs", ()):
            new.append(Sample(wid, t, "proc", int(pid), _numbers(values)))
        if b.get("host"):
            new.append(Sample(wid, t, "host", None, _numbers(b["host"])))
        for index, values in b.get("gpus", ()):
            new.append(Sample(wid, t, f"gpu{int(index)}", None, _numbers(values)))
        notes = [str(n) for n in b.get("notes", ())]
        # All checked: now add.
        self.t.samples.extend(new)
        self.t.processes.update({(wid, pid): name for pid, name in names.items()})
        have = self.worker(wid).notes
        have.extend(n for n in notes if n not in have)

    def _on_spans(self, wid: str, b: dict[str, Any]) -> None:
        pid = int(b["pid"])
        threads = {(wid, pid, int(tid)): str(name) for tid, name in b.get("threads", ())}
        spans: list[Span] = []
        marks: list[Mark] = []
        for rec in b.get("records", ()):
            if len(rec) != protocol.RECORD_FIELDS:
                raise ValueError(f"span record of {len(rec)} fields")
            rtype, job, sid, parent, name, start, end, tid, attrs, error = rec
            if attrs is not None and not isinstance(attrs, dict):
                raise ValueError("span attrs must be a map")
            job = None if job is None else int(job)
            if rtype == protocol.RECORD_MARK:
                marks.append(Mark(wid, job, str(name), self._wall(wid, start), pid, int(tid), attrs))
            else:
                spans.append(Span(wid, job, int(sid), None if parent is None else int(parent),
                                  str(name), self._wall(wid, start), self._wall(wid, end), pid,
                                  int(tid), attrs, None if error is None else str(error)))
        self.t.threads.update(threads)
        self.t.spans.extend(spans)
        self.t.marks.extend(marks)

    _on_mark = _on_spans

    def _on_bye(self, wid: str, b: dict[str, Any]) -> None:
        status, dropped = str(b.get("status", "exited")), int(b.get("dropped", 0))
        errors = [str(e) for e in b.get("errors", ())]
        w = self.worker(wid)
        w.status, w.dropped, w.errors = status, dropped, errors

    def snapshot(self) -> tuple[Timeline, list[tuple[str, dict[str, Any]]]]:
        """Shallow copies of what finish() needs: cheap, to take under a caller's lock."""
        t = Timeline({k: dataclasses.replace(w) for k, w in self.t.workers.items()},
                     list(self.t.jobs), list(self.t.spans), list(self.t.marks),
                     list(self.t.samples), dict(self.t.processes), dict(self.t.threads))
        return t, [(wid, dict(job)) for (wid, _), job in self._open_jobs.items()]

    def timeline(self, offsets: dict[str, int] | None = None) -> Timeline:
        """A copy of the timeline so far. A job still open shows as running, or as killed
        when its worker has already said bye. offsets: worker id -> ns its clock runs ahead of
        the driver's, taken off every time of that worker."""
        return self.finish(self.snapshot(), offsets)

    @staticmethod
    def finish(snapshot: tuple[Timeline, list[tuple[str, dict[str, Any]]]],
               offsets: dict[str, int] | None = None) -> Timeline:
        t, open_jobs = snapshot
        if offsets:
            _shift(t, offsets)
        for wid, job in open_jobs:
            gone = t.workers[wid].status != "running"
            job = dict(job, start=job["start"] - (offsets or {}).get(wid, 0))
            _append_job(t, wid, job, t.end_ns if gone else None, "killed" if gone else "running",
                        None)
        t.sort()
        return t


def _shift(t: Timeline, offsets: dict[str, int]) -> None:
    """Move each worker's events by its clock offset onto the driver's clock."""
    rep = dataclasses.replace
    t.samples = [rep(s, t_ns=s.t_ns - offsets[s.worker]) if offsets.get(s.worker) else s
                 for s in t.samples]
    t.spans = [rep(s, start_ns=s.start_ns - offsets[s.worker], end_ns=s.end_ns - offsets[s.worker])
               if offsets.get(s.worker) else s for s in t.spans]
    t.marks = [rep(m, t_ns=m.t_ns - offsets[m.worker]) if offsets.get(m.worker) else m
               for m in t.marks]
    t.jobs = [rep(j, start_ns=j.start_ns - offsets[j.worker],
                  end_ns=None if j.end_ns is None else j.end_ns - offsets[j.worker])
              if offsets.get(j.worker) else j for j in t.jobs]


def _append_job(t: Timeline, wid: str, job: dict[str, Any], end: int | None, status: str,
                error: Any, stats: dict[str, float] | None = None) -> None:
    """A job is a Job record and also the outermost span of its worker's spans."""
    err = None if error is None else str(error)
    t.jobs.append(Job(wid, job["id"], job["name"], job["start"], end, status, err, job["pid"],
                      job["tid"], stats))
    t.spans.append(Span(wid, job["id"], job["id"], None, job["name"], job["start"],
                        end if end is not None else job["start"], job["pid"],
                        job["tid"] or job["pid"], {"status": status, **(stats or {})},
                        None if status in ("ok", "running") else (err or status), "job"))
