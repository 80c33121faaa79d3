"""Processes that leave the worker's tree, and whether they are still the job's.

A process whose parent exits is reparented to init (or to the nearest subreaper): it no longer
hangs under the tree's root. A daemon does it on purpose (fork, fork again, the middle one
exits), often too fast for a sample to see the middle process at all. Such a process is
followed (kept in the tree) when its process group, its session or its cgroup is the job's,
compared with the tree root's:
- the process group or the session, unless the root's is init's (0 or 1: everything there
  shares it, which says nothing);
- the (memory) cgroup, only when the root's is not the sampler's own: a job given one of its own
  (systemd-run, a container watched from outside). A shared one (a user's session, a
  container the sampler runs in too) says nothing either.
Otherwise (a daemon that called setsid(), say) it has left the job and is no longer counted.
Either way the timeline's notes say so, once, with its pid and name.

A process never seen in the tree is held to more: its process group or session counts only
when the job leads it (the root, a member, or the sampler itself: `run`'s command shares run's
group). A group or session led from outside (a shell without job control, a CI runner, a
login session) is shared with whatever else was started there: a stranger's daemon once
counted in a job's tree that way.

A member that leaves is noticed in the tree's discovery: it is no longer reached from the root
but is alive, and its parent is no longer a member. A process that left before any sample saw
it is found among the new children of the reapers (init, and any subreaper seen taking a
member), read in one file each: never a scan of all of /proc.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable

from .. import procfs

log = logging.getLogger("workerscope.sidecar")


def stat_ids(data: bytes) -> tuple[int, int, int, int]:
    """(ppid, process group, session, start time in clock ticks) from a /proc/PID/stat text."""
    f = data[data.rindex(b")") + 2:].split(None, 20)
    return int(f[1]), int(f[2]), int(f[3]), int(f[19])


class Belonging:
    """What makes a process the job's: the tree root's process group, session and cgroup,
    where each says something (see the module's docstring)."""

    def __init__(self, root: int, root_stat: bytes) -> None:
        self.root = root
        _, pgid, sid, self.start = stat_ids(root_stat)
        self.pgid = pgid if pgid > 1 else None
        self.sid = sid if sid > 1 else None
        cgroup = procfs.read_memory_cgroup(root)
        mine = procfs.read_memory_cgroup(os.getpid())
        self.cgroup = cgroup if cgroup is not None and cgroup != mine and cgroup[1] != "/" else None

    def why(self, pid: int, pgid: int, sid: int) -> str | None:
        """Why pid is still the job's, or None if it is not."""
        if self.pgid is not None and pgid == self.pgid:
            return "same process group as the job"
        if self.sid is not None and sid == self.sid:
            return "same session as the job"
        if self.cgroup is not None and procfs.read_memory_cgroup(pid) == self.cgroup:
            return "same cgroup as the job"
        return None

    def why_unseen(self, pid: int, pgid: int, sid: int, members: Iterable[int]) -> str | None:
        """Why pid, never seen in the tree, is the job's: as why(), but a process group or
        session only when the job leads it."""
        leaders = {self.root, os.getpid(), *members}
        return self.why(pid, pgid if pgid in leaders else -1, sid if sid in leaders else -1)


class Reapers:
    """The children of init and of the subreapers seen taking members, held open; each look
    returns those not seen at the previous one."""

    def __init__(self) -> None:
        self.fds: dict[int, int] = {}
        self.seen: set[int] = set()
        self.learn(1)

    def learn(self, pid: int) -> None:
        """pid took an orphaned member: watch its children too."""
        if pid in self.fds or pid <= 0:
            return
        try:
            # Orphans go to the reaper's first live thread: its main thread, but for a moment.
            self.fds[pid] = os.open(f"/proc/{pid}/task/{pid}/children", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as err:
            log.debug("children of reaper %d unreadable: %s", pid, err)

    def children(self) -> set[int]:
        kids: set[int] = set()
        for pid, fd in list(self.fds.items()):
            try:
                data = procfs.pread_all(fd)
            except OSError:
                os.close(self.fds.pop(pid))  # that reaper is gone
                continue
            kids.update(int(k) for k in data.split())
        return kids

    def fresh(self, kids: set[int]) -> set[int]:
        """Those of kids (the reapers' children now) that were not there at the last look."""
        out = kids - self.seen
        self.seen = kids
        return out

    def close(self) -> None:
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                log.debug("fd %d was closed already", fd)
        self.fds = {}


def left_note(pid: int, name: str, ppid: int, why: str | None, seen: bool = True) -> str:
    """The worker's note on a process that left the tree, followed (why) or not."""
    how = "left the tree" if seen else "left the tree before a sample saw it"
    if why is not None:
        return (f"pid {pid} ({name}) {how} (its parent exited; now a child of pid {ppid}) and "
                f"is followed: {why}")
    return (f"pid {pid} ({name}) {how} (its parent exited; now a child of pid {ppid}, in "
            "another session and process group): no longer counted")
