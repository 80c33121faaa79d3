"""Deaths and cut-short spans on every view, from hand-built timelines (no processes): an
OOM-killed worker, one killed by SIGKILL, one that exited inside its job, and a healthy one."""

from __future__ import annotations

import json
import re

import pytest
from factories import job, job_span, sample, span, worker
from test_html import _Dom, chromium, drawn, open_page

from workerscope.export.attribution import DIED, function_table, workers_table
from workerscope.export.chrome import to_chrome
from workerscope.export.html import to_html
from workerscope.export.terminal import gantt, jobs_table, report, workers_text
from workerscope.protocol import Status
from workerscope.timeline import Span, Timeline

S = 1_000_000_000
MIB = 1024 * 1024
T0 = 1_700_000_000 * S
OOM = "h1:100:101"
SIGKILLED = "h2:200:201"
EXITED = "h3:300:301"
HEALTHY = "h4:400:401"
OOM_ERROR = ("OOM-killed: cgroup limit 64.0 MiB, last RSS 83.5 MiB (kernel log: Killed process "
             "100 (python))")
OOM_DEATH = {"cause": "oom", "pid": 100, "signal": 9, "oom_kills": 1,
             "cgroup_limit_bytes": 64 * MIB, "cgroup_usage_bytes": 2 * MIB,
             "cgroup_peak_bytes": 64 * MIB, "last_rss_bytes": int(83.5 * MIB),
             "peak_rss_bytes": int(83.7 * MIB), "last_tree_rss_bytes": 90 * MIB,
             "kernel_log": "Memory cgroup out of memory: Killed process 100 (python) "
                           "total-vm:300000kB, anon-rss:85000kB"}


def _job(t: Timeline, wid: str, pid: int, start: float, end: float, status: str,
         error: str | None = None, death: dict | None = None, name: str = "train") -> None:
    """Job 1 of `wid` from `start` to `end` s past T0, and its job span."""
    j = job(worker=wid, name=name, start_ns=T0 + int(start * S), end_ns=T0 + int(end * S),
            status=status, error=error, pid=pid, death=death)
    t.jobs.append(j)
    t.spans.append(job_span(j))


def _span(wid: str, pid: int, sid: int, name: str, start: float, end: float,
          **fields: object) -> Span:
    """Span `sid` of job 1 under the job's span, from `start` to `end` s past T0."""
    return span(worker=wid, job=1, id=sid, parent=1, name=name, start_ns=T0 + int(start * S),
                end_ns=T0 + int(end * S), pid=pid, **fields)


def death_timeline() -> Timeline:
    """Four workers over 10 s. h1 is OOM-killed at 6 s inside `grow`, which is cut short; its
    tree has three processes (python 100, stress 102, gzip 103). h2 is killed by SIGKILL at
    4 s, h3 exits with status 3 at 5 s, h4 runs a clean job with one failing call."""
    t = Timeline()
    for wid, status in ((OOM, "killed"), (SIGKILLED, "killed"), (EXITED, "killed"),
                        (HEALTHY, "exited")):
        t.workers[wid] = worker(wid, status=status, interval=0.5)
    t.workers[OOM].notes.append(f"died inside a job: {OOM_ERROR}")
    _job(t, OOM, 100, 0, 6, "oom_killed", OOM_ERROR, OOM_DEATH)
    t.spans.append(_span(OOM, 100, 2, "load", 1, 2))
    t.spans.append(_span(OOM, 100, 3, "grow", 3, 6, cut_short=True))
    _job(t, SIGKILLED, 200, 1, 4, "killed", "killed by SIGKILL", {"cause": "signal", "signal": 9})
    t.spans.append(_span(SIGKILLED, 200, 2, "grow", 2, 4, cut_short=True))
    _job(t, EXITED, 300, 1, 5, "killed", "exited inside the job with status 3",
         {"cause": "exit", "exit_status": 3})
    _job(t, HEALTHY, 400, 0, 10, "ok")
    t.spans.append(_span(HEALTHY, 400, 2, "parse", 2, 3,
                         attrs={"traceback": "Traceback (most recent call last):\n  File "
                                             "\"x.py\", line 3, in parse\nValueError: bad row 7"},
                         error="ValueError: bad row 7"))
    t.processes.update({(OOM, 100): "python", (OOM, 102): "stress", (OOM, 103): "gzip"})
    for k in range(13):  # h1: samples every 0.5 s until 6 s
        ts = T0 + k * S // 2
        rss = {100: 20 * MIB + k * 4 * MIB, 102: 5 * MIB + k * 2 * MIB, 103: 3 * MIB}
        cpu = {100: 90.0, 102: 40.0 + k, 103: 5.0}
        for pid in (100, 102, 103):
            t.samples.append(sample(worker=OOM, t_ns=ts, scope="proc", pid=pid,
                                    rss_bytes=float(rss[pid]), cpu_percent=cpu[pid],
                                    cpu_user_s=cpu[pid] / 100 * k / 2, cpu_system_s=0.0))
        t.samples.append(sample(worker=OOM, t_ns=ts, pid=100, rss_bytes=float(sum(rss.values())),
                                cpu_percent=sum(cpu.values())))
        t.samples.append(sample(worker=OOM, t_ns=ts, scope="host", cgroup_mem_limit_bytes=64.0 * MIB))
    for k in range(21):
        t.samples.append(sample(worker=HEALTHY, t_ns=T0 + k * S // 2, pid=400,
                                rss_bytes=30.0 * MIB, cpu_percent=50.0))
    t.sort()
    return t


