"""Why a straggler was slow: a cause for each straggling worker, with the numbers behind it, or
"no clear cause" and the two best candidates. The one rule, for every view:

- a straggler is a worker whose job time passes timeline.is_straggler against its peers'
  (jobs that ended in a death, killed, OOM-killed or lost, are told as deaths and left out);
- each worker's evidence is read over those of its jobs its samples cover (its job process's
  CPU sampled across the whole job; a worker with none gets no cause), each counter taken
  straight between the samples on either side of the job's start and end, summed over its
  jobs: its job threads' CPU and run delay (runnable, waiting for a CPU), the other threads'
  CPU in the job's process, the tree's other processes' run delay, its cgroup's CPU
  throttling, the pressure stalls (PSI: its cgroup's, else the host's), major faults,
  storage IO, block IO delay, its cgroup's memory use against its limit, the GPUs' use (and
  their clocks while busy), and the spans' own time by function;
- the extra time is its job time less the median peer's; the peers' figures are scaled to
  its number of jobs, and what its number of jobs alone accounts for is "more jobs". Each
  cause is given the seconds of the extra time its own evidence accounts for, against the
  median of the same evidence on the peers (so a machine busy for everyone blames no one):
  throttled: its extra throttled CPU time, at most the time its job thread did not run;
  CPU-starved: the extra run delay (beyond what its peers' share of runnable time gives its
  own CPU time) not throttling's, and its other processes' extra run delay while it waited
  on them; memory pressure (only with a memory signal: an extra memory stall, extra major
  faults, or a cgroup near its limit while storage was read): the extra memory stall, the
  extra system CPU of reclaim and faults, and the extra blocked time where it read back from
  storage; IO-bound (only with extra storage IO, an IO stall or block IO delay): the extra
  blocked time; GIL- or lock-bound: the extra blocked time while other threads of its process
  ran more; GPU-bound (its GPUs over GPU_BUSY busy): the extra blocked time; GPU clocks low:
  the share of the extra time its lower clock accounts for; input-starved (no IO or memory
  signal): the extra blocked time left; slower code path: the extra CPU its job threads
  computed themselves (user time, and system time without a memory signal), grossed up by
  the peers' wait for a CPU, told with the functions whose own time grew most; only where the
  function with the most extra time was called more often than on the median peer (more CPU
  in the same calls is no path the spans show: a slower machine, a branch inside them);
- the cause named is the one whose seconds are at least CLEAR_SHARE of the extra time and
  CLEAR_LEAD times the next; else "no clear cause", with the two best. The GPU figures are
  of every GPU the sidecar reads on the host (docs/METRICS.md), not only the worker's.
"""

from __future__ import annotations

import bisect
import dataclasses
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..protocol import Status
from ..timeline import Job, Sample, Span, Timeline, straggler_limit
from ..units import fmt_bytes, fmt_seconds

CPU_STARVED = "CPU-starved"
THROTTLED = "throttled"
IO_BOUND = "IO-bound"
MEMORY = "memory pressure"
GIL = "GIL- or lock-bound"
INPUT = "input-starved"
GPU_BOUND = "GPU-bound"
GPU_CLOCKS = "GPU clocks low"
CODE_PATH = "slower code path"
MORE_JOBS = "more jobs"
CAUSES = (CPU_STARVED, THROTTLED, IO_BOUND, MEMORY, GIL, INPUT, GPU_BOUND, GPU_CLOCKS, CODE_PATH,
          MORE_JOBS)
NO_CLEAR_CAUSE = "no clear cause"

CLEAR_SHARE = 0.5  # of the extra time, what the named cause must account for
CLEAR_LEAD = 1.5  # and how many times the next cause's seconds
IO_BYTES = 16 * 1024 * 1024  # extra storage IO that makes IO a candidate
MAJOR_FAULTS = 256  # extra major faults that are a memory signal
NEAR_LIMIT = 0.9  # a cgroup's memory use against its limit that is a signal with storage reads
GPU_BUSY = 80.0  # GPU utilisation (%) over which waiting on it is GPU-bound
LOW_CLOCK = 0.85  # a GPU clock under this share of the peers' median is low
FUNCTIONS_SHOWN = 3
DIED = frozenset({Status.KILLED, Status.OOM_KILLED, Status.LOST})


