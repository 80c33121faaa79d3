"""Where a worker's memory went: the top allocation sites (tracemalloc) at each job's end and
when the worker's memory cgroup passes a share of its limit. Opt-in (the `allocations`
setting: how many sites; 0, the default, costs nothing): tracemalloc makes every allocation
of the process slower while it traces (~1.5-3x in allocation-heavy code, one frame a site),
and a snapshot costs time in the job that takes it (seconds with millions of live blocks):
job-end snapshots are skipped where they would take more than a tenth of the time. Once on,
tracing stays on in the process.

Each snapshot is a mark named "allocations" on the timeline, its attrs the sites (`where`:
"file:line", `bytes` and `blocks` still allocated from there), the traced total and peak
(`traced_bytes`, `peak_bytes`) and why it was taken (`reason`: "job end", or the cgroup's
working set against its limit). A watcher thread, started with the first job that asks,
reads the cgroup's usage once a second and takes one snapshot per crossing of the line (the
stacks_memory setting, as for the stacks taken then).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import tracemalloc
from typing import Any

from .. import cgroup, protocol
from . import recorder as rec
from .instruments import mark

log = logging.getLogger("workerscope")

WATCH_S = 1.0
SHARE = 0.1  # of the time between job-end snapshots, at most what taking them may cost
MARK = protocol.ALLOCATIONS_MARK
_lock = threading.Lock()
_watcher: threading.Thread | None = None
_line = 0.0  # the share of the cgroup's limit that triggers a snapshot (0: none)
_sites = 0
_started_here = False  # this module started tracemalloc (and a forked child stops it)
_last = 0.0  # monotonic time of the last job-end snapshot's end
_cost = 0.0  # and how long it took


def start(sites: int, line: float) -> None:
    """Trace allocations from now on (once per process), and watch the memory cgroup; never
    raises (monitoring must not break the job)."""
    global _watcher, _line, _sites, _started_here
    _sites, _line = sites, line
    try:
        if not tracemalloc.is_tracing():
            tracemalloc.start(1)
            _started_here = True
        with _lock:
            if _watcher is None and line > 0:
                _watcher = threading.Thread(target=_watch, name="workerscope-allocations",
                                            daemon=True)
                _watcher.start()
    except Exception as err:  # noqa: BLE001 - monitoring must never break the job it watches
        log.warning("workerscope: allocations could not be traced: %r", err)


def top(n: int) -> dict[str, Any]:
    """The n sites holding the most memory now, with the traced total and peak."""
    stats = tracemalloc.take_snapshot().statistics("lineno")
    own = tracemalloc.__file__
    sites = [s for s in stats[:n + 4] if s.traceback[0].filename != own][:n]
    traced, peak = tracemalloc.get_traced_memory()
    return {"sites": [{"where": f"{s.traceback[0].filename}:{s.traceback[0].lineno}",
                       "bytes": s.size, "blocks": s.count} for s in sites],
            "traced_bytes": traced, "peak_bytes": peak}


def at_job_end() -> None:
    """A snapshot at a job's end, unless that would make snapshots cost more than SHARE of
    the time (one takes seconds with millions of live blocks: jobs ending faster than that
    get one now and then)."""
    global _last, _cost
    start = time.monotonic()
    if _cost and start - _last < _cost / SHARE:
        return
    if snapshot("job end"):
        _last = time.monotonic()
        _cost = _last - start


def snapshot(reason: str, headroom: int | None = None) -> bool:
    """A mark of the top sites now (True if taken); never raises. headroom: the bytes left
    under the memory limit; a snapshot that would need more (about twice what tracemalloc
    holds) is not taken, and the mark says so: it could cause the kill it would explain."""
    if not _sites or not tracemalloc.is_tracing() or rec.active is None:
        return False
    try:
        need = 2 * tracemalloc.get_tracemalloc_memory()
        if headroom is not None and need > headroom:
            mark(MARK, reason=reason, sites=[], skipped=f"a snapshot needs ~{need:,} bytes, "
                 f"{headroom:,} are left under the limit")
        else:
            mark(MARK, reason=reason, **top(_sites))
        return True
    except Exception as err:  # noqa: BLE001 - monitoring must never break the job it watches
        log.warning("workerscope: the allocation sites could not be taken: %r", err)
        return False


def _watch() -> None:
    from .. import procfs

    mounts = procfs.cgroup_mounts()
    above = False
    stop = threading.Event()
    while not stop.wait(WATCH_S):
        # Found again at each look: a job may move its process into another cgroup.
        found = cgroup.memory_dir(os.getpid(), mounts)
        if found is None:
            continue
        version, where = found
        _, limit_name, usage_name, _ = cgroup.FILES[version]
        limit = cgroup.read_int(os.path.join(where, limit_name))
        usage = cgroup.read_int(os.path.join(where, usage_name))
        if not limit or usage is None:
            continue
        if usage >= _line * limit:  # the working set (less the page cache), as stacks_memory
            usage -= cgroup.inactive_file(where, version)
        share = usage / limit
        if share < _line:
            above = False
        elif not above:  # once a crossing: again only after it fell back under the line
            above = snapshot(f"memory at {share:.0%} of its cgroup's limit",
                             headroom=max(limit - usage, 0))


def _forget_after_fork() -> None:
    # A forked child has no watcher thread (its first job starts one) and may never run a
    # job: what this module started is stopped there, and the lock is its own.
    global _watcher, _lock, _started_here
    _watcher, _lock = None, threading.Lock()
    if _started_here and tracemalloc.is_tracing():
        tracemalloc.stop()
    _started_here = False


os.register_at_fork(after_in_child=_forget_after_fork)
