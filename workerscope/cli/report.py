"""`workerscope report FILE`: show a saved timeline in the terminal, or convert it."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..timeline import check_output_path

if TYPE_CHECKING:
    import argparse

    from ._common import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """The `report` command and its options."""
    p = subparsers.add_parser("report", help="show a saved timeline, or convert it",
                              description="With no output flag: a Gantt per worker and summary "
                                          "tables in the terminal.")
    p.add_argument("file", help="a .wsc timeline or record (from run, listen, demo, "
                   "Timeline.save or Subscriber(record=))")
    p.add_argument("--html", help="write a self-contained HTML report")
    p.add_argument("--json", help="write a Chrome trace (chrome://tracing; small traces in "
                   "Perfetto)")
    p.add_argument("--pftrace", help="write Perfetto's protobuf trace: opens at any size in "
                   "ui.perfetto.dev (needs 'workerscope[trace]')")
    p.add_argument("--csv", help="write the samples as CSV")
    p.add_argument("--png", help="write resource plots and the Gantt as one PNG (needs matplotlib)")
    p.add_argument("--wsc", help="write a copy in the native format")
    p.add_argument("--parquet", metavar="DIR", help="write a folder of Parquet tables (spans, "
                   "jobs, samples, marks, workers; needs 'workerscope[parquet]')")
    p.add_argument("--max-sample-mib", type=float, default=None, metavar="MIB",
                   help="memory for the samples of a record (default 256); past it they are "
                        "folded into time bins, as each worker's notes then say; 0 keeps "
                        "every sample")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="rows of the jobs table (default 20: the jobs that did not end ok "
                        "first, then the longest); 0 lists every job")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write each file asked for, or with none asked for, show the timeline here."""
    from ..record import load
    from ._common import settle

    if args.max_sample_mib is not None and args.max_sample_mib < 0:
        raise UsageError("--max-sample-mib must be 0 (every sample) or more")
    if args.jobs is not None and args.jobs < 0:
        raise UsageError("--jobs must be 0 (every job) or more")
    parquet = args.parquet
    if parquet and not parquet.lower().endswith(".parquet"):
        parquet = parquet.rstrip("/") + ".parquet"  # the folder's name says its format
    outputs = [path for path in (args.html, args.json, args.pftrace, args.csv, args.wsc, args.png,
                                 parquet) if path]
    for path in outputs:
        check_output_path(path)  # before the (possibly long) load
    if args.max_sample_mib is None:
        timeline = load(args.file)
    else:
        budget = int(args.max_sample_mib * 2**20) or None
        timeline = load(args.file, max_sample_bytes=budget)
    settle()  # held to the end
    wrote = [timeline.save(path) for path in outputs]
    if wrote:
        for path in wrote:
            print(f"wrote {path}")
        return 0
    import shutil

    from ..export.terminal import JOBS_SHOWN, report

    width = shutil.get_terminal_size((100, 24)).columns
    jobs = JOBS_SHOWN if args.jobs is None else (args.jobs or None)
    sys.stdout.write(report(timeline, width=width, color=sys.stdout.isatty(), jobs=jobs))
    return 0
