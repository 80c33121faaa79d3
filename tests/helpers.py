"""Helpers the tests import (`from helpers import ...`); fixtures live in conftest.py.

CPU is burned by CPU time, never by the wall clock: on a loaded machine a burner that watched
the wall clock would get less than a core and burn less than the test expects.
"""

from __future__ import annotations

import bisect
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

import psutil

from workerscope import Subscriber, Timeline, protocol
from workerscope.worker import link as launcher

# Settings of the test environment, which conftest.py sets for every test. A sidecar whose
# driver has gone (the test closed its Subscriber first) waits bye_timeout for an ack that never
# comes: 2 s by default, in the teardown of a dozen tests. A test of the bye and its ack sets its
# own. Here, not in conftest.py: `from conftest import` would find tests/unit's or
# tests/integration's conftest first.
TEST_ENV = {"WORKERSCOPE_BYE_TIMEOUT": "0.3"}


def wait_until(condition: Callable[[], object], what: str = "the condition",
               timeout: float = 60.0, step: float = 0.01) -> None:
    """Wait until `condition()` holds, looking again every `step` seconds: a test waits on
    what it needs, never a fixed time. Fails the test after `timeout` seconds, naming
    `what`."""
    assert eventually(condition, timeout, step), f"timed out waiting for {what}"


