"""What a hostile sender's names and attrs do at the real boundaries: `listen` and `report`
print them escaped, the .json of NaN attrs parses in node's JSON.parse, and the HTML report of
attrs nested 1,000 deep draws in Chromium without a script error."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
import time

import pytest
from factories import T0, S, job, job_span, span, timeline, worker
from helpers import run_cli
from test_html import drawn, open_page

from workerscope.export.html import to_html
from workerscope.units import printable

HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;owned\x07\x1b[2J\x9b31m\u202e"
# What a terminal acts on: C0 but newlines, DEL, C1, bidi controls.
_ACTED_ON = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _deep(levels: int) -> dict:
    top: dict = {}
    d = top
    for _ in range(levels):
        d["a"] = {}
        d = d["a"]
    return top


def _timeline():
    j = job(worker="h:7:1", id=1, name=f"job {HOSTILE}", start_ns=T0, end_ns=T0 + S,
            status="error", error=f"error {HOSTILE}", pid=7)
    return timeline(workers=[worker("h:7:1", notes=[f"note {HOSTILE}"])], jobs=[j],
                    spans=[job_span(j), span(worker="h:7:1", job=1, id=2, parent=1,
                                             name=f"span {HOSTILE}", start_ns=T0,
                                             end_ns=T0 + S // 2, pid=7,
                                             attrs={"deep": _deep(1_000), "nan": math.nan,
                                                    "inf": -math.inf})])


def test_report_prints_hostile_names_escaped(tmp_path):
    """`workerscope report` of a timeline with hostile names writes no control byte."""
    path = _timeline().save(tmp_path / "t.wsc")
    r = run_cli("report", path)
    assert r.returncode == 0, r.stderr
    assert not _ACTED_ON.findall(r.stdout)
    assert f"note {printable(HOSTILE)}" in r.stdout


def test_listen_prints_hostile_frames_escaped(clean_env):
    """`listen`'s line per frame shows a job's hostile name and error escaped."""
    from test_security import Sender

    proc = subprocess.Popen([sys.executable, "-m", "workerscope", "listen", "--insecure",
                             "--jobs", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sender = None
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().decode()
        assert first.startswith("listening on tcp://"), first
        sender = Sender(first.split()[-1])
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            # Resent until it ends: the first frames may go out before the connection is up.
            sender.hello("h:7:1")
            sender.send("h:7:1", "job_start", {"job": 1, "name": HOSTILE, "t": time.time_ns(),
                                               "pid": 7})
            sender.send("h:7:1", "job_end", {"job": 1, "status": "error", "error": HOSTILE,
                                             "t": time.time_ns()})
            time.sleep(0.2)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if sender is not None:
            sender.close()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    text = stdout.decode()
    assert "job end" in text and printable(HOSTILE) in text
    assert not _ACTED_ON.findall(text)


def test_json_of_nan_and_deep_attrs_parses_in_node(tmp_path):
    """node's JSON.parse reads the .json of a span with NaN, -Infinity and 1,000-deep attrs."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the strict parser check in the unit tests stands")
    path = _timeline().save(tmp_path / "t.json")
    script = ("const t = JSON.parse(require('fs').readFileSync(process.argv[1], 'utf8'));"
              "const a = t.traceEvents.find(e => e.args && e.args.nan !== undefined).args;"
              "console.log(a.nan + ' ' + a.inf)")
    r = subprocess.run([node, "-e", script, path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "NaN -Infinity"


@pytest.mark.browser
def test_html_of_deep_attrs_draws(tmp_path):
    """The HTML report of a span whose attrs nest 1,000 deep draws without a script error."""
    dom = open_page(to_html(_timeline()), tmp_path)
    assert drawn(dom, "gantt")[0] > 0
