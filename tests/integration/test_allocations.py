"""The allocations setting (worker/allocations.py): the top allocation sites (tracemalloc) as a
mark at each job's end, naming the line that holds the memory, and once when the memory
cgroup's working set passes stacks_memory of its limit; nothing traced while it is off."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from helpers import child_cgroup, remove_cgroup, write_text

from workerscope import Subscriber, cgroup, protocol
from workerscope.export.terminal import report

MIB = 1 << 20
WORKER = textwrap.dedent("""
    import os, sys, time, tracemalloc
    from workerscope import profiled

    kept = []

    def job(where):
        if where:
            with open(os.path.join(where, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        for _ in range(96 if where else 48):
            kept.append(bytearray(MIB_ONE))  # LEAK_LINE
            time.sleep(0.02 if where else 0)
        if where:
            time.sleep(2.5)  # a watcher's look or two past the line
        return tracemalloc.is_tracing()

    run = profiled(job, mode="heavy", interval=0.05, endpoint=sys.argv[1])
    print(run(sys.argv[2]), run(""), flush=True)
""").replace("MIB_ONE", str(MIB))
LEAK_LINE = next(i for i, line in enumerate(WORKER.splitlines(), 1) if "LEAK_LINE" in line)


def _run(endpoint: str, where: str, allocations: int) -> str:
    env = {**os.environ, "WORKERSCOPE_ALLOCATIONS": str(allocations)}
    proc = subprocess.run([sys.executable, "-c", WORKER, endpoint, where], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_each_job_end_names_the_line_holding_the_memory(clean_env):
    with Subscriber() as sub:
        assert _run(sub.endpoint, "", 10) == "True True"
        assert sub.wait(jobs=2, byes=1, timeout=60)
        t = sub.timeline()
    marks = [m for m in t.marks if m.name == protocol.ALLOCATIONS_MARK]
    assert [m.attrs["reason"] for m in marks] == ["job end", "job end"], marks
    assert {m.job for m in marks} == {j.id for j in t.jobs}
    for m, held in zip(sorted(marks, key=lambda m: m.t_ns), (48, 96), strict=True):
        top = m.attrs["sites"][0]
        assert top["where"] == f"<string>:{LEAK_LINE}", m.attrs["sites"][:3]
        assert held * MIB <= top["bytes"] < (held + 2) * MIB and top["blocks"] >= held
        assert len(m.attrs["sites"]) <= 10 and m.attrs["traced_bytes"] >= top["bytes"]
    text = report(t)
    assert "allocations:" in text and f"<string>:{LEAK_LINE}" in text


def test_off_by_default_traces_nothing(clean_env):
    with Subscriber() as sub:
        assert _run(sub.endpoint, "", 0) == "False False"
        assert sub.wait(jobs=2, byes=1, timeout=60)
        t = sub.timeline()
    assert not [m for m in t.marks if m.name == protocol.ALLOCATIONS_MARK]


def test_passing_the_memory_line_takes_the_sites_once(clean_env):
    """A job in a memory cgroup of 160 MiB that grows to 96 MiB (past 0.5 of it, the line set
    here), then another that grows to 144: one mark taken at the crossing, beside the job
    ends'."""
    version, child = child_cgroup(cgroup.memory_dir(os.getpid()), "memory")
    try:
        write_text(os.path.join(child, "memory.limit_in_bytes" if version == 1 else "memory.max"),
                   str(160 * MIB))
        os.environ["WORKERSCOPE_STACKS_MEMORY"] = "0.5"
        try:
            with Subscriber() as sub:
                _run(sub.endpoint, child, 10)
                assert sub.wait(jobs=2, byes=1, timeout=60)
                t = sub.timeline()
        finally:
            del os.environ["WORKERSCOPE_STACKS_MEMORY"]
    finally:
        remove_cgroup(child)
    reasons = [m.attrs["reason"] for m in t.marks if m.name == protocol.ALLOCATIONS_MARK]
    past = [r for r in reasons if r.startswith("memory at")]
    assert len(past) == 1 and reasons.count("job end") == 2, reasons
    assert int(past[0].split()[2].rstrip("%")) >= 50
