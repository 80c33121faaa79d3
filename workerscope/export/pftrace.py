"""Perfetto's native protobuf trace (.pftrace): ~48 bytes a span, counters included, for
ui.perfetto.dev at any size.

Built with the `perfetto` package's generated protos (the `trace` extra), never by hand. Packets
go into a `Trace` message that is written out and cleared every CHUNK packets
(pftrace_packets.py): Trace messages written one after another are one Trace (protobuf merges
repeated fields), so memory stays bounded whatever the trace's size.

What the UI shows:
- a machine per host (SystemInfo.machine_name): the first host is the trace's own machine, the
  others carry a machine_id on every packet, so pids of different hosts never collide;
- per worker, a process track of its root pid named after the worker, holding (in this order)
  its tree.* and proc.* counters, its threads' counters, the sidecar's, its threads' slices,
  then one track per other process of its tree (its counters and threads under it);
- per host, one `host <name>` track with the machine's host.* and gpu<i>.* counters once
  (counters.py groups, names and rates counters for this trace and the Chrome one alike).

Size: each track's slices form a packet sequence of their own, with an incremental clock
(timestamps are deltas from the previous packet: 3-4 bytes, not 9), the track as a sequence
default (no uuid per event), and slice names and argument names interned per sequence. A
group's counters (counters.py) share a sequence, one event per value (~24 bytes) naming its
track: Perfetto's UI (its WASM trace processor) misread values packed into one event's
extra_counter_values (~14 bytes a value), reading some as 0; a sequence per counter track
came out larger still, its deltas no longer 0 within a sample. A value equal to its track's
previous one is left out, except the track's last (a counter holds its value until the next,
and the track ends where its samples end). A thread whose counters never move from 0 gets no
counter tracks. Slices carry their attrs, error, cut_short and a job's death; per-span
resource attribution stays in the .json and the HTML report (~50 bytes a span more here).

Whatever a timeline holds is written: a trace that starts before 1970 starts at 0 (protobuf's
timestamps are unsigned); a pid past int32 or a tid past int64 (a frame carries up to uint64)
is numbered anew from SPARE_ID on its track (its name keeps the real number); an attr's key
that is not a string is made one, a nested value is bounded (units.json_safe).
"""

from __future__ import annotations

import itertools
from typing import Any, BinaryIO

from ..errors import WorkerscopeError
from ..timeline import Job, Mark, Span, Timeline, write_atomic
from ..units import json_safe
from .attribution import NOT_FAILED
from .chrome import span_args, split_nested
from .counters import CounterGroup, counter_groups, counter_metrics, counter_name, track_points
from .pftrace_packets import BOOTTIME, INT64, REALTIME, PacketSequence, Tracks, Writer
from .stacks import mark_args


def trace_protos() -> Any:
    """The perfetto package's generated trace protos (perfetto_trace_pb2), or a WorkerscopeError
    that says how to install them."""
    try:
        from perfetto.protos.perfetto.trace import (  # type: ignore[import-untyped]
            perfetto_trace_pb2,
        )
    except ImportError as err:
        raise WorkerscopeError(
            "writing a .pftrace needs the perfetto package: pip install 'workerscope[trace]' "
            "(or save a .json, which Perfetto's UI opens too)") from err
    return perfetto_trace_pb2


def write_pftrace(t: Timeline, path: str) -> str:
    """Write `t` as a Perfetto protobuf trace at `path` (through a temporary file and a rename).
    Needs the perfetto package; without it, a WorkerscopeError says how to install it."""
    pb = trace_protos()
    def stream(f: BinaryIO) -> None:
        w = Writer(f, pb)
        _write(t, w)
        w.flush()

    return write_atomic(path, stream)


def _write(t: Timeline, w: Writer) -> None:
    """The machines, then every track descriptor, then each track's events."""
    # From the first submit where one came before every event: its flow starts there.
    t0 = min([t.start_ns or 0, *(j.submitted_ns for j in t.jobs if j.submitted_ns is not None)])
    machines = _Machines(t)
    workers, devices = counter_groups(t)
    procs, threads, by_proc = _owners(t, workers)
    for wid in procs:
        machines.of(wid)
    _machine_packets(w, machines, t0)
    tree = _TrackTree(t, Tracks(w), machines)
    rank = {wid: i for i, wid in enumerate(t.workers)}
    for wid in sorted(procs, key=lambda x: (rank.get(x, len(rank)), x)):
        tree.worker(wid, procs[wid], threads, by_proc)
    tree.hosts(devices)
    flows = {(j.worker, j.pid, j.id): k for k, j in enumerate(
        (j for j in t.jobs if j.submitted_ns is not None), start=1)}
    _slices(t, w, tree.tracks, tree.thread_track, t0, flows)
    _failed_jobs(t, w, tree.worker_track, machines.of, t0)
    _submits(t, w, tree.worker_track, machines.of, t0, flows)
    for g, m, uuids in tree.counters:
        _counter_events(w, g, m, uuids, t0)


