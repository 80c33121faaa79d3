"""The wire format, and the only module that knows it.

Two channels carry msgpack:

* driver frames (sidecar -> Subscriber over ZeroMQ, and the job timeline sent back to the
  worker): ``[VERSION, kind, worker_id, seq, body]`` where body is a map with str keys.
* pipe messages (worker <-> its sidecar over a socketpair): a 4-byte big-endian length,
  then ``[kind, body]``.

Decoding untrusted bytes raises ProtocolError and nothing else, never unpickles, and never
allocates past the size cap: msgpack bounds every container by the length of the input.
"""

from __future__ import annotations

import bisect
import enum
import itertools
import operator
import re
import struct
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

import msgpack

from .errors import ProtocolError

if TYPE_CHECKING:
    from typing_extensions import NotRequired

VERSION = 1

class FrameKind(str, enum.Enum):
    """A driver frame's kind (sidecar -> driver, except the last four)."""

    HELLO = "hello"
    JOB_START = "job_start"
    JOB_END = "job_end"
    SAMPLE = "sample"
    SPANS = "spans"
    MARK = "mark"
    BYE = "bye"
    # Every HEARTBEAT_S while alive, jobs or not: liveness, live drop counts, clock samples.
    HEARTBEAT = "heartbeat"
    # Clock offset estimation (Cristian): driver -> sidecar ping {id, t0}; sidecar -> driver
    # pong {id, t0, t1} with t1 the sidecar's wall clock when it answered.
    PONG = "pong"
    # Driver -> sidecar: acknowledges a bye so the sidecar may close without losing it.
    ACK = "ack"
    PING = "ping"
    # Driver -> sidecar: {id, reason}: every thread's stack of the tree, sent back as a mark
    # named "stacks" whose attrs carry the request's id (sidecar/stacks.py).
    STACKS = "stacks"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


HELLO = FrameKind.HELLO
JOB_START = FrameKind.JOB_START
JOB_END = FrameKind.JOB_END
SAMPLE = FrameKind.SAMPLE
SPANS = FrameKind.SPANS
MARK = FrameKind.MARK
BYE = FrameKind.BYE
HEARTBEAT = FrameKind.HEARTBEAT
ACK = FrameKind.ACK
PING = FrameKind.PING
PONG = FrameKind.PONG
STACKS = FrameKind.STACKS
STACKS_MARK = "stacks"  # the name of the mark a dump of stacks is
ALLOCATIONS_MARK = "allocations"  # the top allocation sites (the allocations setting)
GPU_XID_MARK = "gpu_xid"  # an Xid error NVML reported on a GPU the job uses
FRAME_KINDS = frozenset(FrameKind)
# A decoded kind is looked up here: the enum member, at the cost of a dict lookup (~30 ns)
_KINDS: dict[str, FrameKind] = {k.value: k for k in FrameKind}
HEARTBEAT_S = 1.0
# The longest a sidecar waits for its bye's acknowledgement while the driver says it is still
# reading its frames (bye_timeout is the longest it waits without a word), and so about the
# longest a worker that waits for its sidecar (`run`, Dask) waits past bye_timeout.
MAX_BYE_WAIT_S = 120.0

# Pipe message kinds: control only (spans go through the span rings, see spanring.py).
# Worker -> sidecar: hello, job_start, job_end, close. Sidecar -> worker: ready, timeline.
READY = "ready"
TIMELINE = "timeline"
CLOSE = "close"
PIPE_KINDS = frozenset({HELLO, READY, JOB_START, JOB_END, TIMELINE, CLOSE})


