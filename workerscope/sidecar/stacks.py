"""The sidecar's side of stacks on demand: signal each process of the tree that has workerscope
loaded (it has a `<pid>.stacks` file in the ring directory: worker/stacks.py), read what its
faulthandler wrote, and describe the processes without it from /proc (command, state, wchan).

The sidecar is the worker's own child and the same user: the signal needs no privilege, and no
ptrace is involved, so it works unprivileged, in containers without CAP_SYS_PTRACE and in a pid
namespace.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable
from typing import Any

from .. import procfs

log = logging.getLogger("workerscope")

SUFFIX = ".stacks"  # worker/stacks.py writes a process's dumps in <ring folder>/<pid>.stacks
CRASH_SUFFIX = ".crash"  # and faulthandler's output at a fatal signal in <pid>.crash
REFUSED_SUFFIX = ".nostacks"  # or, where it could not install its handler, why
WAIT_S = 1.0  # for every process's dump to be written
# A dump is taken as whole once its file has not grown for this long: faulthandler writes it
# in one go from the signal handler, a few write() calls a frame; 50 ms rides out a
# preemption or a cgroup's CPU throttling in the middle of it.
QUIET_S = 0.05
POLL_S = 0.005  # how often a dump under way is looked at
MAX_DUMP_BYTES = 4 << 20  # read of one dump (faulthandler: 100 threads x 100 frames, ~2 MB)
MAX_MARK_BYTES = 512 << 10  # a whole dump's mark, encoded: well inside a frame (1 MiB)
MAX_COMMAND = 1024  # characters of a command line described
MAX_THREADS = 100
MAX_FRAMES = 40  # read of one process's dump (faulthandler: 100 threads x 100 frames)
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):$")
_FRAME = re.compile(r'^  File "(.*)", line (\d+) in (.*)$')


def parse(text: str) -> list[dict[str, Any]]:
    """faulthandler's dump as threads: {"thread": "0x...", "current": bool, "frames":
    [{"file", "line", "function"}, ...] innermost first, "truncated": bool}."""
    threads: list[dict[str, Any]] = []
    for line in text.splitlines():
        head = _THREAD.match(line)
        if head:
            threads.append({"thread": head.group(2), "current": head.group(1) != "Thread",
                            "frames": [], "truncated": False})
            continue
        if not threads:
            continue
        frame = _FRAME.match(line)
        if frame:
            threads[-1]["frames"].append({"file": frame.group(1), "line": int(frame.group(2)),
                                          "function": frame.group(3)})
        elif line.strip() in ("...", "<no Python frame>"):
            threads[-1]["truncated"] = line.strip() == "..."
    return threads


class Asking:
    """A dump of stacks under way: each process of `pids` that can dump (its file is in
    `directory`) is signalled at once, and poll() reads each one's dump once its file has
    stopped growing, so the sidecar's loop goes on sampling meanwhile. Those that cannot dump
    are described from /proc."""

    def __init__(self, directory: str, pids: Iterable[int], sig: int,
                 wait_s: float = WAIT_S) -> None:
        self.deadline = time.monotonic() + wait_s
        self.wait_s = wait_s
        self.dumped: dict[int, dict[str, Any]] = {}
        self.others: list[dict[str, Any]] = []
        self._files: dict[int, tuple[str, int]] = {}  # pid -> (its file, its size before)
        self._sizes: dict[int, int] = {}
        self._quiet_since: dict[int, float] = {}
        for pid in pids:
            path = os.path.join(directory, f"{pid}{SUFFIX}")
            try:
                size = os.stat(path).st_size
            except OSError:
                self.others.append(_cannot_dump(directory, pid))
                continue
            if procfs.catches(pid, sig) is not True:
                # Its file outlived its handler (an exec, a ring closed, the interpreter
                # ending): the signal's default action would end the process.
                self.others.append({**describe(pid), "threads": [], "error":
                                    "its stacks handler is not installed now: not signalled"})
                continue
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue  # ended meanwhile
            except OSError as err:
                self.others.append({**describe(pid), "error": f"could not signal it: {err}"})
                continue
            self._files[pid] = (path, size)
            self._sizes[pid] = size

    def poll(self, force: bool = False) -> bool:
        """Read the dumps that are whole; True once every one is (or the wait is over, or
        `force`: what is there is taken as it is)."""
        now = time.monotonic()
        for pid, (path, start) in list(self._files.items()):
            try:
                size = os.stat(path).st_size
            except OSError as err:  # the process ended and its ring folder went
                self.dumped[pid] = {"pid": pid, "threads": [],
                                    "error": f"its dump could not be read: {err.strerror}"}
                del self._files[pid]
                continue
            if size != self._sizes[pid]:
                self._sizes[pid], self._quiet_since[pid] = size, now
            elif size > start and now - self._quiet_since.get(pid, now) >= QUIET_S:
                self.dumped[pid] = _read(pid, path, start, size)
                del self._files[pid]
                _empty(path, size)
        if self._files and now < self.deadline and not force:
            return False
        for pid, (path, start) in self._files.items():  # late, or never: what is there
            size = self._sizes[pid]
            late = ("the process ended before its dump was whole" if force
                    else f"no whole dump within {self.wait_s:g} s of the signal")
            self.dumped[pid] = ({**_read(pid, path, start, size), "error": late} if size > start
                                else {"pid": pid, "threads": [], "error": late + " (none)"})
            _empty(path, size)
        self._files.clear()
        return True

    def processes(self) -> list[dict[str, Any]]:
        """Each process's dump, by pid, then the processes that could not dump."""
        return [self.dumped[pid] for pid in sorted(self.dumped)] + self.others