def eventually(condition: Callable[[], object], timeout: float = 60.0,
               step: float = 0.01) -> bool:
    """Whether `condition()` holds within `timeout` seconds, looked at every `step` seconds
    (for a test that asserts it with a message of its own)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return bool(condition())
        time.sleep(step)
    return True


def python_script(code: str) -> list[str]:
    """argv running `code` (dedented) in a fresh interpreter."""
    return [sys.executable, "-c", textwrap.dedent(code)]


def burn_code(seconds: float) -> str:
    """Code that keeps its thread on a core until that thread has used `seconds` of CPU time,
    however long that takes on a busy machine."""
    return f"import time\nt = time.thread_time() + {seconds}\nwhile time.thread_time() < t: pass\n"


def burn(seconds: float) -> None:
    """Burn `seconds` of this thread's CPU time, here."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class CpuClock:
    """Burns CPU while noting this process's CPU time against the wall clock, so a test knows
    how much CPU the process really got between any two instants: the ground truth for a
    sampler's cpu_percent of it, which is below 100 on a busy machine, and varies."""

    def __init__(self) -> None:
        self.marks: list[tuple[int, float]] = []  # (time.time_ns(), time.process_time())

    def burn(self, seconds: float, step: float = 0.001) -> None:
        """Burn `seconds` of this thread's CPU time, noting the process's every `step` s."""
        end = time.thread_time() + seconds
        self.marks.append((time.time_ns(), time.process_time()))
        while time.thread_time() < end:
            burn(step)
            self.marks.append((time.time_ns(), time.process_time()))

    def cpu_at(self, t_ns: int) -> float:
        """The process's CPU seconds at wall time t_ns, which must fall within the burn."""
        times = [t for t, _ in self.marks]
        assert times[0] <= t_ns <= times[-1], "outside the burn"
        i = max(1, bisect.bisect_left(times, t_ns))
        (t0, c0), (t1, c1) = self.marks[i - 1], self.marks[i]
        return c0 + (c1 - c0) * (t_ns - t0) / max(t1 - t0, 1)

    def tree_cpu_percent(self, timeline: Timeline) -> tuple[float, float, int]:
        """The timeline's tree cpu_percent over the ticks that fall wholly within the burn,
        averaged over time; the CPU % this process really got over those same instants; and
        how many ticks that is.

        Each cpu_percent is the rate since the previous sample that has one (or since the
        first sample), so the two averages cover exactly the same span."""
        tree = [s for s in timeline.samples if s.scope == "tree"]
        since, spans = tree[0].t_ns, []
        for s in tree:
            if "cpu_percent" in s.values:
                if self.marks[0][0] <= since and s.t_ns <= self.marks[-1][0]:
                    spans.append((since, s.t_ns, s.values["cpu_percent"]))
                since = s.t_ns
        assert spans, "no tick fell wholly within the burn"
        start, end = spans[0][0], spans[-1][1]
        read = sum(pct * (t1 - t0) for t0, t1, pct in spans) / (end - start)
        truth = 100 * (self.cpu_at(end) - self.cpu_at(start)) / ((end - start) / 1e9)
        return read, truth, len(spans)


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m workerscope ARGS`, its output captured as text."""
    return subprocess.run([sys.executable, "-m", "workerscope", *args], capture_output=True,
                          text=True, timeout=timeout)


class SampleCounter:
    """A Subscriber that counts sample frames, so a test can wait for the sampler to tick
    instead of sleeping."""

    def __init__(self) -> None:
        self.count = 0
        self._cond = threading.Condition()
        self.sub = Subscriber(on_frame=self._on_frame)

    def _on_frame(self, frame: protocol.Frame) -> None:
        if frame.kind == protocol.SAMPLE:
            with self._cond:
                self.count += 1
                self._cond.notify_all()

    @property
    def endpoint(self) -> str:
        return self.sub.endpoint

    def wait(self, more: int, timeout: float = 30) -> None:
        with self._cond:
            target = self.count + more
            assert self._cond.wait_for(lambda: self.count >= target, timeout), "no samples came"


# -- what the leak check (conftest.no_leaks) looks at -------------------------------------------
def is_mp_helper(p: psutil.Process) -> bool:
    """multiprocessing's own long-lived helper (resource tracker), shared by all tests."""
    try:
        return "multiprocessing.resource_tracker" in " ".join(p.cmdline())
    except psutil.Error:
        return False


# Files a library keeps open for its process's life by design, opened on first use: libuuid's
# clock (uuid.uuid1 through libuuid, which Dask calls) is held to order the ids it makes.
LIFELONG = frozenset({"/var/lib/libuuid/clock.txt"})


def open_fds() -> set[str]:
    """This process's open file descriptors, but those LIFELONG."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") in LIFELONG:
                continue
        except OSError:
            continue
        out.add(fd)
    return out


def orphan_sidecars() -> list[int]:
    """Sidecar processes of ours that no link owns any more (a live link's is not a leak:
    sidecars are kept for the next job by design)."""
    owned = {link.proc.pid for link in [*launcher._links.values(), *launcher._retired]
             if link.proc is not None}
    out = []
    for p in psutil.Process().children():
        try:
            if (p.pid not in owned and p.status() != psutil.STATUS_ZOMBIE
                    and "workerscope.sidecar" in " ".join(p.cmdline())):
                out.append(p.pid)
        except psutil.Error:
            continue  # it ended while we looked
    return out


def lithops_localhost(lithops):
    """A Lithops FunctionExecutor on its localhost backend and storage, its workers started
    with this interpreter (Lithops starts `python` from PATH by default)."""
    return lithops.FunctionExecutor(config={
        "lithops": {"backend": "localhost", "storage": "localhost", "log_level": "WARNING"},
        "localhost": {"runtime": sys.executable}})


def lithops_clean(fexec, timeout: float = 120.0) -> None:
    """Clean a Lithops executor's storage, stop its monitor and invoker, and wait until no
    process of Lithops' is left: its cleaner (one for all executors, started anew only when
    none runs) can take its time on a loaded machine, and must not outlive the test."""
    fexec.clean(clean_cloudobjects=True)
    fexec.__exit__(None, None, None)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = []
        for p in psutil.Process().children(recursive=True):
            try:
                if "lithops" in " ".join(p.cmdline()):
                    left.append(p)
            except psutil.Error:
                continue  # gone, or a zombie being reaped
        if not left:
            return
        psutil.wait_procs(left, timeout=min(5.0, max(0.1, deadline - time.monotonic())))
    raise AssertionError(f"Lithops processes still running after {timeout:g} s: "
                         f"{[' '.join(p.cmdline())[:200] for p in left if p.is_running()]}")


def run_ray_driver(code: str, endpoint: str) -> object:
    """Run a Ray driver script (`code`, given `endpoint` as its argument) in a process of its
    own, as Ray keeps descriptors open after shutdown; its last line of output, as JSON."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=here)  # Ray's workers import tests/jobs.py too
    r = subprocess.run([sys.executable, "-c", code, endpoint], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def write_text(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def remove_cgroup(child: str) -> None:
    """Move what is left in a cgroup the test made to its parent, then remove it (the kernel
    may take a moment to let go of a process that just left)."""
    import errno

    parent = os.path.dirname(child)
    deadline = time.monotonic() + 10
    while True:
        with open(os.path.join(child, "cgroup.procs")) as f:
            pids = f.read().split()
        for pid in pids:
            try:
                write_text(os.path.join(parent, "cgroup.procs"), pid)
            except OSError:
                continue  # it exited meanwhile
        try:
            os.rmdir(child)
            return
        except OSError as err:
            if err.errno != errno.EBUSY or time.monotonic() > deadline:
                raise


def child_cgroup(found: tuple[int, str] | None, kind: str) -> tuple[int, str]:
    """A new child of a cgroup the test can see (found: cgroup.memory_dir and the like), as
    (version, directory); pytest.skip where there is none or none can be made."""
    import pytest

    if found is None:
        pytest.skip(f"no {kind} cgroup visible to this process")
    version, parent = found
    child = os.path.join(parent, f"workerscope-test-{kind}-{os.getpid()}")
    try:
        os.mkdir(child)
    except OSError as err:
        pytest.skip(f"cannot create a {kind} cgroup under {parent}: {err}")
    return version, child
