"""`workerscope export FILE --otlp URL`: send a recorded run to an OpenTelemetry collector,
with its original timestamps (export/otlp.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._common import EXIT_ERROR

if TYPE_CHECKING:
    import argparse

    from ._common import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """The `export` command and its options."""
    p = subparsers.add_parser("export", help="send a recorded run to another system",
                              description="Send a .wsc timeline or record, its original "
                                          "timestamps kept, over OTLP/HTTP.")
    p.add_argument("file", help="a .wsc timeline or record")
    p.add_argument("--otlp", required=True, metavar="URL",
                   help="an OTLP/HTTP collector's base URL (http://localhost:4318): spans to "
                        "/v1/traces, metrics to /v1/metrics (needs 'workerscope[otlp]')")
    p.add_argument("--service", default="workerscope", help="the service.name of every worker")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..export.otlp import ready, send_otlp
    from ..record import load

    ready()  # the protos are there, or the error that says how to get them: before the load
    sent = send_otlp(load(args.file), args.otlp, service=args.service)
    print(f"sent {sent.spans:,} spans and {sent.points:,} points in {sent.requests:,} requests"
          + (f"; {sent.failed:,} failed ({sent.spans_dropped:,} spans, {sent.points_dropped:,} "
             f"points not sent): {sent.last_error}" if sent.failed else ""))
    return EXIT_ERROR if sent.failed else 0
