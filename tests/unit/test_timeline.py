"""The Timeline: merge across workers, clock mapping, native files and the Chrome trace."""

from __future__ import annotations

import json

import pytest
from factories import frame, sample, span, span_record, timeline, worker
from hypothesis import given, settings
from hypothesis import strategies as st

from workerscope import Timeline, load, protocol
from workerscope.builder import build
from workerscope.errors import WorkerscopeError
from workerscope.export.chrome import to_chrome
from workerscope.timeline import in_start_order


def frames_of_worker(wid, host, pid, wall, mono, records=(), jobs=((1, 100, 900),)):
    """Frames one sidecar would send: hello, jobs, one sample, the given span records."""
    seq = iter(range(1000))
    out = [frame("hello", worker=wid, seq=next(seq), host=host, pid=pid, anchor=[wall, mono],
                 interval=0.1)]
    out += [frame("job_start", worker=wid, seq=next(seq), job=job, name=f"job{job}", t=mono + start,
                  pid=pid, tid=pid) for job, start, _ in jobs]
    out.append(frame("sample", worker=wid, seq=next(seq), t=mono + 500, tree={"cpu_percent": 50.0},
                     procs=[[pid, {"rss_bytes": 10}]], host={"cpu_percent": 5.0},
                     new=[[pid, 1, "python"]]))
    out.append(frame("spans", worker=wid, seq=next(seq), pid=pid, records=[list(r) for r in records],
                     threads=[[pid, "MainThread"]]))
    out += [frame("job_end", worker=wid, seq=next(seq), job=job, t=mono + end, status="ok")
            for job, _, end in jobs]
    return out


def test_two_workers_share_one_wall_axis():
    """Monotonic times of two sidecars with different anchors land on one wall-clock axis."""
    rec = span_record(job=1, id=2, parent=1, name="f", start_ns=200, end_ns=300, tid=11)
    a = frames_of_worker("a", "h1", 11, wall=1_000_000, mono=0, records=[rec])
    rec_b = span_record(job=1, id=2, parent=1, name="f", start_ns=50_200, end_ns=50_300, tid=11)
    b = frames_of_worker("b", "h2", 11, wall=1_000_000, mono=50_000, records=[rec_b])
    t = build(a + b)
    fa, fb = (s for s in t.spans if s.name == "f")
    assert fa.start_ns == fb.start_ns == 1_000_200
    assert {s.t_ns for s in t.samples} == {1_000_500}
    assert len(t.jobs) == 2 and {j.worker for j in t.jobs} == {"a", "b"}


def test_wsc_round_trip(tmp_path):
    """save(.wsc) then load gives back an equal timeline."""
    rec = span_record(job=1, id=2, parent=1, name="f", start_ns=200, end_ns=300, tid=5,
                      attrs={"k": [1, 2]}, error="ValueError")
    t = build(frames_of_worker("w", "h", 5, 10**18, 0, records=[rec]))
    path = t.save(tmp_path / "t.wsc")
    back = load(path)
    assert back == t


def test_repr_is_one_short_line_of_counts():
    """repr(timeline) is one bounded line of counts and its time range, however many records
    it holds (it printed every record); equality still compares every field."""
    wall = 1_700_000_000 * 10**9
    t = build(frames_of_worker("a", "h1", 11, wall, 0) + frames_of_worker("b", "h2", 12, wall, 0))
    text = repr(t)
    assert text.startswith("<Timeline: 2 workers, 2 jobs, 2 spans, 0 marks, 6 samples, "), text
    assert "from 2023-11-14T22:13:20" in text and text.endswith(">"), text
    big = t.merge(t)
    for k in range(50_000):
        big.spans.append(span(worker="a", job=1, id=10 + k, parent=1, start_ns=wall + k,
                              end_ns=wall + k + 10**10, pid=11))
    text = repr(big)
    assert "\n" not in text and len(text) < 200, text
    assert "50,002 spans" in text and ", 10 s from" in text, text
    assert repr(Timeline()) == "<Timeline: 0 workers, 0 jobs, 0 spans, 0 marks, 0 samples, 0 processes>"
    odd = timeline(spans=[span(worker="a", job=1, start_ns=-10**20, end_ns=0)])  # before year 1
    assert repr(odd).endswith(f"from {-10**20} ns>"), repr(odd)
    assert t != big and t == build(frames_of_worker("a", "h1", 11, wall, 0)
                                   + frames_of_worker("b", "h2", 12, wall, 0))


def test_load_refuses_what_it_cannot_read(tmp_path):
    """Garbage, a foreign msgpack file, and .json are refused with WorkerscopeError."""
    (tmp_path / "bad.wsc").write_bytes(b"\xc1\xc1")
    (tmp_path / "other.wsc").write_bytes(protocol.encode_blob({"version": 99}))
    for name in ("bad.wsc", "other.wsc", "x.json"):
        with pytest.raises(WorkerscopeError):
            load(tmp_path / name)
    with pytest.raises(WorkerscopeError, match=r"use one of .*\.json.*\.wsc"):
        Timeline().save(tmp_path / "t.txt")