@dataclass(frozen=True)
class Evidence:
    """One worker's figures over its jobs (seconds, bytes, counts; None where unmeasured)."""

    jobs: int  # the jobs its samples cover, over which the rest is summed
    wall_s: float
    cpu_user_s: float  # its job threads' own (the process's where its threads are not sampled)
    cpu_system_s: float
    run_delay_s: float  # its job threads'
    children_run_delay_s: float  # the tree's other processes'
    other_threads_cpu_s: float  # the job processes' other threads
    other_threads: int  # how many of them ran (over 10 ms)
    process_cpu_s: float  # the job processes' whole
    throttled_s: float
    throttled_periods: float
    memory_stall_s: float
    io_stall_s: float
    major_faults: float
    storage_bytes: float
    blkio_delay_s: float
    memory_use: float | None  # the highest use of its cgroup's memory limit (0-1)
    gpu_util: float | None  # mean %, over its GPUs
    sm_clock_mhz: float | None
    functions: dict[str, float] = field(default_factory=dict)  # own (exclusive) span time
    calls: dict[str, int] = field(default_factory=dict)

    @property
    def blocked_s(self) -> float:
        """The time its job threads neither ran nor waited for a CPU."""
        return max(self.wall_s - self.cpu_user_s - self.cpu_system_s - self.run_delay_s, 0.0)


@dataclass(frozen=True)
class Straggler:
    """A straggling worker: its job time, the median peer's, the cause (None: no clear
    cause) with the sentence that supports it, and every candidate as (cause, seconds of the
    extra time it accounts for, why), best first."""

    worker: str
    wall_s: float
    median_s: float
    cause: str | None
    because: str
    candidates: tuple[tuple[str, float, str], ...]

    @property
    def text(self) -> str:
        """The verdict as one line: "CPU-starved: waited 62% of its 8.1 s for a CPU ..."."""
        head = (f"{fmt_seconds(self.wall_s)} of jobs against {fmt_seconds(self.median_s)} "
                f"on the median peer")
        if self.cause is not None:
            return f"{self.cause}: {self.because} ({head})"
        if not self.candidates:
            return (f"{NO_CLEAR_CAUSE} ({head}): no samples cover its jobs (light mode, a "
                    f"sidecar lost, frames lost), or too few of its peers'")
        best = "; ".join(f"{c} ({fmt_seconds(s)} of the extra time: {why})"
                         for c, s, why in self.candidates[:2] if s > 0)
        return f"{NO_CLEAR_CAUSE} ({head})" + (f"; the two best: {best}" if best else "")


