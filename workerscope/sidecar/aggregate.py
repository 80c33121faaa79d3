"""samples_per_frame: sample N times, send one frame with the last value of each metric and its
min, mean and max over the N, as MLflow's system-metrics monitor does, to cut frame volume on
long runs without losing peaks."""

from __future__ import annotations

from typing import Any

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
        for scope in ("tree", "host", "sidecar"):
            out[scope] = _combine([b.get(scope) or {} for b in bodies])
        out["procs"] = _combine_keyed([b.get("procs") or [] for b in bodies])
        if any("gpus" in b for b in bodies):
            out["gpus"] = _combine_keyed([b.get("gpus") or [] for b in bodies])
        if any("threads" in b for b in bodies):
            rows = [row for b in bodies for row in b.get("threads") or []]
            threads = _combine_keyed([[[(r[0], r[1]), r[2]] for r in b.get("threads") or []]
                                      for b in bodies])
            starts = {(r[0], r[1]): r[3] for r in rows if len(r) > 3}  # a thread's start
            out["threads"] = [[pid, tid, v, *([starts[(pid, tid)]] if (pid, tid) in starts else [])]
                              for (pid, tid), v in threads]
        for key in ("new", "gone", "notes"):
            items = [x for b in bodies for x in b.get(key, ())]
            if items:
                out[key] = items
        return out
