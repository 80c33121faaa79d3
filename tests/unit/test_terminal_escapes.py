"""Text that came from a frame or a timeline reaches the terminal as text: the report, the line
per frame of `listen` and the live view escape every control character in it (ESC, BEL, C1,
DEL, bidi overrides), keep letters of every script, and add only their own colour codes."""

from __future__ import annotations

import re

from factories import T0, S, job, job_span, span, timeline, worker

from workerscope import protocol
from workerscope.cli.listen import _FrameLines
from workerscope.export import terminal
from workerscope.export.live import render
from workerscope.protocol import Frame
from workerscope.units import printable

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # writes the clipboard
TITLE = "\x1b]0;owned\x07"  # sets the window title
CLEAR = "\x1b[2J"  # clears the screen
C1 = "\x9b31m\x9d0;t\x9c"  # 8-bit CSI, OSC and ST
OTHER = "\x7f\u202e\u2066\x00\t\n\r\x08"  # DEL, bidi overrides, NUL, tab, newline, CR, BS
HOSTILE = OSC52 + TITLE + CLEAR + C1 + OTHER
ESCAPED = printable(HOSTILE)

# What a terminal acts on: C0 but the view's own newlines, DEL, C1, and the bidi controls.
_ACTED_ON = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_OWN_COLOURS = re.compile(re.escape(terminal.RED) + "|" + re.escape(terminal.DIM) + "|"
                          + re.escape(terminal.RESET))


def _hostile_timeline():
    """Worker, job, span names, errors, statuses and notes all carrying HOSTILE."""
    wid = f"{HOSTILE}:7:1"
    w = worker(wid, host=HOSTILE, pid=7, status=HOSTILE, notes=[f"note {HOSTILE}"])
    calm = worker("calm:8:1", pid=8, notes=[f"shared {HOSTILE}"])
    w.notes.append(f"shared {HOSTILE}")
    died = job(worker=wid, id=1, name=f"job {HOSTILE}", start_ns=T0, end_ns=T0 + S,
               status="killed", error=f"error {HOSTILE}", pid=7,
               death={"signal": 9, "note": f"death {HOSTILE}", "kernel_log": HOSTILE})
    failed = job(worker="calm:8:1", id=2, name=f"other {HOSTILE}", start_ns=T0, end_ns=T0 + S,
                 status="error", error=f"boom {HOSTILE}", pid=8)
    spans = [job_span(died), job_span(failed),
             span(worker=wid, job=1, id=10, parent=1, name=f"span {HOSTILE}", start_ns=T0,
                  end_ns=T0 + S // 2, pid=7, error=f"span error {HOSTILE}")]
    return timeline(workers=[w, calm], jobs=[died, failed], spans=spans)


def _acted_on(text: str) -> list[str]:
    return sorted(set(_ACTED_ON.findall(text)))


def test_printable_escapes_controls_and_keeps_every_script():
    """printable() writes controls as escapes (ESC as \\x1b) and keeps letters and spaces."""
    assert printable("plain name") == "plain name"
    assert printable("\x1b]0;t\x07") == "\\x1b]0;t\\x07"
    assert printable("a\tb\nc\x9b\x7f") == "a\\tb\\nc\\x9b\\x7f"
    assert printable("abc\u202edef") == "abc\\u202edef"
    names = "训练 обучение تدريب\u200cها प्रशिक्षण 👨\u200d👩 a\u00a0b\u3000c"  # noqa: RUF001
    assert printable(names) == names
    assert printable(ESCAPED) == ESCAPED  # escaping twice changes nothing
    assert not _acted_on(ESCAPED)


def test_report_escapes_every_name_error_and_note():
    """report() without colour holds no control character but its newlines, and every hostile
    text still shows, escaped."""
    out = terminal.report(_hostile_timeline(), width=1000, jobs=None)
    assert _acted_on(out) == []
    for text in (f"job {ESCAPED}", f"error {ESCAPED}", f"note {ESCAPED}", f"span {ESCAPED}",
                 f"shared {ESCAPED}", f"boom {ESCAPED}", f"death {ESCAPED}"):
        assert text in out, text


def test_report_in_colour_adds_only_its_own_codes():
    """With colour, the only escape sequences are the view's own colours."""
    out = terminal.report(_hostile_timeline(), width=1000, color=True, jobs=None)
    assert terminal.RED in out
    assert _acted_on(_OWN_COLOURS.sub("", out)) == []


def test_report_escapes_within_a_narrow_terminal():
    """Cut to a narrow width, names are cut after escaping: no raw control survives."""
    for width in (20, 40, 80):
        assert _acted_on(terminal.report(_hostile_timeline(), width=width)) == []


def test_frame_lines_escape_every_field():
    """The line per frame of `listen` escapes the worker and every body value it shows."""
    bodies = {protocol.HELLO: {"pid": HOSTILE, "interval": HOSTILE},
              protocol.JOB_START: {"job": HOSTILE, "name": HOSTILE},
              protocol.JOB_END: {"job": 1, "status": HOSTILE, "error": HOSTILE},
              protocol.SAMPLE: {"tree": {"num_procs": HOSTILE}},
              protocol.SPANS: {"records": []},
              protocol.BYE: {"status": HOSTILE, "dropped": HOSTILE},
              protocol.HEARTBEAT: {}}
    for kind, body in bodies.items():
        line = terminal.frame_line(Frame(kind, HOSTILE, 0, body))
        assert _acted_on(line) == [], kind
        assert ESCAPED in line, kind


def test_listen_lines_of_unexpected_bodies_and_losses_are_escaped(capsys):
    """listen's own lines (a body it cannot show, frames lost) escape the worker id too."""

    def fails(frame: Frame) -> str:
        raise TypeError("unexpected")

    class Sub:
        def __init__(self) -> None:
            self.lost = {HOSTILE: 3}

    lines = _FrameLines(fails)
    lines.sub = Sub()  # type: ignore[assignment]
    lines(Frame(protocol.SPANS, HOSTILE, 0, {}))
    out = capsys.readouterr().out
    assert "lost" in out and "body not shown" in out
    assert _acted_on(out) == [] and ESCAPED in out


def test_live_view_escapes_every_cell():
    """The live view escapes a worker's id, status, job and span; the text still shows."""
    row = {"worker": f"{HOSTILE}:1:2", "host": HOSTILE, "pid": 1, "status": HOSTILE,
           "job": f"j{HOSTILE}", "span": f"s{HOSTILE}", "cpu_percent": 5.0, "rss_bytes": 2**20,
           "gpu_util_percent": None, "lost": 0, "dropped": 0, "running_s": 1.0,
           "straggler": False, "failed_jobs": 0}
    screen = render([row], "tcp://127.0.0.1:5555", width=2000, jobs=1)
    assert _acted_on(screen) == []
    assert f"j{ESCAPED[:10]}" in screen and ESCAPED in screen