class _Machines:
    """A machine per host, numbered in the order the workers name them (the first, 0, is the
    trace's own), then in the order other hosts are asked for."""

    def __init__(self, t: Timeline) -> None:
        self.host_of = {wid: wk.host for wid, wk in t.workers.items()}
        self.ids = {h: i for i, h in enumerate(dict.fromkeys(self.host_of.values()))}

    def of(self, wid: str) -> int:
        h = self.host_of.get(wid, "")
        if h not in self.ids:
            self.ids[h] = len(self.ids)
        return self.ids[h]


def _owners(t: Timeline, workers: list[CounterGroup]) -> tuple[
        dict[str, set[int]], dict[tuple[str, int], set[int]],
        dict[tuple[str, int], list[CounterGroup]]]:
    """Every (worker, pid) and (worker, pid, tid) that has something to show: the pids of
    each worker, the tids of each (worker, pid), and the counter groups of each (worker, pid)."""
    procs: dict[str, set[int]] = {wid: {wk.pid} for wid, wk in t.workers.items()}
    threads: dict[tuple[str, int], set[int]] = {}
    for wid, pid in t.processes:
        procs.setdefault(wid, set()).add(pid)
    for wid, pid, tid in t.threads:
        threads.setdefault((wid, pid), set()).add(tid)
    for wid, pid, tid in itertools.chain(((s.worker, s.pid, s.tid) for s in t.spans),
                                         ((mk.worker, mk.pid, mk.tid) for mk in t.marks)):
        procs.setdefault(wid, set()).add(pid)
        threads.setdefault((wid, pid), set()).add(tid)
    by_proc: dict[tuple[str, int], list[CounterGroup]] = {}
    for g in workers:
        if g.pid is not None:
            procs.setdefault(g.worker, set()).add(g.pid)
            by_proc.setdefault((g.worker, g.pid), []).append(g)
    return procs, threads, by_proc


def _machine_packets(w: Writer, machines: _Machines, t0: int) -> None:
    """Each machine's name, and its wall clock, so the UI can show times of day."""
    for h, m in sorted(machines.ids.items(), key=lambda kv: kv[1]):
        p = w.packet(m)
        p.system_info.machine_name = h or "localhost"
        p = w.packet(m)
        for clock in (BOOTTIME, REALTIME):
            c = p.clock_snapshot.clocks.add()
            c.clock_id, c.timestamp = clock, max(t0, 0)  # as _Shifted moves the clock


class _TrackTree:
    """The track descriptors, written in the order the UI lists them, and what goes on which."""

    def __init__(self, t: Timeline, tracks: Tracks, machines: _Machines) -> None:
        self.t, self.tracks, self.machines = t, tracks, machines
        # (worker, pid, tid) -> (its track, machine, the track of its process)
        self.thread_track: dict[tuple[str, int, int], tuple[int, int, int]] = {}
        self.worker_track: dict[str, int] = {}
        self.counters: list[tuple[CounterGroup, int, dict[str, int]]] = []  # group, machine, metric -> uuid
        self.pids, self.tids = _Renumber(2**31), _Renumber(INT64)  # ProcessDescriptor.pid: int32

    def worker(self, wid: str, pids: set[int], threads: dict[tuple[str, int], set[int]],
               by_proc: dict[tuple[str, int], list[CounterGroup]]) -> None:
        """A worker's process track, named after it, holding its root process's counters and
        threads, then a track per other process of its tree with that one's."""
        t, m = self.t, self.machines.of(wid)
        wk = t.workers.get(wid)
        root = wk.pid if wk else min(pids)
        d = self.tracks.add(m)
        d.process.pid = self.pids(root)
        name = t.processes.get((wid, root))
        label = f"{wk.host}:{wk.pid}" if wk else wid
        d.process.process_name = f"worker {label}" + (f" ({name})" if name else "")
        if wk:
            d.process.process_labels.extend([wk.status, f"{wk.lost} frames lost"])
        self.worker_track[wid] = d.uuid
        for pid in sorted(pids, key=lambda p: (p != root, p)):
            if pid == root:
                parent = d.uuid
            else:
                pname = t.processes.get((wid, pid), "process")
                parent = self.tracks.add(m, d.uuid, f"{pname} {pid}").uuid
            for g in by_proc.get((wid, pid), []):
                self._counter_tracks(g, parent, m)
            self._threads(wid, pid, pid == root, parent, m, threads.get((wid, pid), set()))

    def _threads(self, wid: str, pid: int, root: bool, parent: int, m: int,
                 tids: set[int]) -> None:
        # The root process's threads are the UI's own thread tracks; another process's are
        # named tracks under that process's.
        for tid in sorted(tids):
            tname = self.t.threads.get((wid, pid, tid), f"thread {tid}")
            if root:
                td = self.tracks.add(m, parent)
                td.thread.pid, td.thread.tid = self.pids(pid), self.tids(tid)
                td.thread.thread_name = tname
            else:
                td = self.tracks.add(m, parent, f"{tname} {tid}")
            self.thread_track[(wid, pid, tid)] = (td.uuid, m, parent)

    def hosts(self, devices: list[CounterGroup]) -> None:
        """One `host <name>` track per host, with its machine's counters."""
        for h in dict.fromkeys(g.host for g in devices):
            m = self.machines.ids.get(h, 0)
            parent = self.tracks.add(m, name=f"host {h or 'localhost'}").uuid
            for g in devices:
                if g.host == h:
                    self._counter_tracks(g, parent, m)

    def _counter_tracks(self, g: CounterGroup, parent: int, m: int) -> None:
        metrics = counter_metrics(g)
        if metrics:
            self.counters.append((g, m, {
                metric: self.tracks.add(m, parent, counter_name(g.scope, metric, g.tid), True).uuid
                for metric in metrics}))


