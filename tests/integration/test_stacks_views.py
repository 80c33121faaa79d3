"""A dump of stacks (a mark named "stacks") in every view: the terminal report, the Chrome
trace, the .pftrace, and the HTML report in Chromium, where clicking the mark opens its stacks
and the death it came before links to them. From a hand-built timeline: the OOM death of
test_deaths with the stacks its sidecar took just before."""

from __future__ import annotations

import json

import pytest
from test_deaths import OOM, T0, S, death_timeline
from test_html import _Dom, chromium, open_page
from test_pftrace import decode

from workerscope.export.chrome import to_chrome
from workerscope.export.html import to_html
from workerscope.export.pftrace import write_pftrace
from workerscope.export.terminal import report
from workerscope.timeline import Mark, Timeline

REASON = "memory: its cgroup holds 58 MiB, 90% of its limit of 64 MiB (stacks_memory 0.9)"
DUMP = {
    "reason": REASON, "request": None,
    "processes": [
        {"pid": 100, "threads": [
            {"thread": "0x00007f0000000001", "current": False, "name": "MainThread", "tid": 100,
             "span": "grow", "truncated": False,
             "frames": [{"file": "train.py", "line": 41, "function": "allocate_batch"},
                        {"file": "train.py", "line": 12, "function": "grow"}]},
            {"thread": "0x00007f0000000002", "current": True, "truncated": False,
             "frames": [{"file": "loader.py", "line": 7, "function": "prefetch"}]}]},
        {"pid": 102, "command": "stress --vm 1", "state": "S", "wchan": "do_wait",
         "workerscope": False}],
}


def stacks_timeline() -> Timeline:
    t = death_timeline()
    t.marks.append(Mark(worker=OOM, job=1, name="stacks", t_ns=T0 + int(5.8 * S), pid=100,
                        tid=100, attrs=DUMP))
    t.sort()
    return t


def test_terminal_report_shows_the_stacks_beside_the_death():
    text = report(stacks_timeline(), width=100)
    assert "deaths:" in text and "stacks:" in text
    after = text[text.index("stacks:"):]
    assert "MainThread (0x00007f0000000001, tid 100) in span grow" in after
    assert "allocate_batch  train.py:41" in after
    assert "process 102: stress --vm 1 (no workerscope: state S, wchan do_wait)" in after
    assert REASON in after


def test_traces_carry_the_stacks_as_text_on_an_instant(tmp_path):
    t = stacks_timeline()
    events = to_chrome(t)["traceEvents"]
    (ev,) = [e for e in events if e.get("ph") == "i" and e["name"] == "stacks"]
    assert ev["args"]["reason"] == REASON
    assert "allocate_batch  train.py:41" in ev["args"]["stacks"]
    json.dumps(ev)  # plain JSON
    path = tmp_path / "t.pftrace"
    write_pftrace(t, str(path))
    (instant,) = [i for i in decode(path.read_bytes())["instants"] if i[1] == "stacks"]
    _, _, t_ns, args = instant
    assert t_ns == T0 + int(5.8 * S)
    assert args["reason"] == REASON and "in span grow" in args["stacks"]


_CLICK = """<script>
setTimeout(() => {
  const b = document.body, g = document.getElementById("gantt"), r = g.getBoundingClientRect();
  const spot = window.__wsMarkSpot(0);
  const ev = kind => new MouseEvent(kind, {clientX: r.left + spot.x, clientY: r.top + spot.y,
                                          bubbles: true});
  g.dispatchEvent(ev("mousemove"));
  b.dataset.tip = document.getElementById("tip").textContent;
  b.dataset.before = String(document.getElementById("stacks-0").open);
  g.dispatchEvent(ev("click"));
  b.dataset.after = String(document.getElementById("stacks-0").open);
  b.dataset.done = "1";
}, 100);
</script></body></html>"""


@pytest.mark.browser
def test_html_mark_opens_its_stacks_and_the_death_links_them(tmp_path):
    page = to_html(stacks_timeline())
    open_page(page, tmp_path)  # ready, free of script errors
    assert "allocate_batch  train.py:41" in page and "MainThread" in page
    assert 'href="#stacks-0"' in page[page.index("<h2>Deaths</h2>"):page.index('id="stacks"')]
    path = tmp_path / "click.html"
    path.write_text(page.replace("</body></html>", _CLICK), encoding="utf-8")
    body = _Dom(chromium(path, tmp_path, "--dump-dom", "--window-size=1400,1400")).tags["body"]
    assert body.get("data-errors") is None, body["data-errors"]
    assert body.get("data-done") == "1"
    assert "click to read them" in body["data-tip"] and REASON in body["data-tip"], body
    assert (body["data-before"], body["data-after"]) == ("false", "true")
