"""The worker's end of the sidecar: start it, talk to it over a socketpair, notice when it dies.

One link per worker process and settings, reused across jobs (see `get_link`). A link that
finds its sidecar dead says so with SidecarError; callers turn that into a timeline whose worker
status is "sidecar_lost" and run the job on, unmonitored.

Each link has a private directory (0700, under /dev/shm when there is one) for the span rings
of this process and of the processes it forks (recorder.py); the hello names it, the sidecar
reads the rings there and removes the directory when it exits. The pipe carries control only.
A sidecar that died (SIGKILL) leaves its directory: the next link's hello hands it to the new
sidecar (dead_rings), which counts what the dead one had not read and removes it.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .. import protocol
from ..config import Config, job_values, link_key, to_dict
from ..errors import ProtocolError, SidecarError
from . import recorder as spans
from .exits import at_exit, started_by_multiprocessing

START_TIMEOUT = 30.0
REPLY_TIMEOUT = 30.0
# How long a write to the sidecar may wait for room in the pipe while the sidecar runs but
# takes nothing (far behind a fast worker on a loaded machine). One stopped by SIGSTOP (a
# debugger, a frozen container) is given up on after FROZEN_S. Either way the job goes on
# unmonitored, instead of blocking for ever with the link's lock held.
WRITE_TIMEOUT = 30.0
# While it waits for an answer, the worker looks this often whether the sidecar is stopped,
# and gives up on one stopped this long (rather than wait REPLY_TIMEOUT for it).
FROZEN_LOOK_S = 0.25
FROZEN_S = 2.0


class SidecarLink:
    def __init__(self, config: Config, target_pid: int | None = None,
                 dead_rings: list[list[Any]] | None = None) -> None:
        self.config = config
        # [[directory, pid], ...]: ring directories of this process's sidecars that died, for
        # this one's hello; removed here if it never takes them.
        self.dead_rings = list(dead_rings or [])
        self.target_pid = os.getpid() if target_pid is None else target_pid
        self.worker_id = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.thread: threading.Thread | None = None  # the sidecar, when it runs in this process
        self._sock: socket.socket | None = None
        self._sock_id: tuple[int, int] | None = None  # what the pipe's descriptor refers to
        self._reader = protocol.PipeReader()
        self._inbox: list[tuple[str, dict[str, Any]]] = []
        # _lock orders writes; _read_lock lets one thread at a time read replies, which it
        # files in _inbox for whichever job they answer.
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self.rings: str | None = None  # the directory of the span rings
        self.writer: spans.Writer | None = None  # this process's ring
        self.ring_error: str | None = None
        self.dead = False
        self._stopped_since: float | None = None  # when the sidecar was first seen stopped

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.make_ring()
        try:
            self.spawn()
        except SidecarError:
            self.close()
            raise
        self.handshake()

    def make_ring(self, own: bool = True) -> None:
        """This process's span ring, in a new private directory: in /dev/shm (memory), else
        the temporary directory. Without room for one the jobs still run and are sampled;
        their spans are not recorded, and the worker's errors say so. own=False: the
        directory only, for other processes' rings (`run`, whose own process records none)."""
        for where in _ring_places():
            _remove_dead_rings(where)
            try:
                self.rings = _private_dir(where, f"workerscope-{os.getpid()}-{_PIDNS}-")
                if own:
                    self.writer = spans.Writer(
                        self.rings, spans.ring_slots(self.config.ring_records,
                                                     self.config.span_cpu),
                        self.config.span_cpu)
                return
            except OSError as err:
                self.ring_error = f"no span ring ({err}): spans are not recorded"
                self.remove_rings()

    def remove_rings(self) -> None:
        """Unmap this process's ring and remove the directory (what the sidecar does when it
        exits; the worker does it when the sidecar cannot)."""
        if self.writer is not None:
            spans.release(self.writer)
            self.writer = None
        if self.rings is not None:
            shutil.rmtree(self.rings, ignore_errors=True)
            self.rings = None
        for where, _ in self.dead_rings:
            shutil.rmtree(where, ignore_errors=True)
        self.dead_rings = []

    def spawn(self, serve: Callable[[socket.socket], object] | None = None) -> None:
        """Start the sidecar process; `handshake` then names its target and waits for it.
        serve: run the sidecar in a thread of this process instead, as serve(its end of the
        pipe), which closes that end when it returns. `workerscope run` and `attach` do: a
        process that only waits for its command has the CPU to spare, and a second
        interpreter's start-up cost more than all the sampling of a short command."""
        ours, theirs = socket.socketpair()
        # Room for bursts of job edges while the sidecar is busy sampling.
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self._sock_id = _identity(ours.fileno())
        if serve is not None:
            self._sock = ours
            self.thread = threading.Thread(target=serve, args=(theirs,), daemon=True,
                                           name="workerscope-sidecar")
            self.thread.start()
            return
        # Arguments carry only the pipe; the settings go in the hello (handshake).
        cmd = [sys.executable, "-m", "workerscope.sidecar", "--fd", str(theirs.fileno())]
        try:
            # A new session: a Ctrl-C meant for the job must not kill the sidecar before it has
            # delivered what it recorded. It exits on EOF of the pipe instead.
            self.proc = subprocess.Popen(
                cmd, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                start_new_session=True, close_fds=True,
            )
        except OSError as err:
            ours.close()
            raise SidecarError(f"could not start the sidecar ({err}); is workerscope installed?") from err
        finally:
            theirs.close()
        self._sock = ours

    def handshake(self, target_pid: int | None = None) -> None:
        if target_pid is not None:
            self.target_pid = target_pid
        try:
            self._write(protocol.encode_pipe(protocol.HELLO, {
                "pid": os.getpid(), "anchor": protocol.clock_anchor(), "target": self.target_pid,
                "config": to_dict(self.config), "rings": self.rings,
                "ring_error": self.ring_error, "dead_rings": self.dead_rings,
            }))
            ready = self._wait_for(protocol.READY, START_TIMEOUT)
        except SidecarError:
            self.close(wait=False)
            raise
        self.dead_rings = []  # the sidecar's now (it read them at its hello, then removed them)
        self.worker_id = ready["worker"]

    def close(self, wait: bool = False, hand_over: bool = False) -> list[list[Any]]:
        """Tell the sidecar this worker is done; it then reads the rings a last time, says bye
        to the driver and exits. hand_over: where the sidecar is gone, leave its ring
        directory (and those it was to take) for the next one, and return them as its
        dead_rings: what it had not read is counted there, not lost unsaid."""
        if self._sock is not None:
            try:
                if not self.dead:
                    self._write(protocol.encode_pipe(protocol.CLOSE, {}))
            except (OSError, SidecarError):
                self.dead = True
            self._let_go()
        if self.writer is not None:
            spans.release(self.writer)
            self.writer = None
        if self.dead and self.proc is not None and self.proc.poll() is None and self._stopped():
            # Given up on as stopped: it would hold its ring folder (and a process slot) for
            # ever. What it had not sent is lost with it, as it was once it stopped.
            self.proc.kill()
            self.proc.wait()
        # A sidecar waits bye_timeout for its bye's ack, longer while the driver says it is
        # still reading (up to MAX_BYE_WAIT_S): killed sooner, its last frames would be lost.
        patience = (max(self.config.bye_timeout, protocol.MAX_BYE_WAIT_S)
                    if self.config.bye_timeout > 0 else 0.0) + 10
        if wait and self.proc is not None:
            try:
                await_exit(self.proc, patience)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if wait and self.thread is not None:
            self.thread.join(timeout=patience)
        left: list[list[Any]] = []
        if not self._sidecar_running():
            # The sidecar is gone (or never came): nobody else will remove its rings, unless
            # they are handed to the next one.
            if hand_over and self.proc is not None and self.rings is not None:
                left = [*self.dead_rings, [self.rings, self.proc.pid]]
                self.rings, self.dead_rings = None, []
            self.remove_rings()
        self.dead = True
        return left

    def _stopped(self) -> bool:
        """Whether the sidecar process is stopped now (state T or t: SIGSTOP, a debugger)."""
        if self.proc is None:
            return False
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
                data = f.read()
            return data[data.rindex(b")") + 2:][:1] in (b"T", b"t")
        except (OSError, ValueError):
            return False

    def _frozen(self) -> bool:
        """Whether the sidecar process has been stopped (state T or t) for FROZEN_S: a busy
        one (a big job's timeline to build) is waited for, a stopped one is not."""
        now = time.monotonic()
        if not self._stopped():
            self._stopped_since = None
            return False
        if self._stopped_since is None:
            self._stopped_since = now
        return now - self._stopped_since >= FROZEN_S

    def _sidecar_running(self) -> bool:
        if self.thread is not None:
            return self.thread.is_alive()
        return self.proc is not None and self.proc.poll() is None

    @property
    def alive(self) -> bool:
        return not self.dead and self._sidecar_running()

    # -- jobs --------------------------------------------------------------------------------
    def job_start(self, job: int, name: str, out: str | None, keep: bool = True,
                  pid: int | None = None, t: int | None = None,
                  record: str | None = None, config: Config | None = None,
                  submitted: int | None = None) -> None:
        """keep: the sidecar keeps the job's frames for job_end(want_timeline=True) or `out`.
        pid and t: a job run by another process (`workerscope run`'s command), from when.
        record: a record file (record.py) the sidecar appends the job's frames to as it
        sends them, so a kill -9 of this process leaves them readable. config: the job's
        own settings (its job settings travel with it; the link's when not given).
        submitted: the wall-clock ns the job was submitted at (profiled.queued())."""
        body = {
            **job_values(self.config if config is None else config),
            "job": job, "name": name, "out": out, "keep": keep,
            "t": time.monotonic_ns() if t is None else t,
            "pid": os.getpid() if pid is None else pid,
            "tid": threading.get_native_id() if pid is None else pid,
        }
        if record is not None:
            body["record"] = record
        if submitted is not None:
            body["submitted"] = submitted
        self._write(protocol.encode_pipe(protocol.JOB_START, body))

    def job_end(self, job: int, status: str, error: str | None, want_timeline: bool,
                traceback: str | None = None) -> list[bytes] | None:
        """Close the job; with want_timeline, wait for the sidecar's frames of it. error:
        "Type: message" of what it raised, and traceback its (bounded) traceback."""
        # The sidecar reads the rings before it ends the job: its spans precede its end.
        body: dict[str, Any] = {"job": job, "t": time.monotonic_ns(), "status": status,
                                "error": error, "reply": want_timeline}
        if traceback:
            body["traceback"] = traceback
        self._write(protocol.encode_pipe(protocol.JOB_END, body))
        if not want_timeline:
            return None
        reply = self._wait_for(protocol.TIMELINE, REPLY_TIMEOUT, job=job)
        return list(reply["frames"])

    # -- pipe --------------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        with self._lock:
            self._write_locked(data)

    def _let_go(self) -> None:
        """Close the pipe, unless its number holds something else now: the job closed it (as
        closerange(3, ...) does) and opened a file of its own there, which must stay open."""
        if self._sock is None:
            return
        if self._ours():
            self._sock.close()
        else:
            self._sock.detach()
        self._sock = None

    def _ours(self) -> bool:
        """Whether the pipe's descriptor is still the pipe (one fstat)."""
        return self._sock is not None and _identity(self._sock.fileno()) == self._sock_id

    def _check_ours(self) -> None:
        if not self._ours():
            self.dead = True
            self._let_go()
            raise SidecarError("the pipe to the sidecar was closed by the job (its descriptor "
                               "holds something else now): the job goes on unmonitored")

    def _write_locked(self, data: bytes) -> None:
        sock = self._sock
        if sock is None or self.dead:
            raise SidecarError("the sidecar is gone")
        view = memoryview(data)
        progress = time.monotonic()
        room: select.poll | None = None
        while True:
            # Never into a descriptor the job has reused: checked again after each wait, as
            # another thread of the job may close it meanwhile.
            self._check_ours()
            sent = self._send_some(sock, view)
            if sent:
                view = view[sent:]
                if not view:
                    return
                progress = time.monotonic()
            if room is None:  # poll, not select: a descriptor past 1023 is fine
                room = select.poll()
                room.register(sock, select.POLLOUT)
            room.poll(int(FROZEN_LOOK_S * 1000))
            self._give_up_writing(time.monotonic() - progress)

    def _send_some(self, sock: socket.socket, view: memoryview) -> int:
        """The bytes of `view` the pipe takes now: 0 where it is full (the caller waits for
        room). Never blocking: the reply reader sets the socket's timeout while it waits.
        MSG_NOSIGNAL: a dead sidecar must not SIGPIPE a worker that restored SIG_DFL.
        SidecarError where the sidecar is gone."""
        try:
            return sock.send(view, socket.MSG_NOSIGNAL | socket.MSG_DONTWAIT)
        except (BlockingIOError, TimeoutError):
            return 0
        except OSError as err:
            self.dead = True
            raise SidecarError(f"the sidecar is gone ({err})") from err

    def _give_up_writing(self, idle: float) -> None:
        """Raise SidecarError (the link done: part of a message may be in the pipe) where the
        sidecar has taken nothing for `idle` s and is stopped, or is far behind."""
        if idle >= FROZEN_S and self._stopped():
            reason = f"is stopped (SIGSTOP, a debugger, a frozen container?) for {idle:.0f} s"
        elif idle >= WRITE_TIMEOUT:
            reason = f"took nothing for {WRITE_TIMEOUT:g} s"
        else:
            return
        self.dead = True
        raise SidecarError(f"the sidecar {reason}; the job goes on unmonitored")

    def _wait_for(self, kind: str, timeout: float, job: int | None = None) -> dict[str, Any]:
        """The next message of `kind` (for `job`, if given), reading the pipe if need be."""
        deadline = time.monotonic() + timeout
        if not self._read_lock.acquire(timeout=timeout):
            raise SidecarError(f"the sidecar did not answer within {timeout:g} s")
        try:
            return self._wait_locked(kind, deadline, timeout, job)
        finally:
            self._read_lock.release()

    def _wait_locked(self, kind: str, deadline: float, timeout: float,
                     job: int | None) -> dict[str, Any]:
        self._stopped_since = None  # a stop seen in an earlier wait says nothing of this one
        while True:
            for i, (k, body) in enumerate(self._inbox):
                if k == kind and (job is None or body.get("job") == job):
                    del self._inbox[i]
                    return body
            left = deadline - time.monotonic()
            if left <= 0 or self._sock is None:
                self.dead = True
                raise SidecarError(f"the sidecar did not answer within {timeout:g} s")
            self._check_ours()  # never read what is the job's
            self._sock.settimeout(min(left, FROZEN_LOOK_S))
            try:
                chunk = self._sock.recv(1 << 20)
            except TimeoutError:
                if self._frozen():
                    self.dead = True
                    raise SidecarError(
                        f"the sidecar is stopped (SIGSTOP, a debugger, a frozen container?) "
                        f"and has been for {FROZEN_S:g} s: the job goes on unmonitored") from None
                continue
            except OSError as err:
                self.dead = True
                raise SidecarError(f"the sidecar is gone ({err})") from err
            finally:
                if self._sock is not None:
                    self._sock.settimeout(None)
            if not chunk:
                self.dead = True
                raise SidecarError("the sidecar exited")
            self._stopped_since = None  # it answered: running again
            try:
                self._inbox.extend(self._reader.feed(chunk))
            except ProtocolError as err:
                self.dead = True
                raise SidecarError(f"the sidecar sent garbage: {err}") from err