class Status(str, enum.Enum):
    """How a worker or a job stands. Workers: running (a job open), idle (alive, no job open:
    its sidecar has not said bye), then exited (closed cleanly), ended (its sidecar ended
    without a job open), killed (it died inside a job), sidecar_lost; a
    driver adds stale (silent past stale_after) and dead (gone from this host without a bye),
    and a record read back adds lost (running or idle where the record ends without the
    driver's close: its driver was killed).
    Jobs: running, ok, error, killed (its worker died inside it: the error text says how, by
    which signal or with which exit status), oom_killed (the kernel's OOM killer killed its
    worker; the job's `death` holds the evidence); a driver adds lost (open when its worker
    went stale or dead, or when the driver closed: never "running" after the run)."""

    RUNNING = "running"
    IDLE = "idle"
    OK = "ok"
    ERROR = "error"
    KILLED = "killed"
    OOM_KILLED = "oom_killed"
    EXITED = "exited"
    ENDED = "ended"
    SIDECAR_LOST = "sidecar_lost"
    STALE = "stale"
    DEAD = "dead"
    LOST = "lost"

    # The plain string wherever it is printed, formatted or written.
    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


# What a frame may say of a job's end, and of a worker at its bye; anything else is refused
# at decode (a status lands in every view, and in HTML).
JOB_END_STATUSES = frozenset({Status.OK, Status.ERROR, Status.KILLED, Status.OOM_KILLED,
                              Status.LOST})
BYE_STATUSES = frozenset({Status.EXITED, Status.ENDED, Status.KILLED, Status.SIDECAR_LOST})
_STATUSES: dict[str, Status] = {s.value: s for s in Status}


def status_of(value: object, allowed: frozenset[Status]) -> Status:
    """The Status a frame names, if it is one of `allowed`; else ValueError (whose frame is
    then refused as malformed)."""
    status = _STATUSES.get(value) if isinstance(value, str) else None
    if status is None or status not in allowed:
        raise ValueError(f"status {str(value)[:40]!r} is not one of "
                         f"{', '.join(sorted(allowed))}")
    return status


# -- frame bodies ------------------------------------------------------------------------------
# One schema per kind of frame body. Producers annotate the bodies they build with these (mypy
# checks them); the builder and the driver read them. Rows inside are arrays, not maps: the
# names of their items are in the comments.
Metrics = dict[str, float]


class HelloBody(TypedDict):
    host: str
    pid: int  # the tree's root
    anchor: list[int]  # [wall ns, monotonic ns], read together
    node: NotRequired[str | None]
    boot_id: NotRequired[str]
    sidecar_pid: NotRequired[int]
    interval: NotRequired[float]
    metrics: NotRequired[dict[str, list[str]]]  # scope -> the metrics its samples may carry
    net_scope: NotRequired[str]  # "host" or "namespace"
    mode: NotRequired[str]  # "light" for a light worker (no sidecar to ping)


class JobStartBody(TypedDict):
    job: int
    name: str
    t: int  # monotonic ns
    pid: int
    tid: int | None
    anchor: NotRequired[list[int]]  # for a driver that missed the hello
    submitted: NotRequired[int]  # wall ns the job was submitted at (profiled.queued())


class JobEndBody(TypedDict):
    job: int
    t: int
    status: str  # one of JOB_END_STATUSES
    error: str | None  # "Type: message" of what the job raised, or how its worker died
    traceback: NotRequired[str]  # of what it raised, bounded (recorder.MAX_TRACEBACK)
    death: NotRequired[dict[str, Any]]  # how its worker died inside it (sidecar/death.py)
    stats: NotRequired[Metrics]  # a light job's counters


class SampleBody(TypedDict):
    t: int
    n: NotRequired[int]  # readings folded into this frame (samples_per_frame)
    tree: NotRequired[Metrics]
    procs: NotRequired[list[list[Any]]]  # [pid, Metrics]
    host: NotRequired[Metrics]
    gpus: NotRequired[list[list[Any]]]  # [device index, Metrics]
    threads: NotRequired[list[list[Any]]]  # [pid, tid, Metrics] or [pid, tid, Metrics, start]
    sidecar: NotRequired[Metrics]  # what sampling this tree cost
    notes: NotRequired[list[str]]
    new: NotRequired[list[list[Any]]]  # [pid, ppid, name]: members first seen (or renamed)
    gone: NotRequired[list[int]]


