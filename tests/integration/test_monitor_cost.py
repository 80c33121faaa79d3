"""The monitor's own cost (the sidecar's `sidecar` samples) told in the views: a line in the
HTML report's header, a column of its workers table and a plot beside the others; lines in
the terminal report. The figures are checked against the real sidecars' samples."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from helpers import burn, burn_code, python_script

from workerscope import Timeline, load, monitor
from workerscope.export.html import to_html
from workerscope.export.terminal import report
from workerscope.units import BYTE_UNITS, short_worker

_SECONDS = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
# "0.42% of a core ... (12.3 MiB RSS..., 45.2 µs a sample)"
_COST = re.compile(r"([\d.]+)% of a core[^(]*\(([\d.]+) (\w+) RSS[^,]*, ([\d.]+) (\S+) a sample\)")


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory) -> Timeline:
    """Two real heavy workers: this process and a child process, each sampled every 20 ms
    while it burns 0.3 s of CPU; their timelines merged."""
    path = tmp_path_factory.mktemp("cost") / "child.wsc"
    code = (f"from workerscope import monitor\nwith monitor(interval=0.02, out={str(path)!r}):\n"
            + "".join(f"    {line}\n" for line in burn_code(0.3).splitlines()))
    child = subprocess.run(python_script(code), capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    with monitor(interval=0.02) as m:
        burn(0.3)
    assert m.timeline is not None
    return Timeline.merge(m.timeline, load(str(path)))


def truth(t: Timeline, worker: str | None = None) -> tuple[float, float, float, list[float]]:
    """From the sidecar samples, computed here: CPU seconds between the first and the last
    sample, the wall seconds between them, the largest RSS, and every per-sample cost."""
    rows = sorted((s for s in t.samples if s.scope == "sidecar"
                   and (worker is None or s.worker == worker)), key=lambda s: s.t_ns)
    assert len(rows) >= 5, "too few sidecar samples"
    cpu = rows[-1].values["cpu_s"] - rows[0].values["cpu_s"]
    wall = (rows[-1].t_ns - rows[0].t_ns) / 1e9
    rss = max(s.values["rss_bytes"] for s in rows)
    costs = [s.values["sample_cost_s"] for s in rows if "sample_cost_s" in s.values]
    return cpu, wall, rss, costs


def check(text: str, share: float, rss: float, per_sample: float) -> None:
    """`text` tells `share` (% of a core, to two digits), `rss` and `per_sample` (to three)."""
    m = _COST.search(text)
    assert m, text
    said_share = float(m.group(1))
    said_rss = float(m.group(2)) * BYTE_UNITS[m.group(3)]
    said_cost = float(m.group(4)) * _SECONDS[m.group(5)]
    assert said_share == pytest.approx(share, rel=0.051, abs=0.0051), (text, share)
    assert said_rss == pytest.approx(rss, rel=0.006), (text, rss)
    assert said_cost == pytest.approx(per_sample, rel=0.006), (text, per_sample)


def test_terminal_report_tells_the_monitors_cost_per_worker_and_overall(two_workers):
    """The terminal report says what workerscope used, per worker and over both, as the
    sidecar samples give it: CPU over the time sampled, the largest RSS, the mean sample cost."""
    t = two_workers
    text = report(t, width=120)
    workers = sorted(t.workers)
    assert len(workers) == 2
    lines = text.splitlines()
    overall = [line for line in lines if line.startswith("workerscope used")]
    assert len(overall) == 1, text
    cpu, wall, rss, costs = zip(*(truth(t, w) for w in workers), strict=True)
    every_cost = [c for cs in costs for c in cs]
    check(overall[0], 100 * sum(cpu) / sum(wall), max(rss), sum(every_cost) / len(every_cost))
    for k, w in enumerate(workers):
        (line,) = [x for x in lines if x.strip().startswith(short_worker(w) + " ")
                   and "of a core" in x]
        check(line, 100 * cpu[k] / wall[k], rss[k], sum(costs[k]) / len(costs[k]))


def _data(page: str) -> dict:
    blob = re.search(r'<script type="application/json" id="ws-data">(.*?)</script>', page, re.S)
    assert blob
    return dict(json.loads(blob.group(1)))


def test_html_report_tells_the_monitors_cost_and_plots_it(two_workers):
    """The HTML header has the overall line, the workers table each worker's cost, and a plot
    draws each sidecar's CPU from its samples."""
    t = two_workers
    page = to_html(t)
    header = page[:page.index("<h2>Workers over time</h2>")]
    cpu, wall, rss, costs = zip(*(truth(t, w) for w in sorted(t.workers)), strict=True)
    every_cost = [c for cs in costs for c in cs]
    check(re.sub(r"<[^>]+>", "", header), 100 * sum(cpu) / sum(wall), max(rss),
          sum(every_cost) / len(every_cost))
    table = page[page.index("<h2>Workers</h2>"):]
    table = table[:table.index("</table>")]
    for k, w in enumerate(sorted(t.workers)):
        row = next(r for r in table.split("<tr") if f"<code>{w}</code>" in r)
        check(re.sub(r"<[^>]+>", "", row), 100 * cpu[k] / wall[k], rss[k],
              sum(costs[k]) / len(costs[k]))
    (plot,) = [p for p in _data(page)["plots"] if p["id"] == "plot-sidecar"]
    assert {s["label"] for s in plot["series"]} == set(t.workers)
    for line in plot["series"]:
        want = [s.values["cpu_percent"] for s in sorted(t.samples, key=lambda s: s.t_ns)
                if s.scope == "sidecar" and s.worker == line["label"]
                and "cpu_percent" in s.values]
        assert line["v"] == pytest.approx(want, rel=1e-3, abs=1e-6)


def test_a_timeline_without_sidecar_samples_tells_no_cost():
    """No `sidecar` samples (light mode, an older file): no cost line, no made-up zero."""
    from test_terminal import fixed_timeline

    t = fixed_timeline()
    assert "workerscope used" not in report(t) and "workerscope used" not in to_html(t)


def test_a_small_share_keeps_two_digits():
    """A monitor's share of a core reads "0.42%", never "0%" (fmt_percent's whole percent)
    nor an exponent; from 10% on it is whole."""
    from workerscope.units import fmt_share

    assert [fmt_share(x) for x in (0, 0.004249, 0.4249, 3.14, 9.96, 42.4, None)] == [
        "0%", "0.0042%", "0.42%", "3.1%", "10%", "42%", "-"]
