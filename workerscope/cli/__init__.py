"""workerscope's command line: run | attach | listen | report | export | stacks | demo.

One module per command, each with `add_parser(subparsers)` and `run(args)`; what they share is
in _common. Each keeps its heavy imports (the driver's pyzmq, the sidecar, the exporters)
inside `run`, so that `workerscope --help` and a command's start stay fast."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError, WorkerscopeError
from . import attach, demo, export, listen, report, run, stacks
from ._common import EXIT_ERROR

DESCRIPTION = "workerscope's command line: run | attach | listen | report | export | stacks | demo."
COMMANDS = (run, attach, listen, report, export, stacks, demo)


class _Version(argparse.Action):
    """--version, which looks the version up only when asked: importlib.metadata would cost
    every other command its start-up time."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        import workerscope

        print(f"workerscope {workerscope.__version__}")
        parser.exit()


def parser() -> argparse.ArgumentParser:
    """The whole command line: each command module adds its own subcommand."""
    p = argparse.ArgumentParser(prog="workerscope", description=DESCRIPTION)
    p.add_argument("--version", action=_Version,
                   help="print the installed version (workerscope X.Y.Z) and exit")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (else sys.argv's); its exit status. A bad command line
    exits as argparse exits for one (2), or with its UsageError's status; another
    WorkerscopeError is one line on stderr and EXIT_ERROR."""
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as err:
        print(f"workerscope: {err}", file=sys.stderr)
        return err.exit_status
    except WorkerscopeError as err:
        print(f"workerscope: {err}", file=sys.stderr)
        return EXIT_ERROR


__all__ = ["main", "parser"]
