"""`workerscope run -- CMD` as users drive it: signals, long commands, every output format."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from workerscope import load
from workerscope.record import RecordReader


def start_run(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "workerscope", "run", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigterm_reaches_the_command_and_the_timeline_is_written(clean_env, tmp_path):
    """SIGTERM to `run` is passed to the command (not orphaning it), and what was recorded
    is still written; run exits as the command did (143)."""
    out = tmp_path / "t.wsc"
    started = tmp_path / "started"
    code = (f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); "
            "time.sleep(60)")
    proc = start_run("--interval", "0.1", "-o", str(out), "--", sys.executable, "-c", code)
    deadline = time.monotonic() + 60
    while not started.exists():
        assert time.monotonic() < deadline, "the command never started"
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    t = load(out)
    (job,) = t.jobs
    assert job.status == "error" and "SIGTERM" in (job.error or ""), job
    assert all(w.status != "running" for w in t.workers.values())


def test_a_long_python_c_script_gets_a_short_job_name(clean_env, tmp_path):
    """`python -c SCRIPT` is named after the interpreter and the script's start, not a
    thousand-column job name; the ended run's worker is not left 'running'."""
    out = tmp_path / "t.wsc"
    script = "x = 1\n" + "\n".join(f"y{i} = {i}" for i in range(200))
    r = subprocess.run([sys.executable, "-m", "workerscope", "run", "--interval", "0.1", "-o",
                        str(out), "--", sys.executable, "-c", script],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    t = load(out)
    (job,) = t.jobs
    assert len(job.name) <= 80, job.name
    assert "-c" in job.name and "x = 1" in job.name
    assert job.status == "ok"
    assert [w.status for w in t.workers.values()] == ["exited"]


def test_run_writes_a_png(clean_env, tmp_path):
    """`-o x.png` is a format run writes (it was refused only after the command ran)."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "x.png"
    r = subprocess.run([sys.executable, "-m", "workerscope", "run", "--interval", "0.1", "-o",
                        str(out), "--", sys.executable, "-c", "import time; time.sleep(0.3)"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


ATTACHED = """
import multiprocessing, time
from workerscope import span, timed

@timed
def step(i):
    time.sleep(0.01)
    return i

def child():
    step(100)

if __name__ == "__main__":
    for i in range(3):
        step(i)
    with span("outer"):
        step(3)
    p = multiprocessing.get_context("fork").Process(target=child)
    p.start()
    p.join()
"""


def test_run_records_the_spans_of_the_commands_python_processes(clean_env, tmp_path):
    """`run -- python script.py` records the script's @timed and span() spans, and those of
    a child it forks, with no code change beyond the decorators."""
    script = tmp_path / "job.py"
    script.write_text(ATTACHED)
    out = tmp_path / "t.wsc"
    r = subprocess.run([sys.executable, "-m", "workerscope", "run", "--interval", "0.05", "-o",
                        str(out), "--", sys.executable, str(script)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    t = load(out)
    steps = [s for s in t.spans if s.name.endswith("step")]
    assert len(steps) == 5, sorted(s.name for s in t.spans)
    (job,) = t.jobs
    assert all(s.job == job.id for s in steps)
    outer = next(s for s in t.spans if s.name == "outer")
    assert sum(s.parent == outer.id for s in steps) == 1
    assert len({s.pid for s in steps}) == 2, "the forked child's span is there too"


def test_run_samples_in_its_own_process(clean_env, tmp_path):
    """`run` starts no second interpreter for its sampler: while the command runs, the
    command is run's only child (issue 11: a sidecar's start-up cost more than sampling)."""
    import psutil

    started, end, out = tmp_path / "started", tmp_path / "end", tmp_path / "t.wsc"
    code = (f"import os, pathlib, time; pathlib.Path({str(started)!r}).touch()\n"
            f"while not os.path.exists({str(end)!r}): time.sleep(0.01)\n")
    proc = start_run("--interval", "0.05", "-o", str(out), "--", sys.executable, "-c", code)
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline, "the command never started"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        kids = psutil.Process(proc.pid).children()
        assert len(kids) == 1 and "workerscope" not in " ".join(kids[0].cmdline()), kids
    finally:
        end.touch()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    t = load(out)
    assert [s for s in t.samples if s.scope == "tree"], "sampled all the same"


def test_a_run_killed_with_sigkill_leaves_what_it_recorded(clean_env, tmp_path):
    """kill -9 of `run` (a scheduler's time limit, the OOM killer) leaves a record beside the
    output, written as the samples came: it loads, with the command's samples and its job
    lost where the record ends. A run that ends normally removes it."""
    out = tmp_path / "t.wsc"
    partial = tmp_path / "t.partial.wsc"
    started = tmp_path / "started"
    code = (f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); "
            "time.sleep(60)")
    proc = start_run("--interval", "0.05", "-o", str(out), "--", sys.executable, "-c", code)
    try:
        deadline = time.monotonic() + 60
        while not (started.exists() and partial.exists()
                   and sum(1 for _ in RecordReader(partial)) >= 12):
            assert time.monotonic() < deadline, "nothing recorded as the command ran"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
    finally:
        proc.kill()
        # The command outlives `run` (it holds run's stdout and stderr): end it too.
        subprocess.run(["pkill", "-9", "-f", str(started)], check=False)
        proc.communicate(timeout=60)
    assert not out.exists()
    t = load(partial)
    (job,) = t.jobs
    assert job.status == "lost", job
    assert sum(s.scope == "tree" for s in t.samples) >= 5
    assert {w.status for w in t.workers.values()} == {"lost"}

    done = tmp_path / "done.wsc"
    r = subprocess.run([sys.executable, "-m", "workerscope", "run", "--interval", "0.05", "-o",
                        str(done), "--", sys.executable, "-c", "pass"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert done.exists() and not (tmp_path / "done.partial.wsc").exists()
