"""samples_per_frame: sample N times, send one frame with the last value of each metric and its
min, mean and max over the N, as MLflow's system-metrics monitor does, to cut frame volume on
long runs without losing peaks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..protocol import SAMPLE_SECTIONS, Section

SUFFIXES = ("_min", "_mean", "_max")


def _combine(dicts: list[dict[str, float]]) -> dict[str, float]:
    keys: dict[str, list[float]] = {}
    for d in dicts:
        for k, v in d.items():
            keys.setdefault(k, []).append(v)
    out: dict[str, float] = {}
    for k, vs in keys.items():
        out[k] = vs[-1]
        if len(dicts) > 1:
            out[k + "_min"], out[k + "_max"] = min(vs), max(vs)
            out[k + "_mean"] = sum(vs) / len(vs)
    return out


def _combine_keyed(rows: list[list[list[Any]]]) -> list[list[Any]]:
    """Rows of [[key, values], ...] per sample -> one [[key, combined], ...]."""
    by_key: dict[Any, list[dict[str, float]]] = {}
    for row in rows:
        for key, values in row:
            by_key.setdefault(key, []).append(values)
    return [[key, _combine(vals)] for key, vals in by_key.items()]


class Aggregator:
    def __init__(self, n: int) -> None:
        self.n = n
        self.bodies: list[dict[str, Any]] = []

    def add(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """Take one sample body; return a frame body when N have gathered."""
        if self.n <= 1:
            return body
        self.bodies.append(body)
        return self.flush() if len(self.bodies) >= self.n else None

    def flush(self) -> dict[str, Any] | None:
        """The frame body of what has gathered so far, or None."""
        bodies, self.bodies = self.bodies, []
        if not bodies:
            return None
        if len(bodies) == 1:
            return bodies[0]
        out: dict[str, Any] = {"t": bodies[-1]["t"], "n": len(bodies)}
        present = {key for b in bodies for key in b} - {"t", "n"}
        unknown = present - SAMPLE_SECTIONS.keys()
        if unknown:
            # A section the schema lacks would vanish from every frame: say it at once.
            raise ValueError(f"sample section(s) {', '.join(sorted(unknown))} not in "
                             "protocol.SAMPLE_SECTIONS")
        for key in present:
            out[key] = _COMBINE[SAMPLE_SECTIONS[key]]([b[key] for b in bodies if key in b])
        return out


def _combine_threads(rows_per_sample: list[list[list[Any]]]) -> list[list[Any]]:
    """Thread rows [pid, tid, values(, start)] of each sample -> one row per thread, with the
    start of a thread that began meanwhile."""
    combined = _combine_keyed([[[(r[0], r[1]), r[2]] for r in rows] for rows in rows_per_sample])
    starts = {(r[0], r[1]): r[3] for rows in rows_per_sample for r in rows if len(r) > 3}
    return [[pid, tid, v, *([starts[(pid, tid)]] if (pid, tid) in starts else [])]
            for (pid, tid), v in combined]


_COMBINE: dict[Section, Callable[[list[Any]], Any]] = {
    Section.METRICS: _combine,
    Section.KEYED: _combine_keyed,
    Section.THREADS: _combine_threads,
    Section.LIST: lambda items: [x for part in items for x in part],
}
