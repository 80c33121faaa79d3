"""The HTML report: one self-contained page, checked in a real headless Chromium."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import time
from html.parser import HTMLParser

import pytest
from factories import job, job_span, sample, span, timeline, worker

from workerscope import monitor, timed
from workerscope.export import html as html_export
from workerscope.export.html import to_html
from workerscope.timeline import Timeline

PLOTS = ("plot-cpu", "plot-mem", "plot-io", "plot-net", "plot-gpu", "plot-gpumem")
NASTY = "</script><script>alert(1)</script>"


# -- a synthetic timeline -----------------------------------------------------------------------
def synthetic(workers: int = 16, spans: int = 50_000, seconds: float = 20.0,
              interval: float = 0.1, seed: int = 1) -> Timeline:
    """`workers` workers with two jobs each, about `spans` spans in all, nested 4 deep
    (job > step > load/compute/save > kernel), every 97th span failing, worker 3 killed
    halfway through its second job, and proc/tree/host/gpu0 samples every `interval` s."""
    rnd = random.Random(seed)
    origin = 1_700_000_000 * 10**9
    t = Timeline()
    per_job = max(spans // (workers * 2), 6)
    killed = 3 if workers > 3 else None
    count = 0
    for w in range(workers):
        wid, pid = f"host{w // 8}:{1000 + w}", 1000 + w
        t.workers[wid] = worker(wid, interval=interval, status="killed" if w == killed else "exited",
                                notes=["gpu0: power_w not supported"] if w == 0 else [])
        slot = seconds / 2 * (1.0 if w == workers - 1 else 0.6)  # the last one straggles
        job_ns = int(slot * 1e9 * 0.95)
        ids = iter(range(1, 10**9))
        died_at = None
        for j in range(2):
            jid = next(ids)
            j0 = origin + j * int(slot * 1e9) + rnd.randrange(10**7)
            steps = max((per_job - 1) // 5, 1)
            step_ns = job_ns // steps
            end = j0 + steps * step_ns
            status = "ok"
            if w == killed and j == 1:
                end, status = j0 + job_ns // 2, "killed"
                died_at = end
            t.jobs.append(job(worker=wid, id=jid, name="train", start_ns=j0, end_ns=end,
                              status=status, pid=pid))
            t.spans.append(job_span(t.jobs[-1], error=None if status == "ok" else status))
            count += 1
            for k in range(steps):
                s0 = j0 + k * step_ns
                if s0 + step_ns > end:
                    break
                sid = next(ids)
                t.spans.append(span(worker=wid, job=jid, id=sid, parent=jid, name="step",
                                    start_ns=s0, end_ns=s0 + step_ns - 1000, pid=pid,
                                    attrs={"step": k}))
                parts = (("load", 0.2), ("compute", 0.6), ("save", 0.15))
                c0 = s0
                for name, share in parts:
                    cid = next(ids)
                    c1 = c0 + int(step_ns * share)
                    count += 1
                    err = "ValueError: bad batch" if count % 97 == 0 else None
                    t.spans.append(span(worker=wid, job=jid, id=cid, parent=sid, name=name,
                                        start_ns=c0, end_ns=c1, pid=pid, error=err))
                    if name == "compute":
                        t.spans.append(span(worker=wid, job=jid, id=next(ids), parent=cid,
                                            name="kernel", start_ns=c0 + 1000, end_ns=c1 - 1000,
                                            pid=pid, tid=pid + 1, attrs={"grid": [64, 1]}))
                    c0 = c1
                count += 2
        stop = died_at or origin + int(seconds * 1e9)
        rss = read = net = 0.0
        cpu_s = 0.0
        n = 0
        while origin + int(n * interval * 1e9) <= stop:
            ts = origin + int(n * interval * 1e9)
            cpu = rnd.uniform(50, 100)
            cpu_s += cpu / 100 * interval
            rss = max(rss + rnd.uniform(-5e6, 6e6), 5e7)
            read += rnd.uniform(0, 2e6)
            net += rnd.uniform(0, 1e5)
            t.samples.append(sample(worker=wid, t_ns=ts, pid=pid, cpu_percent=cpu,
                                    cpu_user_s=cpu_s, cpu_system_s=0.0, rss_bytes=rss,
                                    read_bytes=read, write_bytes=read / 2))
            t.samples.append(sample(worker=wid, t_ns=ts, scope="proc", pid=pid, cpu_user_s=cpu_s,
                                    cpu_system_s=0.0, rss_bytes=rss, peak_rss_bytes=rss * 1.1,
                                    read_bytes=read, write_bytes=read / 2))
            t.samples.append(sample(worker=wid, t_ns=ts, scope="host", cpu_percent=cpu / 4,
                                    net_sent_bytes=net, net_recv_bytes=2 * net))
            t.samples.append(sample(worker=wid, t_ns=ts, scope="gpu0",
                                    util_percent=rnd.uniform(0, 100), mem_used_bytes=4e9 + w * 1e8))
            n += 1
    t.sort()
    return t


# -- the browser --------------------------------------------------------------------------------
class _Dom(HTMLParser):
    """The attributes of <body> and of each <canvas id=...> in a dumped DOM."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: dict[str, dict[str, str | None]] = {}
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.tags["body"] = a
        elif tag == "canvas" and a.get("id"):
            self.tags[str(a["id"])] = a