def ask(directory: str, pids: Iterable[int], sig: int,
        wait_s: float = WAIT_S) -> list[dict[str, Any]]:
    """Asking(...), waited for here."""
    asking = Asking(directory, pids, sig, wait_s)
    while not asking.poll():
        time.sleep(POLL_S)
    return asking.processes()


def crashes(directory: str, pids: Iterable[int] | None = None) -> list[dict[str, Any]]:
    """What faulthandler wrote in the `<pid>.crash` files of `directory` (each of `pids`, or
    all): a process that died of a fatal signal left "Fatal Python error: Segmentation fault"
    and every thread's stack there. Each file read is removed: a crash is told once."""
    out: list[dict[str, Any]] = []
    if pids is None:
        try:
            names = os.listdir(directory)
        except OSError:  # the ring folder is gone: no process of the tree made a ring
            return out
        pids = sorted(int(name[:-len(CRASH_SUFFIX)]) for name in names
                      if name.endswith(CRASH_SUFFIX) and name[:-len(CRASH_SUFFIX)].isdigit())
    for pid in pids:
        path = os.path.join(directory, f"{pid}{CRASH_SUFFIX}")
        try:
            with open(path, "rb") as f:
                text = f.read(MAX_DUMP_BYTES).decode("utf-8", "replace")
            os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as err:
            out.append({"pid": pid, "threads": [],
                        "error": f"its crash file could not be read: {err.strerror}"})
            continue
        if text.strip():
            first = text.strip().splitlines()[0]
            out.append({"pid": pid, "error": first, "threads": trim(parse(text))})
    return out


def name_threads(proc: dict[str, Any], named: dict[int, dict[str, Any]]) -> None:
    """Give each thread of a process's dump its name, tid and the span it is in, where the
    process's ring named it (Rings.threads_of: the threads that recorded a span)."""
    for thread in proc.get("threads") or ():
        try:
            ident = int(thread["thread"], 16)
        except (KeyError, TypeError, ValueError):
            continue
        thread.update(named.get(ident, {}))


