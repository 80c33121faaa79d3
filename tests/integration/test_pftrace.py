"""The Perfetto protobuf trace (.pftrace) read back with the perfetto package's own protos, and
the counters of both traces (.pftrace and Chrome .json): grouped per process, once per host,
cumulative ones as rates, thread counters apart."""

from __future__ import annotations

import subprocess
import threading
from typing import Any

import pytest
from helpers import burn, burn_code, python_script

from workerscope import mark, monitor, span, timed
from workerscope.export.chrome import to_chrome
from workerscope.export.counters import (
    counter_groups,
    counter_metrics,
    counter_name,
    group_values,
)
from workerscope.timeline import Sample, Span, Timeline, Worker

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
S = 1_000_000_000


@timed
def crunch() -> None:
    burn(0.2)


@pytest.fixture(scope="module")
def real_timeline() -> Timeline:
    """A heavy job: nested spans, a span on a second thread, a mark, and a child process."""

    def worker_thread() -> None:
        with span("side", step=3):
            burn(0.1)

    with monitor(interval=0.05) as m:
        with span("outer"):
            crunch()
            mark("checkpoint", step=1)
            th = threading.Thread(target=worker_thread, name="side-thread")
            th.start()
            th.join()
        subprocess.run(python_script(burn_code(0.3)), check=True)
    return m.timeline


def decode(data: bytes) -> dict[str, Any]:
    """What a reader of the trace sees: every slice (track, name, start, duration, args), every
    instant, every counter track's points, the track descriptors and the machines' names;
    timestamps rebuilt from each sequence's incremental clock, names from its interned data."""
    trace = pb.Trace()
    trace.ParseFromString(data)
    seqs: dict[int, dict[str, Any]] = {}
    tracks: dict[int, Any] = {}
    out: dict[str, Any] = {"slices": [], "instants": [], "counters": {}, "machines": {},
                           "flows_out": [], "flows_in": []}
    open_slices: dict[int, list[tuple[str, int, dict[str, Any]]]] = {}
    for p in trace.packet:
        if p.HasField("system_info"):
            out["machines"][p.machine_id] = p.system_info.machine_name
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            (clock,) = [c for c in p.clock_snapshot.clocks if c.is_incremental]
            assert p.trace_packet_defaults.timestamp_clock_id == clock.clock_id
            seqs[p.trusted_packet_sequence_id] = {
                "t": clock.timestamp, "names": {}, "keys": {},
                "track": p.trace_packet_defaults.track_event_defaults.track_uuid}
        if not p.HasField("track_event"):
            continue
        st = seqs[p.trusted_packet_sequence_id]
        st["names"].update({e.iid: e.name for e in p.interned_data.event_names})
        st["keys"].update({e.iid: e.name for e in p.interned_data.debug_annotation_names})
        st["t"] += p.timestamp
        te, t_ns = p.track_event, st["t"]
        track = te.track_uuid or st["track"]
        assert track in tracks, "every event's track is described before it"
        args = {st["keys"][a.name_iid]: getattr(a, a.WhichOneof("value"))
                for a in te.debug_annotations}
        out["flows_out"].extend(te.flow_ids)
        out["flows_in"].extend(te.terminating_flow_ids)
        if te.type == te.TYPE_SLICE_BEGIN:
            open_slices.setdefault(track, []).append((st["names"][te.name_iid], t_ns, args))
        elif te.type == te.TYPE_SLICE_END:
            name, start, args = open_slices[track].pop()
            out["slices"].append((track, name, start, t_ns - start, args))
        elif te.type == te.TYPE_INSTANT:
            out["instants"].append((track, st["names"][te.name_iid], t_ns, args))
        elif te.type == te.TYPE_COUNTER:
            first = (te.double_counter_value if te.HasField("double_counter_value")
                     else te.counter_value)
            points = [(te.track_uuid, first),
                      *zip(te.extra_counter_track_uuids, te.extra_counter_values, strict=True),
                      *zip(te.extra_double_counter_track_uuids, te.extra_double_counter_values,
                           strict=True)]
            for uuid, value in points:
                assert tracks[uuid].HasField("counter")
                out["counters"].setdefault(uuid, []).append((t_ns, value))
    assert not any(open_slices.values()), "every slice ends"
    out["tracks"] = tracks
    return out