# -- one link per process and settings -----------------------------------------------------------
_links: dict[tuple[object, ...], SidecarLink] = {}
_links_lock = threading.Lock()


def await_exit(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """proc.wait(timeout), woken by the exit itself (poll on a pidfd), not by Popen's own
    polling, whose sleeps double up to 50 ms: a sidecar that took 9 ms to exit kept the worker
    waiting 16, one that took 17 kept it 32. Where there is no pidfd, Popen's wait."""
    if proc.poll() is not None:
        return proc.returncode
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # before Linux 5.3; or reaped by someone else
        return proc.wait(timeout=timeout)
    try:
        if proc.poll() is not None:  # exited, or reaped by someone else, before the open: the
            return proc.returncode  # pidfd may then name a new process that took its pid
        exited = select.poll()
        exited.register(fd, select.POLLIN)
        if not exited.poll(max(int(timeout * 1000), 0)):
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    return proc.wait()


def _ring_places() -> Iterator[str]:
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        yield shm
    import tempfile  # only where /dev/shm has no room: ~1.3 ms of every `run` otherwise

    yield tempfile.gettempdir()


def _private_dir(where: str, prefix: str) -> str:
    """A new directory in `where` that only this user may enter, as tempfile.mkdtemp makes."""
    for _ in range(100):
        path = os.path.join(where, prefix + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free name for a directory in {where}")


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


# Ring directories are named workerscope-<worker pid>-<pid namespace>-<random>: pids mean
# something only in their namespace, and /dev/shm may be shared across containers.
_PIDNS = _pid_namespace()
_RING_DIR = re.compile(r"workerscope-(\d+)-(\d+)-")


def _remove_dead_rings(where: str) -> None:
    """Remove the ring directories of workers of this pid namespace that are gone. Their
    sidecar removes them, unless it died too (both SIGKILLed, say); one still reading after
    its worker's death has the rings mapped, and loses nothing."""
    try:
        names = os.listdir(where)
    except OSError:
        return
    for name in names:
        m = _RING_DIR.match(name)
        if m and int(m.group(2)) == _PIDNS and not os.path.exists(f"/proc/{m.group(1)}"):
            shutil.rmtree(os.path.join(where, name), ignore_errors=True)


# Links given up on (their sidecar stopped answering, or fell behind) whose sidecar may still
# run: told to finish (its pipe closed), reaped as it exits, waited for by close_all(wait=True).
_retired: list[SidecarLink] = []


def get_link(config: Config) -> SidecarLink:
    """The running link for these settings, started (or restarted after a death) on demand."""
    with _links_lock:
        _retired[:] = [old for old in _retired if old._sidecar_running()]  # reaps the exited
        link = _links.get(link_key(config))
        if link is not None and link.alive:
            return link
        dead: list[list[Any]] = []
        if link is not None:
            dead = link.close(hand_over=True)  # a dead sidecar's unread spans: the next one's
            if link._sidecar_running():
                _retired.append(link)
        started_by_multiprocessing()  # a fork child's os._exit runs no atexit handler
        link = SidecarLink(config, dead_rings=dead)
        _links[link_key(config)] = link
        link.start()
        return link


def _identity(fd: int) -> tuple[int, int] | None:
    """What a descriptor refers to (device, inode), None if it is closed."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def close_all(wait: bool = False) -> None:
    with _links_lock:
        links = [*_links.values(), *_retired]
        _links.clear()
        _retired.clear()
    for link in links:
        link.close(wait=wait)


def _forget_after_fork() -> None:
    # The sidecars belong to the parent. A forked child starts its own when it needs one, and
    # closes its copy of the pipe: else the sidecar would miss the EOF of the parent's death.
    global _links_lock
    for link in _links.values():
        link._let_go()
        link.dead = True
        # Its ring and directory belong to the parent (recorder.py gives the child its own).
        link.writer = None
        link.rings = None
        link.dead_rings = []
    _links.clear()
    _retired.clear()
    _links_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
at_exit(close_all)