def _slices(t: Timeline, w: Writer, tracks: Tracks,
            thread_track: dict[tuple[str, int, int], tuple[int, int, int]], t0: int,
            flows: dict[tuple[str, int, int], int]) -> None:
    """Each thread's spans and marks on its track; spans that overlap without nesting (async
    tasks on one event loop) on further tracks beside it, as many as they need."""
    jobs = {(j.worker, j.pid, j.id): j for j in t.jobs}
    spans: dict[tuple[str, int, int], list[Span]] = {}
    for s in t.spans:
        spans.setdefault((s.worker, s.pid, s.tid), []).append(s)
    marks: dict[tuple[str, int, int], list[Mark]] = {}
    for mk in t.marks:
        marks.setdefault((mk.worker, mk.pid, mk.tid), []).append(mk)
    for key, (uuid, m, parent) in thread_track.items():
        nested, rest = split_nested(spans.get(key, []))
        _lane(_sequence(w, m, t0, uuid), nested, sorted(marks.get(key, []), key=lambda mk: mk.t_ns),
              jobs, flows)
        while rest:
            nested, rest = split_nested(rest)
            name = f"{t.threads.get(key, 'thread')} {key[2]} (overlapping)"
            _lane(_sequence(w, m, t0, tracks.add(m, parent, name).uuid), nested, [], jobs, flows)


def _lane(seq: PacketSequence, nested: list[Span], marks: list[Mark],
          jobs: dict[tuple[str, int, int], Job], flows: dict[tuple[str, int, int], int]) -> None:
    """Slices that nest, and marks, on one track, in time order: a slice ends before anything
    that starts at its end."""
    pb = seq.w.pb
    begin, end, instant = (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END,
                           pb.TrackEvent.TYPE_INSTANT)
    stack: list[int] = []
    i = 0
    for s_start, s in [*((s.start_ns, s) for s in nested), (INT64, None)]:
        while True:
            mark_t = marks[i].t_ns if i < len(marks) else INT64
            if stack and stack[-1] <= min(s_start, mark_t):
                seq.event(stack.pop(), end)
            elif mark_t <= s_start and i < len(marks):
                mk = marks[i]
                p, te = seq.event(mk.t_ns, instant, mk.name)
                if mk.attrs:
                    seq.annotate(p, te, _annotations(mark_args(mk)))
                i += 1
            else:
                break
        if s is not None:
            p, te = seq.event(s.start_ns, begin, s.name)
            if s.kind == "job" and (s.worker, s.pid, s.id) in flows:  # from its submit
                te.terminating_flow_ids.append(flows[(s.worker, s.pid, s.id)])
            args = span_args(s, jobs)
            if args:
                seq.annotate(p, te, _annotations(args))
            stack.append(s.end_ns)


