"""A worker that dies inside a job: the job says how (OOM kill with its figures, signal, exit
status), from what the sidecar reads after the pipe's EOF (sidecar/death.py)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import textwrap
import threading

import pytest
from helpers import child_cgroup, python_script, remove_cgroup, write_text

from workerscope import Subscriber, cgroup, protocol
from workerscope.builder import TimelineBuilder
from workerscope.errors import ProtocolError
from workerscope.procfs import parse_stat_exit
from workerscope.sidecar.death import DeathWatch, find_oom_record
from workerscope.timeline import Job, Timeline

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/, where jobs.py is
LIMIT = 64 * 1024 * 1024


# -- a memory cgroup of the test's own ---------------------------------------------------------
def _own_memory_cgroup() -> tuple[int, str] | None:
    """(version, directory) of this process's memory cgroup, where this process can see it."""
    return cgroup.memory_dir(os.getpid())


def _make_cgroup() -> tuple[int, str]:
    """A child memory cgroup limited to LIMIT, without swap; pytest.skip where none can be
    made."""
    version, child = child_cgroup(_own_memory_cgroup(), "memory")
    try:
        if version == 1:
            write_text(os.path.join(child, "memory.limit_in_bytes"), str(LIMIT))
            swap = os.path.join(child, "memory.memsw.limit_in_bytes")
        else:
            if not os.path.exists(os.path.join(child, "memory.max")):
                raise OSError(errno.ENOENT, "the memory controller is not enabled for children "
                              f"of {os.path.dirname(child)} (cgroup.subtree_control)")
            write_text(os.path.join(child, "memory.max"), str(LIMIT))
            swap = os.path.join(child, "memory.swap.max")
        if os.path.exists(swap):  # no swap to flee to: the limit is the limit
            write_text(swap, str(LIMIT) if version == 1 else "0")
    except OSError as err:
        os.rmdir(child)
        pytest.skip(f"cannot set a memory limit in {child}: {err}")
    return version, child


@pytest.fixture
def memory_cgroup():
    """(version, directory) of a fresh memory cgroup limited to LIMIT; removed afterwards."""
    version, child = _make_cgroup()
    try:
        yield version, child
    finally:
        remove_cgroup(child)


def _kernel_log_readable() -> bool:
    try:
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
        return True
    except OSError:
        return False


class Frames:
    """A Subscriber that also counts sample frames, to wait for the sidecar's next ticks."""

    def __init__(self) -> None:
        self.samples = 0
        self._cond = threading.Condition()
        self.sub = Subscriber(on_frame=self._on_frame)

    def _on_frame(self, frame: protocol.Frame) -> None:
        if frame.kind == protocol.SAMPLE:
            with self._cond:
                self.samples += 1
                self._cond.notify_all()

    def wait_samples(self, more: int, timeout: float = 30) -> bool:
        with self._cond:
            target = self.samples + more
            return self._cond.wait_for(lambda: self.samples >= target, timeout)