def chromium(url_path, tmp_path, *extra: str) -> str:
    """Run headless Chromium on a file (60 s at most); returns what it printed."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("Debian's `chromium` is not installed (apt-get install -y chromium): the "
                    "HTML report can only be checked in a real browser")
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={tmp_path / 'chromium-profile'}",
           "--virtual-time-budget=10000", *extra, url_path.as_uri()]
    # A session of its own: on a timeout the whole browser (zygote, renderers) is killed.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("chromium did not finish in 60 s")
    assert proc.returncode == 0, err[-2000:]
    return out


def open_page(page: str, tmp_path, name: str = "report.html") -> dict:
    """Load a page in Chromium; the DOM's tags, once it is ready and free of script errors."""
    path = tmp_path / name
    path.write_text(page, encoding="utf-8")
    dom = _Dom(chromium(path, tmp_path, "--dump-dom")).tags
    assert dom["body"].get("data-errors") is None, dom["body"]["data-errors"]
    assert dom["body"].get("data-ready") == "1", "the page did not finish drawing"
    return dom


def render(t: Timeline, tmp_path, name: str = "report.html", **kw) -> tuple[str, dict]:
    """The report of `t`, and its DOM's tags once loaded in Chromium."""
    page = to_html(t, **kw)
    return page, open_page(page, tmp_path, name)


def drawn(dom: dict, cid: str) -> tuple[int, int]:
    """(data-drawn, data-ink) of a canvas."""
    tag = dom[cid]
    return int(tag.get("data-drawn") or 0), int(tag.get("data-ink") or 0)


@pytest.fixture(scope="module")
def big() -> tuple[Timeline, str]:
    """The 16-worker, 50k-span synthetic timeline and its report."""
    t = synthetic(spans=51_000)
    return t, to_html(t)


# -- tests --------------------------------------------------------------------------------------
@pytest.mark.browser
def test_big_synthetic_timeline_draws_everything(big, tmp_path):
    """16 workers and 50k nested spans: the page is ready, error-free, and every canvas is inked."""
    t, page = big
    assert len(t.spans) >= 50_000 and len(t.workers) == 16
    dom = open_page(page, tmp_path)
    for cid in ("gantt", *PLOTS):
        n, ink = drawn(dom, cid)
        assert n > 0 and ink > 0, (cid, dom[cid])


def test_big_report_is_compact_and_flags_workers(big):
    """Spans take ~50 bytes each; the killed worker, the straggler and worker notes are shown."""
    t, page = big
    blob = re.search(r'<script type="application/json" id="ws-data">(.*?)</script>', page, re.S)
    data = json.loads(blob.group(1))
    span_part = len(json.dumps([data["spans"], data["avals"], data["errors"], data["attrs"]],
                               separators=(",", ":")))
    assert span_part / len(t.spans) < 55, span_part / len(t.spans)
    killed = [w for w in data["workers"] if w[2]]
    assert [w[0] for w in killed] == ["host0:1003"]
    assert [w[0] for w in data["workers"] if w[3]] == ["host1:1015"]
    assert "gpu0: power_w not supported" in page and "⚠ straggler" in page


