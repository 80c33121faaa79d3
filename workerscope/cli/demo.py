"""`workerscope demo`: run the embedded demo job and write its timeline."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ._common import summary

if TYPE_CHECKING:
    import argparse

    from ._common import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """The `demo` command and its options."""
    p = subparsers.add_parser("demo", help="run the embedded demo job and write its timeline",
                              description="Run a small job on a process pool (CPU, memory and "
                                          "IO work under @timed functions, each worker sampled "
                                          "by a sidecar) and write its HTML report, Perfetto "
                                          "trace and .wsc timeline into --output-dir.")
    p.add_argument("-o", "--output-dir", default="workerscope-demo")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--tasks", type=int, default=6)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo, write its files, and say how to open them."""
    from ..demo import jobs_seconds, run_demo

    t0 = time.perf_counter()
    timeline, paths = run_demo(args.output_dir, workers=args.workers, tasks=args.tasks)
    print(f"workerscope demo: {summary(timeline)}; jobs ran {jobs_seconds(timeline):.1f} s "
          f"({time.perf_counter() - t0:.1f} s in all, with the process pool's start-up and "
          f"writing the files)")
    for p in paths:
        print(f"  wrote {p}")
    print("  open the .html in a browser; the .json in https://ui.perfetto.dev (Open trace file);")
    print(f"  or see it here: workerscope report {paths[0]}")
    return 0
