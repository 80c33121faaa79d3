"""Folding driver frames into a Timeline: the one path used by the sidecar (a job's own
timeline), the worker (monitor().timeline) and the driver (all workers).

Frames come from the network: every field is checked, and anything wrong becomes a
ProtocolError for the frame, never a half-added record or a crash of the caller.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from . import protocol
from .errors import ProtocolError
from .protocol import CUMULATIVE, Status
from .timeline import Job, Mark, Sample, Span, Timeline, Worker, bounded_attrs
from .units import fmt_bytes, fmt_seconds

# A worker's notes from its frames (a bye may carry 1 MiB of them, and a worker may say bye
# again and again): at most WORKER_NOTES_BYTES of them (UTF-8) a worker, NOTE_CHARS
# characters a note, in the driver's live state as in any timeline built; past them, one
# note says so. The record's facts keep them within the same bounds (record.NoteBudget).
NOTE_CHARS = 1_000
WORKER_NOTES_BYTES = 8 * 1024

_INT64 = 2**63
_SANE_NS = 100 * 365 * 86_400 * 10**9  # a century
# Two workers of one boot whose (wall, monotonic) pairs differ by less than this share one:
# honest pairs of one host agree within microseconds.
SHARED_ANCHOR_NS = 1_000_000


def _opt(value: Any, kind: type) -> Any:
    """An optional field of an untrusted frame: None, or a value of `kind` (else ValueError)."""
    if value is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


# Bounds on what a frame's text fields may hold in memory (each worker keeps them for its life).
MAX_NAME = 1000  # characters of a job's name; a longer one is cut, marked
MAX_HOST = 255  # a host name (and a node name): DNS's own bound
MAX_BOOT_ID = 128  # /proc/sys/kernel/random/boot_id is 36
MAX_BOOTS = 4096  # hosts whose workers share one clock anchor (their boot ids), at most


def bounded_text(value: Any, most: int) -> str:
    """A text field of an untrusted frame, cut to `most` characters (marked with "...")."""
    text = str(value)
    return text if len(text) <= most else text[:most - 3] + "..."


_PLAIN_NUMBERS = frozenset({int, float})
_ABSENT: tuple[()] = ()  # what a frame's optional list is when it has none


def _numbers(values: Any) -> dict[str, float]:
    """A metrics map from an untrusted frame, copied: str keys, finite-or-not numbers."""
    return dict(_checked(values))


def _checked(values: Any) -> dict[str, float]:
    """A metrics map from an untrusted frame, checked (not copied): str keys (msgpack's
    strict_map_key), finite-or-not numbers, nothing else."""
    if not isinstance(values, dict):
        raise ValueError("metric values must be a map")
    # The common case first, in C: plain int and float values (a bool's type is bool).
    # Anything else gets the full check.
    if _PLAIN_NUMBERS.issuperset(map(type, values.values())):
        return values
    for k, v in values.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise ValueError(f"metric {k!r} is not a number")
    return values


# The figures a sidecar sends with a job its worker died in (sidecar/death.py), by type.
# Other keys (a newer sidecar's) are dropped; a known key of the wrong type fails the frame.
_DEATH_TEXT = frozenset({"cause", "cgroup", "kernel_log", "kernel_log_error", "note",
                        "gpu_accounting"})
_DEATH_INTS = frozenset({"pid", "wait_status", "signal", "exit_status", "oom_kills",
                         "cgroup_limit_bytes", "cgroup_usage_bytes", "cgroup_peak_bytes",
                         "last_rss_bytes", "peak_rss_bytes", "last_tree_rss_bytes",
                         "gpu_peak_mem_bytes"})
# Lists of maps (sidecar/gpu.py): NVML's accounting of the dead process on each GPU, and the
# Xid errors of the job; each map's known fields, by type (int, float, or a GPU's scope).
_DEATH_LISTS: dict[str, dict[str, str]] = {
    "gpu_lifetime": {"device": "gpu", "util_percent": "int", "mem_util_percent": "int",
                     "peak_mem_bytes": "int", "time_s": "float"},
    "gpu_xids": {"device": "gpu", "xid": "int"},
}
MAX_DEATH_LIST = 16
_DEATH_FLAGS = frozenset({"core_dumped"})
MAX_DEATH_TEXT = 1000
MAX_TRACEBACK = 4096  # characters of a job's traceback kept (the worker sends at most 2 KiB)


def _death_list(key: str, value: Any) -> list[dict[str, Any]]:
    """One of a death's lists of maps, each field checked (unknown ones dropped)."""
    if not isinstance(value, list) or len(value) > MAX_DEATH_LIST:
        raise ValueError(f"death {key} must be a list of at most {MAX_DEATH_LIST} maps")
    fields = _DEATH_LISTS[key]
    out = []
    for item in value:
        if not isinstance(item, dict):
            raise ValueError(f"death {key} must hold maps")
        one: dict[str, Any] = {}
        for name, kind in fields.items():
            if name not in item:
                continue
            v = item[name]
            if kind == "gpu":
                if not isinstance(v, str) or not protocol.is_gpu_scope(v):
                    raise ValueError(f"death {key} {name} must be a GPU's scope")
            elif kind == "int":
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise ValueError(f"death {key} {name} must be a non-negative integer")
            elif (not isinstance(v, (int, float)) or isinstance(v, bool)
                  or not math.isfinite(v) or v < 0):
                raise ValueError(f"death {key} {name} must be a non-negative number")
            one[name] = v
        out.append(one)
    return out


