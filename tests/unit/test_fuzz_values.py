"""Fuzzing the values a key holder puts in well-formed frames, through the driver's own path:
pong times into the clock estimate, hello clock anchors and boot ids, span attrs of any
shape, and the driver's facts in its record. Whatever is sent, folding raises ProtocolError
only, and what was accepted builds a timeline that every format saves, on sane times.

The driver here is a Subscriber's receive state without its sockets: frames are decoded and
folded by Receiver._fold, answered by Replies.answer into a stand-in socket (so the pings a
pong answers are the driver's own), recorded by a real RecordWriter and read back by
read_record with the driver's facts, as Subscriber.timeline does.

Each fuzzer runs WORKERSCOPE_FUZZ_EXAMPLES examples: 300 in the suite, as test_fuzz.py (the
12 take ~15 s); WORKERSCOPE_FUZZ_EXAMPLES=5000 runs the 5,000 each of the full check (~6 min
on 2 cores)."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import msgpack
import pytest
from factories import T0, S, frame, span_record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workerscope import protocol
from workerscope.builder import SHARED_ANCHOR_NS, TimelineBuilder
from workerscope.driver import late
from workerscope.driver.clock import SANE_OFFSET_NS, ClockSync
from workerscope.driver.frames import FrameFanout
from workerscope.driver.live import LiveState
from workerscope.driver.receive import Receiver
from workerscope.driver.replies import Replies, is_int
from workerscope.driver.state import Limits, ReceiveState
from workerscope.errors import ProtocolError, WorkerscopeError
from workerscope.record import FACTS, Facts, RecordWriter, read_record
from workerscope.timeline import Timeline, load

EXAMPLES = int(os.environ.get("WORKERSCOPE_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
# A run of 5,000 examples saving every format takes minutes, past the suite's 120 s.
LONG = pytest.mark.timeout(max(120, EXAMPLES // 5))

HOST, BOOT = "driverhost", "driver-boot"  # the driver's own host and boot
REMOTE = "otherhost:42:43"  # a worker of another host: pinged for its clock
INT64 = 2**63
BIG = 2**64 - 1
MISSING = object()  # a body key left out

# Integers at msgpack's edges and around int64's, and any in between.
edge_ints = st.sampled_from([-(2**63), -(2**63) + 1, -1, 0, 1, 2**31, 2**32, 2**63 - 1, 2**63,
                             BIG, SANE_OFFSET_NS, -SANE_OFFSET_NS])
any_ints = edge_ints | st.integers(-(2**63), BIG)
# Everything else msgpack carries: the wrong types for a time or an id.
junk = (st.none() | st.booleans() | st.floats() | st.sampled_from([math.nan, math.inf, -math.inf])
        | st.text(max_size=8) | st.binary(max_size=8) | st.lists(any_ints, max_size=3)
        | st.dictionaries(st.text(max_size=3), any_ints, max_size=2))


class _Sock:
    """Stands in for the driver's ROUTER socket: keeps the frames the driver sends back."""

    def __init__(self) -> None:
        self.sent: list[protocol.Frame] = []

    def send_multipart(self, parts: list[bytes], flags: int = 0) -> None:
        self.sent.append(protocol.decode_frame(parts[1]))


class _Clock:
    """The driver's wall clock, moved by hand."""

    def __init__(self, t: int = T0) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


