"""A monitor's timeline counts the spans lost in that block, not the process's running total
(issue: a second monitor that lost 134,464 spans reported 268,928)."""

from __future__ import annotations

import subprocess
import sys

WORKER = """
import json, sys
from workerscope import monitor, timed

@timed
def tick():
    pass

out = []
for _ in range(3):
    with monitor("flood", mode="heavy", interval=0.05, ring_records=1024) as m:
        for _ in range(50_000):
            tick()
    w = next(iter(m.timeline.workers.values()))
    kept = sum(s.name.endswith("tick") for s in m.timeline.spans)
    out.append([kept, w.spans_lost])
print(json.dumps(out))
"""


def test_each_monitor_counts_its_own_lost_spans(clean_env):
    """Three blocks of 50,000 spans into a ring of 1,024: each block's kept spans and its
    spans_lost add up to its 50,000 calls (a running total would add up to more)."""
    done = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True,
                          timeout=300, check=True)
    blocks = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert any(lost for _, lost in blocks), f"the ring never filled: {blocks}"
    for kept, lost in blocks:
        assert kept + lost == 50_000, blocks
