"""The receive state of a Subscriber: what its receive thread knows, and the copies others read.

One ReceiveState per Subscriber, made with what it works with (the live TimelineBuilder, the
LiveState, the replies and their clock estimates, the limits). The receive thread alone
changes it (receive.py), always under `cond`. Every read from another thread takes `cond` and
returns a copy, so a user may iterate `sub.lost` while workers arrive, and keep or change
what it got without touching the driver's own counts.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from ..builder import TimelineBuilder
from ..protocol import Status
from ..record import FACTS, Facts, NoteBudget, RecordWriter
from ..timeline import straggler_limit
from .live import LiveState
from .replies import Replies

MAX_STRAGGLERS_ASKED = 100  # stragglers' stacks asked for in one pass (about a second)


@dataclass(frozen=True)
class Limits:
    """What senders may make one driver hold, and when a worker counts as silent."""

    stale_after: float
    max_workers: int
    max_kept_bytes: int | None
    max_frame_bytes: int


@dataclass(frozen=True)
class Counts:
    """The receive thread's counters at one instant (Subscriber documents each)."""

    bad_frames: int
    callback_errors: int
    loop_errors: int
    last_error: str | None
    jobs_started: int
    jobs_ended: int


class ReceiveState:
    """Counters, bookkeeping and live state of one driver; changed under `cond` only."""

    def __init__(self, limits: Limits, builder: TimelineBuilder, live: LiveState,
                 replies: Replies) -> None:
        self.limits = limits
        self.builder = builder
        self.live = live
        self.replies = replies
        self.record: RecordWriter | None = None  # the Subscriber's, set before each start
        self.cond = threading.Condition()
        self.lost: dict[str, int] = {}
        self.received: dict[str, int] = {}
        self.dropped: dict[str, int] = {}  # frames each sidecar could not queue (it says so)
        self.refused = {"identity": 0, "workers": 0, "kept": 0, "open_jobs": 0}
        self.not_kept: dict[str, int] = {}
        self.bad_frames = 0
        self.callback_errors = 0
        self.loop_errors = 0
        self.last_error: str | None = None
        self.jobs_started = 0
        self.jobs_ended = 0
        self.kept = 0  # bytes of frames in the record, against max_kept_bytes
        self.next_seq: dict[str, int] = {}
        self.last_seen: dict[str, float] = {}  # monotonic
        self.last_wall: dict[str, int] = {}
        self.gone_wall: dict[str, int] = {}  # when each dead worker was first found gone
        self.anchored: set[str] = set()  # workers whose clock anchor is known (or never will be)
        self.introduced: set[str] = set()  # workers whose hello was folded in (or a heartbeat's)
        self.notes = NoteBudget()  # what of each worker's notes the facts carry
        self.let_go = 0  # workers let go of to make room for new ones (their data is recorded)
        self.byes_let_go = 0  # of those, workers that had said bye (for wait(byes=N))
        # Stacks asked for (Subscriber.stacks): (worker, request id, reason) for the receive
        # thread to send, and the dumps that came back, by request id (taken by the asker).
        self.stacks_asked: collections.deque[tuple[str, int, str]] = collections.deque()
        self.stacks_got: dict[int, dict[str, Any]] = {}
        # Requests someone waits for, and the worker each was sent to (the rest: triggers).
        self.stacks_waited: dict[int, str] = {}
        self.wake_fd: int | None = None  # the receive thread's wake-up pipe, while it runs
        self._straggler_asked: dict[tuple[str, int], None] = {}  # jobs asked for, oldest first
        self._trigger_ids = iter(range(-1, -2**62, -1))  # triggered requests: negative ids
        self._written = Facts()  # the facts as the record has them, so far
        self._written_to: RecordWriter | None = None  # the record they were written to

    # -- reads, from any thread --------------------------------------------------------------
    def copy_lost(self) -> dict[str, int]:
        with self.cond:
            return dict(self.lost)

    def copy_received(self) -> dict[str, int]:
        with self.cond:
            return dict(self.received)

    def copy_dropped(self) -> dict[str, int]:
        with self.cond:
            return dict(self.dropped)

    def copy_refused(self) -> dict[str, int]:
        with self.cond:
            return dict(self.refused)

    def counts(self) -> Counts:
        with self.cond:
            return Counts(self.bad_frames, self.callback_errors, self.loop_errors,
                          self.last_error, self.jobs_started, self.jobs_ended)

    def clock_offsets(self) -> dict[str, tuple[int, int | None]]:
        with self.cond:
            return self.replies.clocks.offsets()

    def pending_acks(self) -> dict[str, tuple[bytes, int]]:
        with self.cond:
            return dict(self.replies.pending_ack)

    def wait(self, jobs: int | None, timeout: float | None, byes: int | None,
             started: int | None) -> bool:
        """See Subscriber.wait."""
        def done() -> bool:
            ok = jobs is None or self.jobs_ended >= jobs
            ok = ok and (started is None or self.jobs_started >= started)
            if byes is not None:
                said_bye = self.byes_let_go + sum(w.status != Status.RUNNING
                                                  for w in self.builder.t.workers.values())
                ok = ok and said_bye >= byes
            return ok

        with self.cond:
            return self.cond.wait_for(done, timeout)

    def stacks(self, worker: str, request: int, reason: str,
               timeout: float) -> dict[str, Any] | None:
        """See Subscriber.stacks."""
        with self.cond:
            self.stacks_asked.append((worker, request, reason))
            self.stacks_waited[request] = worker
            if self.wake_fd is not None:
                with contextlib.suppress(BlockingIOError):  # full: it wakes up all the same
                    os.write(self.wake_fd, b"!")
            try:
                if not self.cond.wait_for(lambda: request in self.stacks_got, timeout):
                    return None
                return self.stacks_got.pop(request)
            finally:
                self.stacks_waited.pop(request, None)
                self.stacks_got.pop(request, None)

    def ask_stragglers(self, now: float) -> None:
        """A running job that crosses the straggler rule gets its stacks taken, once while it
        straggles: its worker's sidecar sends them as a mark, which the record keeps (the
        receive thread, about once a second; at most MAX_STRAGGLERS_ASKED new ones a pass)."""
        with self.cond:
            running = self.live.stragglers(now)
            asked = {(wid, job): None for wid, job, _, _ in running
                     if (wid, job) in self._straggler_asked}  # those still straggling
            new = 0
            for wid, job, ran, limit in running:
                if (wid, job) in asked or new >= MAX_STRAGGLERS_ASKED:
                    continue
                asked[(wid, job)] = None
                new += 1
                self.stacks_asked.append((wid, next(self._trigger_ids),
                                          f"straggler: job {job} running {ran:.1f} s, over "
                                          f"the straggler line of {limit:.1f} s (1.5x the "
                                          "median job)"))
            self._straggler_asked = asked

    # -- room for new workers (the receive thread) ---------------------------------------------
    def gone(self, now: float, connected: Callable[[str], bool]) -> list[str]:
        """The workers that may be let go of to make room, those to go first first: gone
        (no connection speaks for them: never one whose connection is open, however silent)
        and done (said bye, or silent for over stale_after), those that said bye first, then
        the longest silent."""
        with self.cond:
            out = [(w.status == Status.RUNNING, self.last_seen.get(wid, 0.0), wid)
                   for wid, w in self.builder.t.workers.items() if self.may_let_go(wid, now,
                                                                                   connected)]
        return [wid for _, _, wid in sorted(out)]

    def may_let_go(self, wid: str, now: float, connected: Callable[[str], bool]) -> bool:
        w = self.builder.t.workers.get(wid)
        if w is None or connected(wid):
            return False
        return (w.status != Status.RUNNING
                or now - self.last_seen.get(wid, now) > self.limits.stale_after)

    def forget(self, wids: list[str]) -> None:
        """Let go of all the driver holds of these workers in memory: what it knows of them
        is written to the record first (facts), so timeline() and load() still have them
        whole."""
        with self.cond:
            self.write_facts()
            for wid in wids:
                self._forget(wid)

    def _forget(self, wid: str) -> None:
        with self.cond:
            w = self.builder.t.workers.get(wid)
            self.let_go += 1
            self.byes_let_go += w is not None and w.status != Status.RUNNING
            for store in (self.lost, self.received, self.dropped, self.not_kept, self.next_seq,
                          self.last_seen, self.last_wall, self.gone_wall):
                store.pop(wid, None)
            self.anchored.discard(wid)
            self.introduced.discard(wid)
            self.notes.forget(wid)
            for key in [k for k in self._straggler_asked if k[0] == wid]:
                del self._straggler_asked[key]
            for name in Facts.MAPS:  # what was written of it: in the file now
                getattr(self._written, name).pop(wid, None)
            self.builder.forget(wid)
            self.live.forget(wid)
            self.replies.forget(wid)

    def states(self) -> dict[str, str]:
        """See Subscriber.states."""
        now = time.monotonic()
        with self.cond:
            out: dict[str, str] = {}
            for wid, w in self.builder.t.workers.items():
                status = w.status
                if status == Status.RUNNING:
                    if self.replies.local(w) and not any(psutil.pid_exists(p) for p in
                                                         (w.pid, w.sidecar_pid) if p):
                        status = Status.DEAD
                        self.gone_wall.setdefault(wid, time.time_ns())
                    elif now - self.last_seen.get(wid, now) > self.limits.stale_after:
                        status = Status.STALE
                    elif not self.live.open_jobs(wid):
                        status = Status.IDLE
                out[wid] = status
            return out

    def rows(self) -> list[dict[str, object]]:
        """See Subscriber.live."""
        with self.cond:
            return self.live.rows(self.builder.t.workers, self.states(), self.lost,
                                  self.dropped, time.monotonic())

    def metrics(self, most: int) -> tuple[list[dict[str, Any]], dict[str, float], int]:
        """What the /metrics exporter shows, copied under the lock: a row per worker (at most
        `most`, the most recently heard from), the driver's own counts, and how many workers
        were left out."""
        with self.cond:
            now = time.monotonic()
            states = self.states()
            limit = straggler_limit(self.live.job_seconds)
            known = self.builder.t.workers
            ids = sorted(known, key=lambda wid: -self.last_seen.get(wid, 0.0))
            rows: list[dict[str, Any]] = []
            for wid in ids[:most]:
                w, live = known[wid], self.live.workers.get(wid)
                running = [] if live is None else [now - t0 for _, t0 in live.jobs.values()]
                rows.append({
                    "worker": wid, "host": w.host, "status": states.get(wid, ""),
                    "tree": {} if live is None else dict(live.tree),
                    "gpu_util": None if live is None else live.gpu_util,
                    "gpu_mem": None if live is None else live.gpu_mem,
                    "ended": {} if live is None else dict(live.ended),
                    "running": len(running),
                    "stragglers": 0 if limit is None else sum(r > limit for r in running),
                    "received": self.received.get(wid, 0), "lost": self.lost.get(wid, 0),
                    "dropped": self.dropped.get(wid, 0)})
            driver: dict[str, float] = {"workers": len(known), "bad_frames": self.bad_frames,
                      "callback_errors": self.callback_errors, "loop_errors": self.loop_errors,
                      "jobs_started": self.jobs_started, "jobs_ended": self.jobs_ended,
                      "kept_bytes": self.kept,
                      **{f"refused_{k}": v for k, v in self.refused.items()}}
            return rows, driver, max(len(ids) - most, 0)

    def facts(self, closed_wall: int | None = None) -> Facts:
        """What this driver knows that no frame says, and its workers' notes, bounded
        (record.NoteBudget)."""
        with self.cond:
            notes = {wid: list(self.notes.keep(wid, w.notes))
                     for wid, w in self.builder.t.workers.items()}
            record = self.record
            unwritten = 0 if record is None else record.dropped + record.failed
            return Facts(clocks=self.replies.clocks.offsets(), lost=dict(self.lost),
                         dropped=dict(self.dropped), states=self.states(),
                         last_wall=dict(self.last_wall), notes=notes, closed_wall=closed_wall,
                         gone_wall=dict(self.gone_wall), not_kept=dict(self.not_kept),
                         max_kept=self.limits.max_kept_bytes, unwritten=unwritten,
                         unwritten_why=None if record is None else record.last_error)

    def write_facts(self, closed_wall: int | None = None) -> None:
        """Append to the record what changed in the facts since they were last written (the
        receive thread, or the closing one): nothing when nothing did, so quiet workers cost
        the record nothing, and a worker's notes are written once each. What a tick writes
        is the facts of the workers whose frames came since the last (their last frame's
        time, counts), the notes they added, within their budget, and states that moved."""
        with self.cond:
            record = self.record
            if record is None:
                return
            if record is not self._written_to:  # a new file: every fact goes in once
                self._written, self._written_to = Facts(), record
            now = self.facts(closed_wall)
            delta = now.since(self._written)
            self._written = now
            # Appended under the lock: deltas must reach the file in the order they were taken.
            for part in () if delta is None else delta.encode_parts():
                record.append(part, FACTS)