def _owner(tracks: dict[int, Any], uuid: int) -> str:
    """Who a counter track belongs to: "pid N" (a worker's process or another of its tree) or
    "host NAME"."""
    parent = tracks[tracks[uuid].parent_uuid]
    if parent.HasField("process"):
        return f"pid {parent.process.pid}"
    if parent.name.startswith("host "):
        return parent.name
    return f"pid {parent.name.rsplit(' ', 1)[1]}"


def test_pftrace_holds_every_span_counter_process_and_machine(real_timeline, tmp_path):
    """Saved as .pftrace and parsed back with Perfetto's protos: every span with its name,
    start and duration, the mark, every counter's values (rates for cumulative ones), the
    worker named on its process track, the child process under it, the host as machine."""
    t = real_timeline
    path = t.save(tmp_path / "t.pftrace")
    got = decode((tmp_path / "t.pftrace").read_bytes())
    assert path.endswith(".pftrace")

    assert sorted((n, s, d) for _, n, s, d, _ in got["slices"]) == sorted(
        (s.name, s.start_ns, s.end_ns - s.start_ns) for s in t.spans)
    side = [args for _, n, _, _, args in got["slices"] if n == "side"]
    assert side == [{"step": 3}]
    assert [(n, ts) for _, n, ts, _ in got["instants"]] == [(m.name, m.t_ns) for m in t.marks]

    (w,) = t.workers.values()
    assert got["machines"] == {0: w.host}
    tracks = got["tracks"]
    procs = [d.process for d in tracks.values() if d.HasField("process")]
    assert [(p.pid, p.process_name.startswith(f"worker {w.host}:{w.pid}")) for p in procs] == [
        (w.pid, True)]
    children = {pid for (_, pid) in t.processes} - {w.pid}
    assert children, "the child process was seen"
    named = {d.name for d in tracks.values() if d.parent_uuid and not d.HasField("counter")}
    for pid in children:
        assert any(n.endswith(f" {pid}") for n in named), (pid, named)
    threads = {d.thread.thread_name for d in tracks.values() if d.HasField("thread")}
    assert "side-thread" in threads

    by_track = {(_owner(tracks, u), tracks[u].name): pts for u, pts in got["counters"].items()}
    workers, machines = counter_groups(t)
    checked = set()
    for g in (*workers, *machines):
        owner = f"host {g.host}" if g.pid is None else f"pid {g.pid}"
        if not counter_metrics(g):
            continue  # a thread whose CPU never moved has no counter tracks
        for t_ns, values in group_values(g):
            for metric, value in values:
                key = (owner, counter_name(g.scope, metric, g.tid))
                # A counter holds its value until the next: repeats are left out.
                before = [v for ts, v in by_track[key] if ts <= t_ns]
                assert before and before[-1] == pytest.approx(value, rel=1e-12), (key, t_ns)
                checked.add(key)
    assert set(by_track) == checked
    names = {name for _, name in checked}
    assert {"tree.cpu_percent", "tree.rss_bytes", "tree.cpu_user_s/s", "proc.rss_bytes",
            "host.cpu_percent"} <= names
    assert any(n.startswith("thread.cpu_percent (tid ") for n in names)


def test_chrome_counters_grouped_rated_and_per_thread(real_timeline):
    """In the Chrome trace, a process's tree.* and proc.* counters come first, each thread's
    counters carry its tid, host counters sit once on a process named after the host, and
    cumulative counters are rates."""
    ev = to_chrome(real_timeline)["traceEvents"]
    cs = [e for e in ev if e["ph"] == "C"]
    (w,) = real_timeline.workers.values()
    first = [e["name"].split(".")[0] for e in cs if e["pid"] == w.pid]
    assert first[0] == "tree" and set(first[:first.index("thread")]) <= {"tree", "proc"}
    tids = {e["name"].rsplit("(tid ", 1)[1] for e in cs if e["name"].startswith("thread.")}
    assert len(tids) >= 2, "the main thread and the side thread, apart"
    hosts = {e["pid"] for e in cs if e["name"].startswith("host.")}
    (host_pid,) = hosts
    assert {"ph": "M", "name": "process_name", "pid": host_pid, "tid": 0,
            "args": {"name": f"host {w.host}"}} in ev
    assert not any(e["name"] == "tree.cpu_user_s" for e in cs), "a total, not a rate"
    assert any(e["name"] == "tree.cpu_user_s/s" for e in cs)


