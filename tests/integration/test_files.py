"""Files the user points workerscope at: anything that is not a readable timeline, an output
folder that does not exist, an `out=` that could never be written. Each is one clear line,
said before any work is done, never a hang or a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from workerscope import Timeline, load, monitor, profiled, protocol
from workerscope.errors import ConfigError, WorkerscopeError
from workerscope.timeline import Span, Worker


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workerscope", *args], capture_output=True,
                          text=True, timeout=timeout)


def small_timeline() -> Timeline:
    t = Timeline()
    t.workers["h:1:2"] = Worker("h:1:2", host="h", pid=1)
    t.spans.append(Span("h:1:2", 1, 1, None, "job", 1_000, 2_000, 1, 1))
    return t


def test_report_refuses_a_fifo_without_hanging(tmp_path):
    """`report` on a FIFO says it is not a regular file instead of blocking on the read."""
    fifo = tmp_path / "pipe.wsc"
    os.mkfifo(fifo)
    r = cli("report", str(fifo), timeout=30)
    assert r.returncode == 2
    assert "not a regular file" in r.stderr
    assert "Traceback" not in r.stderr


def test_load_refuses_a_device():
    """load() on /dev/zero is refused at once rather than read without end."""
    with pytest.raises(WorkerscopeError, match="not a regular file"):
        load("/dev/zero")


def test_report_into_a_missing_folder_is_one_line(tmp_path):
    """An output path whose folder does not exist is one line naming the folder."""
    src = small_timeline().save(tmp_path / "t.wsc")
    r = cli("report", src, "--html", str(tmp_path / "no" / "such" / "r.html"))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "no such folder" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("damage", [
    lambda d: d["spans"][0].__setitem__(5, "soon"),       # start_ns a string
    lambda d: d["spans"][0].__setitem__(0, 7),            # worker id a number
    lambda d: d["workers"][0].__setitem__("pid", [1]),    # pid a list
    lambda d: d["samples"].append(["h:1:2", 5, "tree", 1, {"cpu_percent": "hot"}]),
    lambda d: d["jobs"].append(["h:1:2", 1, "j", "start", None, "ok", None, 1, None]),
])
def test_wsc_with_wrong_field_types_is_one_line(tmp_path, damage):
    """A well-formed msgpack .wsc whose records hold wrong types is refused when loaded, so
    no view fails later with a traceback."""
    d = small_timeline().to_dict()
    d["spans"] = [list(s) for s in d["spans"]]
    damage(d)
    path = tmp_path / "bad.wsc"
    path.write_bytes(protocol.encode_blob(d))
    with pytest.raises(WorkerscopeError, match="damaged timeline file"):
        load(path)
    r = cli("report", str(path))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("make", [
    lambda out: profiled(sum, mode="heavy", out=out),
    lambda out: monitor(out=out),
])
def test_out_with_unknown_extension_fails_at_the_call(make, tmp_path):
    """out="x.txt" fails when profiled()/monitor() is called, before any job runs."""
    with pytest.raises(ConfigError, match="extension"):
        make(str(tmp_path / "x.txt"))


def test_monitor_out_in_a_missing_folder_fails_before_the_block(tmp_path):
    """monitor(out=...) into a folder that does not exist fails before the block runs."""
    ran = []
    with (pytest.raises(ConfigError, match="no such folder"),
          monitor(out=str(tmp_path / "missing" / "t.wsc"))):
        ran.append(1)
    assert not ran


def test_run_with_a_bad_output_fails_before_the_command(tmp_path):
    """`run -o x.txt` and `run -o missing/x.json` fail before starting the command."""
    marker = tmp_path / "ran"
    cmd = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    for out in (tmp_path / "x.txt", tmp_path / "missing" / "x.json"):
        r = cli("run", "-o", str(out), "--", *cmd)
        assert r.returncode == 2, r.stderr
        assert "Traceback" not in r.stderr
        assert not marker.exists(), "the command ran although its output could never be written"
