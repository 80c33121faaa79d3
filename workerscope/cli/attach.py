"""`workerscope attach PID`: sample a process tree that is already running."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from ..config import resolve
from ..errors import UsageError
from ..protocol import Status
from ..timeline import check_output_path
from ._common import end_job, partial_path, restore_ctrl_c, sidecar_here, stop_on_ctrl_c, write_and_end

if TYPE_CHECKING:
    import argparse

    from ._common import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """The `attach` command and its options."""
    p = subparsers.add_parser("attach", help="sample a process tree that is already running",
                              description="Samples PID and its descendants until PID exits, "
                                          "--duration passes or Ctrl-C, then writes the timeline.")
    p.add_argument("pid", type=int)
    p.add_argument("--interval", type=float, default=None, help="seconds between samples")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument("-o", "--output", help="timeline file, .json, .html, .csv or .wsc")
    p.add_argument("--endpoint", help="also stream to a listening driver at this address")
    p.add_argument("--node", help="node name recorded with the samples")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Sample a process tree that is already running, until it exits, --duration passes or
    Ctrl-C; then write the timeline."""
    from ..builder import build
    from ..worker.link import SidecarLink

    if not os.path.exists(f"/proc/{args.pid}"):
        raise UsageError(f"no process {args.pid}")
    config = resolve(interval=args.interval, endpoint=args.endpoint, node=args.node)
    if args.output:
        check_output_path(args.output)
    link = SidecarLink(config)
    link.spawn(sidecar_here())
    link.handshake(args.pid)
    name = _process_name(args.pid)
    out = args.output or f"workerscope-{args.pid}.json"
    partial = partial_path(out)
    link.job_start(1, f"attach {args.pid} ({name})", None, record=partial)
    print(f"workerscope: sampling {args.pid} ({name}) and its children every "
          f"{config.interval:g} s; Ctrl-C stops", file=sys.stderr, flush=True)
    stop = stop_on_ctrl_c()
    try:
        exited = _wait_exit(args.pid, args.duration, stop)
    finally:
        restore_ctrl_c()
    if stop.is_set():
        print("stopped", file=sys.stderr)
    frames = end_job(link, Status.OK, None if not exited else "the process exited")
    write_and_end(build(frames), out, f"workerscope-{args.pid}", partial)
    return 0


def _process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _wait_exit(pid: int, seconds: float | None, stop: threading.Event) -> bool:
    """Wait until pid exits (True), or `seconds` pass or `stop` is set (False). Works for
    processes that are not our children, through a pidfd where the kernel has them."""
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = 0.5 if left is None else min(0.5, left)  # short steps: Ctrl-C is seen at once
            if _exited(pid, fd, step):
                return True
            if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                return False
    finally:
        if fd is not None:
            os.close(fd)


def _exited(pid: int, fd: int | None, step: float) -> bool:
    """Whether pid exited, waiting up to `step` seconds on its pidfd (or, without one,
    waiting first and then looking)."""
    import select

    if fd is not None:
        return bool(select.select([fd], [], [], step)[0])
    threading.Event().wait(step)
    return not os.path.exists(f"/proc/{pid}")
