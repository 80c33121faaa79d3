"""The Timeline: samples, spans, marks and jobs of many workers on one wall-clock ns axis.

Built from driver frames (`builder.TimelineBuilder`), the same way in the sidecar (a job's own
timeline), in the worker (what `monitor().timeline` returns) and in the driver (all workers).
Each sidecar's monotonic timestamps are mapped to wall time through the (wall, monotonic)
anchor pair in its hello; the worker's spans use the worker's own pair.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import operator
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from . import protocol
from .errors import FileFormatError, OutputPathError, ProtocolError, WorkerscopeError
from .protocol import Status
from .units import CUT, MAX_DEPTH, fmt_seconds

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
    # running | idle | exited | ended | killed | sidecar_lost; at a driver also stale (silent
    # for longer than stale_after) and dead (its processes are gone from this host, no bye)
    status: Status = Status.RUNNING
    frames: int = 0
    lost: int = 0
    dropped: int = 0
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the sidecar could not measure, once each
    clock_offset_ns: int = 0  # how far its clock ran ahead of the driver's (subtracted)
    clock_error_ns: int | None = None  # half the round trip of the best offset sample
    # Span records its span rings overwrote before the sidecar read them (rings too small for
    # the span rate: see the ring_records setting); nothing is dropped without being counted.
    spans_lost: int = 0


@dataclass(frozen=True)
class Job:
    worker: str
    id: int
    name: str
    start_ns: int
    end_ns: int | None
    status: Status  # running | ok | error | killed | oom_killed | lost
    error: str | None
    pid: int
    tid: int | None
    stats: dict[str, float] | None = None  # light mode: the job's start/end counters
    # How its worker died inside it (cause, signal or exit status, OOM figures): the sidecar's
    # evidence, see docs/METRICS.md. Last, with a default: older .wsc rows still load.
    death: dict[str, Any] | None = None
    # When it was submitted (profiled.queued()), on the driver's clock: its queue time is
    # start_ns - submitted_ns. Last, with a default: older .wsc rows still load.
    submitted_ns: int | None = None

    @property
    def queued_ns(self) -> int | None:
        """How long it waited between its submit and its start (None if not known)."""
        return None if self.submitted_ns is None else max(self.start_ns - self.submitted_ns, 0)


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
    error: str | None = None  # "Type: message" (bounded); the traceback is attrs["traceback"]
    kind: str = "span"  # span | job
    # Still open when its process died (or its sidecar stopped reading): it ends there. Last,
    # with a default: older .wsc rows still load.
    cut_short: bool = False
    # The CPU time (ns) its thread used while it ran, read at its begin and end (the span_cpu
    # setting): measured, where attribution's cpu_s is an estimate. None: not measured.
    cpu_ns: int | None = None

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
    scope: str  # proc | tree | host | gpu<i> | thread | sidecar
    # the process for proc (and the thread's process for thread), the tree's root for tree
    # and sidecar (the cost of monitoring that tree), None for host and gpu<i>
    pid: int | None
    values: dict[str, float]
    tid: int | None = None  # the thread, for thread; last, with a default: older .wsc rows load


@dataclass(repr=False)  # its __repr__ counts: the generated one printed every record
class Timeline:
    workers: dict[str, Worker] = field(default_factory=dict)
    jobs: list[Job] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    # (worker, pid) -> process name; (worker, pid, tid) -> thread name
    processes: dict[tuple[str, int], str] = field(default_factory=dict)
    threads: dict[tuple[str, int, int], str] = field(default_factory=dict)

    def __repr__(self) -> str:
        """One line of counts and the time range, however many records the timeline holds."""
        counts = (f"{len(self.workers):,} workers, {len(self.jobs):,} jobs, "
                  f"{len(self.spans):,} spans, {len(self.marks):,} marks, "
                  f"{len(self.samples):,} samples, {len(self.processes):,} processes")
        start, end = self.start_ns, self.end_ns
        if start is None or end is None:
            return f"<Timeline: {counts}>"
        try:
            when = datetime.datetime.fromtimestamp(start // 10**9, tz=datetime.timezone.utc)
            since = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        except (OverflowError, ValueError, OSError):  # a repr must not raise, whatever was loaded
            since = f"{start} ns"
        return f"<Timeline: {counts}, {fmt_seconds((end - start) / 1e9)} from {since}>"

    # -- building ----------------------------------------------------------------------------
    @classmethod
    def merge(cls, *timelines: Timeline) -> Timeline:
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
        self.spans[:] = in_start_order(self.spans)
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

    # -- views that workerscope.export registers in VIEWS -------------------------------------
    def _repr_html_(self) -> str:  # Jupyter shows a Timeline as its HTML report
        return str(_views()["_repr_html_"](self))

    def to_pandas(self) -> dict[str, Any]:
        """{"spans", "samples", "jobs", "marks", "workers"}: pandas DataFrames (needs pandas)."""
        return dict(_views()["to_pandas"](self))

    # -- files -------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> str:
        """Write by extension: .wsc (native msgpack), .pftrace (Perfetto's protobuf trace),
        .json (Chrome trace), .html (self-contained report), .csv (samples), .png (plots) or
        .parquet (a folder of Parquet tables).
        Returns the path.

        The formats other than .wsc live in workerscope.export (see _views)."""
        path = os.fspath(path)
        writer = _WRITERS[check_output_path(path)]
        return writer(self, path)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": FILE_VERSION,
            "workers": [dataclasses.asdict(w) for w in self.workers.values()],
            # Field order as declared; plain tuples (astuple deep-copies every record, 40x slower).
            "jobs": [_row(j, _JOB_FIELDS) for j in self.jobs],
            "spans": [_attrs_row(_row(s, _SPAN_FIELDS), _SPAN_ATTRS) for s in self.spans],
            "marks": [_attrs_row(_row(m, _MARK_FIELDS), _MARK_ATTRS) for m in self.marks],
            "samples": [(s.worker, s.t_ns, s.scope, s.pid, s.values) if s.tid is None
                        else (s.worker, s.t_ns, s.scope, s.pid, s.values, s.tid)
                        for s in self.samples],
            "processes": [[w, pid, name] for (w, pid), name in self.processes.items()],
            "threads": [[w, pid, tid, name] for (w, pid, tid), name in self.threads.items()],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Timeline:
        """The inverse of to_dict, every record's fields checked for type: a damaged or
        hand-made file is refused here, never half-read into views that fail later."""
        if not isinstance(d, dict) or d.get("version") != FILE_VERSION:
            raise FileFormatError("not a workerscope timeline of a version this release reads")
        try:
            return cls(
                workers={w["id"]: _record(Worker, w) for w in d["workers"]},
                jobs=[_record(Job, j) for j in d["jobs"]],
                spans=[_record(Span, s) for s in d["spans"]],
                marks=[_record(Mark, m) for m in d["marks"]],
                samples=[_record(Sample, s) for s in d["samples"]],
                processes={(_typed(str, w), _typed(int, pid)): _typed(str, name)
                           for w, pid, name in d["processes"]},
                threads={(_typed(str, w), _typed(int, pid), _typed(int, tid)): _typed(str, name)
                         for w, pid, tid, name in d["threads"]},
            )
        except (KeyError, TypeError, ValueError) as err:
            raise FileFormatError(f"damaged timeline file: {err}") from err


def _typed(kind: type, value: Any) -> Any:
    if not _CHECKS[kind.__name__](value):
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_STATUS_VALUES = frozenset(s.value for s in Status)
# Checks for the annotations the records use (annotations are strings here: see the
# __future__ import). A record class with a field of another type fails loudly at import.
_CHECKS: dict[str, Callable[[Any], bool]] = {
    "int": _is_int,
    "float": _is_number,
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "Any": lambda v: True,
    "Status": lambda v: isinstance(v, str) and v in _STATUS_VALUES,
    "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "dict[str, Any]": lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
    "dict[str, float]": lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and _is_number(x) for k, x in v.items()),
}


def _field_check(annotation: str) -> Callable[[Any], bool]:
    parts = [p.strip() for p in annotation.split("|")]
    optional = "None" in parts
    checks = [_CHECKS[p] for p in parts if p != "None"]
    return lambda v: (optional and v is None) or any(c(v) for c in checks)


_FIELD_CHECKS: dict[type, list[tuple[str, Callable[[Any], bool], bool]]] = {}


def _record(cls: type[Any], raw: Any) -> Any:
    """One record of a .wsc file: a map (workers) or a row in field order (the rest), its
    fields checked; a row may stop early where the fields left out have defaults."""
    fields = _FIELD_CHECKS[cls]
    if isinstance(raw, dict):
        names = {name for name, _, _ in fields}
        unknown = set(raw) - names
        if unknown:
            raise ValueError(f"{cls.__name__} has no field(s) {', '.join(sorted(map(str, unknown)))}")
        values = raw
    elif isinstance(raw, (list, tuple)) and len(raw) <= len(fields):
        values = {name: v for (name, _, _), v in zip(fields, raw, strict=False)}
    else:
        raise ValueError(f"a {cls.__name__} record is a row of at most {len(fields)} fields")
    for name, check, required in fields:
        if name not in values:
            if required:
                raise ValueError(f"{cls.__name__}.{name} is missing")
        elif not check(values[name]):
            raise ValueError(f"{cls.__name__}.{name} has a wrong type: {values[name]!r:.60}")
    if "status" in values:  # a plain string in the file, the Status it names in memory
        values = {**values, "status": Status(values["status"])}
    return cls(**values)


for _cls in (Worker, Job, Span, Mark, Sample):
    _FIELD_CHECKS[_cls] = [
        (f.name, _field_check(str(f.type)),
         f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(_cls)]

_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))
_SPAN_FIELDS = tuple(f.name for f in dataclasses.fields(Span))
_MARK_FIELDS = tuple(f.name for f in dataclasses.fields(Mark))


def _row(record: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(getattr(record, n) for n in names)


_SPAN_ATTRS = _SPAN_FIELDS.index("attrs")
_MARK_ATTRS = _MARK_FIELDS.index("attrs")
_CONTAINERS = (dict, list, tuple)


def _attrs_row(row: tuple[Any, ...], at: int) -> tuple[Any, ...]:
    """A record's row with its attrs made loadable: a .wsc map's keys must be strings (the
    reader's strict_map_key), and attrs keep at most units.MAX_DEPTH levels. The row itself
    where nothing needs it, which is the common case, checked cheaply."""
    attrs = row[at]
    if attrs is None:
        return row
    fixed = bounded_attrs(attrs)
    return row if fixed is attrs else (*row[:at], fixed, *row[at + 1:])


def bounded_attrs(value: Any, depth: int = MAX_DEPTH) -> Any:
    """Attrs as a .wsc holds them: map keys strings, at most `depth` levels of containers
    (deeper ones are CUT and their type); `value` itself where it needs nothing."""
    if type(value) is dict:
        if (all(type(k) is str for k in value)
                and not any(type(v) in _CONTAINERS for v in value.values())):
            return value
        if depth <= 0:
            return CUT + repr(type(value).__name__)
        return {k if isinstance(k, str) else str(k): bounded_attrs(v, depth - 1)
                for k, v in value.items()}
    if type(value) in (list, tuple):
        if not any(type(v) in _CONTAINERS for v in value):
            return value
        if depth <= 0:
            return CUT + repr(type(value).__name__)
        return [bounded_attrs(v, depth - 1) for v in value]
    return value


# A straggler takes over 1.5x the median of its peers, judged among at least three.
STRAGGLER_FACTOR = 1.5
STRAGGLER_MIN_PEERS = 3


def in_start_order(spans: Iterable[Span]) -> list[Span]:
    """Spans by start, the longer first of those that start together (a parent before its
    children), else as they came: two stable sorts keyed in C, not a Python key a span."""
    out = sorted(spans, key=_END, reverse=True)  # reverse keeps equal ends as they came
    out.sort(key=_START)
    return out


_START, _END = operator.attrgetter("start_ns"), operator.attrgetter("end_ns")


def is_straggler(value: float, peers: Sequence[float], factor: float = STRAGGLER_FACTOR) -> bool:
    """The one straggler rule of every view: a worker's job time (or a running job's age) is
    over `factor` x the median of `peers` (the same measure for every worker, itself included),
    and there are at least STRAGGLER_MIN_PEERS of them."""
    limit = straggler_limit(peers, factor)
    return limit is not None and value > limit


def straggler_limit(peers: Sequence[float], factor: float = STRAGGLER_FACTOR) -> float | None:
    """What a job time must pass to be a straggler's (is_straggler), None where no time is:
    too few peers, or a median of 0. For one set of peers and many values, computed once."""
    if len(peers) < STRAGGLER_MIN_PEERS:
        return None
    import statistics  # here: it costs ~5 ms of imports (fractions, decimal) at start-up

    median = statistics.median(peers)
    return factor * median if median > 0 else None


def write_atomic(path: str, data: bytes | Callable[[BinaryIO], object]) -> str:
    """Write through a temporary file and a rename: a reader never sees half a file, and a
    failed write leaves any earlier file whole. data: the bytes, or a function that writes
    them to the open file as they are made (a large trace, streamed).

    Safe in a shared folder: the temporary file is made new (O_EXCL, O_NOFOLLOW) under a name
    nobody can guess, so a symlink planted at it is never followed; the rename replaces a
    symlink at `path` itself rather than write through it, and where `path` is the user's own
    symlink the file goes to its target (another user's is replaced, never followed)."""
    target = own_link_target(path)
    folder, base = os.path.split(target)
    for _ in range(100):
        tmp = os.path.join(folder, f".{base}.tmp{os.getpid()}-{os.urandom(6).hex()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o666)
            break
        except FileExistsError:
            continue
    else:
        raise OutputPathError(f"cannot write {path!r}: no free temporary name in {folder!r}")
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                data(f)
        os.replace(tmp, target)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return path


def own_link_target(path: str) -> str:
    """Where a file at `path` goes: `path`, or where it points when it is a symlink of this
    user's (resolved whole). Another user's symlink is not followed: `path` itself, which a
    rename replaces (opening it takes O_NOFOLLOW, see open_no_foreign_link)."""
    for _ in range(40):  # the kernel's own bound on links followed
        try:
            st = os.lstat(path)
        except OSError:
            return path
        if not stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid():
            return path  # a file, or a link of someone else's: not followed further
        # one hop at a time, each link's owner looked at (realpath would follow them all)
        path = os.path.join(os.path.dirname(path), os.readlink(path))
    return path


def open_no_foreign_link(path: str, flags: int, mode: int) -> int:
    """os.open of a file to write in place (a record), never through another user's symlink:
    O_NOFOLLOW, and a symlink of this user's own followed to its target. OSError as os.open's;
    OutputPathError for a symlink of someone else's."""
    target = own_link_target(path)
    try:
        return os.open(target, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as err:
        # ELOOP: O_NOFOLLOW met a link; EACCES: the kernel's own guard in a sticky folder
        # (fs.protected_regular) met one
        if err.errno not in (errno.ELOOP, errno.EACCES):
            raise
        try:
            st = os.lstat(target)
        except OSError:
            raise err from None
        if not stat.S_ISLNK(st.st_mode):
            raise
    raise OutputPathError(f"{path!r} is a symlink of another user's (uid {st.st_uid}): not "
                          "written through; remove it, or give another path")


def _write_wsc(timeline: Timeline, path: str) -> str:
    return write_atomic(path, protocol.encode_blob(timeline.to_dict()))


Writer = Callable[[Timeline, str], str]
# extension -> writer; workerscope.export.files adds the views' formats.
_WRITERS: dict[str, Writer] = {".wsc": _write_wsc}
_READY: dict[str, Callable[[], object]] = {}
# name -> view for Timeline's view methods; workerscope.export.files registers them.
VIEWS: dict[str, Callable[[Timeline], Any]] = {}


# The module that registers the views' formats and VIEWS. Loaded by name, on first need: this
# module imports no exporter (the import layers), yet saving must not depend on whether
# someone imported the views first.
VIEWS_MODULE = "workerscope.export.files"


def _views() -> dict[str, Callable[[Timeline], Any]]:
    if not VIEWS:
        import importlib

        importlib.import_module(VIEWS_MODULE)
    return VIEWS


def check_output_path(path: str, folder: bool = True) -> str:
    """The extension of an output path if a file could be saved there now (a known format,
    and with `folder`, an existing folder); else a WorkerscopeError naming what is wrong.
    Callers check this before the work whose results it will hold."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in _WRITERS:
        _views()
    if ext not in _WRITERS:
        known = ", ".join(sorted(_WRITERS))
        raise OutputPathError(f"unknown file type (extension) for {path!r}: use one of {known}")
    where = os.path.dirname(path) or "."
    if folder and not os.path.isdir(where):
        raise OutputPathError(f"cannot write {path!r}: no such folder {where!r}")
    if ext in _READY:
        _READY[ext]()
    return ext


def register_format(ext: str, writer: Writer, ready: Callable[[], object] | None = None) -> None:
    """Let Timeline.save write files ending in `ext` (".json") with `writer(timeline, path)`.
    ready: raises a WorkerscopeError if the format cannot be written here (a package it needs
    is missing): check_output_path calls it, before the work."""
    _WRITERS[ext.lower()] = writer
    if ready is not None:
        _READY[ext.lower()] = ready


def out_path(template: str, pid: int, job: int) -> str:
    """An `out` path with {pid}, {job} and {host} filled in, so workers and jobs that share one
    setting write files of their own."""
    import socket

    try:
        return template.format(pid=pid, job=job, host=socket.gethostname())
    except (KeyError, IndexError, ValueError) as err:
        raise OutputPathError(
            f"out path {template!r}: only {{pid}}, {{job}} and {{host}} may be filled in") from err


# What opens a file of each of the formats workerscope writes, for a user who gave one to load.
_OPEN_WITH = {
    ".json": "a .json trace opens in Perfetto's UI (ui.perfetto.dev) or chrome://tracing",
    ".pftrace": "a .pftrace opens in Perfetto's UI (ui.perfetto.dev)",
    ".html": "an .html report opens in any browser",
    ".csv": "a .csv opens in a spreadsheet or pandas.read_csv",
    ".png": "a .png opens in an image viewer",
}
_OTHER = "give the .wsc that was saved beside it, or a driver's record"


def load(path: str | os.PathLike[str]) -> Timeline:
    """Read a timeline written by Timeline.save (.wsc). A driver's record is read by
    workerscope.load (record.py), which reads both."""
    path = os.fspath(path)
    try:
        # Before opening: opening a FIFO blocks until a writer comes, a device reads for ever.
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise WorkerscopeError(f"{path!r} is not a regular file")
        if not path.endswith(".wsc"):
            raise FileFormatError(f"{path!r}: load() reads workerscope's native .wsc files; "
                                  f"{_OPEN_WITH.get(os.path.splitext(path)[1].lower(), _OTHER)}")
        with open(path, "rb") as f:
            _refuse_holes(f.fileno(), path)
            data = f.read()
    except OSError as err:
        raise WorkerscopeError(f"cannot read {path!r}: {err.strerror or err}") from err
    try:
        raw = protocol.decode_blob(data, limit=None)
    except ProtocolError as err:
        raise FileFormatError(f"{path!r} is not a workerscope timeline: {err}") from err
    return Timeline.from_dict(raw)


def _refuse_holes(fd: int, path: str) -> None:
    """FileFormatError if the file has a hole. A .wsc is one msgpack object, read whole, and
    is written whole (write_atomic): a hole means it was damaged or made another way (a 4 GB
    sparse file was read into memory, 4.2 GB, and then refused), so it is refused before a
    byte of it is read. Where the file system cannot say (SEEK_HOLE unsupported), it is read."""
    size = os.fstat(fd).st_size
    try:
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        return
    if hole < size:
        raise FileFormatError(
            f"{path!r} is not a workerscope timeline: it has a hole (bytes never written) from "
            f"byte {hole:,} of its {size:,}; a .wsc is written whole, so this one is damaged")