class _Driver:
    """A Subscriber's receive state and record, fed frames by hand (no sockets, no thread
    but the record's writer)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.clock = _Clock()
        builder = TimelineBuilder(keep=False)
        limits = Limits(stale_after=1e9, max_workers=4096, max_kept_bytes=None,
                        max_frame_bytes=protocol.MAX_FRAME_BYTES)
        self.replies = Replies(ClockSync(now=self.clock), builder, HOST, BOOT)
        self.state = ReceiveState(limits, builder, LiveState(), self.replies)
        self.state.record = RecordWriter(path)
        self.rx = Receiver(self.state, FrameFanout(), late.Unanchored())
        self.sock = _Sock()

    def send(self, data: bytes) -> bool:
        """Decode, fold and answer one frame as the receive thread does; False if refused."""
        try:
            f = protocol.decode_frame(data)
        except ProtocolError:
            return False
        with self.state.cond:
            folded = self.rx._fold(f, data)
            if folded:
                assert self.replies.answer(self.sock, b"peer", f) is None  # type: ignore[arg-type]
        return folded

    def pings(self) -> list[protocol.Frame]:
        return [f for f in self.sock.sent if f.kind == protocol.PING]

    def timeline(self) -> Timeline:
        """What Subscriber.timeline returns once the driver has closed."""
        written = self.state.record.flush()
        return read_record(self.path, written, self.state.facts(closed_wall=self.clock.t))

    def close(self) -> None:
        self.state.record.close()


def _driver(tmp_path_factory: pytest.TempPathFactory) -> _Driver:
    return _Driver(str(tmp_path_factory.mktemp("rec") / "run.wsr"))


def _strict(text: str) -> Any:
    """What JSON.parse reads: NaN and Infinity are not JSON."""
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def _save_all(t: Timeline, folder: Any, exts: tuple[str, ...] = (".wsc", ".pftrace", ".json")
              ) -> None:
    """Every format in `exts` saves; the .wsc loads back, the .json is strict JSON."""
    for ext in exts:
        path = t.save(folder / f"t{ext}")
        assert os.path.getsize(path) > 0
        if ext == ".wsc":
            load(path)
        elif ext == ".json":
            with open(path, encoding="utf-8") as f:
                _strict(f.read())


def _times(t: Timeline) -> list[int]:
    return ([s.start_ns for s in t.spans] + [s.end_ns for s in t.spans]
            + [m.t_ns for m in t.marks] + [s.t_ns for s in t.samples]
            + [j.start_ns for j in t.jobs] + [j.end_ns for j in t.jobs if j.end_ns is not None])


def _work(wid: str, seq: int, mono: int, sample: bool = True) -> list[bytes]:
    """A job with a span, a mark and (with `sample`) a sample of `wid`, its times from `mono`
    on (ns)."""
    rec = span_record(job=1, id=2, parent=1, name="f", start_ns=mono + 100, end_ns=mono + 200)
    mk = span_record(kind=protocol.RECORD_MARK, job=1, id=3, name="m", start_ns=mono + 150)
    return [
        frame("job_start", worker=wid, seq=seq, job=1, name="job", t=mono, pid=42, tid=42),
        frame("spans", worker=wid, seq=seq + 1, pid=42, records=[rec], threads=[[42, "main"]]),
        frame("mark", worker=wid, seq=seq + 2, pid=42, records=[mk], threads=[]),
        frame("job_end", worker=wid, seq=seq + 4, job=1, t=mono + 400, status="ok", error=None),
        *([frame("sample", worker=wid, seq=seq + 3, t=mono + 300, tree={"cpu_percent": 1.0})]
          if sample else []),
    ]


def _value(data: st.DataObject, right: Any, wrong: st.SearchStrategy[Any]) -> Any:
    """A body field: usually the right value, else anything of `wrong`, or left out."""
    choice = data.draw(st.sampled_from(["right", "right", "wrong", "missing"]))
    if choice == "right":
        return right
    return MISSING if choice == "missing" else data.draw(wrong)


# -- 1. pongs ----------------------------------------------------------------------------------
@LONG
@FUZZ
@given(data=st.data(), skew=st.integers(-SANE_OFFSET_NS, SANE_OFFSET_NS),
       wall=st.none() | st.integers(T0 - SANE_OFFSET_NS, T0 + SANE_OFFSET_NS),
       pongs=st.integers(1, 6))
def test_pongs_keep_offsets_finite_and_bounded_and_saves_working(tmp_path_factory, data, skew,
                                                                 wall, pongs):
    """Pongs of any id, t0 and t1 (ints at int64's and msgpack's edges, floats, NaN, inf,
    the wrong types, keys left out) from a worker whose anchor is honest (its clock `skew`
    off the driver's) or anywhere within a century of the driver's clock (farther, see
    test_an_anchor_near_int64_and_a_pong_a_century_off_save): a pong without integer id and t1 is refused with
    ProtocolError, one a century off the driver's clock is not taken, every offset kept is an
    integer within a century (plus the round trip) of the driver's clock, and the closed
    driver's timeline saves with every time moved by exactly that offset."""
    d = _driver(tmp_path_factory)
    try:
        mono0 = 5 * S
        wall = T0 + skew if wall is None else wall
        hello = frame("hello", worker=REMOTE, host="otherhost", pid=42, sidecar_pid=43,
                      boot_id="another-boot", anchor=[wall, mono0])
        assert d.send(hello)
        seq = 1
        for _ in range(pongs):
            pings = d.pings()
            ping = pings[-1].body if pings else {"id": 1, "t0": T0}
            d.clock.t += data.draw(st.integers(0, 10 * S), label="time to the pong")
            longest = d.clock.t - T0  # no round trip is longer than all the time so far
            t1 = T0 + skew + data.draw(st.integers(-3 * SANE_OFFSET_NS, 3 * SANE_OFFSET_NS)
                                       | st.sampled_from([-SANE_OFFSET_NS, SANE_OFFSET_NS]))
            t1 = min(max(t1, -(2**63)), BIG)  # what msgpack can carry
            body = {"id": _value(data, ping["id"], any_ints | junk),
                    "t0": _value(data, ping["t0"], any_ints | junk),
                    "t1": _value(data, t1, any_ints | junk)}
            body = {k: v for k, v in body.items() if v is not MISSING}
            accepted = d.send(frame("pong", worker=REMOTE, seq=seq, body=body))
            assert accepted == (is_int(body.get("id")) and is_int(body.get("t1"))), body
            seq += 1
            for offset, error in d.replies.clocks.offsets().values():
                assert is_int(offset) and abs(offset) <= SANE_OFFSET_NS + longest
                assert error is None or 0 <= error <= longest
        for data_ in _work(REMOTE, seq, mono0 + S):
            d.send(data_)  # refused if its time falls outside int64 on the worker's clock
        t = d.timeline()
        offset = d.replies.clocks.offsets()[REMOTE][0]
        for f in (s for s in t.spans if s.name == "f"):
            assert f.start_ns == wall + S + 100 - offset
        assert all(-INT64 <= x < INT64 for x in _times(t))
        _save_all(t, tmp_path_factory.mktemp("out"))
    finally:
        d.close()


def test_an_anchor_near_int64_and_a_pong_a_century_off_save(tmp_path):
    """A worker whose anchor's wall time is near -2**63 (in int64, accepted) and whose pong
    says its clock is a century ahead (accepted, at the bound): the closed driver's timeline
    keeps its times inside int64 and saves as .wsc."""
    d = _Driver(str(tmp_path / "run.wsr"))
    try:
        assert d.send(frame("hello", worker=REMOTE, host="otherhost", pid=42, sidecar_pid=43,
                            boot_id="another-boot", anchor=[-(2**63) + 10 * S, 5 * S]))
        (ping,) = d.pings()
        assert d.send(frame("pong", worker=REMOTE, seq=1, id=ping.body["id"],
                            t0=ping.body["t0"], t1=T0 + SANE_OFFSET_NS))
        assert all(d.send(data_) for data_ in _work(REMOTE, 2, 6 * S))
        t = d.timeline()
    finally:
        d.close()
    t.save(tmp_path / "t.wsc")
    assert all(-INT64 <= x < INT64 for x in _times(t))


# -- 2. hello anchors and boot ids -------------------------------------------------------------
anchors = (st.tuples(any_ints, any_ints).map(list)
           | st.lists(any_ints | junk, max_size=4) | junk)
boot_ids = (st.just(BOOT) | st.just("another-boot") | st.text(max_size=40)
            | st.text(min_size=120, max_size=140) | junk)


@LONG
@FUZZ
@given(anchor=anchors, boot=boot_ids, host=st.sampled_from([HOST, "otherhost"]),
       mono=st.integers(-(2**62), 2**62), hostile_work=st.booleans())
def test_hello_anchors_and_boot_ids_of_any_shape(tmp_path_factory, anchor, boot, host, mono,
                                                 hostile_work):
    """A hello whose anchor and boot id are anything, sent first (with this host's boot id or
    not), and its worker's frames: the hello is refused with ProtocolError or accepted; then
    an honest worker of this host and boot says hello and works. The timeline saves, every
    time is inside int64, and the honest worker's times are where its own anchor puts them
    (within SHARED_ANCHOR_NS: a hostile pair that agrees that closely may be shared)."""
    d = _driver(tmp_path_factory)
    try:
        hostile = f"{host}:7:8"
        body = {"host": host, "pid": 7, "sidecar_pid": 8, "anchor": anchor}
        if boot is not MISSING:
            body["boot_id"] = boot
        said_hello = d.send(frame("hello", worker=hostile, body=body))
        if hostile_work:
            # Without a hello, a tree sample fails the .json save: a known bug, pinned by
            # test_a_tree_sample_of_a_worker_without_hello_saves_as_json.
            for data_ in _work(hostile, 1, mono, sample=said_hello):
                d.send(data_)
        honest = f"{HOST}:10:11"
        assert d.send(frame("hello", worker=honest, host=HOST, pid=10, sidecar_pid=11,
                            boot_id=BOOT, anchor=[T0, 5 * S]))
        for data_ in _work(honest, 1, 6 * S):
            assert d.send(data_)
        t = d.timeline()
        (f,) = [s for s in t.spans if s.name == "f" and s.worker == honest]
        assert abs(f.start_ns - (T0 + S + 100)) <= SHARED_ANCHOR_NS
        assert all(-INT64 <= x < INT64 for x in _times(t))
        _save_all(t, tmp_path_factory.mktemp("out"))
    finally:
        d.close()


@FUZZ
@given(anchor=anchors, boot=boot_ids)
def test_hello_decode_raises_only_protocol_error(anchor, boot):
    """The builder alone, on a hello of any anchor and boot id: accepted or ProtocolError."""
    b = TimelineBuilder()
    try:
        b.add(protocol.decode_frame(frame("hello", worker="h:1:2", host="h", pid=1,
                                          anchor=anchor, boot_id=boot)))
    except ProtocolError:
        return
    b.timeline()


def test_a_tree_sample_of_a_worker_without_hello_saves_as_json(tmp_path):
    """A worker whose hello was malformed (or never came: held frames are folded as they are
    after late.HOLD_S) sends a tree sample: the .json saves."""
    d = _Driver(str(tmp_path / "run.wsr"))
    try:
        assert not d.send(frame("hello", worker="h:1:2", host="h", pid=1, anchor=[]))
        assert d.send(frame("sample", worker="h:1:2", seq=1, t=5, tree={"cpu_percent": 1.0}))
        t = d.timeline()
    finally:
        d.close()
    t.save(tmp_path / "t.json")


# -- 3. the driver's facts in a record ---------------------------------------------------------
texts = st.text(max_size=12)
ints64 = st.integers(-(2**63), BIG)
facts_strategy = st.builds(
    Facts,
    clocks=st.dictionaries(texts, st.tuples(ints64, st.none() | ints64), max_size=3),
    lost=st.dictionaries(texts, ints64, max_size=3),
    dropped=st.dictionaries(texts, ints64, max_size=3),
    states=st.dictionaries(texts, texts | st.sampled_from([s.value for s in protocol.Status]),
                           max_size=3),
    last_wall=st.dictionaries(texts, ints64, max_size=3),
    notes=st.dictionaries(texts, st.lists(texts, max_size=3), max_size=3),
    closed_wall=st.none() | ints64,
    gone_wall=st.dictionaries(texts, ints64, max_size=3))


@FUZZ
@given(st.binary(max_size=256))
def test_facts_decode_raises_only_protocol_error_on_random_bytes(data):
    """Random bytes as a facts entry: Facts or ProtocolError (Facts.decode's documented error)."""
    try:
        Facts.decode(data)
    except ProtocolError:
        pass


@FUZZ
@given(st.dictionaries(st.sampled_from(["clocks", "lost", "dropped", "states", "last_wall",
                                        "notes", "closed_wall", "gone_wall", "other"]),
                       st.recursive(st.none() | st.booleans() | ints64 | st.floats() | texts
                                    | st.binary(max_size=8),
                                    lambda inner: st.lists(inner, max_size=4)
                                    | st.dictionaries(texts, inner, max_size=4),
                                    max_leaves=12), max_size=9)
       | st.lists(ints64, max_size=3) | ints64)
def test_facts_decode_raises_only_protocol_error_on_any_msgpack(raw):
    """Any msgpack value, maps of the facts' own keys included: Facts or ProtocolError."""
    try:
        Facts.decode(msgpack.packb(raw, use_bin_type=True))
    except ProtocolError:
        pass


@FUZZ
@given(facts_strategy)
def test_facts_round_trip(facts):
    """Facts of any keys and int64/uint64 values decode to what was encoded."""
    assert Facts.decode(facts.encode()) == facts


@LONG
@FUZZ
@given(facts=facts_strategy, data=st.data())
def test_a_record_with_any_decodable_facts_loads_and_saves(tmp_path_factory, facts, data):
    """A record (a driver's file, maybe hand-edited) whose facts decode: it loads, or says a
    WorkerscopeError; what loaded saves in every format."""
    wid = "h:1:2"
    offset = st.integers(-SANE_OFFSET_NS, SANE_OFFSET_NS)  # farther: the test below
    facts.clocks[wid] = data.draw(st.tuples(offset, st.none() | ints64), label="clock")
    facts.states[wid] = data.draw(st.sampled_from([s.value for s in protocol.Status]))
    facts.last_wall[wid] = data.draw(ints64, label="last_wall")
    if data.draw(st.booleans()):
        facts.gone_wall[wid] = data.draw(ints64, label="gone_wall")
    folder = tmp_path_factory.mktemp("facts")
    w = RecordWriter(folder / "run.wsr")
    try:
        w.append(frame("hello", worker=wid, host="h", pid=1, anchor=[T0, 5 * S]))
        for data_ in _work(wid, 1, 6 * S):
            w.append(data_)
        w.append(facts.encode(), FACTS)
        written = w.flush()
    finally:
        w.close()
    try:
        t = read_record(folder / "run.wsr", written)
    except WorkerscopeError:
        return
    _save_all(t, folder)


def test_a_record_whose_facts_hold_a_huge_clock_offset_saves(tmp_path):
    """A record (hand-edited, or damaged) whose facts give a worker a clock offset of 2**64 - 1:
    it loads, and what it loads saves as .wsc (or it is refused with a WorkerscopeError)."""
    w = RecordWriter(tmp_path / "run.wsr")
    try:
        w.append(frame("hello", worker="h:1:2", host="h", pid=1, anchor=[T0, 5 * S]))
        for data_ in _work("h:1:2", 1, 6 * S):
            w.append(data_)
        w.append(Facts(clocks={"h:1:2": (BIG, None)}).encode(), FACTS)
        written = w.flush()
    finally:
        w.close()
    try:
        t = read_record(tmp_path / "run.wsr", written)
    except WorkerscopeError:
        return
    t.save(tmp_path / "t.wsc")


# -- 4. span attrs of any shape ----------------------------------------------------------------
keys = st.text(max_size=6) | st.binary(max_size=4)  # what msgpack's strict_map_key lets through
odd_keys = keys | st.integers(-(2**63), BIG) | st.none() | st.booleans() | st.floats()
leaves = (st.none() | st.booleans() | st.integers(-(2**63), BIG) | st.floats()
          | st.sampled_from([math.nan, math.inf, -math.inf, -(2**63), BIG])
          | st.text(max_size=10) | st.binary(max_size=10))


def _attrs(key_strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(key_strategy, inner, max_size=4), max_leaves=24)


def _nest(value: Any, levels: int, as_list: bool) -> dict[str, Any]:
    """`value` under `levels` more levels of maps (or lists), in an attrs map."""
    for _ in range(levels):
        value = [value] if as_list else {"a": value}
    return {"deep": value}


@LONG
@FUZZ
@given(attrs=_attrs(keys), levels=st.sampled_from([0, 0, 1, 31, 32, 33, 200, 1000]),
       as_list=st.booleans(), mark_too=st.booleans())
def test_span_attrs_of_any_shape_through_the_driver(tmp_path_factory, attrs, levels, as_list,
                                                    mark_too):
    """Span (and mark) attrs of any nesting, NaN, inf, huge ints, bytes, bytes keys, sent in a
    spans frame: refused with ProtocolError at decode, or folded, recorded, read back and saved
    as .wsc (loads back), .json (strict JSON), .pftrace and .html."""
    d = _driver(tmp_path_factory)
    try:
        wid = f"{HOST}:10:11"
        assert d.send(frame("hello", worker=wid, host=HOST, pid=10, boot_id=BOOT,
                            anchor=[T0, 5 * S]))
        value = _nest(attrs, levels, as_list)
        rec = span_record(name="f", start_ns=6 * S, end_ns=7 * S, attrs=value)
        try:
            spans = frame("spans", worker=wid, seq=1, pid=10, records=[rec], threads=[])
        except ValueError:  # msgpack's own nesting limit, at the sender
            return
        d.send(spans)
        if mark_too:
            mk = span_record(kind=protocol.RECORD_MARK, name="m", start_ns=6 * S, attrs=value)
            d.send(frame("mark", worker=wid, seq=2, pid=10, records=[mk], threads=[]))
        t = d.timeline()
        _save_all(t, tmp_path_factory.mktemp("out"), (".wsc", ".json", ".pftrace", ".html"))
    finally:
        d.close()


@LONG
@FUZZ
@given(attrs=_attrs(odd_keys), levels=st.sampled_from([0, 1, 32, 33, 1000]),
       as_list=st.booleans())
def test_span_attrs_of_any_shape_in_frames_folded_in_process(tmp_path_factory, attrs, levels,
                                                             as_list):
    """Frames built in process (a heartbeat's hello, a worker's own timeline) carry attrs
    msgpack would refuse: keys of any type. The builder takes them or raises ProtocolError,
    span_bodies sizes them without recursing, and the timeline saves in every format."""
    value = _nest(attrs, levels, as_list)
    rec = span_record(name="f", start_ns=6 * S, end_ns=7 * S, attrs=value)
    list(protocol.span_bodies(10, [rec], []))
    b = TimelineBuilder()
    b.add(protocol.Frame(protocol.HELLO, "h:10:11", 0, {"host": "h", "pid": 10,
                                                        "anchor": [T0, 5 * S]}))
    try:
        b.add(protocol.Frame(protocol.SPANS, "h:10:11", 1,
                             {"pid": 10, "records": [list(rec)], "threads": []}))
    except ProtocolError:
        pass
    _save_all(b.timeline(), tmp_path_factory.mktemp("out"), (".wsc", ".json", ".pftrace",
                                                              ".html"))