def _death(value: Any) -> dict[str, Any] | None:
    """A job_end's `death` map from an untrusted frame: None, or the known figures checked."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("cause"), str):
        raise ValueError("death must be a map with a cause")
    out: dict[str, Any] = {}
    for key, v in value.items():
        if key in _DEATH_TEXT:
            if not isinstance(v, str) or len(v) > MAX_DEATH_TEXT:
                raise ValueError(f"death {key} must be a string of at most {MAX_DEATH_TEXT}")
        elif key in _DEATH_INTS:
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"death {key} must be a non-negative integer")
        elif key in _DEATH_FLAGS:
            if not isinstance(v, bool):
                raise ValueError(f"death {key} must be true or false")
        elif key in _DEATH_LISTS:
            out[key] = _death_list(key, v)
            continue
        else:
            continue
        out[key] = v
    return out


# How a bin of samples keeps each metric (SampleBins). Cumulative counters (protocol.CUMULATIVE):
# the last value. Rates and levels over time: the mean. What runs out ("available", "free"):
# the min, so a dip shows. Other gauges (bytes, counts): the max, so a peak shows.
LAST, MEAN, LOW, HIGH = 0, 1, 2, 3
_MEAN_NAMES = frozenset({"sample_cost_s"})


def fold_rule(metric: str) -> int:
    """LAST, MEAN, LOW or HIGH: how a bin keeps this metric."""
    if metric in CUMULATIVE:
        return LAST
    if ("_percent" in metric or metric.endswith(("_w", "_c", "_mhz"))
            or metric.startswith("load_") or metric in _MEAN_NAMES):
        return MEAN
    if "available" in metric or "free" in metric:
        return LOW
    return HIGH


_RULES: dict[str, int] = {}  # fold_rule's answers: metric names come from frames, so bounded


def _memo(cache: dict[Any, Any], key: Any, make: Callable[[Any], Any], most: int) -> Any:
    """make(key), from the cache where it is there; kept there while it holds under most."""
    value = cache.get(key)
    if value is None:
        value = make(key)
        if len(cache) < most:
            cache[key] = value
    return value


def _rule(metric: str) -> int:
    rule: int = _memo(_RULES, metric, fold_rule, 4096)
    return rule


class _Plan:
    """The metrics of one key layout (a sample's keys, in their order) split by fold_rule, with
    getters that take each group's values out of a map in C: a bin whose samples share the
    layout folds with a few C calls, not a Python step per metric."""

    __slots__ = ("cuts", "get_high", "get_last", "get_low", "get_mean", "get_row", "high",
                 "keys", "last", "low", "mean", "row_keys")

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        groups: dict[int, list[str]] = {LAST: [], MEAN: [], LOW: [], HIGH: []}
        for k in keys:
            groups[_rule(k)].append(k)
        self.last, self.mean, self.low, self.high = (
            tuple(groups[r]) for r in (LAST, MEAN, LOW, HIGH))
        self.get_last, self.get_mean, self.get_low, self.get_high = (
            _getter(g) for g in (self.last, self.mean, self.low, self.high))
        # A sample's values as one row, the rules' groups one after the other (a series'
        # rows of one bin are folded a column at a time: _Bin.of_rows), and where each ends.
        self.row_keys = self.last + self.mean + self.low + self.high
        self.get_row = _getter(self.row_keys)
        a = len(self.last)
        b = a + len(self.mean)
        self.cuts = (a, b, b + len(self.low))


def _getter(keys: tuple[str, ...]) -> Callable[[dict[str, float]], tuple[float, ...]]:
    """A function giving the values of `keys` in a map as a tuple, in C where it can."""
    if len(keys) > 1:
        return operator.itemgetter(*keys)
    if keys:
        key = keys[0]
        return lambda values: (values[key],)
    return lambda values: ()


_PLANS: dict[tuple[str, ...], _Plan] = {}  # key layouts come from frames, so bounded


def _layout(values: dict[str, float]) -> _Plan:
    """The plan of a map's key layout, finite or not."""
    plan: _Plan = _memo(_PLANS, tuple(values), _Plan, 1024)
    return plan


def _plan(values: dict[str, float]) -> _Plan | None:
    """The plan of a map whose values are all finite; None where one is not (a NaN or an
    infinity is left out of a fold, which only the general form does)."""
    try:
        if not math.isfinite(sum(values.values())):  # a sum is finite only if all are
            return None
    except OverflowError:
        return None
    plan: _Plan = _memo(_PLANS, tuple(values), _Plan, 1024)
    return plan


class _Bin:
    """Samples of one series within one time bin, folded (see fold_rule): the last time, and
    per metric its kept value, plus sums and counts for the means. Values that are not
    finite are left out of a fold (a NaN would spoil a whole bin's mean).

    Two forms, one result. Columnar: while every sample folded in has the same keys in the
    same order, all finite (a sidecar's series), each rule's values are a tuple of their own,
    folded in C (map with max, min and add). General: a map per metric, for anything else;
    a columnar bin turns general when a sample or bin of another layout meets it. A general
    bin keeps the time of each counter's value (`when`): a counter the latest sample lacks
    is then the latest sample's that has it, in whatever order they were folded."""

    __slots__ = ("counts", "high", "last", "low", "n", "plan", "sum", "sums", "t", "values",
                 "when")

    def __init__(self, t: int, values: dict[str, float], columnar: bool = True) -> None:
        self.t = t
        self.plan = _plan(values) if columnar else None
        self.sums: dict[str, float] | None = None  # the general form's means
        self.counts: dict[str, int] | None = None
        if self.plan is None:
            self.values = values
            self.when = {k: t for k in values if _rule(k) == LAST}
            return
        p = self.plan
        self.values = {}
        self.last, self.sum, self.n = p.get_last(values), p.get_mean(values), 1
        self.low, self.high = p.get_low(values), p.get_high(values)

    @classmethod
    def of_rows(cls, t: int, plan: _Plan, rows: list[tuple[float, ...]]) -> _Bin | None:
        """A columnar bin of rows of one layout (plan.get_row's, in time order, the last at
        t) folded a column at a time: what folding them one by one gives (sums may differ in
        their last bits: the order of the adds). None if a value is not finite (they need
        the general form)."""
        cols = list(zip(*rows, strict=True))
        try:
            if not math.isfinite(sum(map(sum, cols))):  # a sum is finite only if all are
                return None
        except OverflowError:
            return None
        a, b, c = plan.cuts
        made = cls.__new__(cls)
        made.t, made.plan, made.sums, made.counts, made.values = t, plan, None, None, {}
        made.last, made.n = rows[-1][:a], len(rows)
        made.sum = tuple(map(sum, cols[a:b]))
        made.low, made.high = tuple(map(min, cols[b:c])), tuple(map(max, cols[c:]))
        return made

    def metrics(self) -> int:
        return len(self.plan.keys) if self.plan is not None else len(self.values)

    def _general(self) -> None:
        """Turn a columnar bin general, its result the same."""
        p = self.plan
        if p is None:
            return
        self.values = self.result()
        self.sums = dict(zip(p.mean, self.sum, strict=True))
        self.counts = dict.fromkeys(p.mean, self.n)
        self.when = dict.fromkeys(p.last, self.t)
        self.plan = None

    def _means(self) -> tuple[dict[str, float], dict[str, int]]:
        if self.sums is None or self.counts is None:
            self.sums = {k: v for k, v in self.values.items()
                         if _rule(k) == MEAN and math.isfinite(v)}
            self.counts = dict.fromkeys(self.sums, 1)
        return self.sums, self.counts

    def _keep(self, k: str, v: float, t: int, sums: dict[str, float],
              counts: dict[str, int], n: int = 1) -> None:
        """Fold one finite value, of a sample (or a bin's counter) at t, into a general bin."""
        mine = self.values
        rule = _rule(k)
        if rule == MEAN:
            sums[k] = sums.get(k, 0.0) + v
            counts[k] = counts.get(k, 0) + n
        elif rule == LAST:
            if k not in mine or not math.isfinite(mine[k]) or t >= self.when[k]:
                mine[k], self.when[k] = v, t
        elif (k not in mine or not math.isfinite(mine[k])
              or ((v > mine[k]) if rule == HIGH else (v < mine[k]))):
            mine[k] = v

    def fold(self, t: int, values: dict[str, float]) -> None:
        later = t >= self.t
        p = self.plan
        if p is not None:
            if _plan(values) is p:  # the same layout, all finite
                if later:
                    self.last, self.t = p.get_last(values), t
                self.sum = tuple(map(operator.add, self.sum, p.get_mean(values)))
                self.n += 1
                self.low = tuple(map(min, self.low, p.get_low(values)))
                self.high = tuple(map(max, self.high, p.get_high(values)))
                return
            self._general()
        sums, counts = self._means()
        for k, v in values.items():
            if math.isfinite(v):
                self._keep(k, v, t, sums, counts)
        if later:
            self.t = t

    def merge(self, other: _Bin) -> None:
        """Fold another bin of the same series in (a wider bin now holds both)."""
        later = other.t >= self.t
        p = self.plan
        if p is not None and other.plan is p:
            if later:
                self.last, self.t = other.last, other.t
            self.sum = tuple(map(operator.add, self.sum, other.sum))
            self.n += other.n
            self.low = tuple(map(min, self.low, other.low))
            self.high = tuple(map(max, self.high, other.high))
            return
        self._general()
        other._general()
        sums, counts = self._means()
        their_sums, their_counts = other._means()
        for k, total in their_sums.items():
            self._keep(k, total, other.t, sums, counts, their_counts[k])
        for k, v in other.values.items():
            if _rule(k) != MEAN and math.isfinite(v):
                self._keep(k, v, other.when.get(k, other.t), sums, counts)
        if later:
            self.t = other.t

    def result(self, take: bool = False) -> dict[str, float]:
        """The bin's values. take: the bin's own map, the means written in (it is not folded
        again)."""
        p = self.plan
        if p is not None:
            out = dict.fromkeys(p.keys, 0.0)  # the sample's own key order
            means = self.sum if self.n == 1 else [x / self.n for x in self.sum]
            for keys, kept in ((p.last, self.last), (p.mean, means), (p.low, self.low),
                               (p.high, self.high)):
                out.update(zip(keys, kept, strict=True))
            return out
        out = self.values if take else dict(self.values)
        if self.sums is not None and self.counts is not None:
            for k, total in self.sums.items():
                out[k] = total / self.counts[k]
        return out


# A file whose part read says its samples will take this many budgets is binned from then
# on (SampleBins._far_over): a margin for records whose samples come denser early on, which
# would then be binned where all might have been kept. Asked EARLY_LOOKS times a budget.
EARLY_FACTOR = 1.5
EARLY_LOOKS = 64
LEAST_READ = 1 / 64  # the least part of a file the whole is projected from

# What a sample costs in memory, roughly: the Sample and its values map (~100 B a metric,
# measured with tracemalloc: 10 metrics ~1.25 KB, 20 ~2.3 KB).
SAMPLE_BYTES = 250
VALUE_BYTES = 100


def sample_bytes(values: dict[str, float]) -> int:
    return SAMPLE_BYTES + VALUE_BYTES * len(values)


_Key = tuple[str, str, "int | None", "int | None"]


class _Series:
    """One series' (worker, scope, pid, tid) samples in SampleBins: its earliest sample, kept
    as it came (never folded), its time bins, and the span of its times."""

    __slots__ = ("bins", "earliest", "first", "latest", "open", "plan", "rows", "size", "t",
                 "times")

    def __init__(self, first: Sample) -> None:
        self.first = first
        self.earliest = self.latest = first.t_ns
        self.bins: dict[int, _Bin] = {}
        # The rows not yet folded: samples of one layout in one bin, in time order (the
        # latest at t), folded together when the next falls elsewhere (SampleBins.row).
        self.open: int | None = None  # their bin; None when there are none
        self.plan: _Plan | None = None
        self.size = 0  # their layout's number of metrics
        self.rows: list[tuple[float, ...]] = []
        self.times: list[int] = []  # each row's
        self.t = 0


class SampleBins:
    """Samples kept within a memory budget. Under `limit_bytes` they are kept as they come.
    Past it, every series (worker, scope, pid, tid) keeps its earliest sample as it is (where
    its counters start from, a thread's start at 0 CPU) and folds the rest into time bins of
    one width, a power of two of nanoseconds, doubled until the bins take at most half the
    budget; as the run goes on it doubles again, so memory stays bounded however long the
    record is. `progress` (how much of a file has been read, 0 to 1) sizes the bins for the
    whole file from the part read, so they are not folded again at each doubling, and starts
    binning as soon as the part read says the whole will be far past the budget
    (EARLY_FACTOR times), not once a budget's worth is held as it came. A series'
    run of samples of one layout in one bin is kept as rows and folded together when the
    run ends (at most 1/40 of the budget is such rows). A bin is one Sample at its last
    time, its metrics kept by fold_rule: totals and the rates between bins exact, rates
    averaged, peaks and dips kept. A run of more
    series than the budget holds at one bin each takes that much instead, and says so."""

    def __init__(self, limit_bytes: int, progress: Callable[[], float] | None = None) -> None:
        self.limit = max(int(limit_bytes), 1)
        self._progress = progress
        self.width = 0  # ns; 0 until the budget is first reached
        self.seen = 0  # samples added
        self.kept = 0  # samples or bins held
        self.bytes = 0  # their estimated memory
        self._threshold = self.limit  # widen past this many bytes
        self._look_at = self.limit // EARLY_LOOKS  # project the whole file past this many
        self._plain: list[Sample] | None = []  # until the budget is first reached
        self._series: dict[_Key, _Series] = {}
        self._open: list[_Series] = []  # the series with rows not yet folded
        self._rows = 0  # how many rows they hold
        # At most this many (~400 B each: a tuple and its numbers), 1/40 of the budget;
        # past it, all are folded.
        self._most_rows = max(1024, self.limit // 16384)

    def add(self, s: Sample) -> None:
        self.rows(s.worker, [(s.t_ns, s.scope, s.pid, s.tid, s.values)])

    def rows(self, wid: str, new: list[tuple[int, str, int | None, int | None,
                                              dict[str, float]]]) -> None:
        """Add one worker's samples, given as (t, scope, pid, tid, values), values checked by
        the caller (and copied here where they are kept as they are)."""
        self.seen += len(new)
        if self._plain is not None:
            for t, scope, pid, tid, values in new:
                self._plain.append(Sample(wid, t, scope, pid, dict(values), tid))
                self.kept += 1
                self.bytes += sample_bytes(values)
            if self.bytes > self._threshold or (
                    self.bytes > self._look_at and self._far_over()):
                self._start()  # binned from now on
            return
        self._runs(wid, new)
        if self._rows >= self._most_rows:
            self._close_all()
        if self.bytes > self._threshold:
            self._widen()

    def _far_over(self) -> bool:
        """Whether the samples of the whole file, projected from the part read, would be
        past EARLY_FACTOR budgets (asked each 1/EARLY_LOOKS of the budget)."""
        self._look_at += self.limit // EARLY_LOOKS
        if self._progress is None:
            return False
        read = self._progress()
        # Not before LEAST_READ: the bins' width is projected from no less (narrower bins
        # would be widened again and again).
        return read >= LEAST_READ and self.bytes > EARLY_FACTOR * self.limit * read

    def _start(self) -> None:
        """Bin the samples kept so far, in bins as wide as _widen would make them."""
        plain, self._plain = self._plain or [], None
        spans: dict[_Key, list[int]] = {}  # series -> [earliest, latest, samples]
        for s in plain:
            have = spans.get((s.worker, s.scope, s.pid, s.tid))
            if have is None:
                spans[(s.worker, s.scope, s.pid, s.tid)] = [s.t_ns, s.t_ns, 1]
            else:
                have[0], have[1], have[2] = min(have[0], s.t_ns), max(have[1], s.t_ns), have[2] + 1
        earliest, latest, count = max(spans.values(), key=lambda have: have[1] - have[0])
        self.width = self._width(max(latest - earliest, 1) / count, self.bytes)
        self.kept = self.bytes = 0
        for s in plain:
            self._runs(s.worker, [(s.t_ns, s.scope, s.pid, s.tid, s.values)], s)
        self._close_all()
        if self.bytes > self.limit // 2:
            self._widen()
        self._threshold = max(self.limit, 2 * self.bytes)

    def _width(self, spacing: float, size: int) -> int:
        """The least power of two of ns of at least `spacing` (a series' ns between samples)
        times how far `size` bytes of bins are over half the budget."""
        over = size / (self.limit / 2)
        if self._progress is not None:
            # A file of known length: bins as wide as its whole would need, projected from
            # the part read (at most 64 times as many samples), not doubled again and again
            # as its samples come (each doubling folds every bin again).
            over /= min(max(self._progress(), LEAST_READ), 1.0)
        width = max(self.width * 2, 1)
        while width < spacing * over:
            width *= 2
        return width

    def _runs(self, wid: str, new: list[tuple[int, str, int | None, int | None,
                                              dict[str, float]]],
              owned: Sample | None = None) -> None:
        """Add samples to their series' open rows where each is the next of them (in their
        bin, not earlier than they are, of their layout); else each starts a run of its own
        (_bin; `owned`: the Sample of a lone one, where the caller has it)."""
        found, width, added = self._series.get, self.width, 0
        for t, scope, pid, tid, values in new:
            series = found((wid, scope, pid, tid))
            if series is not None and series.open == t // width and t >= series.t:
                plan = series.plan
                if plan is not None and len(values) == series.size:
                    try:
                        row = plan.get_row(values)
                    except KeyError:  # another layout of as many keys: a run of its own
                        row = None
                    if row is not None:
                        series.rows.append(row)
                        series.times.append(t)
                        series.t, series.latest = t, max(series.latest, t)
                        added += 1
                        continue
            self._bin(wid, t, scope, pid, tid, values, owned)
        self._rows += added

    def _close(self, series: _Series) -> None:
        """Fold a series' open rows into their bin."""
        index, plan, rows, times = series.open, series.plan, series.rows, series.times
        series.open, series.plan, series.rows, series.times = None, None, [], []
        if index is None or plan is None or not rows:
            return
        made = _Bin.of_rows(series.t, plan, rows)
        if made is None:  # a value not finite: one by one, in the general form
            for t, row in zip(times, rows, strict=True):
                self._fold(series, index, t, dict(zip(plan.row_keys, row, strict=True)))
            return
        have = series.bins.get(index)
        if have is not None:
            have.merge(made)
            return
        series.bins[index] = made
        self.kept += 1
        self.bytes += SAMPLE_BYTES + VALUE_BYTES * len(plan.keys)

    def _close_all(self) -> None:
        for series in self._open:
            self._close(series)
        self._open, self._rows = [], 0

    def _bin(self, wid: str, t: int, scope: str, pid: int | None, tid: int | None,
             values: dict[str, float], sample: Sample | None = None) -> None:
        """Start a run of rows of a series with this sample (`sample`, where the caller has
        one: it owns values; else one is made, values copied, only where it is kept as it
        came: a series' earliest)."""
        key = (wid, scope, pid, tid)
        series = self._series.get(key)
        if series is None:
            self._series[key] = _Series(sample or Sample(wid, t, scope, pid, dict(values), tid))
            self.kept += 1
            self.bytes += sample_bytes(values)
            return
        if t > series.latest:
            series.latest = t
        elif t < series.earliest:
            series.earliest = t
        if t < series.first.t_ns:  # the earlier one takes its place; the one it had is binned
            self.bytes += sample_bytes(values) - sample_bytes(series.first.values)
            old, series.first = series.first, sample or Sample(wid, t, scope, pid, dict(values),
                                                               tid)
            values, t = old.values, old.t_ns
        index = t // self.width if self.width else t  # a bin of its own until widened
        if series.open is not None:
            self._close(series)
        else:
            self._open.append(series)
        # The first row of the next run of this series' samples in one bin, folded when the
        # run ends.
        plan = _layout(values)
        series.open, series.plan, series.size, series.t = index, plan, len(plan.keys), t
        series.rows, series.times = [plan.get_row(values)], [t]
        self._rows += 1

    def _fold(self, series: _Series, index: int, t: int, values: dict[str, float]) -> None:
        b = series.bins.get(index)
        if b is not None:
            b.fold(t, values)
            return
        series.bins[index] = _Bin(t, values)
        self.kept += 1
        self.bytes += sample_bytes(values)

    def _widen(self) -> None:
        self._close_all()
        # Start from the longest series' spacing, scaled by how far over half the budget the
        # bins are; then double until they fit, or every series is in a bin or two.
        widest = max(self._series.values(), key=lambda series: series.latest - series.earliest)
        longest = max(widest.latest - widest.earliest, 1)
        width = self._width(longest / max(len(widest.bins), 1), self.bytes)
        while True:
            self._rebin(width)
            if self.bytes <= self.limit // 2 or width > 2 * longest:
                break
            width *= 2
        # More series than the budget holds, a bin or two each: wait until the bins have
        # doubled before widening again (each widening walks every bin).
        self._threshold = max(self.limit, 2 * self.bytes)

    def _rebin(self, width: int) -> None:
        self.width = width
        kept = len(self._series)
        size = sum(sample_bytes(series.first.values) for series in self._series.values())
        for series in self._series.values():
            wider: dict[int, _Bin] = {}
            for b in series.bins.values():
                index = b.t // width
                have = wider.get(index)
                if have is None:
                    wider[index] = b
                else:
                    have.merge(b)
            series.bins = wider
            kept += len(wider)
            size += sum(SAMPLE_BYTES + VALUE_BYTES * b.metrics() for b in wider.values())
        self.kept, self.bytes = kept, size

    def samples(self, take: bool = False) -> list[Sample]:
        """What is kept, as Samples. take: hand them over, emptying this (no second copy in
        memory: a record's timeline is built once)."""
        self._close_all()
        if self._plain is not None:
            out = self._plain if take else list(self._plain)
            if take:
                self._plain = []
            return out
        out = [series.first for series in self._series.values()]
        for (wid, scope, pid, tid), series in list(self._series.items()):
            if take:
                del self._series[(wid, scope, pid, tid)]
            out.extend(Sample(wid, b.t, scope, pid, b.result(take), tid)
                       for b in series.bins.values())
        return out

    def note(self) -> str | None:
        """What the binning did, for each worker's notes; None while nothing was binned."""
        self._close_all()
        if not self.width:
            return None
        over = (f"; {len(self._series):,} series take more than that at a bin or two each"
                if self.bytes > self.limit else "")
        return (f"samples binned to stay within {fmt_bytes(self.limit)}: {self.seen:,} read, "
                f"{self.kept:,} kept, in bins of {fmt_seconds(self.width / 1e9)}{over} (each "
                "series keeps its first sample; a bin holds the last value of cumulative "
                "counters, the mean of percentages and other rates, the min of available or "
                "free memory, the max of other memory and counts)")


class TimelineBuilder:
    """Folds driver frames of any number of workers into one Timeline.

    keep=False is a driver's live state, whose record file keeps the rest (record.py): workers,
    their open jobs and notes are kept; samples, spans, marks and ended jobs are not (a sample
    is checked only for what a live view reads of it: its tree and GPU values)."""

    def __init__(self, keep: bool = True, max_sample_bytes: int | None = None,
                 progress: Callable[[], float] | None = None) -> None:
        self.keep = keep
        self.t = Timeline()
        # Past max_sample_bytes of samples, they are folded into time bins (SampleBins;
        # progress: how much of its input has been read, 0 to 1, where that is known).
        self.bins = (SampleBins(max_sample_bytes, progress)
                     if max_sample_bytes is not None and keep else None)
        self._anchor: dict[str, tuple[int, int]] = {}
        self._boot_anchor: dict[str, tuple[int, int]] = {}
        self._open_jobs: dict[tuple[str, int], dict[str, Any]] = {}
        self._roots: dict[str, int] = {}
        self.last_sample: dict[str, int] = {}  # worker -> its latest sample's wall time
        self._note_bytes: dict[str, int] = {}  # worker -> bytes of its frames' notes (-1: full)
        self._lost_job: dict[str, int] = {}  # worker -> spans lost in a job's own frames
        # Each kind of frame and what folds it in; kinds not here (heartbeats, pongs, pings,
        # acks) only count as the worker's frames.
        self._handlers: dict[protocol.FrameKind, Callable[[str, dict[str, Any]], None]] = {
            protocol.HELLO: self._on_hello,
            protocol.JOB_START: self._on_job_start,
            protocol.JOB_END: self._on_job_end,
            protocol.SAMPLE: self._on_sample,
            protocol.SPANS: self._on_spans,
            protocol.MARK: self._on_spans,
            protocol.BYE: self._on_bye,
        }

    def worker(self, wid: str) -> Worker:
        w = self.t.workers.get(wid)
        if w is None:
            w = self.t.workers[wid] = Worker(wid)
        return w

    def forget(self, wid: str) -> None:
        """Let go of all this builder holds of one worker (a driver making room for new
        ones: what its frames said is in the record)."""
        self.t.workers.pop(wid, None)
        for store in (self._anchor, self._roots, self.last_sample, self._note_bytes,
                      self._lost_job):
            store.pop(wid, None)
        for key in [k for k in self._open_jobs if k[0] == wid]:
            del self._open_jobs[key]
        for proc in [k for k in self.t.processes if k[0] == wid]:
            del self.t.processes[proc]
        for thread in [k for k in self.t.threads if k[0] == wid]:
            del self.t.threads[thread]

    def _set_anchor(self, wid: str, anchor: Any, boot_id: Any) -> None:
        wall, mono = (int(x) for x in anchor)
        if not (-_INT64 <= wall < _INT64 and -_INT64 <= mono < _INT64):
            raise ValueError("a clock anchor must be two int64 times")
        if isinstance(boot_id, str) and boot_id:
            # Monotonic time is one clock for a whole host (per boot): workers of that host
            # whose pairs agree (within SHARED_ANCHOR_NS) map through one of them, so their
            # events line up exactly. A pair that does not agree keeps its own: a worker's
            # clock is its own, never another's (a hello with this host's boot id and a false
            # anchor must not move the real workers' times).
            if boot_id not in self._boot_anchor and len(self._boot_anchor) >= MAX_BOOTS:
                self._boot_anchor.clear()  # a driver's day of hosts: their next workers anew
            shared = self._boot_anchor.setdefault(boot_id, (wall, mono))
            if abs((wall - mono) - (shared[0] - shared[1])) <= SHARED_ANCHOR_NS:
                wall, mono = shared
        self._anchor[wid] = (wall, mono)

    def _wall(self, wid: str, mono: Any) -> int:
        """A worker's monotonic time on the wall-clock axis. A time that lands more than a
        century from its worker's anchor (or outside int64) is refused: one such frame
        once made every later save fail (OverflowError)."""
        if not isinstance(mono, int) or isinstance(mono, bool):
            raise ValueError(f"a time must be integer nanoseconds, got {type(mono).__name__}")
        anchor = self._anchor.get(wid)
        wall = mono if anchor is None else mono - anchor[1] + anchor[0]
        if anchor is not None and abs(wall - anchor[0]) > _SANE_NS:
            raise ValueError(f"time {mono} is more than a century from the worker's clock")
        if not -_INT64 <= wall < _INT64:
            raise ValueError(f"time {mono} is out of range")
        return wall

    def add(self, frame: protocol.Frame) -> None:
        """Fold one frame in. A malformed body raises ProtocolError; nothing is half-added."""
        handler = self._handlers.get(frame.kind)
        if handler is not None:
            try:
                handler(frame.worker, frame.body)
            except Exception as err:  # untrusted input: whatever broke, it is the frame's fault
                raise ProtocolError(
                    f"malformed {frame.kind} frame from {frame.worker}: {err!r}") from err
        self.worker(frame.worker).frames += 1

    def _on_hello(self, wid: str, b: dict[str, Any]) -> None:
        host, pid = bounded_text(b["host"], MAX_HOST), int(b["pid"])
        node, boot = _opt(b.get("node"), str), _opt(b.get("boot_id"), str)
        if node is not None:
            node = bounded_text(node, MAX_HOST)
        if boot is not None and len(boot) > MAX_BOOT_ID:
            raise ValueError(f"a boot id has at most {MAX_BOOT_ID} characters")
        sidecar_pid, interval = _opt(b.get("sidecar_pid"), int), _opt(b.get("interval"), float)
        self._set_anchor(wid, b["anchor"], boot)
        w = self.worker(wid)
        w.host, w.node, w.pid = host, node, pid
        w.sidecar_pid, w.interval, w.boot_id = sidecar_pid, interval, boot
        self._roots[wid] = w.pid

    def _on_job_start(self, wid: str, b: dict[str, Any]) -> None:
        if wid not in self._anchor and b.get("anchor"):
            self._set_anchor(wid, b["anchor"], None)
        tid = b.get("tid")
        job_id = int(b["job"])
        start = self._wall(wid, b["t"])
        job = {"id": job_id, "name": bounded_text(b["name"], MAX_NAME), "start": start,
               "pid": int(b["pid"]), "tid": None if tid is None else int(tid)}
        submitted = b.get("submitted")
        # Within a century of its start: a time no clock gives would break every save after.
        if type(submitted) is int and abs(submitted - start) <= _SANE_NS:
            job["submitted"] = submitted  # wall ns, the submitter's (the driver's) clock
        self._open_jobs[(wid, job_id)] = job

    def _on_job_end(self, wid: str, b: dict[str, Any]) -> None:
        death = _death(b.get("death"))
        stats = _numbers(b["stats"]) if b.get("stats") else None
        key = (wid, int(b["job"]))
        if key not in self._open_jobs:
            return  # its start was lost: the seq gap is already counted
        end = self._wall(wid, b["t"])
        status = protocol.status_of(b.get("status", Status.OK), protocol.JOB_END_STATUSES)
        error = _opt(b.get("error"), str)
        tb = _opt(b.get("traceback"), str)
        job = self._open_jobs.pop(key)
        if self.keep:
            _append_job(self.t, wid, job, end, status, error, stats, death,
                        None if tb is None else tb[:MAX_TRACEBACK])

    def _on_sample(self, wid: str, b: dict[str, Any]) -> None:
        if not self.keep:
            _check_live(b)
            return
        t = self._wall(wid, b["t"])
        if t > self.last_sample.get(wid, t - 1):
            self.last_sample[wid] = t
        root = self._roots.get(wid)
        got = b.get("new", _ABSENT)  # absent: nothing to do; anything else, as it is
        names = None if got is _ABSENT else {int(pid): str(name) for pid, _, name in got}
        # (t, scope, pid, tid, values), each checked, not yet copied.
        new: list[tuple[int, str, int | None, int | None, dict[str, float]]] = []
        if b.get("tree"):
            new.append((t, "tree", root, None, _checked(b["tree"])))
        for pid, values in b.get("procs", ()):
            new.append((t, "proc", int(pid), None, _checked(values)))
        if b.get("host"):
            new.append((t, "host", None, None, _checked(b["host"])))
        for index, values in b.get("gpus", ()):
            new.append((t, protocol.gpu_scope(index), None, None, _checked(values)))
        for row in b.get("threads", ()):
            pid, tid, values = int(row[0]), int(row[1]), _checked(row[2])
            new.append((t, "thread", pid, tid, values))
            if len(row) > 3:  # a thread that started since the last sample: 0 CPU then
                new.append((self._wall(wid, row[3]), "thread", pid, tid,
                            {k: 0.0 for k in values if k != "cpu_percent"}))
        if b.get("sidecar"):  # what monitoring this tree cost, on its root as tree is
            new.append((t, "sidecar", root, None, _checked(b["sidecar"])))
        got = b.get("notes", _ABSENT)
        notes = None if got is _ABSENT else [str(n) for n in got]
        # All checked: now add.
        if self.bins is not None:
            self.bins.rows(wid, new)
        else:
            self.t.samples.extend(Sample(wid, when, scope, pid, dict(values), tid)
                                  for when, scope, pid, tid, values in new)
        if names:
            self.t.processes.update({(wid, pid): name for pid, name in names.items()})
        if notes:
            self._add_notes(self.worker(wid), notes)

    def plain_records(self, wid: str, b: dict[str, Any]) -> tuple[int, list[PlainSpan],
                                                                   dict[str, Any] | None]:
        """For a live exporter, a spans frame taken apart: its pid, its plain span records
        (no attrs, error or cut: most of them) checked as add() checks them, as
        (job, id, parent, name, start, end, tid, cpu_ns) with wall-clock times, and its body
        with the other span records, for add() (None if there are none). Marks are left out.
        ProtocolError if any record is malformed (then nothing of the frame is taken)."""
        try:
            return self._plain_records(wid, b)
        except Exception as err:  # untrusted input: whatever broke, it is the frame's fault
            raise ProtocolError(f"malformed spans frame from {wid}: {err!r}") from err

    def _plain_records(self, wid: str, b: dict[str, Any]) -> tuple[int, list[PlainSpan],
                                                                    dict[str, Any] | None]:
        pid = int(b["pid"])
        clock = self._clock(wid)
        plain: list[PlainSpan] = []
        rest = []
        for rec in b.get("records", ()):
            span = _plain_span(rec, clock)
            if span is None:
                r = _record(rec)
                if r.kind == protocol.RECORD_MARK:
                    continue
                if r.attrs is not None or r.error is not None or r.cut_short:
                    rest.append(rec)
                    continue
                span = _plain_tuple(r.job, r.id, r.parent, r.name, r.start_ns, r.end_ns, r.tid,
                                    r.cpu_ns, clock)
            plain.append(span)
        return pid, plain, ({**b, "records": rest} if rest else None)

    def _clock(self, wid: str) -> tuple[int, int, int]:
        """(shift, lo, hi): what _wall adds to a worker's monotonic times, and the range of
        wall times it lets through (within a century of its anchor, and int64)."""
        anchor = self._anchor.get(wid)
        shift = 0 if anchor is None else anchor[0] - anchor[1]
        lo, hi = -_INT64, _INT64 - 1
        if anchor is not None:
            lo, hi = max(lo, anchor[0] - _SANE_NS), min(hi, anchor[0] + _SANE_NS)
        return shift, lo, hi

    def _on_spans(self, wid: str, b: dict[str, Any]) -> None:
        pid = int(b["pid"])
        threads = {(wid, pid, int(tid)): str(name) for tid, name in b.get("threads", ())}
        spans: list[Span] = []
        marks: list[Mark] = []
        keep, wall, clock = self.keep, self._wall, self._clock(wid)
        for rec in b.get("records", ()):
            plain = _plain_span(rec, clock)
            if plain is not None:  # most records: checked without a record object
                if keep:
                    job, span_id, parent, name, start, end, tid, cpu = plain
                    spans.append(Span(wid, job, span_id, parent, name, start, end, pid, tid,
                                      cpu_ns=cpu))
                continue
            r = _record(rec)
            # Every field checked whether kept or not: a driver's live builder (keep=False)
            # refuses what a record's would, without building what it would throw away.
            job = None if r.job is None else int(r.job)
            name, start, tid = str(r.name), wall(wid, r.start_ns), int(r.tid)
            # At most MAX_DEPTH levels, keys strings: what views save.
            attrs = bounded_attrs(r.attrs) if r.attrs is not None and keep else r.attrs
            if r.kind == protocol.RECORD_MARK:
                if keep:
                    marks.append(Mark(wid, job, name, start, pid, tid, attrs))
                continue
            span_id, parent = int(r.id), None if r.parent is None else int(r.parent)
            end = wall(wid, r.end_ns)
            error = None if r.error is None else str(r.error)
            if keep:
                cpu = r.cpu_ns
                spans.append(Span(wid, job, span_id, parent, name, start, end, pid, tid, attrs,
                                  error, cut_short=r.cut_short,
                                  # One thread's CPU: at most the span's time (the two clocks
                                  # tick apart by up to a scheduler tick).
                                  cpu_ns=None if cpu is None else min(
                                      cpu, max(r.end_ns - r.start_ns, 0))))
        lost = _opt(b.get("spans_lost"), int)
        lost_job = _opt(b.get("spans_lost_job"), int)
        notes = b.get("notes") or []
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise ValueError("span notes must be a list of strings")
        if not self.keep:
            return
        # All checked: now add.
        self.t.threads.update(threads)
        self.t.spans.extend(spans)
        self.t.marks.extend(marks)
        w = self.worker(wid)
        if lost_job is not None:
            # A job's own timeline (its kept frames): what its rings lost while it ran; the
            # running totals, and those of the jobs nested in it (within its count), no more.
            w.spans_lost = max(self._lost_job.get(wid, 0), lost_job)
            self._lost_job[wid] = w.spans_lost
        elif lost is not None and wid not in self._lost_job:
            w.spans_lost = max(w.spans_lost, lost)  # a running total: a lost frame loses nothing
        self._add_notes(w, notes)

    def _on_bye(self, wid: str, b: dict[str, Any]) -> None:
        status = protocol.status_of(b.get("status", Status.EXITED), protocol.BYE_STATUSES)
        dropped = int(b.get("dropped", 0))
        errors = [str(e) for e in b.get("errors", ())]
        notes = b.get("notes") or []  # e.g. how the worker died
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise ValueError("bye notes must be a list of strings")
        w = self.worker(wid)
        w.status, w.dropped, w.errors = status, dropped, errors
        self._add_notes(w, notes)

    def _add_notes(self, w: Worker, notes: list[str]) -> None:
        """Add what is new of a frame's notes to the worker's, within WORKER_NOTES_BYTES."""
        used = self._note_bytes.get(w.id, 0)
        if used < 0 or not notes:
            return
        have = set(w.notes)
        for whole in notes:
            note = whole if len(whole) <= NOTE_CHARS else whole[:NOTE_CHARS] + " [cut]"
            if note in have:
                continue
            size = len(note.encode("utf-8", "surrogatepass"))
            if used + size > WORKER_NOTES_BYTES:
                w.notes.append(f"more notes of this worker were not kept: a worker keeps at "
                               f"most {fmt_bytes(WORKER_NOTES_BYTES)} of notes from its frames "
                               "(builder.WORKER_NOTES_BYTES)")
                self._note_bytes[w.id] = -1
                return
            w.notes.append(note)
            have.add(note)
            used += size
        self._note_bytes[w.id] = used

    def has_open_job(self, wid: str) -> bool:
        """Whether a job of this worker has started and not ended (running, not idle)."""
        return any(w == wid for w, _ in self._open_jobs)

    def snapshot(self, last: bool = False) -> tuple[Timeline, list[tuple[str, dict[str, Any]]]]:
        """Shallow copies of what finish() needs: cheap, to take under a caller's lock.
        last: nothing is added after (a record read whole): binned samples are handed over,
        not copied."""
        samples = list(self.t.samples) if self.bins is None else self.bins.samples(take=last)
        t = Timeline({k: dataclasses.replace(w) for k, w in self.t.workers.items()},
                     list(self.t.jobs), list(self.t.spans), list(self.t.marks),
                     samples, dict(self.t.processes), dict(self.t.threads))
        note = None if self.bins is None else self.bins.note()
        if note:
            for w in t.workers.values():
                w.notes = [*w.notes, note]
        return t, [(wid, dict(job)) for (wid, _), job in self._open_jobs.items()]

    def timeline(self, offsets: dict[str, int] | None = None) -> Timeline:
        """A copy of the timeline so far. A job still open shows as running, or as killed
        when its worker has already said bye; a worker with no job open and no bye yet is
        idle. offsets: worker id -> ns its clock runs ahead of the driver's, taken off every
        time of that worker."""
        return self.finish(self.snapshot(), offsets)

    @staticmethod
    def finish(snapshot: tuple[Timeline, list[tuple[str, dict[str, Any]]]],
               offsets: dict[str, int] | None = None,
               lost: dict[str, tuple[int, str]] | None = None) -> Timeline:
        """lost: worker -> (end on the driver's clock, why) for workers whose open jobs a
        driver gave up on (silent, gone, or the driver closed): those jobs end there, lost."""
        t, open_jobs = snapshot
        if offsets:
            _shift(t, offsets)
        for wid, job in open_jobs:
            gone = t.workers[wid].status != Status.RUNNING
            shifted = dict(job, start=job["start"] - (offsets or {}).get(wid, 0))
            if lost and wid in lost:
                end, why = lost[wid]
                _append_job(t, wid, shifted, max(end, shifted["start"]), Status.LOST, why)
                continue
            _append_job(t, wid, shifted, t.end_ns if gone else None,
                        Status.KILLED if gone else Status.RUNNING, None)
        busy = {wid for wid, _ in open_jobs}
        for wid, w in t.workers.items():
            if w.status == Status.RUNNING and wid not in busy:
                # No bye yet, but no job open either (its last job ended, and a bye may be
                # on its way): it is not running anything.
                w.status = Status.IDLE
        t.sort()
        return t


# A plain span record, checked, for a live exporter: (job, id, parent, name, start, end, tid,
# cpu_ns), times wall ns on the worker's clock.
PlainSpan = tuple[int | None, int, int | None, str, int, int, int, int | None]


def _plain_span(rec: Any, clock: tuple[int, int, int]) -> PlainSpan | None:
    """The most common record checked without a record object, as _record and _wall check
    it: a plain span (no attrs, error or cut) of the sidecar's own layout, as
    (job, id, parent, name, start, end, tid, cpu_ns) on the wall clock. None for any other
    record (_record checks it)."""
    if not (type(rec) is list and len(rec) == protocol.RECORD_FIELDS and rec[8] is None
            and rec[9] is None and rec[10] is False and rec[0] == protocol.RECORD_SPAN):
        return None
    _, job, sid, parent, name, begin, end, tid, _, _, _, cpu = rec
    if cpu is not None and (type(cpu) is not int or not 0 <= cpu < 1 << 62):
        raise ValueError("a span record's cpu_ns must be a count of ns or nil")
    return _plain_tuple(job, sid, parent, name, begin, end, tid, cpu, clock)


def _plain_tuple(job: Any, sid: Any, parent: Any, name: Any, begin: Any, end: Any, tid: Any,
                 cpu: int | None, clock: tuple[int, int, int]) -> PlainSpan:
    """A span's fields checked and converted, its times moved onto the wall clock."""
    shift, lo, hi = clock
    if type(begin) is not int or type(end) is not int:
        raise ValueError("a time must be integer nanoseconds")
    begin += shift
    end += shift
    if not (lo <= begin <= hi and lo <= end <= hi):
        raise ValueError(f"time {begin} or {end} is out of the worker's range")
    if cpu is not None and cpu > end - begin:
        cpu = max(end - begin, 0)  # one thread's CPU: at most the span's time
    return (None if job is None else int(job), int(sid), None if parent is None else int(parent),
            str(name), begin, end, int(tid), cpu)


def _record(rec: Any) -> protocol.SpanRecord:
    """One record of a spans frame, its fields' kinds checked (ValueError if malformed)."""
    # An older sidecar's records lack the trailing cut_short and cpu_ns.
    if not isinstance(rec, list) or not (protocol.RECORD_FIELDS - 2 <= len(rec)
                                         <= protocol.RECORD_FIELDS):
        raise ValueError(f"a span record is an array of {protocol.RECORD_FIELDS} fields")
    r = protocol.SpanRecord(*rec)
    if r.attrs is not None and not isinstance(r.attrs, dict):
        raise ValueError("span attrs must be a map")
    if not isinstance(r.cut_short, bool):
        raise ValueError("a span record's cut_short must be true or false")
    cpu = r.cpu_ns
    if cpu is not None and (type(cpu) is not int or not 0 <= cpu < 1 << 62):
        raise ValueError("a span record's cpu_ns must be a count of ns or nil")
    return r


def _check_live(b: dict[str, Any]) -> None:
    """What a live view reads of a sample (driver/live.py), checked: its tree's values, and
    each GPU's. The rest is checked when a timeline is built from the record."""
    if b.get("tree"):
        _check_numbers(b["tree"])
    for index, values in b.get("gpus", ()):
        protocol.gpu_scope(index)
        _check_numbers(values)


def _check_numbers(values: Any) -> None:
    if not isinstance(values, dict):
        raise ValueError("metric values must be a map")
    for v in values.values():
        if type(v) not in _PLAIN_NUMBERS:
            raise ValueError("a metric value is not a number")


def _in_range(t: Timeline, offsets: dict[str, int]) -> dict[str, int]:
    """The offsets that keep every time of their worker within int64 once taken off; one
    that would not (an anchor near the edge of int64 and a clock a century off, each within
    its own bound) is left out, and its worker's note says so: a save would fail else."""
    wanted = {w: off for w, off in offsets.items() if off}
    if not wanted:
        return wanted
    lo: dict[str, int] = {}
    hi: dict[str, int] = {}

    def see(wid: str, first: int, last: int) -> None:
        if wid in wanted:
            lo[wid] = min(lo.get(wid, first), first)
            hi[wid] = max(hi.get(wid, last), last)

    for smp in t.samples:  # one pass each, nothing held: a record may hold millions
        see(smp.worker, smp.t_ns, smp.t_ns)
    for m in t.marks:
        see(m.worker, m.t_ns, m.t_ns)
    for s in t.spans:
        see(s.worker, min(s.start_ns, s.end_ns), max(s.start_ns, s.end_ns))
    for j in t.jobs:
        end = j.start_ns if j.end_ns is None else j.end_ns
        see(j.worker, min(j.start_ns, end), max(j.start_ns, end))
    for wid in [w for w in lo if lo[w] - wanted[w] < -_INT64 or hi[w] - wanted[w] >= _INT64]:
        off = wanted.pop(wid)
        if wid in t.workers:
            t.workers[wid].notes.append(
                f"its clock offset ({off} ns) would move its times out of range: they stay on "
                "its own clock")
    return wanted


_Event = TypeVar("_Event", Sample, Span, Mark, Job)


def moved(event: _Event, **changes: int | None) -> _Event:
    """A copy of a frozen event with some of its fields changed: what dataclasses.replace
    makes of these classes (no __post_init__, no field left out of __init__: a unit test
    holds them to it), at a tenth of its cost, which a record of millions of spans, each
    moved onto the driver's clock, paid for a third of its load()."""
    new = object.__new__(type(event))
    new.__dict__.update(event.__dict__, **changes)
    return new


def _shift(t: Timeline, offsets: dict[str, int]) -> None:
    """Move each worker's events by its clock offset onto the driver's clock."""
    offsets = _in_range(t, offsets)
    get = offsets.get
    t.samples = [moved(s, t_ns=s.t_ns - off) if (off := get(s.worker)) else s
                 for s in t.samples]
    t.spans = [moved(s, start_ns=s.start_ns - off, end_ns=s.end_ns - off)
               if (off := get(s.worker)) else s for s in t.spans]
    t.marks = [moved(m, t_ns=m.t_ns - off) if (off := get(m.worker)) else m for m in t.marks]
    t.jobs = [moved(j, start_ns=j.start_ns - off,
                    end_ns=None if j.end_ns is None else j.end_ns - off)
              if (off := get(j.worker)) else j for j in t.jobs]


def _append_job(t: Timeline, wid: str, job: dict[str, Any], end: int | None, status: Status,
                error: Any, stats: dict[str, float] | None = None,
                death: dict[str, Any] | None = None, tb: str | None = None) -> None:
    """A job is a Job record and also the outermost span of its worker's spans (whose attrs
    hold the traceback of what the job raised, as a span's do)."""
    err = None if error is None else str(error)
    t.jobs.append(Job(wid, job["id"], job["name"], job["start"], end, status, err, job["pid"],
                      job["tid"], stats, death, job.get("submitted")))
    attrs: dict[str, Any] = {"status": status, **(stats or {})}
    if tb:
        attrs["traceback"] = tb
    t.spans.append(Span(wid, job["id"], job["id"], None, job["name"], job["start"],
                        end if end is not None else job["start"], job["pid"],
                        job["tid"] or job["pid"], attrs,
                        None if status in (Status.OK, Status.RUNNING) else (err or status), "job"))


def build(frames: Iterable[bytes]) -> Timeline:
    """The Timeline of encoded driver frames (a job's frames from its sidecar, a record)."""
    builder = TimelineBuilder()
    for data in frames:
        # A job's own frames, from its own sidecar: one the wire would not carry (a sample of
        # thousands of processes) is still the job's.
        builder.add(protocol.decode_frame(data, protocol.MAX_PIPE_BYTES))
    return builder.timeline()