# -- the shared rules -----------------------------------------------------------------------------
def test_died_includes_oom_killed_and_tables_name_the_cause():
    """DIED counts oom_killed; the workers table names each death's cause and the function table
    counts cut-short calls."""
    assert Status.OOM_KILLED in DIED
    t = death_timeline()
    rows = {r["worker"]: r for r in workers_table(t)}
    assert {w: rows[w]["died"] for w in rows} == {
        OOM: "oom", SIGKILLED: "SIGKILL", EXITED: "exit 3", HEALTHY: ""}
    assert rows[OOM]["death"] == OOM_DEATH
    funcs = {r["name"]: r for r in function_table(t)}
    assert funcs["grow"]["cut_short"] == 2 and funcs["load"]["cut_short"] == 0


def test_oom_killed_job_of_a_worker_not_marked_killed_is_a_death():
    """A worker whose status did not say so (a driver's `running`) but whose job was
    OOM-killed is drawn as died in the Gantt."""
    t = death_timeline()
    t.workers[OOM].status = "running"
    line = next(x for x in gantt(t, width=80).splitlines() if x.startswith("h1:100"))
    assert "✗" in line


# -- terminal -------------------------------------------------------------------------------------
def test_terminal_shows_causes_and_cut_short_spans():
    """Jobs and workers tables say oom / SIGKILL / exit 3; the Gantt draws cut-short spans with
    their own block and says what it means; the report lists each death's figures."""
    t = death_timeline()
    jobs = jobs_table(t)
    for wid, cause in (("h1:100", "oom"), ("h2:200", "SIGKILL"), ("h3:300", "exit 3")):
        line = next(x for x in jobs.splitlines() if x.startswith(wid))
        assert re.search(rf"\b{cause}\b", line), line
    workers = workers_text(t)
    assert re.search(r"h1:100 +killed .*\boom\b", workers), workers
    g = gantt(t, width=80)
    h1 = next(x for x in g.splitlines() if x.startswith("h1:100"))
    h4 = next(x for x in g.splitlines() if x.startswith("h4:400"))
    assert "▓" in h1 and "▓" not in h4
    text = report(t, width=80)
    assert "▓ cut short" in text
    assert "cgroup limit 64 MiB" in text and "last RSS 83.5 MiB" in text
    assert "Killed process 100 (python)" in text


# -- Chrome trace ---------------------------------------------------------------------------------
def test_chrome_trace_carries_deaths_and_cut_short():
    """The job's slice and its failure instant carry Job.death; a cut-short span says so."""
    trace = json.loads(json.dumps(to_chrome(death_timeline())))
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    job = next(e for e in xs if e["cat"] == "job" and e["pid"] == 100)
    assert job["args"]["death"] == OOM_DEATH
    grow = [e for e in xs if e["name"] == "grow"]
    assert len(grow) == 2 and all(e["args"]["cut_short"] is True for e in grow)
    load = next(e for e in xs if e["name"] == "load")
    assert "cut_short" not in load["args"]
    inst = next(e for e in trace["traceEvents"] if e["ph"] == "i" and e["pid"] == 100)
    assert inst["name"] == "job oom_killed: train" and inst["args"]["death"] == OOM_DEATH


# -- HTML -----------------------------------------------------------------------------------------
def _data(page: str) -> dict:
    blob = re.search(r'<script type="application/json" id="ws-data">(.*?)</script>', page, re.S)
    return json.loads(blob.group(1))


