"""The Sidecar: the sampler process's whole service (its __main__ only parses arguments).

Its settings come in the worker's pipe hello (one Config, sent once). It reads the worker's
pipe, samples the worker's process tree while a job is open, sends every frame to the driver
(if any) and keeps each open job's frames to hand back at the job's end.
EOF on the pipe means the worker is gone: its death named (signal, exit status or OOM kill,
see death.py), a last sample, open jobs ended with that, their timelines still delivered
(driver and `out` file), then bye.
"""

from __future__ import annotations

import collections
import logging
import os
import select
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import protocol
from ..config import Config, config_from_dict, process_variable, public_endpoint, stacks_signal
from ..errors import ConfigError, ProtocolError, WorkerscopeError
from ..procfs import boot_id, net_namespace, read_net_dev
from ..protocol import Status
from ..units import fmt_bytes
from . import stacks
from .aggregate import Aggregator
from .deadlines import Cadences, Deadlines, cadences
from .death import DeathWatch
from .gpu import GPM_METRICS, GpuSampler
from .host import HostSampler
from .rings import EVERY_JOB, Rings, count_dead
from .selfcost import SelfCost
from .tree import ProcessTree

if TYPE_CHECKING:
    from ..record import RecordWriter
    from ..transport import Outbox

log = logging.getLogger("workerscope.sidecar")
HELLO_TIMEOUT = 30.0
IDLE_WAIT_NS = 3_600_000_000_000  # the longest poll when nothing is due (the pipe wakes it)
# How often the span rings are read while a job runs (and, between jobs, once a second).
DRAIN_NS = 50_000_000
IDLE_DRAIN_NS = 250_000_000  # while no ring exists: a new one is read this soon at the latest
_PROC = ["cpu_percent", "cpu_user_s", "cpu_system_s", "rss_bytes", "peak_rss_bytes", "uss_bytes",
         "pss_bytes", "read_bytes", "write_bytes", "read_chars", "write_chars", "num_threads",
         "num_fds", "ctx_switches_voluntary", "ctx_switches_involuntary", "gpu_mem_bytes",
         "gpu_util_percent"]
# Requests for stacks waiting while one dump is under way (sidecar/stacks.py); past it, the
# request is answered at once with an error.
STACKS_QUEUED = 8

METRICS = {
    "proc": _PROC,
    "tree": [*_PROC, "num_procs", "unreadable_procs", "net_sent_bytes", "net_recv_bytes",
             "net_sent_packets", "net_recv_packets", "gpu_devices"],
    "gpu<i>": ["util_percent", "mem_util_percent", "mem_used_bytes", "mem_total_bytes", "power_w",
               "temp_c", "sm_clock_mhz", *(name for name, _ in GPM_METRICS)],
    "gpu<i>/mig<g>": ["mem_used_bytes", "mem_total_bytes", *(name for name, _ in GPM_METRICS)],
    "host": ["cpu_percent", "cpu_percent_core<k>", "cpu_iowait_percent", "cpu_steal_percent",
             "mem_used_bytes", "mem_available_bytes", "mem_total_bytes", "swap_used_bytes",
             "cgroup_mem_limit_bytes", "cgroup_mem_used_bytes", "net_sent_bytes",
             "net_recv_bytes", "net_sent_packets", "net_recv_packets", "disk_read_bytes",
             "disk_write_bytes", "load_1m", "load_5m", "load_15m"],
    "thread": ["cpu_percent", "cpu_user_s", "cpu_system_s"],
    "sidecar": ["cpu_percent", "cpu_s", "rss_bytes", "sample_cost_s"],
}


class OpenJob:
    # Plain classes here and in rings.py and death.py, not dataclasses: making a dataclass
    # takes ~0.5 ms, and `workerscope run` pays the sidecar's imports once per command.
    __slots__ = ("frames", "job", "keep", "lost_before", "name", "out", "record", "stacks_at",
                 "start")

    def __init__(self, job: int, name: str, out: str | None, frames: list[bytes],
                 keep: bool = True) -> None:
        self.job = job
        self.name = name
        self.out = out
        self.frames = frames
        # Frames are kept only for a job whose timeline someone will collect (the worker or
        # `out`): a long job streaming to a driver would otherwise grow the sidecar without bound.
        self.keep = keep
        self.start: dict[str, Any] = {}  # its job_start body, for heartbeats
        self.stacks_at = 0  # monotonic ns: its stacks are taken then (stacks_after; 0: never)
        self.record: RecordWriter | None = None  # its frames, appended as they are sent
        self.lost_before = 0  # the rings' running count of lost records when it started


