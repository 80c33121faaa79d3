"""Writes the golden records that tests/integration/test_golden_records.py loads: a driver's
record (Subscriber(record=...)) and a saved Timeline (.wsc), both of one real worker's job,
with a manifest of what went in. Run again only to add files for a new format, never to
replace the old ones: they are what keeps records written by earlier code loadable.

    python tests/golden/make_records.py 2026-12
"""

from __future__ import annotations

import json
import os
import sys
import time

import workerscope
from workerscope import Subscriber, mark, monitor, timed

HERE = os.path.dirname(os.path.abspath(__file__))
LOADS, FORWARDS = 3, 2  # the scenario: what the test expects back


@timed
def load_batch() -> bytes:
    time.sleep(0.03)
    return bytes(1 << 20)


@timed
def forward(batch: bytes) -> int:
    return sum(range(200_000)) + len(batch)


@timed
def fails() -> None:
    raise ValueError("golden")


def main(tag: str) -> int:
    record = os.path.join(HERE, f"record_{tag}.wsc")
    saved = os.path.join(HERE, f"timeline_{tag}.wsc")
    for path in (record, saved):
        if os.path.exists(path):
            print(f"{path} exists: golden files are never replaced", file=sys.stderr)
            return 1
    with Subscriber(record=record) as sub:
        with monitor(interval=0.05, endpoint=sub.endpoint, name="golden"):
            for i in range(LOADS):
                batch = load_batch()
                if i < FORWARDS:
                    forward(batch)
            mark("epoch", attrs={"n": 1})
            try:
                fails()
            except ValueError:
                pass
        if not sub.wait(jobs=1, timeout=60):
            print("the job did not arrive", file=sys.stderr)
            return 1
        live = sub.timeline()
    live.save(saved)
    manifest = {
        "version": workerscope.__version__,
        "spans": len(live.spans), "samples": len(live.samples), "marks": len(live.marks),
        "jobs": len(live.jobs), "workers": len(live.workers),
    }
    with open(os.path.join(HERE, f"manifest_{tag}.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
