"""Every thread's Python stack, written on a signal by CPython's faulthandler: the worker's side
of "what is it doing right now".

Installed once per process that records into a sidecar's ring directory (recorder.activate):
faulthandler.register(STACKS_SIGNAL, file=<dir>/<pid>.stacks, all_threads=True, chain=True).
faulthandler's handler is C, run in the signal handler itself: it reads every thread's frames
without the GIL, so a thread stuck in C code holding the GIL (a catastrophic regex, a long
numpy call) still shows its stack, and no ptrace, root or CAP_SYS_PTRACE is needed: the
sidecar, this process's own child, sends the signal and reads the file.

The signal is SIGRTMIN + 7 unless WORKERSCOPE_STACKS_SIGNAL names another (a number, or a name
such as SIGUSR2). A handler the job installed first is never replaced: where the signal has a
Python handler, faulthandler chains to it (chain=True: the job's handler runs after the dump);
where it has one this module cannot see (installed from C), nothing is installed and the
sidecar says so when asked. Nothing runs per call or per tick: until the signal comes, the
cost is one sigaction at install.

A forked child undoes the parent's registration and installs its own when its ring is made
(its file, its pid): the parent's file stays the parent's.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
from typing import IO

from .. import procfs
from ..config import process_variable, stacks_signal

log = logging.getLogger("workerscope")

SIGNAL_VARIABLE = "WORKERSCOPE_STACKS_SIGNAL"
SUFFIX = ".stacks"
FATAL = (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT, signal.SIGILL)
REFUSED_SUFFIX = ".nostacks"
_installed: dict[int, tuple[int, IO[bytes], str]] = {}  # pid -> (signal, its file, the folder)
_refused: dict[int, str] = {}  # pid -> why nothing was installed
_crash_file: IO[bytes] | None = None  # where faulthandler.enable writes, if this module enabled it


def install(directory: str) -> None:
    """Have faulthandler dump every thread's stack to <directory>/<pid>.stacks on the stacks
    signal, once per process. Never raises: monitoring must not break the job."""
    pid = os.getpid()
    if pid in _installed:
        return
    if pid in _refused:
        _say_refused(directory, pid)
        return
    sig = stacks_signal()
    if sig is None:
        log.warning("workerscope: %s=%r is not a signal stacks can be asked with: stacks on "
                    "demand are off", SIGNAL_VARIABLE, process_variable(SIGNAL_VARIABLE))
        _refuse(directory, pid, f"{SIGNAL_VARIABLE} names no usable signal")
        return
    try:
        current = signal.getsignal(sig)
    except ValueError:
        current = None
    if current is None or (current in (signal.SIG_DFL, signal.SIG_IGN)
                           and procfs.catches("self", sig)):
        # A handler installed from C (Python's own table does not know it): leave it alone.
        _refuse(directory, pid, f"signal {sig} has a handler installed from C code (not "
                                f"replaced): set {SIGNAL_VARIABLE} to a signal the job leaves "
                                "alone")
        return
    path = os.path.join(directory, f"{pid}{SUFFIX}")
    try:
        # Made under another name and renamed once the handler is in: a process with a
        # <pid>.stacks file always has its handler (the sidecar checks again before each
        # signal: an exec or a closed ring takes the handler away). O_APPEND: the sidecar
        # empties the file after each dump it reads, and the next dump starts at 0.
        fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
                     | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        f = os.fdopen(fd, "wb", buffering=0)
        # Chained only to a handler of the job's: chained to SIG_DFL, the dump would be
        # followed by the signal's default action, the process's end.
        chain = current not in (signal.SIG_DFL, signal.SIG_IGN)
        faulthandler.register(sig, file=f, all_threads=True, chain=chain)
        os.rename(path + ".new", path)
    except (OSError, RuntimeError, ValueError) as err:
        _refuse(directory, pid, f"could not install the stacks handler: {err}")
        return
    _installed[pid] = (sig, f, directory)  # faulthandler writes to its fd: it stays open
    _enable_crash(directory, pid)


def _refuse(directory: str, pid: int, why: str) -> None:
    _refused[pid] = why
    _say_refused(directory, pid)


def _say_refused(directory: str, pid: int) -> None:
    """<directory>/<pid>.nostacks holds why this process cannot dump its stacks: the sidecar
    says so when asked (it never signals such a process)."""
    try:
        fd = os.open(os.path.join(directory, f"{pid}{REFUSED_SUFFIX}"),
                     os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_refused[pid].encode("utf-8", "replace")[:1000])
    except OSError:
        log.debug("workerscope: could not say in %s why stacks are off", directory)


def _enable_crash(directory: str, pid: int) -> None:
    """faulthandler.enable into <directory>/<pid>.crash: a fatal signal (SIGSEGV, SIGBUS, SIGFPE,
    SIGABRT, SIGILL) leaves every thread's Python stack there, for the sidecar to read after
    the death. Not where the job enabled faulthandler itself (python -X faulthandler, or its
    own call): its output stays where it sent it."""
    global _crash_file
    if faulthandler.is_enabled() and _crash_file is None:
        return
    taken = [s.name for s in FATAL if signal.getsignal(s) in (signal.SIG_DFL, signal.SIG_IGN)
             and procfs.catches("self", s)]
    if taken:  # a runtime of the job's own (a JVM) catches these from C: left alone
        log.info("workerscope: %s handled from C in this process: no crash stacks here",
                 ", ".join(taken))
        return
    try:
        fd = os.open(os.path.join(directory, f"{pid}.crash"),
                     os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        f = os.fdopen(fd, "wb", buffering=0)
        faulthandler.enable(file=f, all_threads=True)
    except (OSError, RuntimeError, ValueError):
        return
    if _crash_file is not None:
        _crash_file.close()
    _crash_file = f


def installed() -> bool:
    return os.getpid() in _installed


def uninstall(directory: str) -> None:
    """The ring in `directory` is closed (its sidecar is gone, or going): its stacks handler
    and crash file go too, the signal back to what it was."""
    global _crash_file
    found = _installed.get(os.getpid())
    if found is None or found[2] != directory:
        return
    sig, f, _ = _installed.pop(os.getpid())
    faulthandler.unregister(sig)
    f.close()
    try:  # no file, no signal: the sidecar never signals a process without its handler
        os.unlink(os.path.join(directory, f"{os.getpid()}{SUFFIX}"))
    except OSError:
        log.debug("workerscope: the stacks file in %s was gone already", directory)
    if _crash_file is not None:
        faulthandler.disable()
        _crash_file.close()
        _crash_file = None


def forget_after_fork() -> None:
    """In a forked child, before its own ring is made (recorder.py calls it): the parent's
    registration was inherited, writing to the parent's file. Undone here (a signal to the
    child must not write there, nor into whatever reuses the number); the child's ring then
    installs its own, in its own file."""
    global _crash_file
    for sig, f, _ in _installed.values():
        faulthandler.unregister(sig)
        f.close()
    _installed.clear()
    _refused.clear()
    if _crash_file is not None:  # the parent's crash file: the child's ring enables its own
        faulthandler.disable()
        _crash_file.close()
        _crash_file = None

