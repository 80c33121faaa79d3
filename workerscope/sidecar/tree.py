"""The worker's process tree: who is in it, and what each member, each watched thread and the
whole tree used.

Reads at the floor: each member's /proc files are opened once and re-read with
os.pread(fd, n, 0), which makes the kernel regenerate them, so a steady tick opens and closes
nothing. A held fd belongs to the process it was opened for: once that process is gone the read
fails (ESRCH), even if its pid is reused, and a reused pid is a new member with fresh fds.

Reads are tiered by how fast their values move and what they cost:
- every tick: stat (CPU times, RSS, threads) and io, and the children files (discovery);
  except a single-threaded member asleep then and not run since (its schedstat unchanged),
  whose values carry over until it runs or the next tier below: one small pread, not two;
- at most once a second (`slow_every_ns`), at job edges (`read(full=True)`) and when a member
  is first seen: status (VmHWM, context switches), the fd count and the thread list. VmHWM is a
  high-water mark, so reading it less often loses no peak;
- rarely (`uss_every_ns`): smaps_rollup (USS/PSS), ~12-150 us a process.
Watched threads (those that run a job or a span) have their own stat read every tick (but the
only thread of a member skipped as above), so a span's CPU can be its thread's and not the
whole process's (see export/attribution.py).

Children are found in /proc/PID/task/TID/children of the members we already know; where the
kernel lacks that file (no CONFIG_PROC_CHILDREN) a scan of /proc/*/stat finds them instead.
A regular tick walks them only when the tree may have changed: a process was created in the
pid namespace (its last pid, one pread), a member exited or turned zombie, a thread list
changed, or a second passed. A member that leaves the tree (its parent exited: a daemon's
double fork) is followed or dropped by its process group, session and cgroup: leavers.py.
No psutil: it makes several reads per value and scans all of /proc for children.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from typing import Any, Final

from .. import procfs
from ..procfs import Io, parse_stat, parse_tick, reset_peak
from . import leavers

_SELF = os.getpid()
_HAVE_CHILDREN_FILE = os.path.exists(f"/proc/{_SELF}/task/{_SELF}/children")
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_CHUNK = 4096  # every file read here fits, except children lists (read on) and big statuses

# Counters that only grow; a member that leaves keeps its share in the tree total.
COUNTERS = ("read_bytes", "write_bytes", "read_chars", "write_chars",
            "ctx_switches_voluntary", "ctx_switches_involuntary",
            "major_faults", "run_delay_s", "blkio_delay_s")
IO_COUNTERS = ("read_chars", "write_chars", "read_bytes", "write_bytes")
CTX_COUNTERS = ("ctx_switches_voluntary", "ctx_switches_involuntary")
# The slow tier's evidence of what a process waited for (see docs/METRICS.md): major faults
# (pages read back from storage), run delay (runnable, waiting for a CPU: schedstat), block IO
# delay (delay accounting, where the kernel keeps it). Counters, carried as CTX_COUNTERS are.
WAIT_COUNTERS = ("major_faults", "run_delay_s", "blkio_delay_s")
# Like CPU times, the kernel adds a reaped child's IO to its parent's /proc/PID/io (but not its
# context switches), so these are carried only when no member of the tree reaps the process.
FOLDED_INTO_REAPER = frozenset(IO_COUNTERS)
_STATUS_FIELDS = {k: v for k, v in procfs.STATUS_FIELDS.items()
                  if k not in (b"VmRSS", b"Threads")}  # both come from stat each tick
_HWM_FIELD = {b"VmHWM": "peak_rss_bytes"}
# Pages a member may touch (minor faults) before its VmHWM is read off the slow tier: 8 MiB of
# 4 KiB pages. A busy allocator pays one status read a tick; a quiet one nothing.
PEAK_FAULTS = 2048
# Threads of the target read without being named by a job or a span, while the target has
# at most this many: until spans name their threads, this is how their CPU is known.
ALL_THREADS_MAX = 64
_GONE = (ProcessLookupError, FileNotFoundError)

log = logging.getLogger("workerscope.sidecar")


# What one member adds to the tree's values at one tick: a plain tuple of these, in this order,
# each summed over the members under its name by tree_sums (a NamedTuple made per member per
# tick cost more than the sums). A member skipped as quiet gives its last one again (see
# ProcessTree.read), so a value added here reaches both paths. CPU times are a member's own
# and its reaped children's, which the kernel adds to a parent's; peak_rss_bytes its VmHWM, at
# least its RSS; None: not read (unreadable, or not on this kernel).
READING_FIELDS = ("cpu_user_s", "cpu_system_s", "rss_bytes", "num_threads", "peak_rss_bytes",
                  "read_chars", "write_chars", "read_bytes", "write_bytes")
Reading = tuple[float, float, int, int, int, int | None, int | None, int | None, int | None]
# What a member adds on the tiers (Member.tier), summed only on a tick of its tier: another
# tick carries them over from an older reading, so the tree has no total of them then. Apart
# from READING_FIELDS, so a regular tick makes and sums none of them.
TIER_FIELDS = ("ctx_switches_voluntary", "ctx_switches_involuntary", "num_fds",  # slow tier
               *WAIT_COUNTERS,
               "uss_bytes", "pss_bytes")  # USS tier
Tier = tuple[int | None, int | None, int | None, int | None, float | None, float | None,
             float | None, float | None]
_SLOW_FIELDS, _USS_FIELDS = TIER_FIELDS[:6], TIER_FIELDS[6:]
_SLOW_PART, _USS_PART = slice(0, 6), slice(6, None)
_CPU_USER: Final = 0
_CPU_SYSTEM: Final = 1
_RSS: Final = 2
_PEAK: Final = 4
_NO_READING: Reading = (0.0, 0.0, 0, 0, 0, None, None, None, None)
_NO_TIER: Tier = (None, None, None, None, None, None, None, None)
_NO_CTX: tuple[int | None, int | None] = (None, None)
Waits = tuple[int | None, float | None, float | None]  # WAIT_COUNTERS' values
_NO_WAITS: Waits = (None, None, None)


def _delayacct_on() -> bool:
    """Whether the kernel keeps block IO delays per task (kernel.task_delayacct; a kernel
    without the switch keeps them wherever delay accounting is built in)."""
    try:
        with open("/proc/sys/kernel/task_delayacct", "rb") as f:
            return f.read().strip() != b"0"
    except OSError:
        return True


DELAYACCT = _delayacct_on()
_NO_USS: tuple[float | None, float | None] = (None, None)


def _cpus_of(pid: int) -> int:
    """The CPUs a process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(pid))
    except OSError:
        return os.cpu_count() or 1