class SpansBody(TypedDict):  # spans and mark frames
    pid: int
    records: list[list[Any]]  # SpanRecord rows
    threads: list[list[Any]]  # [tid, name]
    spans_lost: NotRequired[int]  # the rings' running total
    # In a job's own frames only (never sent): the records its rings lost while it ran.
    spans_lost_job: NotRequired[int]
    notes: NotRequired[list[str]]


class HeartbeatBody(TypedDict):
    t: int
    dropped: int
    jobs: list[int]
    hello: dict[str, Any]  # the hello's body less its metrics, for a driver that starts late
    open: list[dict[str, Any]]  # the open jobs' job_start bodies
    spans_open: NotRequired[list[list[Any]]]  # [job, name]: the span each open job is in now


class ByeBody(TypedDict):
    t: int
    status: str  # one of BYE_STATUSES
    dropped: int
    samples: NotRequired[int]
    errors: NotRequired[list[str]]
    notes: NotRequired[list[str]]
    sent: NotRequired[int]


class AckBody(TypedDict):
    seq: int


class PingBody(TypedDict):
    id: int
    t0: int


class PongBody(TypedDict):
    id: int | None
    t0: int | None
    t1: int


FrameBody = (HelloBody | JobStartBody | JobEndBody | SampleBody | SpansBody | HeartbeatBody
             | ByeBody | AckBody | PingBody | PongBody)


class Section(enum.Enum):
    """How the readings of a sample body's section combine when several are folded into one
    frame (samples_per_frame)."""

    METRICS = "metrics"  # one Metrics map
    KEYED = "keyed"  # rows [key, Metrics]
    THREADS = "threads"  # rows [pid, tid, Metrics(, start)]
    LIST = "list"  # items, concatenated


# A GPU's key in a sample's gpus section is its index (scope gpu0); a MIG instance's is
# "INDEX/migGI" (scope gpu0/mig1: GPU 0's GPU instance 1).
_MIG_KEY = re.compile(r"\d{1,4}/mig\d{1,4}")
_GPU_SCOPE = re.compile(r"gpu\d{1,4}(/mig\d{1,4})?")


def gpu_scope(key: Any) -> str:
    """The scope of a gpus row's key (ValueError for anything else)."""
    if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < 10_000:
        return f"gpu{key}"
    if isinstance(key, str) and _MIG_KEY.fullmatch(key):
        return f"gpu{key}"
    raise ValueError(f"a GPU's key is its index or INDEX/migGI, got {key!r:.40}")


def is_gpu_scope(scope: str) -> bool:
    """Whether a sample's scope is a GPU's or a MIG instance's (gpu0, gpu0/mig1)."""
    return _GPU_SCOPE.fullmatch(scope) is not None


# Every section of a sample body but its time and count (a test checks this against
# SampleBody).
SAMPLE_SECTIONS: dict[str, Section] = {
    "tree": Section.METRICS, "host": Section.METRICS, "sidecar": Section.METRICS,
    "procs": Section.KEYED, "gpus": Section.KEYED, "threads": Section.THREADS,
    "new": Section.LIST, "gone": Section.LIST, "notes": Section.LIST,
}


# The metrics docs/METRICS.md marks cumulative (totals that only grow): a trace shows their
# rate, and a bin of samples keeps their last value.
CUMULATIVE = frozenset({
    "cpu_user_s", "cpu_system_s", "cpu_s", "read_bytes", "write_bytes", "read_chars",
    "write_chars", "ctx_switches_voluntary", "ctx_switches_involuntary", "net_sent_bytes",
    "net_recv_bytes", "net_sent_packets", "net_recv_packets", "disk_read_bytes",
    "disk_write_bytes", "major_faults", "run_delay_s", "blkio_delay_s", "cgroup_cpu_throttled_s",
    "cgroup_cpu_throttled_periods", "cgroup_cpu_periods",
    *(f"{scope}psi_{r}_{kind}_s" for scope in ("", "cgroup_") for r in ("cpu", "memory", "io")
      for kind in ("some", "full")),
})


