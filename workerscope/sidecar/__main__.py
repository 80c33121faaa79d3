"""`python -m workerscope.sidecar --fd N`: the sidecar process. Arguments only; the worker
sends its settings and its target pid in the pipe hello (see service.Sidecar)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys

from .service import Sidecar


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workerscope.sidecar")
    parser.add_argument("--fd", type=int, required=True,
                        help="this end of the worker's socketpair")
    args = parser.parse_args(argv)
    # Whatever the sidecar must say goes to stderr, which it shares with its worker.
    logging.basicConfig(format="workerscope sidecar: %(message)s", level=logging.WARNING)
    # The job's Ctrl-C is for the job; we end on EOF of the pipe and deliver what we have.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=args.fd)
    # The target defaults to the parent (the worker); the hello may name another (run, attach).
    sidecar = Sidecar(sock, os.getppid())
    try:
        return sidecar.run()
    finally:
        sock.close()


if __name__ == "__main__":
    sys.exit(main())