def fit(attrs: dict[str, Any], budget: int = MAX_MARK_BYTES) -> None:
    """Cut a dump's processes to fit `budget` bytes encoded: fewer frames a thread (the
    innermost kept), then fewer threads a process, then fewer processes; `cut` says what went."""
    import msgpack

    def size() -> int:
        return len(msgpack.packb(attrs, default=repr))

    if size() <= budget:
        return
    procs: list[dict[str, Any]] = attrs.get("processes") or []
    frames = MAX_FRAMES
    while frames > 1 and size() > budget:
        frames //= 2
        for proc in procs:
            proc["threads"] = [t if len(t["frames"]) <= frames
                               else {**t, "frames": t["frames"][:frames], "truncated": True}
                               for t in proc.get("threads") or ()]
    threads = MAX_THREADS
    while threads > 1 and size() > budget:
        threads //= 2
        for proc in procs:
            if len(proc.get("threads") or ()) > threads:
                proc["threads_cut"] = proc.get("threads_cut", 0) + len(proc["threads"]) - threads
                proc["threads"] = proc["threads"][:threads]
    dropped = 0
    while len(procs) > 1 and size() > budget:
        procs.pop()
        dropped += 1
    attrs["cut"] = (f"cut to fit a frame: at most {frames} frame(s) a thread, {threads} "
                    f"thread(s) a process" + (f", {dropped} process(es) left out" if dropped
                                              else ""))


def trim(threads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most MAX_THREADS threads of MAX_FRAMES innermost frames each (faulthandler writes
    up to 100 of 100, ~2 MB with long paths); fit() then holds the whole mark to a budget."""
    return [t if len(t["frames"]) <= MAX_FRAMES
            else {**t, "frames": t["frames"][:MAX_FRAMES], "truncated": True}
            for t in threads[:MAX_THREADS]]


def _empty(path: str, size: int) -> None:
    """Empty a dump's file once read, so that it never grows past one dump (the process
    writes with O_APPEND: its next dump starts at 0). Not if it grew meanwhile."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_size == size:
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)
    except OSError as err:
        log.debug("could not empty %s: %s", path, err)


def _read(pid: int, path: str, start: int, end: int) -> dict[str, Any]:
    """The dump a process wrote in its file between `start` and `end`."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(min(end - start, MAX_DUMP_BYTES))
    except OSError as err:
        return {"pid": pid, "threads": [], "error": f"its dump could not be read: {err.strerror}"}
    return {"pid": pid, "threads": trim(parse(data.decode("utf-8", "replace")))}


def _cannot_dump(directory: str, pid: int) -> dict[str, Any]:
    """A process of the tree without a stacks file: one that said why (its `<pid>.nostacks`:
    a signal handler of the job's own, installed from C), else one without workerscope."""
    out = describe(pid)
    try:
        with open(os.path.join(directory, f"{pid}{REFUSED_SUFFIX}"), "rb") as f:
            out["error"] = "workerscope cannot ask it: " + f.read(1000).decode("utf-8", "replace")
    except OSError:
        out["workerscope"] = False  # not loaded there (or no ring made yet)
    return out


def describe(pid: int) -> dict[str, Any]:
    """A process without workerscope: its command, state and where the kernel has it wait;
    "unreadable" names what /proc would not give (the process ended meanwhile, or is another
    user's)."""
    out: dict[str, Any] = {"pid": pid}
    unreadable: list[str] = []
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            out["command"] = f.read(MAX_COMMAND).replace(b"\0", b" ").decode(
                "utf-8", "replace").strip()
    except OSError as err:
        unreadable.append(f"command ({err.strerror})")
    try:
        out["state"] = procfs.read_stat_exit(pid)[0]
    except (OSError, IndexError, ValueError) as err:
        unreadable.append(f"state ({getattr(err, 'strerror', None) or err})")
    try:
        with open(f"/proc/{pid}/wchan") as f:
            out["wchan"] = f.read(256).strip()
    except OSError as err:
        unreadable.append(f"wchan ({err.strerror})")
    if unreadable:
        out["unreadable"] = unreadable
    return out