# -- evidence ------------------------------------------------------------------------------------
class _Series:
    """One sample stream (worker, scope, pid, tid), to read counters across a window: each
    key's (times, values) kept apart, in time order, made the first time the key is asked."""

    def __init__(self) -> None:
        self.times: list[int] = []
        self.values: list[dict[str, float]] = []
        self._keys: dict[str, tuple[list[int], list[float]]] = {}

    def _of(self, key: str) -> tuple[list[int], list[float]]:
        got = self._keys.get(key)
        if got is None:
            pairs = [(t, v[key]) for t, v in zip(self.times, self.values, strict=True) if key in v]
            got = self._keys[key] = ([t for t, _ in pairs], [v for _, v in pairs])
        return got

    def at(self, key: str, t: int) -> float | None:
        """The counter at time t, straight between the samples on either side (the first or
        last value outside them); None where the stream never has it."""
        times, values = self._of(key)
        if not times:
            return None
        i = bisect.bisect_left(times, t)
        if i == 0:
            return values[0]
        if i == len(times):
            return values[-1]
        t0, t1, v0, v1 = times[i - 1], times[i], values[i - 1], values[i]
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1

    def delta(self, key: str, start: int, end: int) -> float | None:
        """How much a counter grew across [start, end]; None where the stream never has it."""
        first, last = self.at(key, start), self.at(key, end)
        if first is None or last is None:
            return None
        return max(last - first, 0.0)

    def covers(self, key: str, start: int, end: int) -> bool:
        """Whether samples with the key bracket the window, or fall inside it at both ends
        within a tenth of its length (a stream that stopped at a death does not)."""
        times, _ = self._of(key)
        if not times:
            return False
        slack = max((end - start) // 10, 1)
        return times[0] <= start + slack and times[-1] >= end - slack

    def within(self, start: int, end: int) -> Iterable[dict[str, float]]:
        lo, hi = bisect.bisect_left(self.times, start), bisect.bisect_right(self.times, end)
        return self.values[lo:hi]


_Key = tuple[str, str, int | None, int | None]


class _Index:
    """The samples of a timeline as streams, and each process's thread streams, made once."""

    def __init__(self, samples: Iterable[Sample]) -> None:
        self.series: dict[_Key, _Series] = {}
        self.threads: dict[tuple[str, int | None], list[tuple[int, _Series]]] = {}
        for smp in sorted(samples, key=lambda x: x.t_ns):
            scope = "gpu" if smp.scope.startswith("gpu") else smp.scope
            key = (smp.worker, scope, smp.pid if scope in ("proc", "thread") else None,
                   smp.tid if scope == "thread" else None)
            stream = self.series.get(key)
            if stream is None:
                stream = self.series[key] = _Series()
                if scope == "thread" and smp.tid is not None:
                    self.threads.setdefault((smp.worker, smp.pid), []).append((smp.tid, stream))
            stream.times.append(smp.t_ns)
            stream.values.append(smp.values)

    def get(self, key: _Key) -> _Series | None:
        return self.series.get(key)


def _cpu(series: _Series | None, start: int, end: int) -> float | None:
    if series is None:
        return None
    user, system = series.delta("cpu_user_s", start, end), series.delta("cpu_system_s", start, end)
    return None if user is None or system is None else user + system


def _own_times(spans: list[Span]) -> tuple[dict[str, float], dict[str, int]]:
    """Each function's own time (its spans' durations less their children's) and calls."""
    children: dict[tuple[int, int], int] = {}
    for s in spans:
        if s.parent is not None:
            children[(s.pid, s.parent)] = children.get((s.pid, s.parent), 0) + s.duration_ns
    own: dict[str, float] = {}
    calls: dict[str, int] = {}
    for s in spans:
        if s.kind != "span":
            continue
        mine = max(s.duration_ns - children.get((s.pid, s.id), 0), 0) / 1e9
        own[s.name] = own.get(s.name, 0.0) + mine
        calls[s.name] = calls.get(s.name, 0) + 1
    return own, calls


class _Acc:
    """The sums evidence() makes over one worker's jobs, a part of the samples at a time."""

    def __init__(self, index: _Index) -> None:
        self.index = index
        self.sums = dict.fromkeys(("wall", "user", "system", "delay", "children", "other",
                                   "proc", "thr", "periods", "mem", "io", "faults", "bytes",
                                   "blkio"), 0.0)
        self.others: set[int] = set()
        self.use: float | None = None
        self.util: list[float] = []
        self.clock: list[float] = []

    def job(self, j: Job, a: int, b: int) -> bool:
        """Add one job's figures; False where its samples do not cover it (nothing added)."""
        w = j.worker
        proc = self.index.get((w, "proc", j.pid, None))
        if proc is None or not proc.covers("cpu_user_s", a, b):
            return False  # unmeasured: no figure is better than a zero taken for one
        acc = self.sums
        acc["wall"] += (b - a) / 1e9
        self._threads(j, proc, a, b)
        tree = self.index.get((w, "tree", None, None))
        if tree is not None:
            # The tree's other processes' run delay: theirs, apart from the job thread's.
            tree_delay = tree.delta("run_delay_s", a, b) or 0.0
            acc["children"] += max(tree_delay - (proc.delta("run_delay_s", a, b) or 0.0), 0.0)
            acc["faults"] += tree.delta("major_faults", a, b) or 0.0
            acc["bytes"] += (tree.delta("read_bytes", a, b) or 0.0) + \
                (tree.delta("write_bytes", a, b) or 0.0)
            acc["blkio"] += tree.delta("blkio_delay_s", a, b) or 0.0
        host = self.index.get((w, "host", None, None))
        if host is not None:
            self._host(host, a, b)
        gpu = self.index.get((w, "gpu", None, None))
        if gpu is not None:
            self._gpu(gpu, a, b)
        return True

    def _threads(self, j: Job, proc: _Series, a: int, b: int) -> None:
        """Its job thread's CPU and run delay (its process's where the thread is unsampled),
        and the other threads of its process."""
        acc = self.sums
        thread = self.index.get((j.worker, "thread", j.pid, j.tid)) if j.tid is not None else None
        cpu_proc = _cpu(proc, a, b) or 0.0
        acc["proc"] += cpu_proc
        own = _cpu(thread, a, b) if thread is not None and thread.covers("cpu_user_s", a, b) \
            else None
        stream = proc if own is None or thread is None else thread
        if own is not None:
            acc["other"] += max(cpu_proc - own, 0.0)
            for tid, other in self.index.threads.get((j.worker, j.pid), []):
                if tid != j.tid and (_cpu(other, a, b) or 0.0) > 0.01:
                    self.others.add(tid)
        acc["user"] += stream.delta("cpu_user_s", a, b) or 0.0
        acc["system"] += stream.delta("cpu_system_s", a, b) or 0.0
        acc["delay"] += stream.delta("run_delay_s", a, b) or 0.0

    def _host(self, host: _Series, a: int, b: int) -> None:
        acc = self.sums
        acc["thr"] += host.delta("cgroup_cpu_throttled_s", a, b) or 0.0
        acc["periods"] += host.delta("cgroup_cpu_throttled_periods", a, b) or 0.0
        for name, psi in (("mem", "psi_memory_some_s"), ("io", "psi_io_some_s")):
            cg = host.delta(f"cgroup_{psi}", a, b)
            acc[name] += cg if cg is not None else (host.delta(psi, a, b) or 0.0)
        for v in host.within(a, b):
            limit, used = v.get("cgroup_mem_limit_bytes"), v.get("cgroup_mem_used_bytes")
            if limit and used is not None:
                self.use = max(self.use or 0.0, used / limit)

    def _gpu(self, gpu: _Series, a: int, b: int) -> None:
        for v in gpu.within(a, b):
            busy = v.get("util_percent")
            if busy is not None:
                self.util.append(busy)
                # A clock is compared only while the GPU works: an idle one drops its own.
                if busy >= 50 and "sm_clock_mhz" in v:
                    self.clock.append(v["sm_clock_mhz"])


def evidence(t: Timeline, jobs: list[Job], index: _Index | None = None,
             spans: list[Span] | None = None) -> Evidence | None:
    """One worker's Evidence over those of `jobs` (ended ones) that its samples cover (its
    job process's CPU measured across the whole job); None where none is covered: light mode,
    a sidecar lost, frames lost. index: _Index(t.samples), made once by a caller asking for
    many workers; spans: the worker's."""
    got = _Acc(_Index(t.samples) if index is None else index)
    counted = [j for j in jobs if j.end_ns is not None and got.job(j, j.start_ns, j.end_ns)]
    if not counted:
        return None
    ids = {j.id for j in counted}
    mine = spans if spans is not None else [s for s in t.spans if s.worker == counted[0].worker]
    own_time, calls = _own_times([s for s in mine if s.job in ids])
    acc = got.sums
    return Evidence(
        jobs=len(counted), wall_s=acc["wall"], cpu_user_s=acc["user"],
        cpu_system_s=acc["system"], run_delay_s=acc["delay"],
        children_run_delay_s=acc["children"], other_threads_cpu_s=acc["other"],
        other_threads=len(got.others), process_cpu_s=acc["proc"], throttled_s=acc["thr"],
        throttled_periods=acc["periods"], memory_stall_s=acc["mem"], io_stall_s=acc["io"],
        major_faults=acc["faults"], storage_bytes=acc["bytes"], blkio_delay_s=acc["blkio"],
        memory_use=got.use, gpu_util=statistics.fmean(got.util) if got.util else None,
        sm_clock_mhz=statistics.fmean(got.clock) if got.clock else None, functions=own_time,
        calls=calls)


# -- the verdict ---------------------------------------------------------------------------------
def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def judge(e: Evidence, peers: list[Evidence]) -> tuple[str | None, str, tuple[tuple[str, float, str], ...]]:
    """(cause or None, its sentence, every candidate best first) for a worker's Evidence
    against its peers'."""
    def med(get: Callable[[Evidence], float]) -> float:
        """The median peer's figure, for as many jobs as this worker's."""
        return _median([get(p) * e.jobs / p.jobs for p in peers if p.jobs])

    wall = e.wall_s
    # What made it a straggler, and what is left of that once its number of jobs is counted.
    total = max(wall - _median([p.wall_s for p in peers]), 1e-9)
    extra = max(wall - med(lambda p: p.wall_s), 1e-9)
    x_thr = e.throttled_s - med(lambda p: p.throttled_s)
    # Run delay accrues while a thread is runnable, at the machine's rate, whatever made it
    # compute long: what counts is more of it than its peers' share of runnable time (`rate`,
    # waiting / (waiting + running)) gives its own CPU time.
    rate = min(med(lambda p: _share(p.run_delay_s, p.run_delay_s + p.cpu_user_s + p.cpu_system_s)),
               0.95)
    cpu = e.cpu_user_s + e.cpu_system_s
    x_delay = e.run_delay_s - cpu * rate / (1 - rate)
    x_mem = e.memory_stall_s - med(lambda p: p.memory_stall_s)
    x_blocked = e.blocked_s - med(lambda p: p.blocked_s)
    x_other = e.other_threads_cpu_s - med(lambda p: p.other_threads_cpu_s)
    x_user = e.cpu_user_s - med(lambda p: p.cpu_user_s)
    x_system = e.cpu_system_s - med(lambda p: p.cpu_system_s)
    blocked = max(x_blocked, 0.0)
    # Throttled time is the cgroup's CPU time held, over all its CPUs: no more of it counts
    # than its job thread spent not running (waiting for a CPU, where the kernel counts it
    # there, or else in what looks blocked).
    throttled = min(max(x_thr, 0.0), max(x_delay, 0.0) + blocked, extra)
    blocked = max(blocked - max(throttled - max(x_delay, 0.0), 0.0), 0.0)
    # Its tree's other processes waited for a CPU while its thread waited on them.
    children = min(max(e.children_run_delay_s - med(lambda p: p.children_run_delay_s), 0.0),
                   blocked)
    blocked -= children
    io_signal, memory_signal = _signals(e, med, extra)
    out: list[tuple[str, float, str]] = []
    share = e.run_delay_s / wall if wall else 0.0
    out.append((THROTTLED, throttled,
                f"its cgroup's CPU quota was spent for {fmt_seconds(e.throttled_s)} of CPU time "
                f"({e.throttled_periods:,.0f} periods throttled; the median peer "
                f"{fmt_seconds(med(lambda p: p.throttled_s))})"))
    starved = max(x_delay - throttled, 0.0) + children
    out.append((CPU_STARVED, min(starved, extra),
                f"waited {share:.0%} of its {fmt_seconds(wall)} for a CPU, "
                f"{_share(e.run_delay_s, e.run_delay_s + cpu):.0%} of the time it could run "
                f"(the median peer {rate:.0%})" + (
                    f"; its other processes waited {fmt_seconds(e.children_run_delay_s)}"
                    if children > 0 else "")))
    memory = 0.0
    if memory_signal:
        memory = max(x_mem, 0.0) + max(x_system, 0.0) + (blocked if io_signal else 0.0)
    limit = (f", at {e.memory_use:.0%} of its cgroup's memory limit"
             if e.memory_use is not None and e.memory_use >= NEAR_LIMIT else "")
    out.append((MEMORY, min(memory, extra),
                f"stalled on memory {fmt_seconds(e.memory_stall_s)}{limit}, "
                f"{e.major_faults:,.0f} major faults, {fmt_bytes(e.storage_bytes)} from storage "
                f"(the median peer {fmt_seconds(med(lambda p: p.memory_stall_s))}, "
                f"{fmt_bytes(med(lambda p: p.storage_bytes))})"))
    io = blocked if io_signal and not memory_signal else 0.0
    out.append((IO_BOUND, min(io, extra),
                f"its threads were blocked {fmt_seconds(e.blocked_s)} of its {fmt_seconds(wall)} "
                f"while its tree moved {fmt_bytes(e.storage_bytes)} to and from storage (the "
                f"median peer {fmt_bytes(med(lambda p: p.storage_bytes))})"))
    # Other threads of its process ran while its own was blocked: the whole of that wait is
    # theirs to answer for (their own CPU is less where they waited for a CPU too).
    gil = blocked if x_other >= 0.25 * blocked and x_other > 0.1 * extra else 0.0
    cores = e.process_cpu_s / wall if wall else 0.0
    out.append((GIL, min(gil, extra),
                f"its thread ran {_share(e.cpu_user_s + e.cpu_system_s, wall):.0%} of its "
                f"{fmt_seconds(wall)} while {e.other_threads or 'the'} other thread(s) of its "
                f"process ran {fmt_seconds(e.other_threads_cpu_s)}; the process used "
                f"{cores:.2g} cores"))
    left = max(blocked - gil, 0.0)
    gpu_bound = left if e.gpu_util is not None and e.gpu_util >= GPU_BUSY else 0.0
    out.append((GPU_BOUND, min(gpu_bound, extra),
                f"its GPUs were {e.gpu_util or 0:.0f}% busy while its threads waited "
                f"{fmt_seconds(e.blocked_s)}"))
    out.append(_gpu_clocks(e, peers, extra))
    waiting = left - gpu_bound if not io_signal and not memory_signal else 0.0
    out.append((INPUT, min(max(waiting, 0.0), extra),
                f"its threads waited {fmt_seconds(e.blocked_s)} of its {fmt_seconds(wall)} "
                f"using no CPU and no more storage IO than its peers "
                f"({fmt_bytes(e.storage_bytes)} against {fmt_bytes(med(lambda p: p.storage_bytes))}"
                f"); the median peer waited {fmt_seconds(med(lambda p: p.blocked_s))}"))
    # Computing more costs more than its CPU seconds on a busy machine: the wait for a CPU
    # that comes with them, at the peers' rate.
    computed = (max(x_user, 0.0) + (0.0 if memory_signal else max(x_system, 0.0))) / (1 - rate)
    path, one_path = _code_path(e, peers, med)
    # More CPU in the same calls as the peers' is no path the spans show (a busy sibling
    # hyperthread, a lower clock, a branch inside a function): no seconds for it then.
    out.append((CODE_PATH, min(computed, extra) if one_path else 0.0, path))
    peer_jobs = _median([float(p.jobs) for p in peers])
    out.append((MORE_JOBS, max(total - extra, 0.0) if e.jobs > peer_jobs else 0.0,
                f"it ran {e.jobs:,} jobs against {peer_jobs:,.0f} on the median peer, each "
                f"{fmt_seconds(wall / e.jobs)} against "
                f"{fmt_seconds(_median([p.wall_s / p.jobs for p in peers if p.jobs]))}"))
    out.sort(key=lambda c: -c[1])
    best, second = out[0], out[1]
    if best[1] >= CLEAR_SHARE * total and best[1] >= CLEAR_LEAD * second[1]:
        return best[0], best[2], tuple(out)
    return None, "", tuple(out)


def _signals(e: Evidence, med: Callable[[Callable[[Evidence], float]], float],
             extra: float) -> tuple[bool, bool]:
    """(an IO signal, a memory signal): more storage IO, IO stall or block IO delay than the
    peers; more memory stall or major faults, or a cgroup near its limit while storage was
    read."""
    x_bytes = e.storage_bytes - med(lambda p: p.storage_bytes)
    io = (x_bytes >= IO_BYTES or e.io_stall_s - med(lambda p: p.io_stall_s) >= 0.1 * extra
          or e.blkio_delay_s - med(lambda p: p.blkio_delay_s) >= 0.1 * extra)
    near = e.memory_use is not None and e.memory_use >= NEAR_LIMIT and x_bytes >= IO_BYTES
    memory = (e.memory_stall_s - med(lambda p: p.memory_stall_s) >= 0.1 * extra
              or e.major_faults - med(lambda p: p.major_faults) >= MAJOR_FAULTS or near)
    return io, memory


def _gpu_clocks(e: Evidence, peers: list[Evidence], extra: float) -> tuple[str, float, str]:
    """GPU clocks low: the share of the extra time a clock under LOW_CLOCK of the peers'
    median accounts for."""
    peer_clock = _median([p.sm_clock_mhz for p in peers if p.sm_clock_mhz is not None])
    slow = 0.0
    if e.sm_clock_mhz is not None and peer_clock and e.sm_clock_mhz < LOW_CLOCK * peer_clock:
        slow = extra * (1 - e.sm_clock_mhz / peer_clock)
    return (GPU_CLOCKS, slow, f"its GPU ran at {e.sm_clock_mhz or 0:,.0f} MHz against "
                              f"{peer_clock:,.0f} on its peers")


def _share(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


ONE_PATH = 0.6  # of the functions' extra own time, the share the function called more must hold


def _code_path(e: Evidence, peers: list[Evidence], med: Callable[[Callable[[Evidence], float]],
                                                                  float]) -> tuple[str, bool]:
    """Which functions took the extra time against the median peer, from their own time, and
    whether that points at another path: the function that took the most extra time was
    called more often than on the median peer, and holds ONE_PATH of the extra (True where no
    spans tell)."""
    grew = []
    for name, own in e.functions.items():
        peer = _median([p.functions.get(name, 0.0) for p in peers])
        calls = e.calls.get(name, 0)
        peer_calls = _median([float(p.calls.get(name, 0)) for p in peers])
        if own - peer > 0:
            grew.append((own - peer, name, calls, peer_calls))
    grew.sort(reverse=True)
    cpu = e.cpu_user_s + e.cpu_system_s
    text = (f"its job threads computed {fmt_seconds(cpu)} against "
            f"{fmt_seconds(med(lambda p: p.cpu_user_s + p.cpu_system_s))} on the median peer")
    if not grew:
        return text, True
    text += "; the extra time in " + ", ".join(
        f"{name} (+{fmt_seconds(more)}, {calls:,} call(s) against {peer_calls:,.0f})"
        for more, name, calls, peer_calls in grew[:FUNCTIONS_SHOWN])
    more, _, calls, peer_calls = grew[0]
    one = calls != peer_calls and more >= ONE_PATH * sum(g[0] for g in grew)
    return (text if one else text + ": the same calls as its peers' (a path is not shown by "
            "its spans: a slower machine, or a slower branch inside them)"), one


def stragglers(t: Timeline, live: bool = False) -> list[Straggler]:
    """Every straggling worker of the timeline with its cause, slowest first. live: a job
    still running counts up to its worker's latest record (a driver's timeline, mid-run),
    so a job stuck now is judged and explained now; else only ended jobs count."""
    latest: dict[str, int] = {}
    if live:
        for smp in t.samples:
            latest[smp.worker] = max(latest.get(smp.worker, smp.t_ns), smp.t_ns)
    by_worker: dict[str, list[Job]] = {}
    for job in t.jobs:
        if job.status in DIED:
            continue  # a death, told as one (deaths.py): its time is not a job's to compare
        j = job
        if j.end_ns is None and j.worker in latest and latest[j.worker] > j.start_ns:
            j = dataclasses.replace(j, end_ns=latest[j.worker])
        if j.end_ns is not None:
            by_worker.setdefault(j.worker, []).append(j)
    walls = {w: sum((j.end_ns or j.start_ns) - j.start_ns for j in jobs) / 1e9
             for w, jobs in by_worker.items()}
    limit = straggler_limit(list(walls.values()))
    if limit is None:
        return []
    slow = [w for w, s in walls.items() if s > limit]
    if not slow:
        return []
    index = _Index(t.samples)
    spans: dict[str, list[Span]] = {}
    for s in t.spans:
        spans.setdefault(s.worker, []).append(s)
    found = {w: evidence(t, jobs, index, spans.get(w, [])) for w, jobs in by_worker.items()}
    out = []
    for w in slow:
        peers = [e for other, e in found.items() if other != w and e is not None]
        mine = found[w]
        median = _median([walls[other] for other in walls if other != w])
        if mine is None or len(peers) < 2:
            out.append(Straggler(w, walls[w], median, None, "", ()))
            continue
        cause, because, candidates = judge(mine, peers)
        out.append(Straggler(w, walls[w], median, cause, because, candidates))
    out.sort(key=lambda s: -s.wall_s)
    return out


def cause_lines(found: list[Straggler], name: Callable[[str], str] = str) -> list[str]:
    """Each straggler's verdict as a sentence, for the reports; `name` shows a worker id."""
    return [f"{name(s.worker)}: {s.text}" for s in found]
