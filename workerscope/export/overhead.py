"""What the monitoring cost: the sidecar's own CPU, RSS and per-sample cost (its `sidecar`
samples, docs/METRICS.md), per worker and over all of them, in the words every view uses:
"workerscope used 0.42% of a core (12.3 MiB RSS, 45.2 µs a sample)".

The CPU share is the sidecar's CPU between its first and its last sample over the time between
them (its start-up, before the first, is left out); the RSS is the largest it read; the cost
of a sample is the mean over the samples that carry one.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from ..timeline import Timeline
from ..units import fmt_bytes, fmt_seconds, fmt_share


@dataclass(frozen=True)
class Cost:
    cpu_s: float  # the sidecar's CPU between its first and last sample
    wall_s: float  # the time between them
    rss_bytes: float | None  # the largest RSS it read
    sample_total_s: float  # the CPU of the samples that carry their cost ...
    costed: int  # ... and how many they are

    @property
    def share(self) -> float | None:
        """% of one core (100 = a whole core); None over no time."""
        return 100 * self.cpu_s / self.wall_s if self.wall_s > 0 else None

    @property
    def per_sample_s(self) -> float | None:
        return self.sample_total_s / self.costed if self.costed else None


def costs(t: Timeline) -> dict[str, Cost]:
    """worker -> what its sidecar cost, for the workers with `sidecar` samples, sorted."""
    rows: dict[str, list[tuple[int, dict[str, float]]]] = {}
    for s in t.samples:
        if s.scope == "sidecar":
            rows.setdefault(s.worker, []).append((s.t_ns, s.values))
    out: dict[str, Cost] = {}
    for wid in sorted(rows):
        got = sorted(rows[wid], key=lambda r: r[0])
        cpu = [(tn, v["cpu_s"]) for tn, v in got if "cpu_s" in v]
        rss = [v["rss_bytes"] for _, v in got if "rss_bytes" in v]
        each = [v["sample_cost_s"] for _, v in got if "sample_cost_s" in v]
        used = wall = 0.0
        if len(cpu) >= 2:
            # One sidecar per worker id: its CPU never falls, but a damaged file must not
            # make a negative cost.
            used = sum(max(b - a, 0.0) for (_, a), (_, b) in pairwise(cpu))
            wall = (cpu[-1][0] - cpu[0][0]) / 1e9
        out[wid] = Cost(used, wall, max(rss) if rss else None, sum(each), len(each))
    return out


def total(parts: list[Cost]) -> Cost:
    """All sidecars together: their CPU over their time, the largest RSS of one, the mean
    cost of every sample."""
    rss = [c.rss_bytes for c in parts if c.rss_bytes is not None]
    return Cost(sum(c.cpu_s for c in parts), sum(c.wall_s for c in parts),
                max(rss) if rss else None, sum(c.sample_total_s for c in parts),
                sum(c.costed for c in parts))


def cost_text(c: Cost, each: bool = False) -> str:
    """ "0.42% of a core (12.3 MiB RSS, 45.2 µs a sample)"; with `each`, of several sidecars:
    "0.42% of a core each (12.3 MiB RSS at most, 45.2 µs a sample)". What was not read is
    left out."""
    said = [f"{fmt_bytes(c.rss_bytes)} RSS{' at most' if each else ''}"
            ] if c.rss_bytes is not None else []
    if c.per_sample_s is not None:
        said.append(f"{fmt_seconds(c.per_sample_s)} a sample")
    share = c.share
    head = f"{fmt_share(share)} of a core{' each' if each else ''}" if share is not None else ""
    inner = ", ".join(said)
    if head and inner:
        return f"{head} ({inner})"
    return head or inner


def summary(t: Timeline) -> str | None:
    """The line every view shows, over all workers; None with no `sidecar` samples."""
    parts = list(costs(t).values())
    if not parts:
        return None
    if len(parts) == 1:
        return f"workerscope used {cost_text(parts[0])}"
    whole = total(parts)
    return (f"workerscope used {cost_text(whole, each=True)} over {len(parts)} workers, "
            f"{fmt_seconds(whole.cpu_s)} of CPU in all")