def _killed_in_cgroup(cgroup: str, code: str) -> tuple[subprocess.Popen[str], Timeline]:
    """A worker that runs `code` (it defines `entry(step)`, which prints ready, reads a line,
    then allocates) as a heavy job, moved into `cgroup` once inside the job, until killed;
    the worker and the timeline the driver got."""
    frames = Frames()
    with frames.sub as sub:
        # The worker starts its sidecar outside the limited cgroup, then waits inside the job
        # for the test to move it (and only it) in before it allocates.
        worker = subprocess.Popen(python_script("import sys, time\n"
                                                "from workerscope import profiled, timed\n"
                                                + textwrap.dedent(code) + f"""
profiled(entry, mode="heavy", interval=0.02, endpoint={sub.endpoint!r})(step)
"""), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert worker.stdout.readline() == "ready\n", "the worker never entered its job"
            write_text(os.path.join(cgroup, "cgroup.procs"), str(worker.pid))
            # Two more ticks: the sidecar has seen the worker in its new cgroup (its OOM
            # counter's baseline) before the worker allocates.
            assert frames.wait_samples(2)
            worker.stdin.write("go\n")
            worker.stdin.close()
            # Reaped only once the driver has the job's end: the zombie holds its exit status.
            assert sub.wait(jobs=1, byes=1, timeout=60)
        finally:
            worker.kill()
            worker.wait()
            worker.stdout.close()
        return worker, sub.timeline()


# -- the deaths ---------------------------------------------------------------------------------
def test_oom_killed_worker_is_named_with_limit_and_rss(clean_env, memory_cgroup):
    """A worker OOM-killed in its memory cgroup: its job is oom_killed, says the limit and the
    last RSS, and carries the cgroup's oom_kill rise (and the kernel's line where readable)."""
    _, cgroup = memory_cgroup
    worker, t = _killed_in_cgroup(cgroup, """
        @timed
        def hog(step):
            print("ready", flush=True)
            sys.stdin.readline()
            chunks = []
            while True:  # until the kernel kills us; paced so that samples see it grow
                chunks.append(b"x" * step)
                time.sleep(0.002)

        entry, step = hog, 2 << 20
    """)
    assert worker.returncode == -signal.SIGKILL
    (j,) = t.jobs
    assert j.status == "oom_killed", j.error
    death = j.death
    assert death is not None
    assert death["cause"] == "oom" and death["pid"] == worker.pid
    assert death["signal"] == signal.SIGKILL
    assert death["oom_kills"] >= 1
    assert death["cgroup"] == cgroup
    assert death["cgroup_limit_bytes"] == LIMIT
    assert death["last_rss_bytes"] > 0 and "cgroup_usage_bytes" in death
    assert j.error.startswith("OOM-killed: cgroup limit 64.0 MiB, last RSS ")
    if _kernel_log_readable():
        assert f"Killed process {worker.pid} " in death["kernel_log"]
        assert f"(kernel log: Killed process {worker.pid} " in j.error
    else:
        assert "kernel_log_error" in death
    (w,) = t.workers.values()
    assert w.status == "killed"
    assert any("OOM-killed" in n for n in w.notes)
    # The open function at the death: the sidecar read its span from the worker's span ring
    # after the death and ended it there, cut short.
    cut_short = [s for s in t.spans if s.kind != "job" and s.cut_short]
    assert "hog" in {s.name for s in cut_short}


def _start_worker(endpoint: str, body: str) -> subprocess.Popen[bytes]:
    """A worker running `body` (code with `endpoint` in scope) inside a profiled job."""
    return subprocess.Popen(python_script(f"""
        import os, sys, time
        sys.path.insert(0, {TESTS!r})
        from workerscope import profiled, timed
        endpoint = {endpoint!r}
    """ + body))


def test_sigkilled_worker_names_the_signal(clean_env, tmp_path):
    """SIGKILL inside a job: the job is killed with "killed by SIGKILL" and signal 9."""
    with Subscriber() as sub:
        worker = _start_worker(sub.endpoint, f"""
        from jobs import wait_then_sleep
        profiled(wait_then_sleep, mode="heavy", interval=0.05,
                 endpoint=endpoint)({str(tmp_path / 'flag')!r}, 120)
        """)
        try:
            assert sub.wait(started=1, timeout=30), "the job never started"
            worker.send_signal(signal.SIGKILL)
            # Reaped only once the driver has the job's end: the zombie holds its exit status.
            assert sub.wait(jobs=1, byes=1, timeout=30)
        finally:
            worker.kill()
            worker.wait()
        t = sub.timeline()
    (j,) = t.jobs
    assert j.status == "killed" and j.error == "killed by SIGKILL"
    assert j.death is not None
    assert j.death["cause"] == "signal" and j.death["signal"] == signal.SIGKILL
    assert j.death["pid"] == worker.pid and not j.death["core_dumped"]
    assert any("killed by SIGKILL" in n for n in t.workers[j.worker].notes)


def test_exit_inside_job_names_the_status(clean_env):
    """os._exit(3) inside a job: the job is killed, "exited inside the job with status 3"."""
    with Subscriber() as sub:
        worker = _start_worker(sub.endpoint, """
        @timed
        def quit_now():
            os._exit(3)

        profiled(quit_now, mode="heavy", interval=0.05, endpoint=endpoint)()
        """)
        try:
            assert sub.wait(jobs=1, byes=1, timeout=30)
        finally:
            worker.wait()
        t = sub.timeline()
    assert worker.returncode == 3
    (j,) = t.jobs
    assert j.status == "killed" and j.error == "exited inside the job with status 3"
    assert j.death is not None and j.death["cause"] == "exit" and j.death["exit_status"] == 3


def test_worker_reaped_before_the_sidecar_looks_is_unknown():
    """A worker its parent reaped before the sidecar read /proc: cause unknown, said so."""
    child = subprocess.Popen(python_script("import sys; sys.stdin.read()"), stdin=subprocess.PIPE)
    watch = DeathWatch(child.pid)
    watch.job_started()
    child.stdin.close()
    child.wait()
    death = watch.after_eof()
    assert death.status == "killed" and death.figures["cause"] == "unknown"
    assert "reaped it before" in death.error


def test_pipe_closed_by_a_living_worker_is_said_so():
    """A worker still running after its pipe closed is not called dead: cause unknown."""
    child = subprocess.Popen(python_script("import sys; sys.stdin.read()"), stdin=subprocess.PIPE)
    try:
        watch = DeathWatch(child.pid)
        watch.job_started()
        death = watch.after_eof()
    finally:
        child.stdin.close()
        child.wait()
    assert death.status == "killed" and death.figures["cause"] == "unknown"
    assert death.error.startswith("the worker's pipe closed during the job, and the worker was")


# -- the parts ----------------------------------------------------------------------------------
def test_stat_exit_fields_survive_odd_process_names():
    """state, start time and exit_code are read after the last ")" of the name."""
    fields = ["Z"] + [str(i) for i in range(4, 53)]
    fields[22 - 3], fields[52 - 3] = "777", "9"
    line = ("42 (a) b (c) " + " ".join(fields) + "\n").encode()
    assert parse_stat_exit(line) == ("Z", 777, 9)
    assert parse_stat_exit(line.rsplit(b" ", 3)[0]) == ("Z", 777, None)  # before Linux 3.5


def test_kernel_oom_record_is_found_by_pid():
    """The kernel's "Killed process PID" line is picked for that pid, not for another."""
    log = ["python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
           "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
           "oom_memcg=/t,task_memcg=/t,task=python3,pid=1234,uid=0",
           "Memory cgroup out of memory: Killed process 1234 (python3) total-vm:120000kB, "
           "anon-rss:60000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:200kB "
           "oom_score_adj:0"]
    assert find_oom_record(log, 1234).startswith("Memory cgroup out of memory: Killed process")
    assert find_oom_record(log[:2], 1234).startswith("oom-kill:")
    assert find_oom_record(log, 123) is None and find_oom_record(log, 12345) is None


def _job_end_frame(death: object) -> protocol.Frame:
    return protocol.Frame("job_end", "w1", 2, {"job": 1, "t": 10, "status": "oom_killed",
                                               "error": "OOM-killed", "death": death})


def test_death_figures_are_checked():
    """A job_end's death map is type-checked (ProtocolError, the job still open); unknown
    keys are dropped."""
    b = TimelineBuilder()
    b.add(protocol.Frame("job_start", "w1", 1, {"job": 1, "name": "j", "t": 0, "pid": 1}))
    for bad in ("oom", {"signal": 9}, {"cause": "oom", "signal": "9"},
                {"cause": "oom", "oom_kills": -1}, {"cause": "oom", "core_dumped": 1},
                {"cause": "x" * 5000}):
        with pytest.raises(ProtocolError):
            b.add(_job_end_frame(bad))
    b.add(_job_end_frame({"cause": "oom", "signal": 9, "later": [1], "kernel_log": "K"}))
    (j,) = b.t.jobs
    assert j.status == "oom_killed" and j.death == {"cause": "oom", "signal": 9,
                                                    "kernel_log": "K"}


def test_job_rows_without_death_still_load():
    """A .wsc job row written before jobs had `death` loads, with death None; a new one keeps
    it."""
    old = ["w", 1, "j", 0, 5, "killed", "gone", 7, None, None]
    new = Job("w", 2, "j", 0, 5, "oom_killed", "OOM-killed", 7, None, None, {"cause": "oom"})
    d = Timeline(jobs=[new]).to_dict()
    d["jobs"].append(old)
    jobs = Timeline.from_dict(d).jobs
    assert jobs[0].death == {"cause": "oom"} and jobs[1].death is None


def test_an_oom_kill_comes_with_the_stacks_taken_before_it(clean_env, memory_cgroup):
    """A worker allocating in a @timed function until its 64 MiB cgroup's OOM killer ends it:
    past stacks_memory (90% by default) of the limit, its sidecar took every thread's stack,
    and the report shows them beside the death, naming the function that allocated."""
    _, cgroup = memory_cgroup
    worker, t = _killed_in_cgroup(cgroup, """
        @timed
        def allocates(step):
            print("ready", flush=True)
            sys.stdin.readline()
            chunks = []
            while True:  # until the kernel kills us: ~100 MB/s, so ticks see 90% pass
                chunks.append(b"x" * step)
                time.sleep(0.01)

        entry, step = allocates, 1 << 20
    """)
    assert worker.returncode == -signal.SIGKILL
    (j,) = t.jobs
    assert j.status == "oom_killed", j.error
    (mark,) = [m for m in t.marks if m.name == "stacks"]
    assert mark.job == j.id and mark.attrs is not None
    assert mark.attrs["reason"].startswith("memory: its cgroup holds "), mark.attrs
    assert "of its limit of 64 MiB" in mark.attrs["reason"]
    assert mark.t_ns < (j.end_ns or 0)
    (proc,) = mark.attrs["processes"]
    assert proc["pid"] == worker.pid
    frames_seen = [f["function"] for th in proc["threads"] for f in th["frames"]]
    assert "allocates" in frames_seen, proc
    # The terminal report puts the stacks beside the death.
    from workerscope.export.terminal import report

    text = report(t)
    assert "OOM-killed" in text and "allocates" in text


def test_the_memory_trigger_fires_once_a_crossing(clean_env, memory_cgroup):
    """A worker holding 75% of its cgroup's limit for 2 s, with stacks_memory 0.5 and
    stacks_every 0.05: one dump, at the crossing, not one every 0.05 s."""
    _, cgroup = memory_cgroup
    with Subscriber() as sub:
        worker = subprocess.Popen(python_script(f"""
            import sys, time
            from workerscope import monitor

            with monitor(interval=0.05, endpoint={sub.endpoint!r}, stacks_memory=0.5,
                         stacks_every=0.05, name="holds"):
                print("ready", flush=True)
                sys.stdin.readline()
                held = bytearray({int(0.75 * LIMIT)})
                held[::4096] = b"x" * len(held[::4096])  # touched: resident
                time.sleep(2)
        """), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert worker.stdout is not None and worker.stdin is not None
            assert worker.stdout.readline() == "ready\n"
            write_text(os.path.join(cgroup, "cgroup.procs"), str(worker.pid))
            worker.stdin.write("go\n")
            worker.stdin.close()
            assert worker.wait(timeout=60) == 0
            assert sub.wait(jobs=1, byes=1, timeout=30)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
            worker.stdout.close()
        t = sub.timeline()
    marks = [m for m in t.marks if m.name == "stacks"]
    assert len(marks) == 1, [m.attrs["reason"] for m in marks if m.attrs]
    assert marks[0].attrs is not None and marks[0].attrs["reason"].startswith("memory:")
