"""Spans kept from a steady rate of spans, with the default ring: what a hot loop under
`@timed` keeps when the sidecar cannot read as fast as it writes.

    python benchmarks/bench_burst.py [--seconds S] [--rates R,R,...]

Each case is a process of its own: `with workerscope.monitor(interval=1.0)` around a loop that
calls a `@timed` no-op at RATE calls a second (paced against perf_counter, in batches) for S
seconds (default 2), the ring at its default size (ring_records, 65,536). It prints the spans
written, those in the monitor's timeline, spans_lost, the share kept (the floor: 100%), and
the sidecar's note sizing a ring that would have held the burst, when it gave one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

for _var in [v for v in os.environ if v.startswith("WORKERSCOPE_")]:
    del os.environ[_var]

RATES = (150_000, 355_000, 1_000_000)

CASE = r"""
import json, sys, time
import workerscope
from workerscope import timed

@timed
def noop():
    pass

rate, seconds = float(sys.argv[1]), float(sys.argv[2])
with workerscope.monitor(interval=1.0) as m:
    t0, n = time.perf_counter(), 0
    while (elapsed := time.perf_counter() - t0) < seconds:
        due = int(elapsed * rate) - n
        for _ in range(due):
            noop()
        n += due
t = m.timeline
kept = sum(1 for s in t.spans if s.name.endswith("noop"))
notes = [n for w in t.workers.values() for n in w.notes if "at its fullest" in n]
print(json.dumps({"written": n, "kept": kept,
                  "lost": sum(w.spans_lost for w in t.workers.values()), "notes": notes}))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rates", default=",".join(map(str, RATES)))
    args = ap.parse_args()
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs; a @timed no-op at each "
          f"rate for {args.seconds:g} s under monitor(), the default ring\n")
    print(f"{'spans/s':>10} {'written':>11} {'kept':>11} {'spans_lost':>11} {'kept %':>7}")
    print("-" * 54)
    notes = []
    for rate in (int(r) for r in args.rates.split(",")):
        out = subprocess.run([sys.executable, "-c", CASE, str(rate), str(args.seconds)],
                             capture_output=True, text=True, check=True).stdout
        got = json.loads(out.strip().splitlines()[-1])
        print(f"{rate:>10,} {got['written']:>11,} {got['kept']:>11,} {got['lost']:>11,} "
              f"{100 * got['kept'] / got['written']:>6.1f}%")
        notes += [f"{rate:,}/s: {n}" for n in got["notes"]]
        if got["kept"] + got["lost"] != got["written"]:
            print(f"FAILED: {got['written'] - got['kept'] - got['lost']} spans neither kept "
                  "nor counted lost")
            return 1
    for n in notes:
        print(f"\n{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