# Span records inside spans/mark bodies are tuples on the wire, not maps; SpanRecord names
# their fields for every reader. A record of an older sidecar lacks the trailing cut_short
# and cpu_ns.
RECORD_SPAN = 0
RECORD_MARK = 1


class SpanRecord(NamedTuple):
    kind: int  # RECORD_SPAN or RECORD_MARK
    job: int | None
    id: int
    parent: int | None
    name: str
    start_ns: int  # monotonic
    end_ns: int  # monotonic; a mark's equals its start
    tid: int
    attrs: dict[str, Any] | None
    error: str | None  # "Type: message" of the exception it raised
    cut_short: bool = False  # still open when its process died: it ends at the death
    # The CPU time (ns) its thread used from its begin to its end, read there (the span_cpu
    # setting); None where not measured.
    cpu_ns: int | None = None


RECORD_FIELDS = len(SpanRecord._fields)
MAX_RECORDS_PER_FRAME = 10_000
# Span frames stay well inside MAX_FRAME_BYTES: a frame's records are cut at this many
# estimated bytes as well as at MAX_RECORDS_PER_FRAME, since names, attributes and tracebacks
# (up to 2 KiB each) make records of very different sizes.
SPAN_FRAME_BUDGET = 256 * 1024


def _record_size(r: SpanRecord) -> int:
    """A cheap estimate of a record's packed size, in bytes."""
    size = 64 + _text_bytes(r.name) + (_text_bytes(r.error) if r.error else 0)
    if r.attrs:
        size += _value_size(r.attrs, 8)
    return size


