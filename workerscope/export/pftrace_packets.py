"""The packets of a .pftrace (pftrace.py): chunked Trace messages, packet sequences with their
own incremental clock and interning tables, and track descriptors.

Only the wire-level economy lives here (timestamps as deltas, interned names, small uuids);
what goes on which track is pftrace.py's.
"""

from __future__ import annotations

import itertools
import json
from typing import IO, Any

CHUNK = 4096  # packets per Trace message written
BOOTTIME = 6  # BuiltinClock ids
REALTIME = 1
INCREMENTAL = 64  # 64-127: clocks scoped to one packet sequence
INT64 = 2**63


class Writer:
    """Packets into chunked Trace messages, written to `f` as they fill."""

    def __init__(self, f: IO[bytes], pb: Any) -> None:
        self.f, self.pb = f, pb
        self.trace = pb.Trace()
        self.count = 0
        self.uuids = itertools.count(1)  # small uuids: 1-2 byte varints in every event
        self.sequences = itertools.count(1)

    def packet(self, machine: int) -> Any:
        if self.count >= CHUNK:
            self.flush()
        self.count += 1
        p = self.trace.packet.add()
        if machine:
            p.machine_id = machine
        return p

    def flush(self) -> None:
        if self.count:
            self.f.write(self.trace.SerializeToString())
            # A new message, not Clear(): protobuf's upb backend keeps a message's memory in an
            # arena that Clear() does not give back, so one reused Trace grew by the whole file.
            self.trace = self.pb.Trace()
            self.count = 0


class PacketSequence:
    """One packet sequence: its own incremental clock, default track and interning tables."""

    def __init__(self, w: Writer, machine: int, t0: int, track: int) -> None:
        self.w, self.machine, self.id, self.last = w, machine, next(w.sequences), t0
        self.names: dict[str, int] = {}
        self.keys: dict[str, int] = {}
        pb = w.pb
        p = w.packet(machine)
        p.trusted_packet_sequence_id = self.id
        p.timestamp, p.timestamp_clock_id = t0, BOOTTIME
        p.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        p.first_packet_on_sequence = True
        incremental = p.clock_snapshot.clocks.add()
        incremental.clock_id, incremental.timestamp, incremental.is_incremental = INCREMENTAL, t0, True
        boot = p.clock_snapshot.clocks.add()
        boot.clock_id, boot.timestamp = BOOTTIME, t0
        p.trace_packet_defaults.timestamp_clock_id = INCREMENTAL
        if track:
            p.trace_packet_defaults.track_event_defaults.track_uuid = track

    def event(self, t_ns: int, kind: int, name: str | None = None) -> tuple[Any, Any]:
        """A packet with a TrackEvent of `kind` at t_ns on the default track."""
        p = self.w.packet(self.machine)
        # Events come in time order per sequence; a delta cannot be negative (uint64).
        p.timestamp = max(t_ns - self.last, 0)
        self.last = max(self.last, t_ns)
        p.trusted_packet_sequence_id = self.id
        te = p.track_event
        te.type = kind
        if name is not None:
            iid = self.names.get(name)
            if iid is None:
                iid = self.names[name] = len(self.names) + 1
                entry = p.interned_data.event_names.add()
                entry.iid, entry.name = iid, name
            te.name_iid = iid
            p.sequence_flags = self.w.pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        return p, te

    def annotate(self, p: Any, te: Any, args: dict[str, Any]) -> None:
        for key, value in args.items():
            iid = self.keys.get(key)
            if iid is None:
                iid = self.keys[key] = len(self.keys) + 1
                entry = p.interned_data.debug_annotation_names.add()
                entry.iid, entry.name = iid, key
            a = te.debug_annotations.add()
            a.name_iid = iid
            if isinstance(value, bool):
                a.bool_value = value
            elif isinstance(value, int) and -INT64 <= value < INT64:
                a.int_value = value
            elif isinstance(value, float):
                a.double_value = value
            elif isinstance(value, str):
                a.string_value = value
            else:  # attrs may hold anything (dicts, bytes, numpy values): never fail on them
                a.string_value = json.dumps(value, default=repr)
        p.sequence_flags = self.w.pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


class Tracks:
    """Track descriptors, written first, children ranked in the order they are made."""

    def __init__(self, w: Writer) -> None:
        self.w = w
        self.rank: dict[int, int] = {}

    def add(self, machine: int, parent: int = 0, name: str = "", counter: bool = False) -> Any:
        p = self.w.packet(machine)
        d = p.track_descriptor
        d.uuid = next(self.w.uuids)
        if parent:
            d.parent_uuid = parent
            d.sibling_order_rank = self.rank[parent] = self.rank.get(parent, 0) + 1
        if name:
            d.name = name
        if counter:
            d.counter.SetInParent()
        else:
            d.child_ordering = self.w.pb.TrackDescriptor.EXPLICIT
        return d