def test_html_payload_marks_deaths_and_cut_short():
    """An oom_killed job flags its worker as died and its span as killed; cut-short spans carry
    their own flag; the memory plot gets the cgroup limit; the page lists each death's figures."""
    t = death_timeline()
    page = to_html(t)
    data = _data(page)
    died = {w[0] for w in data["workers"] if w[2]}
    assert died == {OOM, SIGKILLED, EXITED}
    names = data["names"]
    flags = data["spans"]["f"]
    by_name: dict[str, list[tuple[str, int]]] = {}
    for w, n, f in zip(data["spans"]["w"], data["spans"]["n"], flags, strict=True):
        by_name.setdefault(names[n], []).append((data["workers"][w][0], f))
    assert all(f & 16 for _, f in by_name["grow"]) and not any(f & 16 for _, f in by_name["load"])
    assert {w for w, f in by_name["train"] if f & 4} == died  # killed jobs, oom_killed included
    mem = next(p for p in data["plots"] if p["id"] == "plot-mem")
    assert [lim[0] for lim in mem["limits"]] == [64 * MIB]
    assert sorted(d[1] for d in data["deaths"]) == [data["workers"].index(w)
                                                    for w in data["workers"] if w[0] in died]
    assert "Deaths" in page and "cgroup limit 64 MiB" in page and "last RSS 83.5 MiB" in page
    assert "Killed process 100 (python)" in page


# Run after the report's own script: hover the cut-short span of h1, the OOM worker's label
# and the healthy worker's failing call, and leave the tooltips in body[data-*].
_HOVER = """<script>
setTimeout(() => {
  const b = document.body, g = document.getElementById("gantt"), r = g.getBoundingClientRect();
  const tipText = () => document.getElementById("tip").textContent;
  const at = (x, y) => { g.dispatchEvent(new MouseEvent("mousemove",
    {clientX: r.left + x, clientY: r.top + y, bubbles: true})); return tipText(); };
  const spot = window.__wsSpot;
  b.dataset.cut = at(spot("grow", 0, "h1:").x, spot("grow", 0, "h1:").y);
  b.dataset.worker = at(20, spot("grow", 0, "h1:").y);
  b.dataset.job = at(spot("train", 0, "h1:").x, spot("train", 0, "h1:").y);
  b.dataset.err = at(spot("parse", 0).x, spot("parse", 0).y);
  b.dataset.done = "1";
}, 100);
</script></body></html>"""


@pytest.mark.browser
def test_html_draws_deaths_and_explains_them_on_hover(tmp_path):
    """The page draws error-free; hovering shows a cut-short span as such, the OOM-killed job
    and worker with their figures, and a failed call's traceback."""
    page = to_html(death_timeline())
    dom = open_page(page, tmp_path)
    for cid in ("gantt", "plot-cpu", "plot-mem"):
        n, ink = drawn(dom, cid)
        assert n > 0 and ink > 0, cid
    path = tmp_path / "hover.html"
    path.write_text(page.replace("</body></html>", _HOVER), encoding="utf-8")
    body = _Dom(chromium(path, tmp_path, "--dump-dom", "--window-size=1400,1400")).tags["body"]
    assert body.get("data-errors") is None, body["data-errors"]
    assert body.get("data-done") == "1"
    assert "grow" in body["data-cut"] and "cut short" in body["data-cut"], body["data-cut"]
    assert "OOM-killed" in body["data-worker"] and "cgroup limit 64 MiB" in body["data-worker"]
    assert "cgroup limit 64 MiB" in body["data-job"] and "kernel log" in body["data-job"]
    assert "ValueError: bad row 7" in body["data-err"] and "line 3, in parse" in body["data-err"]


