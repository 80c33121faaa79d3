"""`workerscope run -- CMD`: run a command and sample its process tree until it exits."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from ..config import resolve
from ..errors import UsageError, WorkerscopeError
from ..protocol import Status
from ..timeline import check_output_path
from ..units import fmt_signal
from ._common import end_job, job_name, partial_path, shell_code, sidecar_here, write_and_end

if TYPE_CHECKING:
    from ..config import Config
    from ..worker.link import SidecarLink
    from ._common import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """The `run` command and its options."""
    p = subparsers.add_parser(
        "run", help="sample a command's process tree",
        usage="workerscope run [--interval S] [-o FILE] [--endpoint ADDR] -- CMD ARGS...",
        description="Run CMD and sample its whole process tree (CPU, memory, IO, network, GPU) "
                    "every --interval seconds, with the spans of any Python process in it that "
                    "uses @timed, until it exits; then write the timeline (-o, else "
                    "workerscope-PID.json) and a one-line summary. Exits with CMD's own status.")
    p.add_argument("--interval", type=float, default=None, help="seconds between samples (default 1.0)")
    p.add_argument("-o", "--output", help="timeline file, .json (Perfetto) or .wsc")
    p.add_argument("--endpoint", help="also stream to a listening driver at this address")
    p.add_argument("--node", help="node name recorded with the samples")
    p.add_argument("--span-cpu", action="store_true",
                   help="measure each span's thread CPU at its edges in the command's Python "
                        "processes (WORKERSCOPE_SPAN_CPU=1 for them)")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the command, sampled where the sidecar starts (without it where not), and exit
    with the command's status."""
    from ..builder import build

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise UsageError("nothing to run: give a command after --, e.g. workerscope run -- make")
    config = resolve(interval=args.interval, endpoint=args.endpoint, node=args.node)
    if args.output:
        check_output_path(args.output)  # before the command runs, not after
    link = _start_sidecar(config)
    started = time.monotonic_ns()
    child = _start(cmd, link, args.span_cpu)
    # Ctrl-C reaches the command itself (same process group); SIGTERM and SIGHUP sent to us
    # are passed on to it: it ends as it would without us, and we still write what we saw.
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    forwarded = {sig: signal.signal(sig, lambda signum, _: child.send_signal(signum))
                 for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        out = args.output or f"workerscope-{child.pid}.json"
        partial = partial_path(out)
        if link is not None:
            try:
                link.handshake(child.pid)
                link.job_start(1, job_name(cmd), None, pid=child.pid, t=started, record=partial)
            except WorkerscopeError as err:
                print(f"workerscope: sampling off: {err}", file=sys.stderr)
                link = None
        # Wait without reaping: the last sample then still sees the command's own CPU times
        # (as a zombie), which reaping would hand to us and out of its tree.
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        if link is not None:
            frames = _end(link, child)
        rc = child.wait()
    finally:
        signal.signal(signal.SIGINT, old)
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
    if link is None:
        return shell_code(rc)
    timeline = build(frames)
    for worker in timeline.workers.values():
        worker.status = Status.EXITED  # the command has ended; its frames came before its bye
    write_and_end(timeline, out, f"workerscope-{child.pid}", partial)
    return shell_code(rc)


def _start_sidecar(config: Config) -> SidecarLink | None:
    """The sidecar that samples the command, or None (and a line on stderr) where it cannot
    start: the command then runs unsampled rather than not at all."""
    from ..worker.link import SidecarLink

    try:
        link = SidecarLink(config)
        link.make_ring(own=False)  # where the command's Python processes record
        link.spawn(sidecar_here())
    except WorkerscopeError as err:
        print(f"workerscope: sampling off: {err}", file=sys.stderr)
        return None
    return link


def _start(cmd: list[str], link: SidecarLink | None,
           span_cpu: bool = False) -> subprocess.Popen[bytes]:
    """Start the command, told where its Python processes record their spans (and, with
    span_cpu, to measure their CPU)."""
    env = None
    if link is not None and link.rings is not None:
        env = dict(os.environ, WORKERSCOPE_RINGS=link.rings)
        if span_cpu:
            env["WORKERSCOPE_SPAN_CPU"] = "1"
    try:
        return subprocess.Popen(cmd, env=env)
    except OSError as err:
        if link is not None:
            link.close(wait=True)
        raise UsageError(f"cannot start {cmd[0]!r}: {err}") from err


def _end(link: SidecarLink, child: subprocess.Popen[bytes]) -> list[bytes]:
    """End the run's job while the command is a zombie, and close the sidecar."""
    status = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert status is not None  # only WNOHANG returns None
    rc = status.si_status if status.si_code == os.CLD_EXITED else -status.si_status
    if rc == 0:
        error = None
    elif rc < 0:
        error = f"killed by {fmt_signal(-rc)} (exit status {shell_code(rc)})"
    else:
        error = f"exit status {rc}"
    return end_job(link, Status.OK if rc == 0 else Status.ERROR, error)