def _text_bytes(text: str) -> int:
    """The UTF-8 length of `text`: its length where it is ASCII (a flag check), else up to
    four bytes a character."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _value_size(value: Any, depth: int) -> int:
    """About the bytes msgpack writes for `value`, looking `depth` levels deep (attrs may nest
    a thousand levels: str() of them recursed until the sidecar died)."""
    if isinstance(value, str):
        return _text_bytes(value) + 5
    if isinstance(value, bytes):
        return len(value) + 5
    if isinstance(value, dict):
        if depth <= 0:
            return 64 * len(value)
        return 5 + sum(_value_size(k, 0) + _value_size(v, depth - 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        if depth <= 0:
            return 64 * len(value)
        return 5 + sum(_value_size(v, depth - 1) for v in value)
    return 9


def span_bodies(pid: int, records: list[SpanRecord], threads: list[list[Any]],
                budget: int = SPAN_FRAME_BUDGET) -> Iterator[tuple[FrameKind, SpansBody, int | None]]:
    """Records of one process as frames: (spans or mark, body, the job they belong to), one
    run of frames per kind and job, each cut within `budget` bytes and MAX_RECORDS_PER_FRAME
    records. The first frame of each run names the process's threads (each job's frames
    stand alone: a job's own timeline holds only them); with no record, one spans frame names
    them, for no job (None)."""
    groups = _groups(records)
    for (rtype, job), group in groups.items():
        kind = MARK if rtype == RECORD_MARK else SPANS
        at = 0
        for cut in _cuts(group, budget):
            yield kind, _spans_body(pid, group[at:cut] if at or cut < len(group) else group,
                                    threads if not at else []), job
            at = cut
    if threads and not groups:
        yield SPANS, _spans_body(pid, [], threads), None


_kind, _job = operator.itemgetter(0), operator.itemgetter(1)
_name, _attrs, _error = operator.itemgetter(4), operator.itemgetter(8), operator.itemgetter(9)


def _cuts(group: list[SpanRecord], budget: int) -> list[int]:
    """Where a group's frames end (indexes past each frame's last record, the last one
    len(group)): each frame takes the records that follow while their estimated bytes stay
    within budget and they are at most MAX_RECORDS_PER_FRAME, and at least one. Records with
    no attrs and no error (most: a sidecar's burst) are sized once a name and cut in C
    passes (running sums, bisect); the others one by one."""
    n = len(group)
    if any(map(_attrs, group)) or any(map(_error, group)):
        sizes = list(map(_record_size, group))
    else:
        names = list(map(_name, group))
        sized = {name: 64 + _text_bytes(name) for name in set(names)}
        sizes = list(map(sized.__getitem__, names))
    ends = list(itertools.accumulate(sizes))  # bytes up to and with each record
    cuts: list[int] = []
    at = 0
    while at < n:
        base = ends[at - 1] if at else 0
        cut = bisect.bisect_right(ends, base + budget, at, min(n, at + MAX_RECORDS_PER_FRAME))
        at = max(cut, at + 1)
        cuts.append(at)
    return cuts


def _groups(records: list[SpanRecord]) -> dict[tuple[int, int | None], list[SpanRecord]]:
    """The records by (kind, job), each group in the order given: most drains hold one."""
    if records and len(set(map(_kind, records))) == 1 and len(set(map(_job, records))) == 1:
        return {(records[0][0], records[0][1]): records}
    groups: dict[tuple[int, int | None], list[SpanRecord]] = {}
    for r in records:
        groups.setdefault((r[0], r[1]), []).append(r)
    return groups


def _spans_body(pid: int, records: list[SpanRecord], threads: list[list[Any]]) -> SpansBody:
    # SpanRecords are tuples: msgpack writes them as the arrays the schema says.
    return {"pid": pid, "records": records, "threads": threads}  # type: ignore[typeddict-item]


def ring_full_note(reader: str) -> str:
    """What a span ring that filled says, once: who read it too late, and what to raise."""
    return (f"span ring full: records were overwritten before {reader} read them (spans_lost "
            "counts them; raise the ring_records setting, WORKERSCOPE_RING_RECORDS)")

# The largest driver frame, on the wire and at decode (ZMQ_MAXMSGSIZE at the driver): a
# sidecar drops and counts a frame past it rather than send it. Bounds the driver's memory
# (docs/SECURITY.md).
MAX_FRAME_BYTES = 1024 * 1024
# The pipe joins a worker to its own sidecar, and carries a whole job's frames back at its end.
MAX_PIPE_BYTES = 1024 * 1024 * 1024
_LEN = struct.Struct(">I")


class WorkerId(NamedTuple):
    """A worker id's parts: `[node/]host:pid:sidecar`, sidecar a pid, "light" or "lost"."""

    node: str | None
    host: str
    pid: int
    sidecar: str


def worker_id(host: str, pid: int, sidecar: int | str, node: str | None = None) -> str:
    """The id a worker's frames carry: its sidecar's pid, or "light" (light mode, no sidecar)
    or "lost" (the worker's own timeline after its sidecar died)."""
    return f"{node}/{host}:{pid}:{sidecar}" if node else f"{host}:{pid}:{sidecar}"


def parse_worker_id(wid: str) -> WorkerId:
    """The parts of a worker id; for an id of another shape, the whole id as host."""
    node, _, rest = wid.rpartition("/")
    host, _, tail = rest.partition(":")
    pid_text, _, sidecar = tail.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return WorkerId(None, wid, 0, "")
    return WorkerId(node or None, host, pid, sidecar)


class Frame(NamedTuple):
    kind: FrameKind
    worker: str
    seq: int
    body: dict[str, Any]


def _plain(obj: object) -> object:
    """What a value msgpack cannot carry becomes: a number if it is one (numpy scalars),
    else its repr. User attrs must never break the job, and nothing is ever pickled."""
    if hasattr(obj, "__index__"):
        return obj.__index__()
    if hasattr(obj, "__float__"):
        return float(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return repr(obj)[:1000]


def _pack(obj: object) -> bytes:
    # use_bin_type keeps str and bytes apart.
    data: bytes = msgpack.packb(obj, use_bin_type=True, default=_plain)
    return data


def clock_anchor() -> list[int]:
    """A (wall ns, monotonic ns) pair read as close together as this process can: the tightest
    of a few monotonic-wall-monotonic readings, the wall time paired with their midpoint."""
    best = None
    for _ in range(5):
        m1 = time.monotonic_ns()
        w = time.time_ns()
        m2 = time.monotonic_ns()
        if best is None or m2 - m1 < best[0]:
            best = (m2 - m1, w, (m1 + m2) // 2)
    assert best is not None
    return [best[1], best[2]]


# Items per array or map in a driver frame (span records come 10,000 to a frame at most), and
# arrays and maps in all of a frame above _COUNT_ABOVE bytes. Nested arrays get past any
# per-array limit: 1 MiB of empty arrays decoded to ~1M lists, 72 MiB, in 0.46 s holding the
# GIL; counted, it is refused after 65,536 in 13 ms (docs/SECURITY.md). No ext types: none is
# part of the protocol.
MAX_ITEMS = 65_536
_COUNT_ABOVE = 64 * 1024


class _Containers:
    """msgpack's list_hook and object_hook: counts arrays and maps, refuses one too many."""

    def __init__(self, limit: int) -> None:
        self.left = limit

    def __call__(self, obj: Any) -> Any:
        self.left -= 1
        if self.left < 0:
            raise ValueError(f"more than {MAX_ITEMS} arrays and maps in one frame")
        return obj


# msgpack's type bytes of an array or a map: each one in a message begins with one of them.
_NOT_CONTAINERS = bytes(sorted(set(range(256)) - {*range(0x80, 0xA0), 0xDC, 0xDD, 0xDE, 0xDF}))


def _may_hold(data: bytes | bytearray | memoryview, items: int) -> bool:
    """Whether `data` may hold more than `items` arrays and maps: not when it has no more
    bytes of their types than that, in one pass in C (~0.4 ns a byte), so most large frames
    skip the count's Python call for every array and map (a 3,450-span frame: 1,225 to
    ~980 us)."""
    if not isinstance(data, (bytes, bytearray)):
        return True
    return len(data.translate(None, _NOT_CONTAINERS)) > items


def pack(obj: object) -> bytes:
    """obj as msgpack, packed as every frame is (encode_frame)."""
    return _pack(obj)


def unpack(data: bytes, limit: int | None = MAX_FRAME_BYTES, items: int = MAX_ITEMS) -> Any:
    """One msgpack message from untrusted bytes, under a frame's bounds (at most `limit`
    bytes, `items` items an array or map and arrays and maps in all); ProtocolError if not
    one."""
    return _unpack(data, limit, items)


def _unpack(data: bytes, limit: int | None = MAX_FRAME_BYTES, items: int | None = None) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"a frame must be bytes, got {type(data).__name__}")
    if limit is not None and len(data) > limit:
        raise ProtocolError(f"frame of {len(data)} bytes exceeds the {limit}-byte limit")
    try:
        # unpackb caps every string, array and map by the input's own length.
        if items is not None:
            count = _Containers(items) if len(data) > _COUNT_ABOVE and _may_hold(
                data, items) else None
            return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True,
                                   max_array_len=items, max_map_len=items, max_ext_len=0,
                                   list_hook=count, object_hook=count)
        return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except Exception as err:  # msgpack raises several unrelated types for bad input
        raise ProtocolError(f"not a msgpack message: {err}") from err


def encode_frame(kind: str, worker: str, seq: int, body: Mapping[str, Any]) -> bytes:
    """One driver frame, ready for the socket."""
    return _pack([VERSION, kind, worker, seq, body])


def decode_frame(data: bytes, limit: int = MAX_FRAME_BYTES) -> Frame:
    """Parse one driver frame from untrusted bytes; ProtocolError if it is not one."""
    msg = _unpack(data, limit, MAX_ITEMS)
    if not isinstance(msg, list) or len(msg) != 5:
        raise ProtocolError("a frame is a 5-item array [version, kind, worker, seq, body]")
    version, kind, worker, seq, body = msg
    _check_envelope(version, kind, worker, seq)
    if not isinstance(body, dict):
        raise ProtocolError("frame body must be a map")
    return Frame(_KINDS[kind], worker, seq, body)


_MAP_MARKERS = frozenset([*range(0x80, 0x90), 0xDE, 0xDF])  # msgpack's map type bytes


def peek_frame(data: bytes, limit: int = MAX_FRAME_BYTES) -> Frame:
    """The envelope of one driver frame from untrusted bytes, its body left undecoded (an
    empty map): ~1 us, against ~13 us to decode a sidecar's sample whole. The same checks
    as decode_frame, but the body's only that it is a map; ProtocolError if not one."""
    if not isinstance(data, bytes):
        raise ProtocolError(f"a frame must be bytes, got {type(data).__name__}")
    if len(data) > limit:
        raise ProtocolError(f"frame of {len(data)} bytes exceeds the {limit}-byte limit")
    try:
        # The envelope's items are scalars: a container there is refused while it is read.
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=len(data),
                                    max_ext_len=0, max_array_len=5, max_map_len=0)
        unpacker.feed(data)
        if unpacker.read_array_header() != 5:
            raise ProtocolError("a frame is a 5-item array [version, kind, worker, seq, body]")
        version, kind, worker, seq = (unpacker.unpack() for _ in range(4))
        at = unpacker.tell()
    except ProtocolError:
        raise
    except Exception as err:  # msgpack raises several unrelated types for bad input
        raise ProtocolError(f"not a msgpack message: {err}") from err
    _check_envelope(version, kind, worker, seq)
    if at >= len(data) or data[at] not in _MAP_MARKERS:
        raise ProtocolError("frame body must be a map")
    return Frame(_KINDS[kind], worker, seq, {})