@pytest.mark.browser
def test_page_is_self_contained_and_survives_hostile_names(tmp_path):
    """No URL the page would load; a span, attr, note and title of `</script>...` break nothing."""
    t = synthetic(workers=3, spans=300)
    w = next(iter(t.workers.values()))
    w.notes.append(NASTY)
    victim = t.spans[5]
    t.spans[5] = dataclasses.replace(victim, name=NASTY, attrs={NASTY: NASTY}, error=NASTY)
    page, dom = render(t, tmp_path, title=NASTY)
    assert not re.search(r"https?://", page)
    assert not re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=", page, re.I)
    assert "@import" not in page and "url(" not in page
    assert NASTY not in page and "&lt;/script&gt;&lt;script&gt;alert(1)" in page
    assert drawn(dom, "gantt")[0] > 0


# Run after the report's own script: zoom with the wheel, hover a span and a plot, and leave
# what the page showed in body[data-*] for the test to read.
_INTERACT = """<script>
setTimeout(() => {
  const b = document.body, g = document.getElementById("gantt"), r = g.getBoundingClientRect();
  const cpu = document.getElementById("plot-cpu");
  b.dataset.before = cpu.dataset.drawn;
  const x = r.left + r.width * 0.25, y = r.top + 50;  // worker 0, lane 1, ~2 s
  for (let k = 0; k < 6; k++) g.dispatchEvent(new WheelEvent("wheel",
    {clientX: x, clientY: y, deltaY: -400, bubbles: true, cancelable: true}));
  setTimeout(() => {
    b.dataset.after = cpu.dataset.drawn;
    b.dataset.note = document.getElementById("gantt-note").textContent;
    g.dispatchEvent(new MouseEvent("mousemove", {clientX: x, clientY: y, bubbles: true}));
    b.dataset.tip = document.getElementById("tip").textContent;
    const p = cpu.getBoundingClientRect();
    cpu.dispatchEvent(new MouseEvent("mousemove",
      {clientX: x, clientY: p.top + 40, bubbles: true}));
    b.dataset.plottip = document.getElementById("tip").textContent;
    b.dataset.done = "1";
  }, 500);
}, 100);
</script></body></html>"""


@pytest.mark.browser
def test_wheel_zooms_every_canvas_and_hover_explains_a_span(tmp_path):
    """A wheel over the Gantt zooms the plots too; hovering shows a span's attribution."""
    page = to_html(synthetic(workers=4, spans=2_000))
    path = tmp_path / "zoom.html"
    path.write_text(page.replace("</body></html>", _INTERACT), encoding="utf-8")
    body = _Dom(chromium(path, tmp_path, "--dump-dom", "--window-size=1400,1400")).tags["body"]
    assert body.get("data-errors") is None, body["data-errors"]
    assert body.get("data-done") == "1"
    assert int(body["data-after"]) < int(body["data-before"]), "the CPU plot did not zoom"
    assert re.match(r"Showing [\d.]+ s \u2013 [\d.]+ s of 20 s", body["data-note"])
    assert "worker host0:1000" in body["data-tip"] and "cpu_s ≈" in body["data-tip"]
    assert "CPU (tree) at +" in body["data-plottip"] and "%" in body["data-plottip"]


@pytest.mark.browser
def test_spans_past_the_limit_are_binned_and_said_so(tmp_path, monkeypatch):
    """Past MAX_SPANS the shortest spans become bins, the page says how many, and it still draws."""
    monkeypatch.setattr(html_export, "MAX_SPANS", 500)
    t = synthetic(workers=2, spans=2_000)
    page, dom = render(t, tmp_path)
    assert re.search(r"the other [\d,]+ \(each .* or shorter\) are drawn as [\d,]+ grey bins", page)
    assert drawn(dom, "gantt")[0] > 0


def test_to_html_leaves_the_timeline_alone():
    """to_html is pure: the timeline is left unchanged and the same input gives the same page."""
    t = synthetic(workers=2, spans=200)
    before = copy.deepcopy(t)
    assert to_html(t) == to_html(t)
    assert t == before