def test_save_is_atomic_on_failure(tmp_path):
    """A save into a missing folder raises and leaves no partial file behind."""
    with pytest.raises(WorkerscopeError, match="no such folder"):
        Timeline().save(tmp_path / "missing" / "t.wsc")
    assert list(tmp_path.iterdir()) == []


def _span(sid, start, end, tid=1, pid=10, parent=None, worker="w"):
    """Span `sid` of job 1, named s<sid>."""
    return span(worker=worker, job=1, id=sid, parent=parent, name=f"s{sid}", start_ns=start,
                end_ns=end, pid=pid, tid=tid)


def test_chrome_trace_structure():
    """X events are relative microseconds; counters are <scope>.<metric>; names are M events."""
    t = timeline(workers=[worker("w", pid=10)],
                 spans=[_span(1, 10_000, 20_000), _span(2, 12_000, 15_000, parent=1)],
                 samples=[sample(t_ns=10_000, pid=10, cpu_percent=99.0),
                          sample(t_ns=11_000, scope="proc", pid=12, rss_bytes=5)],
                 processes={("w", 10): "python", ("w", 12): "child"},
                 threads={("w", 10, 1): "MainThread"})
    d = to_chrome(t)
    json.dumps(d)  # serialisable as is
    ev = d["traceEvents"]
    xs = [e for e in ev if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"]) for e in xs] == [("s1", 0.0, 10.0), ("s2", 2.0, 3.0)]
    cs = {(e["name"], e["pid"]) for e in ev if e["ph"] == "C"}
    assert cs == {("tree.cpu_percent", 10), ("proc.rss_bytes", 12)}
    names = {(e["name"], e["pid"]) for e in ev if e["ph"] == "M"}
    assert ("process_name", 12) in names and ("thread_name", 10) in names
    assert d["otherData"]["origin_unix_ns"] == 10_000


def test_chrome_overlapping_spans_become_async():
    """Spans that overlap without nesting on one thread go out as b/e pairs, not broken X."""
    t = timeline(workers=[worker("w", pid=10)], spans=[_span(1, 0, 10_000), _span(2, 5_000, 15_000)])
    ev = to_chrome(t)["traceEvents"]
    assert [e["name"] for e in ev if e["ph"] == "X"] == ["s1"]
    be = [(e["ph"], e["name"]) for e in ev if e["ph"] in "be"]
    assert be == [("b", "s2"), ("e", "s2")]


def test_chrome_colliding_pids_of_two_hosts_are_separated():
    """The same pid on two hosts becomes two trace processes, and the mapping is recorded."""
    t = timeline(workers=[worker("a", host="h1", pid=10), worker("b", host="h2", pid=10)],
                 spans=[_span(1, 0, 10, worker="a"), _span(1, 0, 10, worker="b")], sort=False)
    d = to_chrome(t)
    pids = {e["pid"] for e in d["traceEvents"] if e["ph"] == "X"}
    assert len(pids) == 2 and 10 in pids
    assert list(d["otherData"]["remapped_pids"]) == ["h2:10"]


def test_the_json_trace_has_no_counter_tracks_of_idle_threads():
    """As in the .pftrace: a thread whose CPU never moved gets no counter events in the
    Chrome .json (a process's parked threads made dozens of flat tracks), a busy one does."""
    from factories import sample, timeline, worker

    from workerscope.export.chrome import to_chrome

    samples = [sample(t_ns=k * 10**9, scope="thread", pid=10, tid=tid,
                      values={"cpu_user_s": busy * k, "cpu_system_s": 0.0})
               for k in range(5) for tid, busy in ((11, 0.0), (12, 0.5))]
    t = timeline(workers=[worker(pid=10)], samples=samples)
    counters = [e for e in to_chrome(t)["traceEvents"] if e["ph"] == "C"]
    names = {e["name"] for e in counters}
    assert any("12" in n for n in names), names
    assert not any("11" in n for n in names), names


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), max_size=60))
def test_spans_in_start_order_are_by_start_then_the_longer_first(edges):
    """in_start_order (two C-keyed sorts) orders spans as one sort by (start, -end) does,
    spans that tie on both left as they came."""
    spans = [span(id=k, start_ns=a, end_ns=a + d) for k, (a, d) in enumerate(edges)]
    want = sorted(spans, key=lambda s: (s.start_ns, -s.end_ns))
    assert [s.id for s in in_start_order(spans)] == [s.id for s in want]
    t = timeline(spans=list(reversed(spans)))
    t.sort()
    assert [s.id for s in t.spans] == [s.id for s in sorted(
        reversed(spans), key=lambda s: (s.start_ns, -s.end_ns))]