def _failed_jobs(t: Timeline, w: Writer, worker_track: dict[str, int], machine_of: Any,
                 t0: int) -> None:
    """A failed or killed job is also an instant on its worker's track, easy to spot."""
    failed = sorted((j for j in t.jobs if j.status not in NOT_FAILED and j.worker in worker_track),
                    key=lambda j: (j.worker, j.end_ns if j.end_ns is not None else j.start_ns))
    for wid, group in itertools.groupby(failed, key=lambda j: j.worker):
        seq = _sequence(w, machine_of(wid), t0, worker_track[wid])
        for j in group:
            end = j.end_ns if j.end_ns is not None else j.start_ns
            p, te = seq.event(end, w.pb.TrackEvent.TYPE_INSTANT, f"job {j.status}: {j.name}")
            args: dict[str, Any] = {"error": j.error, "job": j.id}
            if j.death:
                args["death"] = j.death
            seq.annotate(p, te, _annotations({k: v for k, v in args.items() if v is not None}))


def _submits(t: Timeline, w: Writer, worker_track: dict[str, int], machine_of: Any, t0: int,
             flows: dict[tuple[str, int, int], int]) -> None:
    """Each job's submit (profiled.queued()) as an instant on its worker's track, with a flow
    to the job's start: Perfetto draws the time it waited as an arrow."""
    submitted = sorted((j for j in t.jobs if (j.worker, j.pid, j.id) in flows
                        and j.worker in worker_track),
                       key=lambda j: (j.worker, j.submitted_ns or 0))
    for wid, group in itertools.groupby(submitted, key=lambda j: j.worker):
        seq = _sequence(w, machine_of(wid), t0, worker_track[wid])
        for j in group:
            p, te = seq.event(j.submitted_ns or 0, w.pb.TrackEvent.TYPE_INSTANT,
                              f"submitted: {j.name}")
            te.flow_ids.append(flows[(j.worker, j.pid, j.id)])
            seq.annotate(p, te, {"job": j.id, "queued_s": (j.queued_ns or 0) / 1e9})


def _counter_events(w: Writer, g: CounterGroup, m: int, uuids: dict[str, int], t0: int) -> None:
    """A group's counters on one sequence, one event per value, in time order; a value equal
    to its track's previous one is left out, except the track's last. One group's points are
    held at a time."""
    events: list[tuple[int, int, float]] = []
    for metric, points in track_points(g).items():
        uuid = uuids[metric]
        prev: float | None = None
        for t_ns, v in points[:-1]:
            if v != prev:
                events.append((t_ns, uuid, v))
                prev = v
        events.extend((t_ns, uuid, v) for t_ns, v in points[-1:])
    # Each track's points are in time order: the sort merges runs, and keeps a time's values
    # in track order.
    events.sort(key=lambda e: e[0])
    counter = w.pb.TrackEvent.TYPE_COUNTER
    seq = _sequence(w, m, t0, 0)
    for t_ns, uuid, v in events:
        _, te = seq.event(t_ns, counter)
        te.track_uuid = uuid
        if _is_int(v):
            te.counter_value = int(v)
        else:
            te.double_counter_value = v


def _is_int(v: float) -> bool:
    """Whole numbers go out as int64 varints (a byte count in ~5 bytes, not a double's 8)."""
    return isinstance(v, int) or (v.is_integer() and -INT64 <= v < INT64)


def _sequence(w: Writer, machine: int, t0: int, track: int) -> PacketSequence:
    """A packet sequence from t0, the trace's start; one that shifts its clock if that is
    before 1970 (a method call more per event, only then)."""
    return PacketSequence(w, machine, t0, track) if t0 >= 0 else _Shifted(w, machine, t0, track)


class _Shifted(PacketSequence):
    """A packet sequence whose clock starts at 0 where the trace starts before 1970: times
    then go out moved by as much, their offsets from the start kept."""

    def __init__(self, w: Writer, machine: int, t0: int, track: int) -> None:
        self.shift = max(-t0, 0)
        super().__init__(w, machine, t0 + self.shift, track)

    def event(self, t_ns: int, kind: int, name: str | None = None) -> tuple[Any, Any]:
        return super().event(t_ns + self.shift, kind, name)


SPARE_ID = 1 << 30  # the first number for ids out of a field's range; Linux's pids stay below 2**22


class _Renumber:
    """Ids as a protobuf field of `limit` takes them: an id within (-limit, limit) as it is,
    each other one a number of its own from SPARE_ID up."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.spare: dict[int, int] = {}

    def __call__(self, n: int) -> int:
        if -self.limit <= n < self.limit:
            return n
        return self.spare.setdefault(n, SPARE_ID + len(self.spare))


def _annotations(args: dict[Any, Any]) -> dict[str, Any]:
    """Args as debug annotations take them: keys strings, nested values bounded (annotate
    writes them as JSON text, which a value nested ~1,000 deep would fail)."""
    for k, v in args.items():
        if type(k) is not str or isinstance(v, (dict, list, tuple)):
            return {k if isinstance(k, str) else str(k):
                    json_safe(v) if isinstance(v, (dict, list, tuple)) else v
                    for k, v in args.items()}
    return args