def test_counter_rates_and_hosts_once_in_both_traces(tmp_path):
    """Two workers of one host: host counters once (from the worker that sampled more), a
    cumulative counter's rate per second, two threads' counters on two tracks; the same in
    the Chrome trace and the .pftrace."""
    samples = []
    for k in range(4):
        samples.append(Sample("a", k * S, "tree", 10, {"cpu_user_s": 0.5 * k, "rss_bytes": 7}))
        samples.append(Sample("a", k * S, "host", None, {"net_sent_bytes": 1000 * k}))
        for tid in (11, 12):
            samples.append(Sample("a", k * S, "thread", 10, {"cpu_percent": float(tid)}, tid))
    samples.append(Sample("b", 0, "host", None, {"net_sent_bytes": 5}))
    t = Timeline(workers={"a": Worker("a", host="h", pid=10), "b": Worker("b", host="h", pid=20)},
                 samples=samples)
    t.sort()
    cs = [e for e in to_chrome(t)["traceEvents"] if e["ph"] == "C"]
    series: dict[tuple[int, str], list[float]] = {}
    for e in cs:
        series.setdefault((e["pid"], e["name"]), []).append(e["args"]["value"])
    host = next(p for p, n in series if n == "host.net_sent_bytes/s")
    assert series == {(10, "tree.cpu_user_s/s"): [0.5, 0.5, 0.5], (10, "tree.rss_bytes"): [7] * 4,
                      (10, "thread.cpu_percent (tid 11)"): [11.0] * 4,
                      (10, "thread.cpu_percent (tid 12)"): [12.0] * 4,
                      (host, "host.net_sent_bytes/s"): [1000.0] * 3}

    t.save(tmp_path / "t.pftrace")
    got = decode((tmp_path / "t.pftrace").read_bytes())
    tracks = got["tracks"]
    by_track = {(_owner(tracks, u), tracks[u].name): pts for u, pts in got["counters"].items()}
    # Repeated values are left out, but every track keeps its first and last point.
    assert by_track == {("pid 10", "tree.cpu_user_s/s"): [(S, 0.5), (3 * S, 0.5)],
                        ("pid 10", "tree.rss_bytes"): [(0, 7), (3 * S, 7)],
                        ("pid 10", "thread.cpu_percent (tid 11)"): [(0, 11), (3 * S, 11)],
                        ("pid 10", "thread.cpu_percent (tid 12)"): [(0, 12), (3 * S, 12)],
                        ("host h", "host.net_sent_bytes/s"): [(S, 1000), (3 * S, 1000)]}
    order = [tracks[u].name for u in sorted(tracks) if tracks[u].HasField("counter")]
    assert order.index("tree.rss_bytes") < order.index("thread.cpu_percent (tid 11)")


def test_pftrace_without_perfetto_says_how_to_install(tmp_path):
    """Saving a .pftrace where the perfetto package cannot be imported fails with a
    WorkerscopeError naming the extra to install, and leaves no file."""
    code = f"""
        import sys
        sys.modules["perfetto"] = None  # an import of it now fails as if it were absent
        from workerscope import Timeline  # the package's names register the save formats
        from workerscope.errors import WorkerscopeError
        try:
            Timeline().save({str(tmp_path / "t.pftrace")!r})
        except WorkerscopeError as err:
            print(err)
    """
    r = subprocess.run(python_script(code), capture_output=True, text=True, check=True)
    assert "pip install 'workerscope[trace]'" in r.stdout, r.stdout + r.stderr
    assert list(tmp_path.iterdir()) == []


def test_pftrace_of_overlapping_spans_and_an_empty_timeline(tmp_path):
    """Spans of one thread that overlap without nesting go on a second track of their
    process; an empty timeline still writes a valid trace."""
    spans = [Span("w", None, 1, None, "a", 0, 10 * S, 10, 10),
             Span("w", None, 2, None, "b", 5 * S, 15 * S, 10, 10)]
    t = Timeline(workers={"w": Worker("w", host="h", pid=10)}, spans=spans)
    t.save(tmp_path / "o.pftrace")
    got = decode((tmp_path / "o.pftrace").read_bytes())
    lanes = {n: tr for tr, n, _, _, _ in got["slices"]}
    assert lanes["a"] != lanes["b"]
    assert got["tracks"][lanes["b"]].name.endswith("(overlapping)")
    Timeline().save(tmp_path / "e.pftrace")
    assert decode((tmp_path / "e.pftrace").read_bytes())["slices"] == []
