"""Where a worker's memory went: the top allocation sites (tracemalloc) at each job's end and
when the worker's memory cgroup passes a share of its limit. Opt-in (the `allocations`
setting: how many sites; 0, the default, costs nothing): tracemalloc makes every allocation
of the process slower while it traces (~1.5-3x in allocation-heavy code, one frame a site).

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
import tracemalloc
from typing import Any

from .. import cgroup, protocol
from .instruments import mark

log = logging.getLogger("workerscope")

WATCH_S = 1.0
MARK = protocol.ALLOCATIONS_MARK
_lock = threading.Lock()
_watcher: threading.Thread | None = None
_line = 0.0  # the share of the cgroup's limit that triggers a snapshot (0: none)
_sites = 0


def start(sites: int, line: float) -> None:
    """Trace allocations from now on (once per process), and watch the memory cgroup."""
    global _watcher, _line, _sites
    _sites, _line = sites, line
    if not tracemalloc.is_tracing():
        tracemalloc.start(1)
    with _lock:
        if _watcher is None and line > 0:
            _watcher = threading.Thread(target=_watch, name="workerscope-allocations",
                                        daemon=True)
            _watcher.start()


def top(n: int) -> dict[str, Any]:
    """The n sites holding the most memory now, with the traced total and peak."""
    snapshot = tracemalloc.take_snapshot()
    snapshot = snapshot.filter_traces((tracemalloc.Filter(False, tracemalloc.__file__),))
    stats = snapshot.statistics("lineno")[:n]
    traced, peak = tracemalloc.get_traced_memory()
    return {"sites": [{"where": f"{s.traceback[0].filename}:{s.traceback[0].lineno}",
                       "bytes": s.size, "blocks": s.count} for s in stats],
            "traced_bytes": traced, "peak_bytes": peak}


def snapshot(reason: str) -> None:
    """A mark of the top sites now; never raises (monitoring must not break the job)."""
    if not _sites or not tracemalloc.is_tracing():
        return
    try:
        mark(MARK, reason=reason, **top(_sites))
    except Exception as err:  # noqa: BLE001 - monitoring must never break the job it watches
        log.warning("workerscope: the allocation sites could not be taken: %r", err)


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
        if share >= _line and not above:
            snapshot(f"memory at {share:.0%} of its cgroup's limit")
        above = share >= _line


def _forget_after_fork() -> None:
    global _watcher
    _watcher = None  # a forked child has no watcher thread; its first job starts one


os.register_at_fork(after_in_child=_forget_after_fork)