@pytest.mark.browser
def test_empty_and_damaged_timelines_render(tmp_path):
    """Empty and damaged timelines (unknown worker, parent cycle, NaN, open job) render."""
    page, dom = render(Timeline(), tmp_path, name="empty.html")
    assert "empty timeline" in page and drawn(dom, "gantt") > (0, 0)
    o = 10**18
    open_job = job(worker="a", name="j", start_ns=o, status="running")
    t = timeline(
        workers=[worker("a", status="sidecar_lost")], jobs=[open_job],
        spans=[job_span(open_job),
               span(worker="ghost", id=5, name="orphan", start_ns=o, end_ns=o + 10**6, pid=7,
                    attrs={(1, 2): math.nan}, error="boom"),
               span(worker="a", job=1, id=9, parent=8, name="cycle", start_ns=o + 10,
                    end_ns=o + 10**6),
               span(worker="a", job=1, id=8, parent=9, name="cycle", start_ns=o + 10,
                    end_ns=o + 10**6)],
        samples=[sample(worker="a", t_ns=o + i * 10**8, pid=1,
                        cpu_percent=math.inf if i == 3 else 50.0,
                        rss_bytes=math.nan if i == 4 else 1e6, read_bytes=100.0 * i, write_bytes=0)
                 for i in range(20)], sort=False)
    page, dom = render(t, tmp_path, name="odd.html")
    assert "sidecar_lost" in page
    for cid in ("gantt", *PLOTS):
        assert drawn(dom, cid)[0] > 0, cid


@timed
def _squares(n: int) -> int:
    return sum(i * i for i in range(n))


@pytest.mark.browser
def test_report_of_a_real_monitored_job(tmp_path, clean_env):
    """A real monitor() job with @timed calls renders; plots without data draw a message."""
    with monitor(interval=0.05) as m:
        end = time.perf_counter() + 0.4
        while time.perf_counter() < end:
            _squares(20_000)
    t = m.timeline
    assert any(s.name.endswith("_squares") for s in t.spans)
    _, dom = render(t, tmp_path)
    assert drawn(dom, "gantt")[0] > 0 and drawn(dom, "gantt")[1] > 0
    assert drawn(dom, "plot-cpu")[0] > 1
    for cid in PLOTS:
        assert drawn(dom, cid)[0] >= 1 and drawn(dom, cid)[1] > 0, cid


def test_function_table_shows_growth_beside_the_rss_a_call_ran_in():
    """The report's function table has a memory growth column (0 B for the sleep, 250 MiB for
    the allocator) and names the RSS column for what it is (issue 14, item 4)."""
    from test_exports import hog_and_nap

    page = to_html(hog_and_nap())
    section = page[page.index("<h2>Functions</h2>"):]
    heads = re.findall(r"<th(?:\s[^>]*)?>(.*?)</th>", section)
    assert "memory grown" in heads and "process RSS during" in heads, heads
    cells = {m.group(1): re.findall(r"<td[^>]*>(.*?)</td>", m.group(0))
             for m in re.finditer(r"<tr[^>]*><td><code>(\w+)</code>.*?</tr>", section)}
    grown = heads.index("memory grown")
    assert cells["nap"][grown] == "0 B" and cells["hog"][grown] == "250 MiB"
    assert cells["nap"][heads.index("process RSS during")] == "270 MiB"


@pytest.mark.browser
def test_per_process_breakdown_is_drawn(tmp_path):
    """The report draws the per-process plots: the top processes by name and pid, and the
    others summed (issue 14, item 8)."""
    from test_exports import process_tree

    page, dom = render(process_tree(), tmp_path)
    for cid in ("plot-proc-mem", "plot-proc-cpu"):
        n, ink = drawn(dom, cid)
        assert n > 0 and ink > 0, cid
    assert "others (4 processes)" in page and "cat 17 (g:20)" not in page


def test_a_note_many_workers_gave_is_listed_once():
    """Worker notes: one every worker gave is one item `all 8 workers: ...`, one some gave
    names how many and which, one only one worker gave stays against that worker."""
    no_gpu = "gpu: no NVIDIA GPU metrics (NVML Shared Library Not Found)"
    t = synthetic(workers=8, spans=300)
    for k, w in enumerate(t.workers.values()):
        w.notes[:] = [no_gpu] + (["gpu0: power_w not supported"] if k < 2 else [])
    t.workers["host0:1005"].notes.append("tree: 3 children vanished mid-sample")
    page = to_html(t)
    box = re.search(r'<ul class="notes">(.*?)</ul>', page, re.S)
    assert box, "no worker notes"
    items = [re.sub(r"<[^>]+>", "", li) for li in re.findall(r"<li[^>]*>(.*?)</li>", box.group(1))]
    assert items == ["all 8 workers: " + no_gpu,
                     "2 of 8 workers (host0:1000, host0:1001): gpu0: power_w not supported",
                     "host0:1005: tree: 3 children vanished mid-sample"], items