def tree_sums(readings: list[Reading] | list[Tier],
              names: tuple[str, ...] = READING_FIELDS) -> dict[str, float]:
    """Each value of the readings summed under its name; absent where a member lacks it
    (None). Nothing for no readings.

    By column, in C (zip, map, sum): less than a Python add per value per member would cost
    in the tick's hot loop."""
    if not readings:
        return {}
    if len(readings) == 1:  # a worker without children: its values as they are, ~5x cheaper
        values = readings[0]
        if None not in values:  # (no cast(): a call costs what the rest of this line does)
            return dict(zip(names, values, strict=True))  # type: ignore[arg-type]
        return {k: v for k, v in zip(names, values, strict=True) if v is not None}
    cols = list(zip(*readings, strict=True))
    try:
        return dict(zip(names, map(sum, cols), strict=True))
    except TypeError:  # a member without a value (None): no total of that one
        out = {}
        for name, col in zip(names, cols, strict=True):
            try:
                out[name] = sum(col)
            except TypeError:
                continue
        return out


def tier_sums(tiers: list[Tier], slow: bool, uss: bool) -> dict[str, float]:
    """tree_sums of the members' tier values, those of the tiers read now only."""
    if slow and uss:
        return tree_sums(tiers, TIER_FIELDS)
    if not slow and not uss:
        return {}
    # Only the columns of the tier read now are summed: no sums made to be dropped.
    names, part = (_SLOW_FIELDS, _SLOW_PART) if slow else (_USS_FIELDS, _USS_PART)
    return tree_sums([tier[part] for tier in tiers], names)  # type: ignore[arg-type]


def _add_io(values: dict[str, float], io: procfs.Io) -> procfs.Io:
    """The io counters that were read into values (a reading without some of them)."""
    values.update({k: v for k, v in zip(IO_COUNTERS, io, strict=True) if v is not None})
    return io


def _open(path: str) -> int:
    """A /proc file held for re-reading; OSError (ENOENT, ESRCH, EACCES, EMFILE) as is."""
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def _close(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            log.debug("fd %d was closed already", fd)


def _pread_all(fd: int) -> bytes:
    """The whole of a held /proc file, however long (a children list can be)."""
    data = os.pread(fd, _CHUNK, 0)
    if len(data) < _CHUNK:
        return data
    parts = [data]
    while len(data) == _CHUNK:
        data = os.pread(fd, _CHUNK, sum(map(len, parts)))
        parts.append(data)
    return b"".join(parts)


def _read_path(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _raise_fd_limit() -> bool:
    """Let this process hold more files (soft limit up to the hard one): a tree of a few
    hundred processes holds ~3 files each. False when it cannot go higher."""
    import resource  # here: only a tree that big needs it

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft * 4, 65536)
    if want <= soft:
        return False
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError):
        return False
    return True


class Member:
    """One process of the tree: its held files and its last readings."""

    # A plain class, not a dataclass: making these three classes took ~4 ms of the sidecar's
    # start-up, which `workerscope run` pays once per command (issue 11).
    __slots__ = ("asleep", "children", "comm", "ctx", "faults", "faults_at_hwm", "followed",
                 "fresh", "hwm", "io", "io_fd",
                 "mapped", "name", "nfds", "nthreads", "own_cpu", "ppid", "quiet", "ran",
                 "reading", "sched_fd", "smaps_fd", "start", "stat_fd", "status_fd", "t",
                 "threads_seen", "tick", "tier", "uss", "waits", "zombie")

    def __init__(self, ppid: int, name: str, start: int, stat_fd: int = -1) -> None:
        self.ppid = ppid
        self.name = name
        self.comm = name.encode()  # as /proc/PID/stat has it: a new one means an exec
        self.start = start  # start time in ticks since boot: the same pid later is another process
        self.stat_fd = stat_fd  # held fds; -1 where not held (the fd budget ran out): open each time
        self.io_fd = -1  # -2: unreadable (another user's process); don't ask again
        self.status_fd = -1
        self.smaps_fd = -1
        # schedstat, held for single-threaded members: while its run time does not move, the
        # process has not run, and its stat and io are not read again (see read()). -2: never.
        self.sched_fd = -1
        self.ran = b""  # schedstat when stat and io were last read (b"": read them next tick)
        self.tick: dict[str, float] | None = None  # the every-tick values of that reading
        self.mapped = False  # its memory was still mapped then (vsize > 0)
        self.asleep = False  # not running then (state not R): a run since moves schedstat
        self.quiet = False  # the last read() skipped it: it had not run
        self.children: dict[int, int] = {}  # tid -> fd of its children file
        self.threads_seen = 0  # num_threads when the thread list was last read
        self.nthreads = 0  # num_threads at the last reading
        self.fresh = True  # first reading to come: status too, whatever the tier
        self.zombie = False
        self.followed = False  # left the tree (its parent exited) and is still the job's
        # Last readings, kept so a member that vanishes still counts in the tree totals.
        self.reading = _NO_READING
        self.own_cpu = 0.0  # own CPU at t, the last rate's start
        self.t: int | None = None
        self.io: procfs.IoTick | procfs.Io | None = None  # the last read
        # The last slow tier's voluntary and involuntary context switches and fd count, the
        # last USS tier's (uss, pss): None where unread.
        self.ctx: tuple[int | None, int | None] = _NO_CTX
        self.nfds: int | None = None
        self.uss: tuple[float | None, float | None] = _NO_USS
        self.waits = _NO_WAITS  # the last slow tier's WAIT_COUNTERS
        self.tier = _NO_TIER  # all of them, as the tree sums them
        self.hwm = 0  # last VmHWM read, bytes
        self.faults = 0  # minor faults (pages touched) at the last reading
        self.faults_at_hwm = 0  # and when VmHWM was last read

    def fds(self) -> list[int]:
        return [self.stat_fd, self.io_fd, self.status_fd, self.smaps_fd, self.sched_fd,
                *self.children.values()]


class Thread:
    __slots__ = ("fd", "own_cpu", "sched_fd", "t", "tick")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.sched_fd = -1  # its schedstat, held from its first slow tier; -2: unreadable
        self.own_cpu: float | None = None
        self.t: int | None = None
        self.tick: dict[str, float] | None = None  # its last CPU times (a quiet process's stay)


