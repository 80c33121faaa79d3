"""What a worker process does as it exits, in every way Python lets it exit cleanly.

`atexit` runs at the interpreter's exit, but a process started by multiprocessing's fork start
method (a Pool's workers, Lithops' JobRunner, a ProcessPoolExecutor on Linux before 3.14) ends
with os._exit once its target returns, and runs no atexit handler: only the finalizers that
multiprocessing.util keeps. Its frames would be left in the socket's queue and its bye never
sent. `at_exit` registers a closer for both; each closer is idempotent, so running twice (a
spawned child runs both) is harmless.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from collections.abc import Callable

# The closers of this process, and the process they were registered in with multiprocessing.
_closers: list[Callable[[], None]] = []
_registered_in = 0
log = logging.getLogger("workerscope")


def at_exit(closer: Callable[[], None]) -> None:
    """Run `closer` when this process exits: at the interpreter's exit (atexit) and, in a
    child of multiprocessing, when its target returns (before its os._exit)."""
    if closer not in _closers:
        _closers.append(closer)
        atexit.register(closer)
    started_by_multiprocessing()


def started_by_multiprocessing() -> None:
    """Register the closers with multiprocessing's finalizers, once per process, where this
    process is a child of multiprocessing. Called again as a link or sender is made: the
    child's registry is cleared as its target starts, after any fork hook could run."""
    global _registered_in
    mp = sys.modules.get("multiprocessing")
    if mp is None or _registered_in == os.getpid() or mp.parent_process() is None:
        return
    from multiprocessing import util

    _registered_in = os.getpid()
    # exitpriority puts them among the finalizers run by the child's exit; 0 is
    # multiprocessing's own lowest, so ours run before its queues' feeders close.
    util.Finalize(None, _run_closers, exitpriority=10)


def _run_closers() -> None:
    for closer in reversed(_closers):  # atexit's order: the last registered first
        try:
            closer()
        except Exception:  # one closer's failure must not cost the others
            log.warning("workerscope: closing at exit failed", exc_info=True)