class Sidecar:
    def __init__(self, sock: socket.socket, target: int) -> None:
        self.sock = sock
        self.target = target
        self.config = Config()
        self.cadences: Cadences = cadences(self.config.interval)
        self.interval_ns = self.cadences.interval_ns
        # The loop's timers: "tick" (a sample, while a job is open), "heartbeat", "drain" (the
        # span rings) and "net" (a look for the target's own network namespace).
        self.deadlines = Deadlines()
        self.reader = protocol.PipeReader()
        self.aggregator = Aggregator(1)
        self.errors: list[str] = []
        self.outbox: Outbox | None = None
        # Built once, at the worker's hello, which names the target and the settings.
        self.tree: ProcessTree
        self.host: HostSampler
        self.gpu: GpuSampler | None = None
        self.watch: DeathWatch  # the worker at the pipe's other end, to name its death
        self.noted: set[str] = set()
        self.net_scope = "host"
        self.own_net_ns: int | None = None
        self.jobs: dict[int, OpenJob] = {}
        # Stacks (sidecar/stacks.py): the dump under way and whom it answers, the requests
        # waiting for it, when a trigger may take the next dump, and the triggers skipped.
        self.asking: stacks.Asking | None = None
        self.asked_for: tuple[str, int | None] = ("", None)  # (reason, request id)
        self.stacks_queue: collections.deque[tuple[str, int | None]] = collections.deque()
        self.stacks_next: dict[str, int] = {}  # trigger kind -> monotonic ns it may fire again
        self.stacks_skipped = 0
        self.memory_armed = True  # the memory trigger fires at a crossing, once
        self.closing = False  # the bye is sent: nothing more is asked of the tree
        self.seq = -1
        self.hello = b""
        self.hello_body: dict[str, Any] = {}  # in every heartbeat too, for a driver that starts late
        self.worker_id = ""
        self.last_sample_ns = 0
        self.last_sample = b""
        self.last_sample_edge = False
        self.last_sample_cost_ns = 0
        self.last_sample_cpu_ns: int | None = None
        self.cost: SelfCost | None = None  # the sidecar's own cost, sent with each sample
        # Test hook: pretend this host's wall clock is off by this much (and that it is
        # another host), to check the driver's clock-offset estimate. Never set in production.
        self.skew = int(process_variable("WORKERSCOPE_TEST_CLOCK_SKEW_NS") or 0)
        self.samples = 0
        # The worker's span rings (from its hello), and pipe messages read but not yet handled.
        self.rings: Rings | None = None
        self.first_job_pending = True
        self.pending: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        # Jobs whose ends a drain met (pump): ended once its spans are sent (finish_ending).
        self.ending: list[tuple[OpenJob, dict[str, Any]]] = []
        self.pipe_broken = False

    # -- frames ------------------------------------------------------------------------------
    def emit(self, kind: str, body: Mapping[str, Any], jobs: list[OpenJob] | None = None) -> bytes:
        self.seq += 1
        data = protocol.encode_frame(kind, self.worker_id, self.seq, body)
        if self.outbox is not None:
            self.outbox.send(data)
        for job in self.jobs.values() if jobs is None else jobs:
            if job.keep:
                job.frames.append(data)
            if job.record is not None:
                job.record.append(data)
        return data

    def sample(self, every_name: bool = False, flush: bool = False, edge: bool = False) -> None:
        """One sample to the driver and every open job. every_name: list every member as new
        (a job's first sample), so each job's own timeline can name its processes."""
        now = time.monotonic_ns()
        cpu = time.thread_time_ns()
        # A regular tick walks the tree only if it may have changed; a job's edge does, and
        # looks for processes that left it unseen too.
        new, gone = self.tree.discover(cheap=not edge, full=edge)
        if every_name:
            new = [(pid, m.ppid, m.name) for pid, m in self.tree.members.items()]
        tree, procs = self.tree.read(now, full=edge)  # a job's edges read every tier
        if self.tree.renamed:  # named again after an exec: the builder takes the last name
            new = [*new, *self.tree.renamed]
            self.tree.renamed = []
        threads = self.tree.read_threads(now)
        self.watch.tick(tree, procs)
        self.read_net(tree, now, bool(new) or edge)
        body: dict[str, Any] = {"t": now, "tree": tree, "procs": procs,
                                "host": self.host.read(now, full=edge)}
        self.stacks_triggers(now)
        if threads:
            body["threads"] = threads
        if self.gpu is None:
            # Here, not at start-up: NVML's init can take a while.
            self.gpu = GpuSampler(every_device=self.config.gpus == "all")
            now = time.monotonic_ns()  # and not counted in what a sample costs
            cpu = time.thread_time_ns()
        self.read_gpus(self.gpu, body, now)
        notes = self.take_notes(self.gpu)
        if notes:
            body["notes"] = notes
        if self.cost is not None:
            body["sidecar"] = self.cost.read(now, self.last_sample_cpu_ns)
        if new:
            body["new"] = [list(n) for n in new]
        if gone:
            body["gone"] = gone
        self.send_sample(body, flush, edge, now)
        self.last_sample_cpu_ns = time.thread_time_ns() - cpu

    def read_net(self, tree: dict[str, Any], now: int, changed: bool) -> None:
        """The tree's network counters, where it has a network namespace of its own."""
        if self.net_scope == "host" and (changed or self.deadlines.due("net", now)):
            # The target may enter a network namespace of its own after the hello (`unshare
            # -n CMD` does as it starts, and `run` says hello at once): look again when the
            # tree changed (an exec renames), at job edges, and once a second (~50 us a look).
            self.deadlines.set("net", now + self.cadences.net_look_ns)
            self.find_net_scope()
        if self.net_scope == "namespace":
            tree.update(read_net_dev(self.target) or {})

    def read_gpus(self, gpu: GpuSampler, body: dict[str, Any], now: int) -> None:
        """The GPUs, and each member's use of them, into a sample's body."""
        if not gpu.available:
            return
        tree, procs = body["tree"], body["procs"]
        gpus, per_pid = gpu.read(set(self.tree.members), now)
        body["gpus"] = gpus
        for pid, values in procs:
            values.update(per_pid.get(pid, {}))
        if gpu.sees_processes or per_pid:
            for key in ("gpu_mem_bytes", "gpu_util_percent"):
                tree[key] = sum(v.get(key, 0) for v in per_pid.values())
            tree["gpu_devices"] = gpu.gpus_in_use(set(self.tree.members))
        for xid in gpu.take_xids():
            self.watch.xids.append(xid)
            self.emit_mark(protocol.GPU_XID_MARK, xid)

    def take_notes(self, gpu: GpuSampler) -> list[str]:
        """What the tree, the GPUs and the host have to say since the last sample, once each."""
        notes = self.tree.take_notes() + gpu.take_notes() + [
            f"host: {k}: {v}" for k, v in self.host.errors.items() if f"host: {k}: {v}" not in self.noted]
        self.noted.update(notes)
        return notes

    def send_sample(self, body: dict[str, Any], flush: bool, edge: bool, now: int) -> None:
        """Aggregate a sample's body; send a frame when one is full (or flush)."""
        self.samples += 1
        frame = self.aggregator.add(body)
        if frame is None and flush:
            frame = self.aggregator.flush()
        if frame is not None:
            self.last_sample = self.emit(protocol.SAMPLE, frame)
        self.last_sample_ns = now
        self.last_sample_edge = edge
        self.last_sample_cost_ns = time.monotonic_ns() - now

    def flush_samples(self) -> None:
        frame = self.aggregator.flush()
        if frame is not None:
            self.last_sample = self.emit(protocol.SAMPLE, frame)

    def sampled_recently(self) -> bool:
        """Whether a job edge may share the last sample instead of taking its own: only when
        that sample was itself a job edge's, taken less than four sample-costs ago. Jobs of a
        millisecond then cost the sidecar a fraction of a core instead of overrunning it, and
        a job's end after a regular tick always gets its own final sample."""
        gap = min(max(4 * self.last_sample_cost_ns, 1_000_000), self.cadences.share_max_ns)
        return self.last_sample_edge and time.monotonic_ns() - self.last_sample_ns < gap

    # -- pipe messages -----------------------------------------------------------------------
    def configure(self, config: Config) -> None:
        """Take the worker's settings (from its hello): interval, driver, aggregation."""
        self.config = config
        self.cadences = cadences(config.interval)
        self.interval_ns = self.cadences.interval_ns
        self.aggregator = Aggregator(config.samples_per_frame)
        if config.endpoint:
            # Imported here: a sidecar with no driver to send to never loads pyzmq (~20 ms).
            import zmq

            from ..transport import Outbox

            try:
                self.outbox = Outbox(config.endpoint, config.send_queue)
            except zmq.ZMQError as err:
                # The job goes on; its timeline still reaches the worker and the out file.
                self.errors.append("cannot connect to the driver at "
                                   f"{public_endpoint(config.endpoint)}: {err}")
                log.warning("%s", self.errors[-1])

    def on_hello(self, body: dict[str, Any]) -> None:
        if body.get("target"):
            self.target = int(body["target"])
        try:
            self.configure(config_from_dict(body.get("config") or {}))
        except ConfigError as err:
            # A hello from this package's own worker always validates; keep the defaults
            # rather than leave the worker without its sidecar.
            self.errors.append(f"bad settings in hello: {err}")
        every = self.cadences
        self.tree = ProcessTree(self.target, exclude=frozenset({os.getpid()}),
                                uss_every_ns=every.uss_every_ns, min_rate_ns=every.min_rate_ns,
                                interval_ns=every.interval_ns, all_threads_of=self.target)
        self.host = HostSampler(self.target)
        self.cost = SelfCost(every.min_rate_ns)
        # EOF on the pipe is the death of the process that holds its other end (the worker;
        # under `run` and `attach`, the CLI), not necessarily of the target.
        self.watch = DeathWatch(int(body.get("pid") or self.target))
        if body.get("ring_error"):
            self.errors.append(str(body["ring_error"]))
        if body.get("rings"):
            self.rings = Rings(str(body["rings"]), int(body.get("pid") or self.target),
                               body.get("dead_rings"))
        elif body.get("dead_rings"):  # no ring of its own: what they held unread goes in errors
            self.errors.extend(count_dead(body["dead_rings"])[1])
        self.own_net_ns = net_namespace(os.getpid())
        self.find_net_scope()
        host = socket.gethostname()
        self.worker_id = protocol.worker_id(host, self.target, os.getpid(), self.config.node)
        hello: protocol.HelloBody = {
            "node": self.config.node, "host": host, "pid": self.target, "sidecar_pid": os.getpid(),
            "interval": self.config.interval, "anchor": self._anchor(),
            "boot_id": boot_id() + ("-skewed" if self.skew else ""),
            "metrics": METRICS, "net_scope": self.net_scope,
        }
        self.hello = self.emit(protocol.HELLO, hello, jobs=[])
        self.hello_body = {k: v for k, v in hello.items() if k != "metrics"}
        self.reply(protocol.READY, {"worker": self.worker_id, "pid": os.getpid()})

    def find_net_scope(self) -> None:
        """/proc has no per-process network bytes. A tree in a network namespace of its own
        has its own counters; otherwise network is host-wide and labelled so."""
        ns = net_namespace(self.target)
        if ns and ns != self.own_net_ns:
            self.net_scope = "namespace"  # for good: a zombie target's namespace reads as gone

    def _anchor(self) -> list[int]:
        wall, mono = protocol.clock_anchor()
        return [wall + self.skew, mono]

    def on_job_start(self, body: dict[str, Any]) -> None:
        job = OpenJob(int(body["job"]), str(body.get("name", "job")), body.get("out"), [self.hello],
                      keep=bool(body.get("keep", True)) or bool(body.get("out")))
        if self.rings is not None:
            job.lost_before = self.rings.lost
            tid = body.get("tid")
            self.rings.jobs.start(job.job, int(body.get("pid", self.target)),
                                  None if tid is None else int(tid),
                                  int(body.get("t", time.monotonic_ns())))
        self.first_job_pending = False
        first = not self.jobs
        reset = first and bool(body.get("reset_peak", self.config.reset_peak))
        if body.get("tid") is not None:  # the job's own CPU is its thread's (attribution)
            self.tree.watch_thread(int(body.get("pid", self.target)), int(body["tid"]))
        if first:
            # Per-job peaks in a warm worker: the kernel's high-water marks restart now.
            self.tree.discover()
            # A per-job setting (Config's job settings travel in each job_start): a warm
            # sidecar's first hello must not decide it for every later job.
            if reset:
                self.tree.reset_peaks()
            self.watch.job_started()
        if body.get("record"):
            self.open_record(job, str(body["record"]))
        self.jobs[job.job] = job
        after = body.get("stacks_after", self.config.stacks_after)
        if isinstance(after, (int, float)) and after > 0:
            job.stacks_at = int(body.get("t", time.monotonic_ns())) + int(after * 1e9)
        job.start = {
            "job": job.job, "name": job.name, "t": body.get("t", time.monotonic_ns()),
            "pid": body.get("pid", self.target), "tid": body.get("tid"),
            "anchor": self._anchor(),
        }
        submitted = body.get("submitted")
        if type(submitted) is int:
            job.start["submitted"] = submitted
        self.emit(protocol.JOB_START, job.start, jobs=[job])
        if self.sampled_recently() and not reset:
            # Back-to-back tiny jobs come faster than full samples can be taken: share the
            # last one rather than fall behind and fill the worker's pipe. Not across a
            # reset of the peaks: that sample holds the peak the reset just cleared.
            if job.keep and self.last_sample:
                job.frames.append(self.last_sample)
        else:
            self.sample(every_name=True, flush=True, edge=True)
        if first and self.deadlines.at("tick") < time.monotonic_ns():
            # Keep the grid of a previous job if it is still ahead: back-to-back jobs shorter
            # than the interval would otherwise restart it each time and never see a tick.
            self.deadlines.set("tick", time.monotonic_ns() + self.interval_ns)
        # The rings are drained every DRAIN_NS while a job runs; with none open the next
        # drain was set a heartbeat away, and the first job's spans waited for it.
        soon = time.monotonic_ns() + DRAIN_NS
        if self.deadlines.at("drain") > soon:
            self.deadlines.set("drain", soon)

    def drain_rings(self, final: bool = False, now: int | None = None) -> None:
        """Send what the span rings hold as spans/mark frames, each to its job. The counters
        are read first, then the pipe: a job's first spans may be in a ring before its
        job_start was read, and are read only once the job is known. final: the worker is
        gone; open spans end at `now`, cut short, and the rings are removed."""
        rings = self.rings
        if rings is None or (not final and self.first_job_pending):
            # Before the first job_start nothing read could be given its job: under
            # `workerscope run` the command records from its first import, before the job
            # is announced. What waits stays in the rings.
            return
        upto = rings.scan()
        if not final and rings.idle:
            return  # no process of the tree records spans (yet): nothing to read
        if not final:
            self.pump()
        for kind, body, job_id in rings.frames(None if final else upto, final,
                                               now or time.monotonic_ns()):
            for tid, _ in body.get("threads", ()):  # a thread that records spans: its own CPU
                self.tree.watch_thread(int(body["pid"]), int(tid))  # from the next tick on
            job = (self.jobs.get(job_id) or self.ending_job(job_id)) if job_id is not None else None
            self.emit(kind, body, jobs=None if job_id == EVERY_JOB else [job] if job else [])
        crashed = rings.take_crashed()
        if crashed:  # a process of the tree died of a fatal signal while the worker lives
            self.crash_stacks(crashed)
        if final:
            rings.close()
            self.rings = None
        self.finish_ending()

    def pump(self) -> None:
        """Read what the worker has already written to the pipe, without waiting, and start
        the jobs it announced (handled before the messages that precede them: a job start
        only opens a job). The rest waits in `pending` for the loop, in order."""
        while True:
            try:
                chunk = self.sock.recv(1 << 20, socket.MSG_DONTWAIT)
            except OSError:  # nothing more now (EAGAIN), or the pipe broke: the loop sees it
                break
            if not chunk:
                break  # EOF: the loop's next read sees it too
            try:
                self.pending.extend(self.reader.feed(chunk))
            except ProtocolError as err:
                self.errors.append(f"bad pipe message: {err}")
                self.pipe_broken = True
                break
        # In order, up to the last job start: a job's end is never handled after a start that
        # came later (starts raced ahead of ends, and a fast worker's jobs piled up open). An
        # end met here waits for the drain that called this (its spans go first, see
        # ending), so its job leaves the open ones now.
        last = max((i for i, m in enumerate(self.pending) if m[0] == protocol.JOB_START),
                   default=-1)
        for _ in range(last + 1):
            kind, body = self.pending[0]
            if kind == protocol.CLOSE:
                break
            self.pending.popleft()
            if kind == protocol.JOB_END:
                self.defer_end(body)
            else:
                self.handle(kind, body)

    def defer_end(self, body: dict[str, Any]) -> None:
        """A job end met while the rings are being drained: its job is closed to what comes
        after (its end time known to the rings, out of the open jobs), and ended once this
        drain has sent its spans (finish_ending)."""
        try:
            job = self.jobs.pop(int(body["job"]), None)
        except (KeyError, TypeError, ValueError) as err:
            self.errors.append(f"bad job_end message: {err!r}")
            return
        if job is None:
            return
        if self.rings is not None:
            self.rings.jobs.end(job.job, int(body.get("t", time.monotonic_ns())))
        self.ending.append((job, body))

    def ending_job(self, job_id: int) -> OpenJob | None:
        return next((job for job, _ in self.ending if job.job == job_id), None)

    def finish_ending(self) -> None:
        """End the jobs whose ends were met during a drain, in order, now that their spans
        are sent."""
        while self.ending:
            job, body = self.ending.pop(0)
            self.jobs[job.job] = job  # end_job takes it from the open jobs
            self.complete_end(job, body)

    def on_job_end(self, body: dict[str, Any]) -> None:
        job = self.jobs.get(int(body["job"]))
        if job is None:
            return
        if self.rings is not None:
            # The job's spans go before its end (the worker wrote them before it sent this).
            self.rings.jobs.end(job.job, int(body.get("t", time.monotonic_ns())))
            self.drain_rings()
        if job.job in self.jobs:  # not ended meanwhile (a drain ends what it met)
            self.complete_end(job, body)

    def complete_end(self, job: OpenJob, body: dict[str, Any]) -> None:
        """A job's last sample, its end frame, and its frames back to the worker if asked."""
        if not self.sampled_recently():
            self.sample(flush=True, edge=True)
        else:
            self.flush_samples()  # readings gathered for samples_per_frame belong to this job
        self.end_job(job, body.get("t", time.monotonic_ns()), str(body.get("status", Status.OK)),
                     body.get("error"), traceback=body.get("traceback"))
        if body.get("reply"):
            self.reply(protocol.TIMELINE, {"job": job.job, "frames": job.frames})

    def end_job(self, job: OpenJob, t: int, status: str, error: Any,
                death: dict[str, Any] | None = None, traceback: object = None) -> None:
        body: protocol.JobEndBody = {"job": job.job, "t": t, "status": status,
                                     "error": None if error is None else str(error)}
        if death is not None:
            body["death"] = death
        if isinstance(traceback, str) and traceback:
            body["traceback"] = traceback
        self.emit(protocol.JOB_END, body, jobs=[job])
        if self.rings is not None and (job.keep or job.record is not None):
            # The job's own timeline counts what was lost while it ran, not the rings' running
            # total since the sidecar started (the driver's, in the frames sent).
            own = protocol.encode_frame(protocol.SPANS, self.worker_id, self.seq, {
                "pid": self.target, "records": [],
                "spans_lost_job": max(self.rings.lost - job.lost_before, 0)})
            if job.keep:
                job.frames.append(own)
            if job.record is not None:
                job.record.append(own)
        del self.jobs[job.job]
        if job.record is not None:
            job.record.close()
        if job.out:
            self.write_out(job)

    def open_record(self, job: OpenJob, path: str) -> None:
        """Append the job's frames to a record file from now on (its hello first). A path
        that cannot be written is said once; the job goes on without it."""
        # Imported here: a sidecar with no record to write never loads the timeline's modules.
        from ..record import RecordWriter

        try:
            job.record = RecordWriter(path, mode=0o600)
        except WorkerscopeError as err:
            self.errors.append(str(err))
            log.warning("%s", err)
            return
        job.record.append(self.hello)

    def write_out(self, job: OpenJob) -> None:
        # Imported here: most sidecars never write a file, and this keeps their start-up short.
        from ..builder import build
        from ..export.files import save
        from ..timeline import out_path

        path = out_path(str(job.out), pid=self.target, job=job.job)
        try:
            save(build(job.frames), path)
        except Exception as err:  # noqa: BLE001 - an exporter's failure must not kill the sidecar
            # A full disk or a bad path must not lose the rest: the driver still has the frames.
            self.errors.append(f"could not write {path}: {err}")
            log.warning("could not write %s: %s", path, err)

    def reply(self, kind: str, body: dict[str, Any]) -> None:
        try:
            self.sock.sendall(protocol.encode_pipe(kind, body))
        except OSError as err:  # the worker is gone; EOF will follow on the read side
            self.errors.append(f"worker pipe: {err}")

    # -- main loop ---------------------------------------------------------------------------
    def run(self) -> int:
        closed = self.loop()
        gone = time.monotonic_ns()  # spans open in the rings end here, cut short
        notes = []
        if self.jobs:
            # First thing: the worker's exit status lasts only until its parent reaps it.
            death = self.watch.after_eof()
            if self.gpu is not None:  # NVML's accounting outlives the process
                death.figures.update(self.gpu.lifetime(self.watch.pid))
            self.poll_stacks(force=True)  # a dump under way: what the tree wrote before it ended
            self.crash_stacks()  # before the last drain, which removes the ring directory
            self.drain_rings(final=True, now=gone)
            self.sample(flush=True)
            now = time.monotonic_ns()
            for job in list(self.jobs.values()):
                self.end_job(job, now, death.status, death.error, death.figures)
            status = Status.KILLED
            notes.append(f"died inside a job: {death.error}")
        else:
            self.poll_stacks(force=True)
            self.crash_stacks()  # a process that died of a fatal signal between jobs
            self.drain_rings(final=True, now=gone)
            status = Status.EXITED if closed else Status.ENDED
        return self.bye(status, notes)

    def loop(self) -> bool:
        """Serve the pipe (and the driver's pings) until close (True) or EOF (False)."""
        # select.poll: a sidecar with no driver never imports pyzmq. The driver's socket is
        # made at the hello (its settings come there), so it joins the poll once it exists:
        # its pings are answered while jobs run, not only during the bye.
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        driver_fd: int | None = None
        started = time.monotonic()
        while True:
            if self.outbox is not None and driver_fd is None:
                driver_fd = self.outbox.fd
                poller.register(driver_fd, select.POLLIN)
            if self.serve_pending():
                return True
            if self.pipe_broken:
                return False
            timeout_ms = self.poll_timeout(time.monotonic_ns())
            if not self.worker_id:
                if time.monotonic() - started > HELLO_TIMEOUT:
                    return False  # no hello: nobody to serve
                timeout_ms = 100
            ready = dict(poller.poll(timeout_ms))
            if self.sock.fileno() in ready:
                closed = self.read_pipe()
                if closed is not None:
                    return closed
            if self.outbox is not None:
                # ZeroMQ's descriptor only signals that something changed: read all there is.
                self.on_driver(self.outbox.receive())
            self.run_timers()

    def poll_timeout(self, now: int) -> int:
        """How long the loop may wait (ms) before a timer is due."""
        # Heartbeats are for a driver: without one they need no wake-up of their own.
        names = ["heartbeat"] if self.outbox is not None else []
        if self.jobs:
            names.append("tick")
        if self.rings is not None and not (self.jobs and self.rings.idle
                                           and self.interval_ns <= IDLE_DRAIN_NS):
            names.append("drain")  # else the next tick looks for a ring
        if self.asking is not None:
            names.append("stacks")
        wake = self.deadlines.next_wake(names, now + IDLE_WAIT_NS)
        return max(0, (wake - now) // 1_000_000) + 1

    def read_pipe(self) -> bool | None:
        """Read what the worker sent and handle it: True at its close, False at EOF or a bad
        message, None to go on."""
        try:
            chunk = self.sock.recv(1 << 20)
        except OSError:
            chunk = b""
        if not chunk:
            return False
        try:
            messages = self.reader.feed(chunk)
        except ProtocolError as err:
            self.errors.append(f"bad pipe message: {err}")
            return False
        self.pending.extend(messages)
        return True if self.serve_pending() else None

    def run_timers(self) -> None:
        """The heartbeat, the tick and the ring drain, each if due."""
        deadlines = self.deadlines
        now = time.monotonic_ns()
        if self.worker_id and deadlines.due("heartbeat", now):
            self.heartbeat(now)
        if self.jobs and deadlines.due("tick", now):
            self.sample()
            # Tick on a fixed grid; if a sample overran whole intervals, skip them.
            now = time.monotonic_ns()
            deadlines.advance("tick", self.interval_ns, now)
        if self.asking is not None and deadlines.due("stacks", now):
            self.poll_stacks()
        if self.rings is not None and deadlines.due("drain", now):
            self.drain_rings()
            # While no process records spans (`run` of a command that is not Python),
            # looking for a first ring 4 times a second, at a tick when ticks are that
            # frequent, spares the wake-ups in between.
            idle = self.rings is not None and self.rings.idle
            deadlines.set("drain", time.monotonic_ns() + (
                (IDLE_DRAIN_NS if idle else DRAIN_NS) if self.jobs
                else int(protocol.HEARTBEAT_S * 1e9)))

    def serve_pending(self) -> bool:
        """Handle the pipe messages read so far, in order; True at the worker's close."""
        while self.pending:
            kind, body = self.pending.popleft()
            if kind == protocol.CLOSE:
                return True
            self.handle(kind, body)
        return False

    def heartbeat(self, now: int) -> None:
        self.deadlines.set("heartbeat", now + int(protocol.HEARTBEAT_S * 1e9))
        if self.outbox is not None:
            # A driver that starts after this sidecar learns from any heartbeat who it is
            # and which jobs are open (driver/late.py).
            beat: protocol.HeartbeatBody = {
                "t": now, "dropped": self.outbox.dropped, "jobs": sorted(self.jobs),
                "hello": self.hello_body, "open": [j.start for j in self.jobs.values()]}
            if self.rings is not None and self.jobs:
                # The span each job is in now: a live view shows what a long job is doing,
                # not the last span it finished.
                beat["spans_open"] = self.rings.innermost_open(self.jobs)
            self.emit(protocol.HEARTBEAT, beat, jobs=[])

    def on_driver(self, frames: list[protocol.Frame]) -> None:
        for frame in frames:
            if frame.kind == protocol.PING:
                body = frame.body
                pong: protocol.PongBody = {"id": body.get("id"), "t0": body.get("t0"),
                                           "t1": time.time_ns() + self.skew}
                self.emit(protocol.PONG, pong, jobs=[])
            elif frame.kind == protocol.STACKS:
                request = frame.body.get("id")
                reason = str(frame.body.get("reason") or "asked")[:300]
                if not isinstance(request, int) or isinstance(request, bool):
                    request = None
                if request is not None and request < 0:  # the driver's trigger: a straggler
                    self.trigger("straggler", reason, time.monotonic_ns(), request)
                else:
                    self.dump_stacks(reason, request)

    # -- stacks (sidecar/stacks.py) -----------------------------------------------------------
    def stacks_triggers(self, now: int) -> None:
        """At each sample: a job that has run `stacks_after` s, or the worker's memory cgroup
        reaching `stacks_memory` of its limit (so that an OOM kill comes with what the job was
        doing just before) takes a dump of stacks. The memory trigger fires once each time
        the working set crosses the line, again only once it fell 5% of the limit below."""
        if not self.jobs:
            return
        for job in self.jobs.values():
            if job.stacks_at and now >= job.stacks_at:
                ran = (now - int(job.start.get("t", now))) / 1e9
                if self.trigger("stacks_after", f"stacks_after: job {job.job} "
                                f"({job.name[:100]}) has run {ran:.1f} s", now):
                    job.stacks_at = 0  # else it waits its turn: taken late, not dropped
                break
        fraction = self.config.stacks_memory
        memory = self.watch.memory() if fraction else None
        if memory is None:
            return
        usage, limit = memory
        if usage < (fraction - 0.05) * limit:  # its working set is lower still
            self.memory_armed = True
            return
        if usage < fraction * limit or not self.memory_armed:
            return
        used = self.watch.working_set(usage)
        if used >= fraction * limit:
            self.memory_armed = False
            self.trigger("memory", f"memory: its cgroup holds {fmt_bytes(used)}, "
                         f"{used / limit:.0%} of its limit of {fmt_bytes(limit)} "
                         f"(stacks_memory {fraction:g})", now)

    def trigger(self, kind: str, reason: str, now: int, request: int | None = None) -> bool:
        """A dump of stacks no one asked for, at most one of each kind (memory,
        stacks_after, straggler) every `stacks_every` s; one past that is skipped and
        counted (the next dump, and the bye's notes, say how many)."""
        if now < self.stacks_next.get(kind, 0):
            self.stacks_skipped += 1
            return False
        self.stacks_next[kind] = now + int(self.config.stacks_every * 1e9)
        self.dump_stacks(reason, request)
        return True

    def crash_stacks(self, pids: list[int] | None = None) -> None:
        """The Python stacks faulthandler wrote as a process of the tree (each of `pids`, or
        any) died of a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGILL): a mark for
        each open job."""
        if self.rings is None:
            return
        crashes = stacks.crashes(self.rings.dir, pids)
        for proc in crashes:
            stacks.name_threads(proc, self.rings.threads_of(proc["pid"]))
        if crashes:
            self.emit_stacks({"reason": "crash", "request": None, "processes": crashes})

    def dump_stacks(self, reason: str, request: int | None = None) -> None:
        """Have every process of the tree that has workerscope loaded dump every thread's
        Python stack (what the others are doing is read from /proc); sent as a mark named
        "stacks" once read (poll_stacks), while the loop goes on sampling. One dump at a
        time: a request meanwhile waits its turn (STACKS_QUEUED of them)."""
        if self.closing:
            return
        if self.asking is not None:
            if len(self.stacks_queue) < STACKS_QUEUED:
                self.stacks_queue.append((reason, request))
            else:
                self.emit_stacks({"reason": reason, "request": request, "processes": [],
                                  "error": f"{STACKS_QUEUED} requests for stacks wait already"})
            return
        sig = stacks_signal()
        if self.rings is None or sig is None:
            error = ("no process of this tree records spans (no ring folder): none can dump "
                     "its stacks" if sig is not None
                     else "WORKERSCOPE_STACKS_SIGNAL names no usable signal")
            self.emit_stacks({"reason": reason, "request": request, "error": error,
                              "processes": [stacks.describe(pid)
                                            for pid in sorted(self.tree.members)]})
            return
        self.asking = stacks.Asking(self.rings.dir, sorted(self.tree.members), sig)
        self.asked_for = (reason, request)
        self.deadlines.set("stacks", time.monotonic_ns() + int(stacks.POLL_S * 1e9))

    def poll_stacks(self, force: bool = False) -> None:
        """Look at the dump under way: sent once whole (or its wait is over, or `force`),
        and the next request begun."""
        asking = self.asking
        if asking is None:
            return
        if not asking.poll(force):
            self.deadlines.set("stacks", time.monotonic_ns() + int(stacks.POLL_S * 1e9))
            return
        self.asking = None
        reason, request = self.asked_for
        processes = asking.processes()
        if self.rings is not None:
            self.drain_rings()  # the spans open now, and the threads named since the last drain
            for proc in processes:
                stacks.name_threads(proc, self.rings.threads_of(proc["pid"]))
        attrs: dict[str, Any] = {"reason": reason, "request": request, "processes": processes}
        if self.stacks_skipped:
            attrs["skipped"] = self.stacks_skipped
        self.emit_stacks(attrs)
        while self.stacks_queue and self.asking is None:
            self.dump_stacks(*self.stacks_queue.popleft())

    def emit_stacks(self, attrs: dict[str, Any]) -> None:
        """A dump of stacks as a mark named "stacks", for every open job (or the worker's
        when none is), cut to fit a frame."""
        stacks.fit(attrs)
        self.emit_mark(protocol.STACKS_MARK, attrs)

    def emit_mark(self, name: str, attrs: dict[str, Any]) -> None:
        """A mark of the sidecar's (stacks, an Xid error), for every open job (or the
        worker's when none is)."""
        now = time.monotonic_ns()
        open_jobs: list[OpenJob | None] = [*self.jobs.values()] or [None]
        for job in open_jobs:
            record = protocol.SpanRecord(protocol.RECORD_MARK, None if job is None else job.job,
                                         0, None, name, now, now, self.target,
                                         attrs, None)
            for kind, body, _ in protocol.span_bodies(self.target, [record], []):
                self.emit(kind, body, jobs=[] if job is None else [job])

    def handle(self, kind: str, body: dict[str, Any]) -> None:
        if kind != protocol.HELLO and not self.worker_id:
            self.errors.append(f"{kind} before hello ignored")
            return
        try:
            if kind == protocol.HELLO:
                self.on_hello(body)
            elif kind == protocol.JOB_START:
                self.on_job_start(body)
            elif kind == protocol.JOB_END:
                self.on_job_end(body)
        except (KeyError, TypeError, ValueError, IndexError) as err:
            self.errors.append(f"bad {kind} message: {err!r}")

    def bye(self, status: str, notes: list[str] | None = None) -> int:
        if not self.worker_id:
            return 1
        self.flush_samples()
        self.poll_stacks(force=True)
        self.closing = True
        if self.stacks_skipped:
            notes = [*(notes or []), f"stacks: {self.stacks_skipped} dump(s) a trigger asked "
                     f"for were skipped: at most one every {self.config.stacks_every:g} s "
                     "(stacks_every)"]
        if self.outbox is None:
            return 0
        body: protocol.ByeBody = {
            "t": time.monotonic_ns(), "status": status, "samples": self.samples,
            "errors": self.errors[-20:], "notes": notes or [], "sent": self.outbox.sent + 1,
            "dropped": self.outbox.dropped}
        self.emit(protocol.BYE, body, jobs=[])
        # Skipped at once when no driver was ever heard from and a connection failed.
        self.outbox.wait_ack(self.seq, self.config.bye_timeout, on_other=self.on_driver,
                              progress=True)
        self.outbox.close()
        from ..transport import not_delivered

        said = not_delivered(self.outbox.bye_wait, self.outbox.endpoint,
                             f"this worker's {self.seq + 1} frame(s)")
        if said:
            log.warning("%s", said)
        return 0