class ProcessTree:
    """Members of the tree rooted at `root`, leaving out `exclude` (the sidecar itself).

    Holds open files: close() (or dropping the object) closes them."""

    def __init__(self, root: int, exclude: frozenset[int] = frozenset(),
                 uss_every_ns: int = 10_000_000_000, slow_every_ns: int = 1_000_000_000,
                 min_rate_ns: int = 50_000_000, interval_ns: int = 1_000_000_000,
                 all_threads_of: int | None = None, hold: bool = True) -> None:
        self.root = root
        self.exclude = exclude
        # smaps_rollup costs 12-150 us a process (it walks every mapping): read it this seldom.
        self.uss_every_ns = uss_every_ns
        # status, the fd count and the thread lists: at most this often, and at job edges.
        self.slow_every_ns = slow_every_ns
        # CPU times move in clock ticks (10 ms): a rate over a shorter gap (the extra samples
        # at a job's start and end) would read 0 % or a spike. Such a sample has no
        # cpu_percent, and the next one measures over the whole longer gap.
        self.min_rate_ns = min_rate_ns
        # The sampling interval: read_threads calls further apart than two of them are not
        # consecutive ticks (the sidecar did not sample between two jobs).
        self.interval_ns = interval_ns
        # The process whose threads are all watched while it has at most ALL_THREADS_MAX
        # (None: only threads named through watch_thread).
        self.all_threads_of = all_threads_of
        self.hold = hold  # False once the fd budget is spent and cannot grow: open each time
        # Between slow tiers, skip the stat and io of a single-threaded member that has not
        # run since they were last read (its schedstat is the same): see read().
        self.skip_quiet = True
        # The slow tier's evidence of waiting (WAIT_COUNTERS, and watched threads' run delay):
        # off only to measure what it costs (benchmarks/bench_sampler.py).
        self.read_waits = True
        self.members: dict[int, Member] = {}
        # CPU and counters of members that left the tree without being reaped into a member's
        # children-times (reparented away, or the root itself gone): kept so totals never fall.
        self.carried_user = 0.0
        self.carried_system = 0.0
        self.carried: dict[str, float] = {}
        self.last_cpu_total = 0.0  # the tree's CPU total as last given: it never falls
        self.cpu_shown = 0.0  # the CPU the tree's rates have shown so far
        self.last_t: int | None = None
        self.cpus = _cpus_of(root)  # a rate of more than these is CPU held, landing late
        self.peak_rss = 0
        self.last_counters: dict[str, float] = {}
        self.unreadable: set[int] = set()
        self.threads: dict[tuple[int, int], Thread] = {}
        self.wanted: set[tuple[int, int]] = set()  # watched, fd not open yet
        self._left: list[int] = []  # retired since the last discover()
        # Processes that left the tree, said once each (the sidecar puts them in the notes).
        self.notes: list[str] = []
        # Members whose name changed (an exec) since they were named, as (pid, ppid, name):
        # the sidecar names them again in its next sample.
        self.renamed: list[tuple[int, int, str]] = []
        self._job: leavers.Belonging | None = None  # the root's process group, session, cgroup
        self._reapers: leavers.Reapers | None = None
        self._adopt_t: int | None = None  # the last look at the reapers' children
        # Cheap discovery (discover(cheap=True)): walk only when the tree may have changed.
        self._dirty = True  # a member turned zombie or changed its thread list since the walk
        self._walk_t: int | None = None
        self._last_pid = b""
        self._last_pid_fd = -1
        self._pid_now = b""  # the last pid _changed read, for the walk it then starts
        self._all_seen = 0  # all_threads_of's thread count when its threads were last listed
        self._threads_t: int | None = None  # the last read_threads
        self._slow_t: int | None = None
        self._uss_t: int | None = None
        # This read()'s tiers, and the members it found gone (retired once it is done).
        self._slow_now = self._uss_now = self._tiers_now = False
        self._vanished: list[int] = []

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        """Close every held file."""
        for m in self.members.values():
            for fd in m.fds():
                _close(fd)
        self.members = {}
        for th in self.threads.values():
            _close(th.fd)
            _close(th.sched_fd)
        self.threads = {}
        if self._reapers is not None:
            self._reapers.close()
        _close(self._last_pid_fd)
        self._last_pid_fd = -1

    # -- held files ----------------------------------------------------------------------------
    def _hold(self, path: str) -> int:
        """An fd held on path, or -1 where the fd budget is spent (then read by path each
        time). OSError for a path that cannot be opened (gone, forbidden)."""
        if not self.hold:
            return -1
        try:
            return _open(path)
        except OSError as err:
            if err.errno not in (errno.EMFILE, errno.ENFILE):
                raise
        if _raise_fd_limit():
            try:
                return _open(path)
            except OSError as err:
                if err.errno not in (errno.EMFILE, errno.ENFILE):
                    raise
        self.hold = False
        return -1

    def _new_member(self, pid: int, ppid: int) -> Member | None:
        """Open a newly seen process's files; None when it is already gone."""
        base = f"/proc/{pid}"
        try:
            fd = self._hold(f"{base}/stat")
        except OSError:
            return None
        try:
            data = os.pread(fd, _CHUNK, 0) if fd >= 0 else _read_path(f"{base}/stat")
            end = data.rindex(b")")
        except (OSError, ValueError):
            _close(fd)
            return None
        rest = data[end + 2:].split()
        m = Member(ppid or int(rest[1]), "", int(rest[19]), stat_fd=fd)
        m.comm = data[data.index(b"(") + 1:end]
        m.name = m.comm.decode(errors="replace")
        try:
            m.io_fd = self._hold(f"{base}/io")
        except PermissionError:
            m.io_fd = -2
        except OSError:
            m.io_fd = -1
        if _HAVE_CHILDREN_FILE:
            self._list_threads(pid, m)
        return m

    def _list_threads(self, pid: int, m: Member) -> bool:
        """Hold the children file of each of pid's threads (threads come and go). False if
        the process is gone."""
        if (m.nthreads == 1 and m.threads_seen == 1 and not m.zombie
                and len(m.children) == 1 and pid in m.children):
            # Its one thread, listed last time, is its leader and alive (the stat just read
            # says so): the list is the same (~2.5 us a member each slow tick, no listdir).
            return True
        try:
            tids = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
        except OSError:
            return False
        for tid in list(m.children):
            if tid not in tids:
                _close(m.children.pop(tid))
        for tid in tids - m.children.keys():
            try:
                m.children[tid] = self._hold(f"/proc/{pid}/task/{tid}/children")
            except OSError:
                continue  # that thread ended while we looked
        m.threads_seen = len(tids)
        return True

    # -- membership ----------------------------------------------------------------------------
    def discover(self, cheap: bool = False,
                 full: bool = False) -> tuple[list[tuple[int, int, str]], list[int]]:
        """Refresh membership. Returns (new members as (pid, ppid, name), pids gone: found
        gone here, or by a read() since the last discover()).

        cheap: skip the walk when nothing can have changed since the last one: no process
        created on the host (the pid namespace's last pid is the same), no member gone, none
        turned zombie, no thread list changed, and the last walk less than `slow_every_ns`
        ago (the sidecar's regular ticks). Processes that left the tree before a sample saw
        them are looked for when the tree changed, once per `slow_every_ns`, and with full
        (a job's edges)."""
        now = time.monotonic_ns()
        if cheap and not self._changed(now):
            gone, self._left = self._left, []
            return [], gone
        self._walk_t = now
        self._dirty = False
        # Before the walk: what it misses moves it. The one _changed read just now, if it did
        # (one pread fewer a cheap tick that walks).
        self._last_pid, self._pid_now = self._pid_now or self._read_last_pid(), b""
        new: list[tuple[int, int, str]] = []
        members = self.members
        seen: set[int] = set()
        left = False
        if _HAVE_CHILDREN_FILE:
            # A process listed in a live member's children file exists: no read needed to
            # know it. The root, then members reached no longer from it, are looked at.
            root = members.get(self.root)
            if root is None or self._alive(self.root, root):
                self._walk(self.root, 0, seen, new)
            unseen = {}
            for pid, m in members.items():
                if pid not in seen and pid != self.root:
                    ids = self._ids(pid, m)
                    if ids is not None:
                        unseen[pid] = ids
            if unseen:
                left = True
                for pid in self._still_ours(unseen):
                    self._walk(pid, members[pid].ppid, seen, new)
            if self._adoption_due(now, bool(new or left or self._left) or full):
                for pid, ppid in self._adopt(self._reapers_children(), seen):
                    self._walk(pid, ppid, seen, new)
                    self._followed(pid)
        else:  # kernels without CONFIG_PROC_CHILDREN
            left = self._scan_discover(seen, new, now, full)
        self._retire_all([pid for pid in members if pid not in seen])
        gone, self._left = self._left, []
        return new, gone

    def take_notes(self) -> list[str]:
        """What the tree has to say since the last call (processes that left it), once each."""
        notes, self.notes = self.notes, []
        return notes

    def _changed(self, now: int) -> bool:
        """Whether the tree may have changed since the last walk (see discover's cheap)."""
        if (self._dirty or self._left or self._walk_t is None
                or now - self._walk_t >= self.slow_every_ns):
            return True
        last = self._read_last_pid()
        if last and last == self._last_pid:
            return False
        self._pid_now = last  # the walk that follows takes it
        return True

    def _read_last_pid(self) -> bytes:
        """The last pid given out in this pid namespace (b"" if unreadable): it moves with
        every process (and thread) created, and only then."""
        try:
            if self._last_pid_fd == -1:
                self._last_pid_fd = _open("/proc/sys/kernel/ns_last_pid")
            return os.pread(self._last_pid_fd, 32, 0)
        except OSError:
            self._last_pid_fd = -2  # not readable here: every tick walks
            return b""

    def _ids(self, pid: int, m: Member) -> tuple[int, int, int, int] | None:
        """(ppid, pgid, sid, start) of a member now; None when it is gone."""
        try:
            data = (os.pread(m.stat_fd, _CHUNK, 0) if m.stat_fd >= 0
                    else _read_path(f"/proc/{pid}/stat"))
        except OSError:
            return None
        return leavers.stat_ids(data) if data else None

    def _belonging(self) -> leavers.Belonging | None:
        """The root's process group, session and cgroup, read once."""
        if self._job is None:
            root = self.members.get(self.root)
            try:
                data = (_read_path(f"/proc/{self.root}/stat") if root is None or root.stat_fd < 0
                        else os.pread(root.stat_fd, _CHUNK, 0))
                self._job = leavers.Belonging(self.root, data)
            except (OSError, ValueError):
                return None  # the root is gone: nothing to compare with
        return self._job

    def _still_ours(self, unseen: dict[int, tuple[int, int, int, int]]) -> list[int]:
        """Of the live members no longer reached from the root (pid -> its ids now), those
        still the job's. A member whose parent is outside the tree left it: followed if its
        process group, session or cgroup is the job's (leavers.py), else dropped; said once
        each in the notes. A member whose parent is another such member goes with it."""
        ours: dict[int, bool] = {}
        job = self._belonging()

        def decide(pid: int, depth: int = 0) -> bool:
            if pid in ours:
                return ours[pid]
            ppid, pgid, sid, _ = unseen[pid]
            m = self.members[pid]
            if ppid in unseen and ppid != pid and depth < 1000:
                ours[pid] = decide(ppid, depth + 1)
            elif ppid in self.members or m.followed:
                ours[pid] = True  # forked after its parent's children were read; or known
            else:
                why = None if job is None else job.why(pid, pgid, sid)
                m.ppid = ppid  # its new parent reaps it: its CPU is carried if it leaves
                m.followed = why is not None
                ours[pid] = m.followed
                self.notes.append(leavers.left_note(pid, m.name, ppid, why))
                log.info("%s", self.notes[-1])
                if m.followed and ppid != 1 and self._reapers is not None:
                    self._reapers.learn(ppid)  # a subreaper: its new children are looked at too
            return ours[pid]

        return [pid for pid in unseen if decide(pid)]

    def _adoption_due(self, now: int, now_anyway: bool) -> bool:
        """Whether to look for processes that left before a sample saw them: now_anyway (the
        tree changed, or a job's edge), else at most once per `slow_every_ns`."""
        if now_anyway or self._adopt_t is None or now - self._adopt_t >= self.slow_every_ns:
            self._adopt_t = now
            return True
        return False

    def _reapers_children(self) -> set[int]:
        if self._reapers is None:
            self._reapers = leavers.Reapers()
        return self._reapers.children()

    def _adopt(self, kids: set[int], seen: set[int],
               stats: dict[int, bytes] | None = None) -> list[tuple[int, int]]:
        """(pid, reaper) of the reapers' new children that left the tree before a sample saw
        them and are the job's: started after the root, in a process group or session the job
        leads, or in its own cgroup. Each said once in the notes."""
        assert self._reapers is not None
        fresh = self._reapers.fresh(kids) - seen - self.exclude - self.members.keys()
        job = self._belonging() if fresh else None
        out = []
        for pid in sorted(fresh):
            if job is None:
                break
            try:
                data = stats[pid] if stats is not None else _read_path(f"/proc/{pid}/stat")
                ppid, pgid, sid, start = leavers.stat_ids(data)
            except (OSError, KeyError, ValueError):
                continue  # gone meanwhile
            why = job.why_unseen(pid, pgid, sid, self.members) if start >= job.start else None
            if why is None:
                continue  # not ours: another job's, or older than the tree
            name = data[data.index(b"(") + 1:data.rindex(b")")].decode(errors="replace")
            self.notes.append(leavers.left_note(pid, name, ppid, why, seen=False))
            log.info("%s", self.notes[-1])
            out.append((pid, ppid))
        return out

    def _walk(self, top: int, top_ppid: int, seen: set[int],
              new: list[tuple[int, int, str]]) -> None:
        """Add top and its descendants to seen (and new members to new), through the
        children files: the hot path of discovery, kept flat."""
        members, exclude, pread = self.members, self.exclude, os.pread
        stack = [(top, top_ppid)]
        while stack:
            pid, ppid = stack.pop()
            if pid in seen or pid in exclude:
                continue
            m: Member | None = members.get(pid)
            if m is None:
                m = self._new_member(pid, ppid)
                if m is None:
                    continue  # exited between the listing and now
                members[pid] = m
                new.append((pid, m.ppid, m.name))
            seen.add(pid)
            for tid, fd in m.children.items():
                try:
                    data = (pread(fd, _CHUNK, 0) if fd >= 0
                            else _read_path(f"/proc/{pid}/task/{tid}/children"))
                    if len(data) >= _CHUNK:
                        data = _pread_all(fd)
                except OSError:
                    continue  # that thread ended: the thread list is refreshed on the slow tier
                if data:
                    stack.extend([(int(kid), pid) for kid in data.split()])

    @staticmethod
    def _alive(pid: int, m: Member) -> bool:
        """Whether the process of this member still exists (a zombie does)."""
        # Its schedstat where held: the kernel writes a third of a microsecond of it against
        # a microsecond of stat, and both fail alike (ESRCH) once the process is reaped.
        fd = m.sched_fd if m.sched_fd >= 0 else m.stat_fd
        try:
            return bool(os.pread(fd, _CHUNK, 0) if fd >= 0 else _read_path(f"/proc/{pid}/stat"))
        except OSError:
            return False

    def _scan_discover(self, seen: set[int], new: list[tuple[int, int, str]], now: int,
                       full: bool) -> bool:
        """discover() without the children files: the parent pid in every /proc/PID/stat.
        True if members left the tree."""
        members = self.members
        stats: dict[int, bytes] = {}
        children: dict[int, list[int]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                data = _read_path(f"/proc/{name}/stat")
            except OSError:
                continue
            stats[int(name)] = data
            ppid = int(data[data.rindex(b")") + 2:].split(maxsplit=2)[1])
            children.setdefault(ppid, []).append(int(name))

        def reach(top: int, top_ppid: int) -> None:
            stack = [(top, top_ppid)]
            while stack:
                pid, ppid = stack.pop()
                if pid in seen or pid in self.exclude or pid not in stats:
                    continue
                seen.add(pid)
                if pid not in members:
                    born = self._new_member(pid, ppid)
                    if born is None:
                        seen.discard(pid)
                        continue
                    members[pid] = born
                    new.append((pid, born.ppid, born.name))
                stack.extend((kid, pid) for kid in children.get(pid, ()))

        reach(self.root, 0)
        unseen = {pid: leavers.stat_ids(stats[pid]) for pid in members
                  if pid not in seen and pid != self.root and pid in stats}
        for pid in self._still_ours(unseen) if unseen else ():
            reach(pid, members[pid].ppid)
        if self._adoption_due(now, bool(new or unseen or self._left) or full):
            if self._reapers is None:
                self._reapers = leavers.Reapers()
            reapers = {1, *self._reapers.fds}
            kids = {pid for pid, data in stats.items() if leavers.stat_ids(data)[0] in reapers}
            for pid, ppid in self._adopt(kids, seen, stats):
                reach(pid, ppid)
                self._followed(pid)
        return bool(unseen)

    def _followed(self, pid: int) -> None:
        """pid, found outside the tree, is followed from now on (and said only once)."""
        m = self.members.get(pid)
        if m is not None:
            m.followed = True

    def _retire_all(self, pids: list[int]) -> None:
        """Retire members found gone together. One whose parent was a member until now was
        reaped by it, even where the parent is gone too: a process and the child it reaped
        often exit between two samples (xargs, a pool, a shell), and the parent's reaper
        then holds both in its children's CPU."""
        before = set(self.members)
        for pid in pids:
            self._retire(pid, before)

    def _retire(self, pid: int, before: set[int] | None = None) -> None:
        m = self.members.pop(pid)
        self._left.append(pid)
        for fd in m.fds():
            _close(fd)
        reaped_inside = m.ppid in self.members or (before is not None and m.ppid in before)
        carried = self.carried
        if m.io is not None and not reaped_inside:
            for key, value in zip(IO_COUNTERS, m.io, strict=True):
                if value is not None:
                    carried[key] = carried.get(key, 0) + value
        counted: list[tuple[str, float | None]] = [*zip(CTX_COUNTERS, m.ctx, strict=True),
                                                    *zip(WAIT_COUNTERS, m.waits, strict=True)]
        for key, count in counted:
            if count is not None:
                carried[key] = carried.get(key, 0) + count
        if not reaped_inside:
            # Nobody in the tree will reap it, so its CPU would vanish from the sum.
            self.carried_user += m.reading[_CPU_USER]
            self.carried_system += m.reading[_CPU_SYSTEM]
        for thread in [k for k in self.threads if k[0] == pid]:
            th = self.threads.pop(thread)
            _close(th.fd)
            _close(th.sched_fd)

    def reset_peaks(self) -> None:
        """Start a new job: each member's VmHWM and the tree's peak restart from now."""
        for pid, m in self.members.items():
            reset_peak(pid)
            m.hwm = 0
        self.peak_rss = 0

    # -- readings --------------------------------------------------------------------------------
    def read(self, now_ns: int, full: bool = False) -> tuple[dict[str, float], list[list[Any]]]:
        """One reading of every member and of the tree. Values that can't be read are absent;
        status, fd and USS values only in the samples that read them (the tiers above).
        full: read every tier now (a job's edges)."""
        # The tiers due (inline: a call is ~3% of a tick of one process).
        slow = self._slow_now = (full or self._slow_t is None
                                 or now_ns - self._slow_t >= self.slow_every_ns)
        if slow:
            self._slow_t = now_ns
        uss = self._uss_now = self._uss_t is None or now_ns - self._uss_t >= self.uss_every_ns
        if uss:
            self._uss_t = now_ns
        self._tiers_now = slow or uss
        # A member read in full at every tier change; between them, a quiet one is not.
        quiet_ok = self.skip_quiet and not self._tiers_now
        readings: list[Reading] = []
        procs: list[list[Any]] = []
        add, append, whole, quiet = readings.append, procs.append, self._read_whole, self._read_quiet
        vanished, pread = self._vanished, os.pread
        # The hot loop of the sidecar: one pread of stat and one of io per member, the fields
        # wanted and nothing else, or one of schedstat (see benchmarks/bench_sampler.py).
        for pid, m in self.members.items():
            ran = b""
            values = None
            if m.nthreads == 1 and m.sched_fd >= 0:
                try:
                    ran = pread(m.sched_fd, 128, 0)
                except _GONE:
                    vanished.append(pid)
                    continue
                except OSError:
                    ran = b""
                if quiet_ok:
                    values = quiet(m, now_ns, ran)
            if values is None:
                values = whole(pid, m, now_ns, ran)
            if values is not None:
                add(m.reading)
                append([pid, values])
        if vanished:
            self._vanished = []
            self._retire_all(vanished)
        tiers = None
        if self._tiers_now and procs:  # every member read now was read whole, its tiers too
            members = self.members
            tiers = tier_sums([members[row[0]].tier for row in procs], slow, uss)
        return self._tree_values(readings, tiers, now_ns), procs

    def _read_quiet(self, m: Member, now_ns: int, ran: bytes) -> dict[str, float] | None:
        """The values of a single-threaded member that has not run since its last reading (its
        run time and timeslices in schedstat, `ran`, the same thread's, have not moved); None
        if it has. Its CPU times, io counters and threads are the same then: its last reading
        stands, for one small pread instead of stat and io. Its RSS can still move without it
        (reclaim; another process writing its memory; huge pages collapsed), which the next
        slow tier reads."""
        # Asleep when last read: a running task's run time moves only at the scheduler's
        # ticks, but one woken since was scheduled in, which counts a timeslice at once. Not a
        # zombie (a leader that exited before its other threads reads so), and a run time
        # that moves at all (b"0 0 0" where the kernel keeps none).
        last = m.tick
        m.quiet = (m.asleep and ran == m.ran and last is not None and not m.zombie
                   and not ran.startswith(b"0 "))
        if not m.quiet or last is None:
            return None
        values = last.copy()
        t = m.t
        if t is not None and now_ns - t >= self.min_rate_ns:
            own = values["cpu_user_s"] + values["cpu_system_s"]
            values["cpu_percent"] = (own - m.own_cpu) / ((now_ns - t) / 1e9) * 100.0
            m.own_cpu, m.t = own, now_ns
        reading = m.reading
        rss, hwm = reading[_RSS], m.hwm
        if m.mapped:  # as a whole read: a peak reset since (a job's start) restarts at the RSS
            if rss > hwm:
                hwm = m.hwm = rss
            values["peak_rss_bytes"] = hwm
        peak = hwm if hwm > rss else rss
        if peak != reading[_PEAK]:  # a reset lowered it
            m.reading = (*reading[:4], peak, *reading[5:])  # at _PEAK; literals keep its type
        return values

    def _read_whole(self, pid: int, m: Member, now_ns: int, ran: bytes) -> dict[str, float] | None:
        """stat and io of one member, and the tiers due; its reading into m.reading. None
        (and the member marked vanished or unreadable) when it cannot be read."""
        m.quiet = False
        fd = m.stat_fd
        try:
            stat = os.pread(fd, _CHUNK, 0) if fd >= 0 else self._stat_by_path(pid, m)
        except OSError as err:
            self._unread(pid, err)
            return None
        fd = m.io_fd
        try:
            io = os.pread(fd, _CHUNK, 0) if fd >= 0 else self._io_by_path(pid, m)
        except OSError as err:
            io = self._io_failed(pid, m, err)
        tick = parse_tick(stat, io)
        if tick is None:  # gone (an empty read), or its pid now another process's
            self._vanished.append(pid)
            return None
        (comm, state, user_t, system_t, cuser_t, csystem_t, nthreads, pages, mapped, counters,
         faults) = tick
        if comm != m.comm:
            self._renamed(pid, m, comm)
        m.asleep = state != b"R"
        if state == b"Z":
            self._exited(m)
        tick_s = _TICK
        user, system, rss = user_t / tick_s, system_t / tick_s, pages * _PAGE
        m.nthreads = nthreads
        values: dict[str, float]
        if isinstance(counters, Io):  # unreadable, or a kernel without some of them
            values = {"cpu_user_s": user, "cpu_system_s": system, "rss_bytes": rss,
                      "num_threads": nthreads}
            rc, wc, rb, wb = _add_io(values, counters)
        else:
            rc, wc, rb, wb = counters
            values = {"cpu_user_s": user, "cpu_system_s": system, "rss_bytes": rss,
                      "num_threads": nthreads, "read_chars": rc, "write_chars": wc,
                      "read_bytes": rb, "write_bytes": wb}
        if io:  # kept for when it leaves (not when it died between its stat and its io)
            m.io = counters
        if nthreads == 1:
            if m.sched_fd == -1:  # read from the next tick on: this one is done
                self._hold_schedstat(pid, m)
            m.tick = values.copy()
        m.ran = ran  # read before stat: a run between the two reads the next tick
        own = user + system
        t = m.t
        if t is None:
            m.own_cpu, m.t = own, now_ns
        elif now_ns - t >= self.min_rate_ns:
            values["cpu_percent"] = (own - m.own_cpu) / ((now_ns - t) / 1e9) * 100.0
            m.own_cpu, m.t = own, now_ns
        m.faults = faults
        if (self._tiers_now or m.fresh or nthreads != m.threads_seen
                or faults - m.faults_at_hwm >= PEAK_FAULTS):
            self._read_tiers(pid, m, values, stat, ran)
        hwm = m.hwm
        m.mapped = mapped
        if mapped:  # vsize: the memory is still mapped (not a zombie, not dying)
            # VmHWM is at least the RSS now: a peak between two status reads is kept.
            if rss > hwm:
                hwm = m.hwm = rss
            values["peak_rss_bytes"] = hwm
        # The peak, at least the RSS: hwm is, where mapped; an RSS unmapped is 0.
        m.reading = (user + cuser_t / tick_s, system + csystem_t / tick_s, rss, nthreads, hwm,
                     rc, wc, rb, wb)
        return values

    def _stat_by_path(self, pid: int, m: Member) -> bytes:
        """/proc/PID/stat read by path (its fd not held): b"" where the pid is another
        process's now, as for one gone."""
        data = _read_path(f"/proc/{pid}/stat")
        st = parse_stat(data)
        return data if st is not None and st.starttime == m.start else b""

    def _unread(self, pid: int, err: OSError) -> None:
        """A member whose stat could not be read: gone, or another user's."""
        if isinstance(err, _GONE):
            self._vanished.append(pid)
        elif isinstance(err, PermissionError):
            self.unreadable.add(pid)
        else:
            raise err

    @staticmethod
    def _io_by_path(pid: int, m: Member) -> bytes:
        """/proc/PID/io read by path (its fd not held); b"" for one known unreadable."""
        return b"" if m.io_fd < -1 else _read_path(f"/proc/{pid}/io")

    def _io_failed(self, pid: int, m: Member, err: OSError) -> bytes:
        """No io this time (b""); none ever again from another user's process."""
        if isinstance(err, PermissionError):
            self.unreadable.add(pid)
            m.io_fd = -2
        return b""

    def _exited(self, m: Member) -> None:
        """m is a zombie now: its children belong to a reaper, and the next walk sees it."""
        if not m.zombie:
            m.zombie = self._dirty = True

    def _read_tiers(self, pid: int, m: Member, values: dict[str, float], stat: bytes,
                    ran: bytes) -> None:
        """The tiers due of one member, into values and m: the slow one (and the first
        reading's), a thread list that changed, USS. stat and ran: its stat and schedstat
        texts of this tick (ran b"" where not read)."""
        if self._slow_now or m.fresh:
            self._read_slow(pid, m, values)
            if self.read_waits:
                self._read_waits(pid, m, values, stat, ran)
            if _HAVE_CHILDREN_FILE:
                self._list_threads(pid, m)  # a new thread may fork: hold its children file
            m.fresh = False
        elif _HAVE_CHILDREN_FILE and m.nthreads != m.threads_seen:
            self._list_threads(pid, m)
            self._dirty = True  # a new thread's children are in a file not walked yet
        if m.faults - m.faults_at_hwm >= PEAK_FAULTS:
            # It touched enough memory since its high-water mark was read to have peaked and
            # freed it again: read the mark while the process can still be read (one that
            # exits before the next slow tier takes its peak with it).
            self._read_hwm(pid, m, values)
        if not _HAVE_CHILDREN_FILE:
            m.threads_seen = m.nthreads  # no list to hold: not asked again until it changes
        if self._uss_now:
            uss = self._uss(pid, m)
            m.uss = uss or _NO_USS
            if uss is not None:
                values["uss_bytes"], values["pss_bytes"] = uss
        ctx, uss_pss, waits = m.ctx, m.uss, m.waits
        m.tier = (ctx[0], ctx[1], m.nfds, waits[0], waits[1], waits[2],  # no list to unpack
                  uss_pss[0], uss_pss[1])

    def _read_waits(self, pid: int, m: Member, values: dict[str, float], stat: bytes,
                    ran: bytes) -> None:
        """WAIT_COUNTERS of one member, into values and m.waits, on the slow tier: from its
        stat text (major faults, block IO delay) and its schedstat (run delay; held from
        here on). The run delay is its main thread's: a process's other threads have their
        own (thread samples carry those of the threads watched)."""
        f = stat[stat.rfind(b")") + 2:].split(b" ", 40)
        try:
            faults = int(f[9])  # field 12, majflt
            blkio = int(f[39]) / _TICK if DELAYACCT and len(f) > 40 else None  # field 42
        except (IndexError, ValueError):
            faults, blkio = None, None
        if not ran:
            if m.sched_fd == -1:
                self._hold_schedstat(pid, m)
            try:
                ran = (os.pread(m.sched_fd, 128, 0) if m.sched_fd >= 0
                       else _read_path(f"/proc/{pid}/schedstat"))
            except OSError:
                ran = b""
        delay = run_delay(ran)
        m.waits = (faults, delay, blkio)
        for key, value in zip(WAIT_COUNTERS, m.waits, strict=True):
            if value is not None:
                values[key] = value

    def _hold_schedstat(self, pid: int, m: Member) -> None:
        try:
            m.sched_fd = self._hold(f"/proc/{pid}/schedstat")
        except OSError:
            m.sched_fd = -2  # no schedstat (CONFIG_SCHED_INFO off): read each tick
        if m.sched_fd == -1:
            m.sched_fd = -2  # the fd budget is spent

    def _renamed(self, pid: int, m: Member, comm: bytes) -> None:
        """It exec'd since it was named (a child is first seen under its parent's name)."""
        m.comm = comm
        m.name = comm.decode(errors="replace")
        self.renamed.append((pid, m.ppid, m.name))

    def _tree_values(self, readings: list[Reading], tiers: dict[str, float] | None,
                     now_ns: int) -> dict[str, float]:
        """The tree's values from this tick's readings and its tiers' sums (None off the
        tiers): totals that never fall (a member reaped outside the tree keeps its share in
        `carried`), and rates."""
        n = len(readings)
        # A worker without children: its values as they are (tree_sums' own first case, here
        # as a call is ~3% of a tick of one process).
        only = readings[0] if n == 1 else None
        tree: dict[str, float]
        if only is not None and None not in only:
            tree = dict(zip(READING_FIELDS, only, strict=True))  # type: ignore[arg-type]
        else:
            tree = tree_sums(readings)
        if n or self.carried_user or self.carried_system:
            user = (tree["cpu_user_s"] if n else 0.0) + self.carried_user  # n: both are there
            total = user + (tree["cpu_system_s"] if n else 0.0) + self.carried_system
            total = max(total, self.last_cpu_total)
            tree["cpu_user_s"] = user
            tree["cpu_system_s"] = total - user
            tree["num_procs"] = n
            self.last_cpu_total = total
            if self.last_t is None:
                self.cpu_shown, self.last_t = total, now_ns
            elif now_ns - self.last_t >= self.min_rate_ns:
                # CPU held while exited children awaited their reaping lands at once: shown
                # at most as all the tree's CPUs, the rest in the intervals that follow, so
                # the rates still add up to the total.
                seconds = (now_ns - self.last_t) / 1e9
                shown = min(total - self.cpu_shown, self.cpus * seconds)
                tree["cpu_percent"] = shown / seconds * 100.0
                self.cpu_shown, self.last_t = self.cpu_shown + shown, now_ns
        if n:
            # An upper bound: the sum of each member's own peak, and members peak at different
            # times. It never misses a peak that fell between two samples.
            if tree["peak_rss_bytes"] > self.peak_rss:
                self.peak_rss = int(tree["peak_rss_bytes"])
            tree["peak_rss_bytes"] = self.peak_rss
            last, carried = self.last_counters, self.carried
            if tiers:
                tree.update(tiers)
            held = last.get
            for key in IO_COUNTERS if tiers is None else COUNTERS:
                if key in tree:
                    # An exited child not yet reaped has left the sum, and its parent's
                    # counters have not grown yet: hold the total until they do. (No max()
                    # and no get of an empty `carried`: 8 calls fewer a tick.)
                    value = carried[key] + tree[key] if key in carried else tree[key]
                    old = held(key, 0)
                    tree[key] = last[key] = old if old > value else value
        if self.unreadable:
            tree["unreadable_procs"] = len(self.unreadable & self.members.keys())
        return tree

    def _status_text(self, pid: int, m: Member) -> bytes | None:
        """A member's /proc/PID/status (its fd held from the first read), None if unreadable."""
        try:
            if m.status_fd == -1 and self.hold:
                m.status_fd = self._hold(f"/proc/{pid}/status")
            return (_pread_all(m.status_fd) if m.status_fd >= 0
                    else _read_path(f"/proc/{pid}/status"))
        except OSError:
            return None

    def _read_hwm(self, pid: int, m: Member, values: dict[str, float]) -> None:
        """One member's high-water mark (VmHWM) alone, off the slow tier."""
        data = self._status_text(pid, m)
        if data is None:
            return
        m.faults_at_hwm = m.faults
        peak = procfs.parse_status(data, _HWM_FIELD).get("peak_rss_bytes")
        if peak is not None:
            m.hwm = int(peak)
            values["peak_rss_bytes"] = peak

    def _read_slow(self, pid: int, m: Member, values: dict[str, float]) -> None:
        """The slow tier of one member, into values: VmHWM, context switches, the fd count."""
        data = self._status_text(pid, m)
        if data is None:
            m.ctx, m.nfds = _NO_CTX, None
            return
        status = procfs.parse_status(data, _STATUS_FIELDS)
        values.update(status)
        m.faults_at_hwm = m.faults
        if "peak_rss_bytes" in status:
            m.hwm = int(status["peak_rss_bytes"])
        try:  # both, as every kernel has them (a lookup costs less than a call of get)
            m.ctx = (status["ctx_switches_voluntary"], status["ctx_switches_involuntary"])
        except KeyError:
            m.ctx = (status.get("ctx_switches_voluntary"), status.get("ctx_switches_involuntary"))
        m.nfds = self._fd_count(pid)
        if m.nfds is not None:
            values["num_fds"] = m.nfds

    @staticmethod
    def _fd_count(pid: int) -> int | None:
        path = f"/proc/{pid}/fd"
        try:
            # Linux 6.2+ gives the count as the directory's size: no listing needed.
            return os.stat(path).st_size or len(os.listdir(path))
        except OSError:
            return None

    def _uss(self, pid: int, m: Member) -> tuple[float, float] | None:
        try:
            if m.smaps_fd == -1 and self.hold:
                m.smaps_fd = self._hold(f"/proc/{pid}/smaps_rollup")
            data = (os.pread(m.smaps_fd, _CHUNK, 0) if m.smaps_fd >= 0
                    else _read_path(f"/proc/{pid}/smaps_rollup"))
        except OSError:
            m.smaps_fd = -2  # another user's, or a kernel without smaps_rollup: not again
            return None
        return parse_smaps_rollup(data)

    # -- threads ---------------------------------------------------------------------------------
    def watch_thread(self, pid: int, tid: int) -> None:
        """Read this thread's CPU from now on, every tick (a job or a span runs in it)."""
        if (pid, tid) not in self.threads:
            self.wanted.add((pid, tid))

    def read_threads(self, now_ns: int) -> list[list[Any]]:
        """[[pid, tid, values], ...] of the watched threads: cpu_user_s and cpu_system_s (the
        thread's own, cumulative) and cpu_percent. Call it right after read() of the same
        tick: the only thread of a member that read() found quiet is not read again. A thread
        read for the first time that started since the previous call has a fourth item, its
        start (monotonic ns): its CPU was 0 then, which a span begun with the thread needs (it
        is read up to a tick late)."""
        self._open_watched(now_ns)
        slow = self._slow_now and self.read_waits  # read() read its slow tier: the waits too
        rows: list[list[Any]] = []
        ended = []
        since, self._threads_t = self._threads_t, now_ns
        if since is not None and now_ns - since > 2 * self.interval_ns + 100_000_000:
            since = None  # no sample since the last job's: a thread born meanwhile is not new
        members = self.members
        for key, th in self.threads.items():
            m = members.get(key[0])
            if th.tick is not None and key[0] == key[1] and m is not None and m.quiet:
                # The only thread of a process that has not run since read() last read it.
                rows.append([key[0], key[1], self._thread_rate(th, th.tick.copy(), now_ns)])
                continue
            try:
                data = (os.pread(th.fd, _CHUNK, 0) if th.fd >= 0
                        else _read_path(f"/proc/{key[0]}/task/{key[1]}/stat"))
            except OSError:
                data = b""
            st = parse_stat(data)
            if st is None:
                ended.append(key)
                continue
            values = {"cpu_user_s": st.utime / _TICK, "cpu_system_s": st.stime / _TICK}
            if slow:
                self._thread_waits(key, th, values)
            th.tick = values.copy()
            start = self._thread_start(th, st, values, since, now_ns)
            rows.append([key[0], key[1], values] if start is None
                        else [key[0], key[1], values, start])
        for key in ended:
            th = self.threads.pop(key)
            _close(th.fd)
            _close(th.sched_fd)
        return rows

    def _thread_waits(self, key: tuple[int, int], th: Thread, values: dict[str, float]) -> None:
        """A watched thread's run delay (run_delay_s) into values, on the slow tier."""
        if th.sched_fd == -2:
            return
        try:
            if th.sched_fd == -1:
                th.sched_fd = self._hold(f"/proc/{key[0]}/task/{key[1]}/schedstat")
            data = (os.pread(th.sched_fd, 128, 0) if th.sched_fd >= 0
                    else _read_path(f"/proc/{key[0]}/task/{key[1]}/schedstat"))
        except OSError:
            _close(th.sched_fd)  # held and now unreadable (the thread ended): not asked again
            th.sched_fd = -2
            return
        delay = run_delay(data)
        if delay is not None:
            values["run_delay_s"] = delay

    def _open_watched(self, now_ns: int) -> None:
        """Hold the stat files of the threads to watch that are not held yet: all of the
        target's (while it has few), and those named through watch_thread."""
        top = self.members.get(self.all_threads_of) if self.all_threads_of is not None else None
        if top is not None and (self._slow_t == now_ns or top.nthreads != self._all_seen):
            # A new thread is watched from the tick it is seen: its first reading is near 0.
            self._all_seen = top.nthreads
            self._watch_all(self.all_threads_of or 0, top)
        if not self.wanted:
            return
        later: set[tuple[int, int]] = set()
        for pid, tid in self.wanted:
            if pid not in self.members:
                # Not in the tree (yet: a child whose ring came first; or never: the CLI's
                # own thread under `run`), so not ours to read now.
                if len(later) < 1024:
                    later.add((pid, tid))
                continue
            try:
                fd = self._hold(f"/proc/{pid}/task/{tid}/stat")
            except OSError:
                continue  # the thread ended before we looked
            self.threads[(pid, tid)] = Thread(fd)
        self.wanted = later

    def _thread_rate(self, th: Thread, values: dict[str, float], now_ns: int) -> dict[str, float]:
        """values with the thread's cpu_percent since its last rate, where that was long
        enough ago (and that rate's start moved to now)."""
        own = values["cpu_user_s"] + values["cpu_system_s"]
        if th.own_cpu is None or th.t is None:
            th.own_cpu, th.t = own, now_ns
        elif now_ns - th.t >= self.min_rate_ns:
            values["cpu_percent"] = (own - th.own_cpu) / ((now_ns - th.t) / 1e9) * 100.0
            th.own_cpu, th.t = own, now_ns
        return values

    def _thread_start(self, th: Thread, st: procfs.Stat, values: dict[str, float],
                      since: int | None, now_ns: int) -> int | None:
        """The start (monotonic ns) of a thread read for the first time that started since
        the previous read_threads, else None; its rate (or its rate's start) into values."""
        if th.own_cpu is None or th.t is None:
            th.own_cpu, th.t = values["cpu_user_s"] + values["cpu_system_s"], now_ns
            # Start times count 10 ms clock ticks (rounded down): one that falls within a
            # tick before the previous reading is a thread born after it, near enough.
            start = _boot_ticks_to_monotonic_ns(st.starttime)
            if since is not None and since - 1_000_000_000 // _TICK < start <= now_ns:
                return max(start, since + 1)
            return None
        self._thread_rate(th, values, now_ns)
        return None

    def _watch_all(self, pid: int, m: Member) -> None:
        tids = list(m.children) if m.children else None
        if tids is None:
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                return
        if len(tids) <= ALL_THREADS_MAX:
            for tid in tids:
                self.watch_thread(pid, tid)


def _boot_ticks_to_monotonic_ns(ticks: int) -> int:
    """A start time from /proc/PID/stat (clock ticks since boot, CLOCK_BOOTTIME) on the
    monotonic clock (which stops while the machine is suspended; BOOTTIME does not)."""
    offset = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
    return ticks * 1_000_000_000 // _TICK - offset


def run_delay(schedstat: bytes) -> float | None:
    """Seconds a task spent runnable, waiting for a CPU, from its schedstat text ("run_ns
    wait_ns timeslices"); None where unread, or a kernel that keeps none (all zeros)."""
    parts = schedstat.split()
    if len(parts) < 3 or schedstat.startswith(b"0 0 0"):
        return None
    try:
        return int(parts[1]) / 1e9
    except ValueError:
        return None


def parse_smaps_rollup(data: bytes) -> tuple[float, float] | None:
    """(USS, PSS) in bytes from a /proc/PID/smaps_rollup text: USS is the private pages,
    clean, dirty and huge (Private_*, as psutil counts it)."""
    uss = pss = 0
    found = False
    for line in data.split(b"\n"):
        if line.startswith(b"Private_"):
            uss += int(line.split()[1])
            found = True
        elif line.startswith(b"Pss:"):
            pss += int(line.split()[1])
    return (uss * 1024.0, pss * 1024.0) if found else None
