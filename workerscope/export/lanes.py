"""Where each span is drawn: a lane (a row) of its worker's band, so that no two spans of one
lane overlap in time, whatever ran at once.

One thread's spans nest: a span is drawn one lane under its parent, so a single-threaded
worker's lanes are its nesting depths. Spans that overlap in time without nesting (jobs in
two threads of a process, spans of the threads a job started, async spans) are packed: a
span and everything under it form a block, and each block goes to the first lanes under its
parent that are free for the whole of its time, as a flame chart of each thread would stack
them. A job that starts after another ended reuses its lanes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..timeline import Span


class Layout(NamedTuple):
    lanes: list[int]  # each span's lane in its worker's band; `limit` and over: past the limit
    depths: list[int]  # each span's nesting depth (a job 0, its top-level spans 1)
    roots: list[int]  # the index of the outermost span each span sits under (itself for one)


def tree(spans: Sequence[Span]) -> tuple[list[int | None], list[int]]:
    """Each span's parent (an index into `spans`, None for an outermost span) and depth. A
    span's parent is the span its `parent` names in its process, else its job; a span with
    neither is outermost (a job is 0). A cycle in damaged data is cut where it is found."""
    parent = _parents(spans)
    depth = _depths(parent)
    # The span where a cycle was cut is outermost (depth 0): its parent is dropped.
    return [None if d == 0 else p for p, d in zip(parent, depth, strict=True)], depth


def _parents(spans: Sequence[Span]) -> list[int | None]:
    """Each span's parent as its ids name it, before any cycle is cut."""
    key = {(s.worker, s.pid, s.id): i for i, s in enumerate(spans) if s.kind == "job"}
    key.update({(s.worker, s.pid, s.id): i for i, s in enumerate(spans) if s.kind != "job"})
    job = {(s.worker, s.job): i for i, s in enumerate(spans) if s.kind == "job"}
    parent: list[int | None] = []
    for i, s in enumerate(spans):
        p = None
        if s.kind != "job":
            if s.parent is not None:
                p = key.get((s.worker, s.pid, s.parent))
            if p is None and s.job is not None:
                p = job.get((s.worker, s.job))
        parent.append(None if p == i else p)
    return parent


def _depths(parent: list[int | None]) -> list[int]:
    """Each span's depth under `parent`; where a chain of parents comes back to itself, the
    span it was entered by is 0."""
    depth = [-1] * len(parent)
    for i in range(len(parent)):
        if depth[i] >= 0:
            continue
        path: list[int] = []
        j: int | None = i
        while j is not None and depth[j] == -1:
            depth[j] = -2  # on the path: a cycle in damaged data stops here
            path.append(j)
            j = parent[j]
        base = depth[j] if j is not None and depth[j] >= 0 else -1
        for k in reversed(path):
            base += 1
            depth[k] = base
    return depth


def _place(busy: list[int], lo: int, start: int, end: int, height: int, limit: int) -> int:
    """The first offset from `lo` whose `height` lanes are all free from `start` on (each
    lane's entry in `busy` is when it is next free), marked busy until `end`; `limit` when
    none below it is (the block is then drawn past the limit, and not marked)."""
    o = lo
    while o < limit:
        k = 0
        while k < height and (o + k >= len(busy) or busy[o + k] <= start):
            k += 1
        if k == height:
            break
        o += k + 1  # lane o + k is taken then: no block that covers it fits
    else:
        return limit
    if len(busy) < o + height:
        busy.extend([start] * (o + height - len(busy)))
    for k in range(o, o + height):
        busy[k] = max(busy[k], end)
    return o


def layout(spans: Sequence[Span], ends: Sequence[int] | None = None,
           limit: int = 24) -> Layout:
    """Each span's lane in its worker's band (see the module's doc). `spans` in start order
    (as Timeline.sort leaves them: the layout is then the most compact). `ends`: where each
    span is drawn to, if not its end_ns (a job still running runs on to its worker's last
    event). A block that finds no room above `limit` lanes is drawn from lane `limit` on."""
    n = len(spans)
    parent, depth = tree(spans)
    start = [s.start_ns for s in spans]
    end = [s.end_ns for s in spans] if ends is None else list(ends)
    offset = [0] * n
    height = [1] * n
    _blocks(parent, depth, start, end, offset, height, limit)
    bands: dict[str, list[int]] = {}
    for i, p in enumerate(parent):
        if p is None:
            bands.setdefault(spans[i].worker, []).append(i)
    for outer in bands.values():
        outer.sort(key=lambda c: start[c])
        busy: list[int] = []
        for c in outer:
            offset[c] = _place(busy, 0, start[c], end[c], min(height[c], limit), limit)
    lanes = offset  # each outermost span's lane is its offset; the others add their parent's
    roots = list(range(n))
    for i in sorted(range(n), key=depth.__getitem__):  # parents first
        p = parent[i]
        if p is not None:
            lanes[i] += lanes[p]
            roots[i] = roots[p]
    return Layout(lanes, depth, roots)


def _blocks(parent: list[int | None], depth: list[int], start: list[int], end: list[int],
            offset: list[int], height: list[int], limit: int) -> None:
    """Each span's children placed in its block (their `offset` under it), from the deepest
    up: a span's block then spans its own time and all of its children's (`start`, `end`),
    `height` lanes."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parent):
        if p is not None:
            children.setdefault(p, []).append(i)  # in start order
    by_depth: list[list[int]] = [[] for _ in range(max(depth, default=-1) + 1)]
    for i in children:
        by_depth[depth[i]].append(i)
    for level in reversed(by_depth):
        for i in level:
            busy: list[int] = []
            h, a, b = 1, start[i], end[i]
            for c in children[i]:
                hc, sc, ec = height[c], start[c], end[c]
                if hc == 1 and len(busy) > 1 and busy[1] <= sc:  # the common case: lane 1
                    busy[1] = ec if ec > busy[1] else busy[1]
                    o = 1
                else:
                    o = _place(busy, 1, sc, ec, hc if hc < limit else limit, limit)
                offset[c] = o
                h = max(h, o + hc)
                a = sc if sc < a else a
                b = ec if ec > b else b
            height[i], start[i], end[i] = (h if h < limit else limit), a, b