def showcase_timeline() -> Timeline:
    """A training run on one node, for docs/report-death.png: worker 4121 and its six data
    loader processes grow towards the 2 GiB cgroup limit until the OOM killer ends it at 7.4 s
    in `augment` (cut short); worker 4200 trains on, its calls steady."""
    gib = 1024 * MIB
    t = Timeline()
    oom, ok = "node1:4121:4122", "node1:4200:4201"
    t.workers[oom] = worker(oom, status="killed", interval=0.25)
    t.workers[ok] = worker(ok, status="exited", interval=0.25)
    error = ("OOM-killed: cgroup limit 2.0 GiB, last RSS 1.1 GiB, peak RSS 1.1 GiB (kernel log: "
             "Killed process 4121 (python))")
    death = {"cause": "oom", "pid": 4121, "signal": 9, "oom_kills": 1,
             "cgroup_limit_bytes": 2 * gib, "cgroup_peak_bytes": 2 * gib,
             "last_rss_bytes": int(1.1 * gib), "peak_rss_bytes": int(1.12 * gib),
             "last_tree_rss_bytes": int(1.96 * gib),
             "kernel_log": "Memory cgroup out of memory: Killed process 4121 (python) "
                           "total-vm:9.1GB, anon-rss:1.1GB, file-rss:0kB, oom_score_adj:0"}
    t.workers[oom].notes.append(f"died inside a job: {error}")
    _job(t, oom, 4121, 0.2, 7.4, "oom_killed", error, death, name="train_epoch")
    _job(t, ok, 4200, 0.3, 9.6, "ok", name="train_epoch")
    sid = iter(range(2, 10**6))
    for wid, pid, stop in ((oom, 4121, 7.4), (ok, 4200, 9.6)):
        x = 0.45 if pid == 4121 else 0.4  # 4121's last `augment` would have ended at 7.5 s
        while x < stop - 0.05:
            for name, d in (("load_batch", 0.35), ("augment", 0.45), ("forward", 0.6)):
                end = min(x + d, stop)
                t.spans.append(_span(wid, pid, next(sid), name, x, end,
                                     cut_short=end >= stop and pid == 4121))
                x = end + 0.05
                if x >= stop:
                    break
    t.processes[(oom, 4121)] = "python"
    t.processes[(ok, 4200)] = "python"
    for k in range(6):
        t.processes[(oom, 4130 + k)] = "pt_data_worker"
    for k in range(39):
        ts = T0 + k * S // 4
        sec = k / 4
        procs = {4121: (0.25 + 0.11 * sec) * gib,
                 **{4130 + j: (0.04 + 0.0044 * (j + 1) * sec) * gib for j in range(6)}}
        cpus = {4121: 95.0 + 3 * (k % 3), **{4130 + j: 20.0 + 7 * j for j in range(6)}}
        if sec <= 7.25:
            for pid, rss in procs.items():
                t.samples.append(sample(worker=oom, t_ns=ts, scope="proc", pid=pid,
                                        rss_bytes=rss, cpu_percent=cpus[pid]))
            t.samples.append(sample(worker=oom, t_ns=ts, pid=4121, rss_bytes=sum(procs.values()),
                                    cpu_percent=sum(cpus.values()), read_bytes=4e7 * sec,
                                    write_bytes=1e6 * sec))
            t.samples.append(sample(worker=oom, t_ns=ts, scope="host",
                                    cgroup_mem_limit_bytes=2.0 * gib))
        t.samples.append(sample(worker=ok, t_ns=ts, scope="host",  # the node's, read by one of them
                                net_recv_bytes=9e7 * sec + 4e6 * (k % 4), net_sent_bytes=1e7 * sec))
        t.samples.append(sample(worker=ok, t_ns=ts, scope="gpu0",
                                util_percent=0.0 if sec < 0.5 else 88.0 + 4 * (k % 3),
                                mem_used_bytes=(12 + min(sec, 1) * 40) * gib))
        t.samples.append(sample(worker=ok, t_ns=ts, scope="proc", pid=4200,
                                rss_bytes=0.6 * gib + 2e6 * (k % 5), cpu_percent=99.0))
        t.samples.append(sample(worker=ok, t_ns=ts, pid=4200, rss_bytes=0.6 * gib + 2e6 * (k % 5),
                                cpu_percent=99.0, read_bytes=3e7 * sec, write_bytes=5e5 * sec))
    t.sort()
    return t


@pytest.mark.browser
def test_showcase_draws_death_cut_short_and_breakdown(tmp_path):
    """The showcase (docs/report-death.png) draws every canvas error-free, with the death, the
    cut-short span and the per-process breakdown in it."""
    t = showcase_timeline()
    page = to_html(t)
    dom = open_page(page, tmp_path)
    for cid in ("gantt", "plot-cpu", "plot-proc-cpu", "plot-mem", "plot-proc-mem", "plot-io"):
        n, ink = drawn(dom, cid)
        assert n > 0 and ink > 0, cid
    data = _data(page)
    assert any(f & 16 for f in data["spans"]["f"])
    assert "others (3 processes)" in page and "cgroup limit 2 GiB (node1:4121)" in page
