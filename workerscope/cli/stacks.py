"""`workerscope stacks PID [PID ...]`: every thread's Python stack of a process that records
with workerscope (under `run`, `attach`, a monitor or profiled job), here and now: the process
dumps them itself (faulthandler, on the stacks signal), so neither root nor ptrace is needed."""

from __future__ import annotations

import glob
import os
import tempfile
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    import argparse

    from ._common import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """The `stacks` command and its options."""
    p = subparsers.add_parser("stacks", help="every thread's Python stack of a running process",
                              description="Asks each PID (a process that records with "
                                          "workerscope) for every thread's Python stack and "
                                          "prints them; no root or ptrace needed.")
    p.add_argument("pids", type=int, nargs="+", metavar="PID")
    p.add_argument("--timeout", type=float, default=2.0,
                   help="seconds to wait for the dumps (default 2)")
    p.set_defaults(func=run)


def _stacks_file(pid: int) -> str | None:
    """Where PID's faulthandler writes its stacks: <pid>.stacks in a ring folder of this
    user's (under /dev/shm, else the temporary folder)."""
    for where in ("/dev/shm", tempfile.gettempdir()):
        for path in glob.glob(os.path.join(where, "workerscope-*", f"{pid}.stacks")):
            try:
                if os.stat(os.path.dirname(path)).st_uid == os.getuid():
                    return path
            except OSError:
                continue
    return None


def run(args: argparse.Namespace) -> int:
    from ..config import stacks_signal
    from ..export.stacks import stacks_text
    from ..sidecar import stacks

    sig = stacks_signal()
    if sig is None:
        raise UsageError("WORKERSCOPE_STACKS_SIGNAL names no signal stacks can be asked with")
    processes: list[dict[str, Any]] = []
    for pid in args.pids:
        path = _stacks_file(pid)
        if path is None:  # no workerscope there: what /proc says of it
            processes.append(stacks.describe(pid))
        else:
            processes += stacks.ask(os.path.dirname(path), [pid], sig, wait_s=args.timeout)
    print(stacks_text({"processes": processes}))
    return 0
