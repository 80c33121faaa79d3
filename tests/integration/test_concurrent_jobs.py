"""Jobs that run at once in two threads of one process: each drawn apart from the other (HTML
lanes, terminal rows, PNG bars), and each credited its own thread's CPU in the function
tables."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from itertools import accumulate, pairwise

import pytest
from helpers import TEST_ENV, burn

from workerscope import Subscriber, Timeline, monitor, span
from workerscope.export.html import to_html
from workerscope.export.terminal import functions_table, gantt, jobs_table
from workerscope.timeline import Span, Worker
from workerscope.units import short_worker
from workerscope.worker import link as launcher

_SECONDS = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


@pytest.fixture(scope="module")
def two_jobs() -> Timeline:
    """A real heavy job in each of two threads of this process, both open at once: "burner"
    burns 1 s of its thread's CPU in span "burn" while "sleeper" sleeps 1 s in span "sleep";
    the driver's merged timeline."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith("WORKERSCOPE_") and name not in TEST_ENV:
                mp.delenv(name)
        with Subscriber() as sub:
            both = threading.Barrier(2, timeout=60)

            def burner() -> None:
                with monitor(interval=0.05, endpoint=sub.endpoint, name="burner"):
                    both.wait()
                    with span("burn"):
                        burn(1.0)
                    both.wait()

            def sleeper() -> None:
                with monitor(interval=0.05, endpoint=sub.endpoint, name="sleeper"):
                    both.wait()
                    with span("sleep"):
                        time.sleep(1.0)
                    both.wait()

            threads = [threading.Thread(target=burner), threading.Thread(target=sleeper)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            assert sub.wait(jobs=2, timeout=60)
            t = sub.timeline()
            launcher.close_all(wait=True)  # the sidecar says bye while the driver answers
    assert {j.name for j in t.jobs} == {"burner", "sleeper"}
    return t


def drawn_spans(page: str) -> list[dict]:
    """Each span as the page's data places it: name, worker, lane, flags, start and end."""
    blob = re.search(r'<script type="application/json" id="ws-data">(.*?)</script>', page, re.S)
    assert blob
    d = json.loads(blob.group(1))
    s = d["spans"]
    starts = list(accumulate(s["t"]))
    return [{"name": d["names"][s["n"][i]], "w": s["w"][i], "lane": s["d"][i], "f": s["f"][i],
             "start": starts[i], "end": starts[i] + s["l"][i]} for i in range(len(starts))]


def no_overlap_in_a_lane(spans: list[dict]) -> None:
    lanes: dict[tuple[int, int], list[dict]] = {}
    for s in spans:
        lanes.setdefault((s["w"], s["lane"]), []).append(s)
    for key, row in lanes.items():
        row.sort(key=lambda s: s["start"])
        for a, b in pairwise(row):
            assert b["start"] >= a["end"], f"{a['name']} and {b['name']} overlap in lane {key}"


def test_html_draws_concurrent_jobs_in_lanes_of_their_own(two_jobs):
    """The report's data puts the two jobs, and their spans, in different lanes of their
    worker, and no two spans of a lane overlap in time."""
    spans = drawn_spans(to_html(two_jobs))
    by_name = {s["name"]: s for s in spans}
    assert by_name["burner"]["f"] & 2 and by_name["sleeper"]["f"] & 2
    assert by_name["burner"]["start"] < by_name["sleeper"]["end"]
    assert by_name["sleeper"]["start"] < by_name["burner"]["end"], "the jobs did not overlap"
    assert by_name["burner"]["lane"] != by_name["sleeper"]["lane"]
    assert by_name["burn"]["lane"] != by_name["sleep"]["lane"]
    no_overlap_in_a_lane(spans)


@pytest.mark.browser
def test_the_page_draws_concurrent_jobs_apart(two_jobs, tmp_path):
    """In a real browser the page draws without errors, and the two jobs at different
    heights of their worker's band."""
    from test_html import _Dom, chromium

    spot = ("<script>const b = document.body, y = n => window.__wsSpot(n, 0).y;"
            "b.dataset.jobs = y('burner') + ',' + y('sleeper');</script></body></html>")
    path = tmp_path / "two.html"
    path.write_text(to_html(two_jobs).replace("</body></html>", spot), encoding="utf-8")
    body = _Dom(chromium(path, tmp_path, "--dump-dom")).tags["body"]
    assert body.get("data-errors") is None, body["data-errors"]
    assert body.get("data-ready") == "1"
    burner, sleeper = (float(v) for v in str(body["data-jobs"]).split(","))
    assert abs(burner - sleeper) >= 3, (burner, sleeper)


def _tree(spans: list[tuple[int, int | None, int, int, int]]) -> Timeline:
    """Spans of worker "w", pid 1: (id, parent, tid, start s, end s); ids 1 and 2 are jobs,
    the spans before 10.5 s are job 1's, the others job 2's."""
    s = 1_000_000_000
    t = Timeline(workers={"w": Worker("w", host="h", pid=1)})
    for sid, parent, tid, a, b in spans:
        t.spans.append(Span("w", 1 if a < 10.5 else 2, sid, parent, f"s{sid}", a * s, b * s, 1,
                            tid, kind="job" if sid <= 2 else "span"))
    t.sort()
    return t


def test_html_lanes_keep_nesting_and_pack_what_runs_at_once():
    """One thread's nesting keeps its depth lanes; spans of two threads that overlap in one
    job (both top-level spans of it) and a later job each find a free lane, and a job that
    starts after another ended reuses lane 0."""
    t = _tree([(1, None, 10, 0, 10), (3, 1, 10, 1, 9), (4, 3, 10, 2, 3), (5, 1, 11, 2, 8),
               (6, 5, 11, 3, 4), (2, None, 12, 11, 12), (7, 2, 12, 11, 12)])
    lanes = {s["name"]: s["lane"] for s in drawn_spans(to_html(t))}
    assert lanes["s1"] == 0 and lanes["s3"] == 1 and lanes["s4"] == 2
    assert lanes["s5"] == 3 and lanes["s6"] == 4, "the other thread's spans go below, nested"
    assert lanes["s2"] == 0 and lanes["s7"] == 1
    no_overlap_in_a_lane(drawn_spans(to_html(t)))


def test_spans_past_the_last_lane_share_it_and_the_page_says_so():
    """30 spans of 30 threads at once, with no job: 24 lanes, the 6 that find none free
    share the last, and the page counts them."""
    t = Timeline(workers={"w": Worker("w", host="h", pid=1)})
    t.spans = [Span("w", None, k, None, f"s{k}", 0, 10**9, 1, 100 + k) for k in range(30)]
    page = to_html(t)
    lanes = sorted(s["lane"] for s in drawn_spans(page))
    assert lanes == list(range(23)) + [23] * 7
    assert "6 spans would need more than 24 lanes of their worker" in page


def test_terminal_gantt_gives_each_concurrent_job_a_row(two_jobs):
    """The terminal Gantt draws the worker's two jobs on two rows (the second labelled as a
    lane of the same worker), each row inside a job where its job ran; the jobs table lists
    both."""
    t = two_jobs
    lines = gantt(t, width=80).splitlines()
    (wid,) = t.workers
    first = next(i for i, line in enumerate(lines) if line.startswith(short_worker(wid)))
    row0, row1 = lines[first], lines[first + 1]
    assert row1.lstrip().startswith("lane 2"), lines
    for row in (row0, row1):
        body = row.split("|")[1]
        assert "█" in body, row
    table = jobs_table(t)
    assert "burner" in table and "sleeper" in table


def test_png_gantt_draws_concurrent_jobs_apart(two_jobs):
    """The PNG's Gantt draws the two jobs, and their spans, at different heights."""
    pytest.importorskip("matplotlib")
    from workerscope.export.plots import figure

    gantt_ax = figure(two_jobs).get_axes()[0]
    y = {txt.get_text(): txt.get_position()[1] for txt in gantt_ax.texts}
    assert y["burner"] != y["sleeper"] and y["burn"] != y["sleep"], y


def _seconds(text: str) -> float:
    value, unit = text.split()
    return float(value) * _SECONDS[unit]


@pytest.mark.accuracy
def test_function_tables_credit_each_thread_its_own_cpu(two_jobs):
    """In the HTML and the terminal function tables, the span that burned 1 s of its thread's
    CPU is credited 0.85-1.15 s and the one that slept beside it at most 0.1 s, though the
    process burned 1 s during both (issue 11)."""
    page = to_html(two_jobs)
    section = page[page.index("<h2>Functions</h2>"):]
    heads = re.findall(r"<th(?:\s[^>]*)?>(.*?)</th>", section)
    cells = {m.group(1): re.findall(r"<td[^>]*>(.*?)</td>", m.group(0))
             for m in re.finditer(r"<tr[^>]*><td><code>(\w+)</code>.*?</tr>", section)}
    cpu = heads.index("CPU")
    assert 0.85 <= _seconds(cells["burn"][cpu]) <= 1.15, cells["burn"]
    assert _seconds(cells["sleep"][cpu]) <= 0.1, cells["sleep"]
    text = functions_table(two_jobs, width=200)
    head, _, *rows = text.splitlines()
    col = head.split().index("cpu")
    row = {r.split()[0]: r for r in rows if r.strip()}
    # cells are "1.01 s": two words each after the name and the calls
    for name, lo, hi in (("burn", 0.85, 1.15), ("sleep", 0.0, 0.1)):
        words = row[name].split()
        value = " ".join(words[2 + 2 * (col - 2):4 + 2 * (col - 2)])
        assert lo <= _seconds(value) <= hi, (name, value, row[name])
