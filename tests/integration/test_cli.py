"""The command line: run, listen, demo, on real processes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict

import pytest
from helpers import burn_code, python_script, run_cli
from jobs import job

from workerscope import load, profiled
from workerscope.export.chrome import to_chrome


def chrome_events(path):
    with open(path) as f:
        data = json.load(f)
    return data["traceEvents"]


def test_run_samples_whole_tree(clean_env, tmp_path):
    """`run` on a command whose 2 children each burn 2 s of CPU: counters for all 3 pids, the
    tree's CPU time holds both children's, and its CPU % adds up to that time."""
    out = tmp_path / "t.wsc"
    code = f"""
        import subprocess, sys
        kids = [subprocess.Popen([sys.executable, "-c", {burn_code(2.0)!r}]) for _ in range(2)]
        print(" ".join(str(k.pid) for k in kids), flush=True)
        for k in kids:
            k.wait()
    """
    r = run_cli("run", "--interval", "0.2", "-o", str(out), "--", *python_script(code))
    assert r.returncode == 0, r.stderr
    kid_pids = {int(p) for p in r.stdout.split()}
    t = load(out)
    counters = defaultdict(set)
    for e in to_chrome(t)["traceEvents"]:
        if e["ph"] == "C" and e["name"].startswith(("proc.", "tree.")):  # host.*: a track of its own
            counters[e["pid"]].add(e["name"])
    assert kid_pids <= set(counters), counters.keys()
    assert len(counters) == 3
    for pid in kid_pids:
        assert "proc.cpu_percent" in counters[pid] and "proc.rss_bytes" in counters[pid]
    tree = [(s.t_ns, s.values) for s in t.samples if s.scope == "tree"]
    cpu_s = [v.get("cpu_user_s", 0) + v.get("cpu_system_s", 0) for _, v in tree]
    # 4 s burned, plus three interpreters' start-up; one child alone would be ~2 s.
    assert 4.0 <= cpu_s[-1] <= 5.0, cpu_s[-1]
    # Each cpu_percent is the rate since the previous one (or since the first sample), so over
    # the run they add up to the CPU time gained: whatever share of the cores the load left.
    added, since, gained = 0.0, tree[0][0], 0.0
    for (t_ns, v), total in zip(tree, cpu_s, strict=True):
        if "cpu_percent" in v:
            added += v["cpu_percent"] / 100 * (t_ns - since) / 1e9
            since, gained = t_ns, total - cpu_s[0]
    # The sidecar starts alongside the command, so some burning may precede its first sample.
    assert gained >= 2.0 and abs(added - gained) <= 0.02 * gained, (added, gained)
    assert "wrote" in r.stderr


def test_run_passes_exit_status_through(clean_env, tmp_path):
    """`run` exits with the command's status; a signal death reads as 128+N."""
    r = run_cli("run", "-o", str(tmp_path / "a.wsc"), "--", sys.executable, "-c", "raise SystemExit(3)")
    assert r.returncode == 3
    (j,) = load(tmp_path / "a.wsc").jobs
    assert (j.status, j.error) == ("error", "exit status 3")
    r = run_cli("run", "-o", str(tmp_path / "b.wsc"), "--", sys.executable, "-c",
                "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert r.returncode == 137


def test_run_errors_are_clear(clean_env):
    """No command, or one that does not exist, is a one-line error and exit status 2."""
    r = run_cli("run")
    assert r.returncode == 2 and "nothing to run" in r.stderr
    r = run_cli("run", "--", "/nonexistent/command")
    assert r.returncode == 2 and "cannot start" in r.stderr
    r = run_cli("run", "--interval", "0", "--", "true")
    assert r.returncode == 2 and "interval" in r.stderr


def test_listen_collects_jobs_then_exits(clean_env, tmp_path):
    """`listen --jobs 2` prints a line per frame, stops after 2 jobs, and writes the timeline."""
    out = tmp_path / "all.wsc"
    proc = subprocess.Popen([sys.executable, "-m", "workerscope", "listen", "--jobs", "2",
                             "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("listening on tcp://127.0.0.1:"), first
        endpoint = first.split()[-1]
        wrapped = profiled(job, mode="heavy", interval=0.05, endpoint=endpoint)
        assert [wrapped(1), wrapped(2)] == [job(1), job(2)]
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert stdout.count("job end") == 2 and "hello" in stdout and "sample" in stdout
    t = load(out)
    assert [j.status for j in t.jobs] == ["ok", "ok"]


def test_listen_help_says_what_listen_does():
    """`listen --help` has a description under its usage line: what it collects, that it
    prints the endpoint to give the workers, and when it stops."""
    r = run_cli("listen", "--help")
    assert r.returncode == 0, r.stderr
    usage, description, *_ = r.stdout.split("\n\n")
    assert usage.startswith("usage: workerscope listen"), r.stdout
    assert not description.startswith("options:"), r.stdout
    text = " ".join(description.split())
    assert "endpoint" in text and "--endpoint" in text and "WORKERSCOPE_ENDPOINT" in text, text


@pytest.mark.parametrize("command", ["run", "attach", "report", "demo"])
def test_every_command_s_help_says_what_it_does(command):
    """Each subcommand's --help has a description under its usage line, as listen's has."""
    r = run_cli(command, "--help")
    assert r.returncode == 0, r.stderr
    usage, description, *_ = r.stdout.split("\n\n")
    assert usage.startswith(f"usage: workerscope {command}"), r.stdout
    assert not description.startswith(("options:", "positional arguments:")), r.stdout
    assert len(description.split()) >= 8, description


def test_demo_writes_trace_with_three_or_more_pids(clean_env, tmp_path):
    """`demo` writes .wsc and .json; the JSON holds X spans and C counters for 3+ pids."""
    r = run_cli("demo", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert str(tmp_path / "demo.json") in r.stdout and str(tmp_path / "demo.html") in r.stdout
    assert (tmp_path / "demo.html").read_text().startswith("<!DOCTYPE html>")
    events = chrome_events(tmp_path / "demo.json")
    x_pids = {e["pid"] for e in events if e["ph"] == "X"}
    c_pids = {e["pid"] for e in events if e["ph"] == "C"}
    assert len(x_pids) >= 3 and len(c_pids) >= 3
    t = load(tmp_path / "demo.wsc")
    names = {s.name for s in t.spans}
    assert {"burn_cpu", "hold_memory", "write_file", "io", "helper_process", "task"} <= names
    assert len(t.jobs) == 6 and all(j.status == "ok" for j in t.jobs)


def test_demo_reports_the_time_its_jobs_took(clean_env, tmp_path):
    """The demo's summary line gives the jobs' time, first job start to last job end, and
    apart from it the whole run's, the process pool's start-up included (it gave only that)."""
    r = run_cli("demo", "-o", str(tmp_path), "--tasks", "3")
    assert r.returncode == 0, r.stderr
    line = r.stdout.splitlines()[0]
    found = re.search(r"jobs ran ([\d.]+) s \(([\d.]+) s in all, with the process pool's "
                      r"start-up", line)
    assert found, line
    jobs_s, whole_s = map(float, found.groups())
    t = load(tmp_path / "demo.wsc")
    first, last = min(j.start_ns for j in t.jobs), max(j.end_ns for j in t.jobs)
    assert abs(jobs_s - (last - first) / 1e9) <= 0.051, (line, (last - first) / 1e9)
    assert whole_s >= jobs_s, line


def test_attach_to_a_running_tree(clean_env, tmp_path):
    """`attach PID` samples a tree that was already running, its children and their CPU time
    included, until the process exits."""
    out = tmp_path / "a.wsc"
    target = subprocess.Popen(python_script(f"""
        import subprocess, sys
        sys.stdin.readline()
        kid = subprocess.Popen([sys.executable, "-c", {burn_code(0.6)!r}])
        print(kid.pid, flush=True)
        kid.wait()
    """), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    attach = subprocess.Popen([sys.executable, "-m", "workerscope", "attach", str(target.pid),
                               "--interval", "0.1", "-o", str(out)], stderr=subprocess.PIPE,
                              text=True)
    try:
        assert "sampling" in attach.stderr.readline()  # the sidecar is up: start the work
        target.stdin.write("go\n")
        target.stdin.flush()
        kid = int(target.stdout.readline())
        target.wait(timeout=30)
        _, stderr = attach.communicate(timeout=30)
    finally:
        for p in (target, attach):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert attach.returncode == 0, stderr
    t = load(out)
    pids = {s.pid for s in t.samples if s.scope == "proc"}
    assert {target.pid, kid} <= pids
    (job,) = t.jobs
    assert job.name.startswith(f"attach {target.pid}")
    tree = [s.values["cpu_user_s"] + s.values["cpu_system_s"] for s in t.samples
            if s.scope == "tree" and "cpu_user_s" in s.values]
    # The child's 0.6 s of CPU, less what it burned after its last sample (one 0.1 s tick);
    # without it the tree has only the parent's start-up, well under 0.1 s.
    assert max(tree) >= 0.5, tree


def test_attach_to_nothing_is_a_clear_error():
    """Attaching to a pid that does not exist says so, exit status 2."""
    r = run_cli("attach", "4194000")
    assert r.returncode == 2 and "no process 4194000" in r.stderr