def _check_envelope(version: Any, kind: Any, worker: Any, seq: Any) -> None:
    if version != VERSION:
        raise ProtocolError(f"frame schema version {version!r}, this workerscope reads {VERSION}")
    # isinstance first: a list or map in the kind's place is unhashable, and `in` would raise
    # TypeError, which once ended the driver's receive thread.
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ProtocolError(f"unknown frame kind {kind!r:.100}")
    if not isinstance(worker, str) or not worker:
        raise ProtocolError("frame worker id must be a non-empty string")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ProtocolError("frame seq must be a non-negative integer")


def encode_pipe(kind: str, body: dict[str, Any]) -> bytes:
    """One length-prefixed pipe message."""
    payload = _pack([kind, body])
    return _LEN.pack(len(payload)) + payload


class PipeReader:
    """Reassembles pipe messages from the byte chunks a socket hands out."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[str, dict[str, Any]]]:
        self._buf += chunk
        out = []
        while len(self._buf) >= _LEN.size:
            (size,) = _LEN.unpack_from(self._buf)
            if size > MAX_PIPE_BYTES:
                raise ProtocolError(f"pipe message of {size} bytes exceeds the limit")
            if len(self._buf) < _LEN.size + size:
                break
            payload = bytes(self._buf[_LEN.size : _LEN.size + size])
            del self._buf[: _LEN.size + size]
            msg = _unpack(payload, MAX_PIPE_BYTES)
            if (
                not isinstance(msg, list)
                or len(msg) != 2
                or not isinstance(msg[0], str)
                or msg[0] not in PIPE_KINDS
                or not isinstance(msg[1], dict)
            ):
                raise ProtocolError("a pipe message is [kind, body] with a known kind")
            out.append((msg[0], msg[1]))
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete message still held."""
        return len(self._buf)


def encode_blob(obj: Any) -> bytes:
    """msgpack for the native .wsc file and for frames bundled inside a pipe message."""
    return _pack(obj)


def decode_blob(data: bytes, limit: int | None = MAX_FRAME_BYTES) -> Any:
    """The inverse of encode_blob; limit=None for a local file the user chose to read."""
    return _unpack(data, limit)
