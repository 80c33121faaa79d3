"""A time bin of samples gives one result whichever form folded it: columnar (every sample of
one key layout, all finite, folded a tuple per rule in C) or general (a map per metric)."""

from __future__ import annotations

import math
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from workerscope.builder import SampleBins, _Bin, fold_rule, sample_bytes
from workerscope.timeline import Sample

EXAMPLES = int(os.environ.get("WORKERSCOPE_FUZZ_EXAMPLES", "300"))

# One metric of each fold rule: last (a counter), mean (a rate), low (what runs out), high.
METRICS = ("cpu_s", "cpu_percent", "mem_available_bytes", "rss_bytes", "load_1m", "num_procs")
LAYOUT = {k: 1.0 for k in METRICS}

finite = st.one_of(st.integers(-2**53, 2**53), st.floats(-1e12, 1e12, allow_nan=False))
anything = st.one_of(finite, st.sampled_from([math.nan, math.inf, -math.inf]))


@st.composite
def sample(draw: st.DrawFn) -> tuple[int, dict[str, float]]:
    """Mostly a sidecar's series: the same keys in the same order, finite; now and then
    another layout, a key missing, or a value that is not finite."""
    t = draw(st.integers(0, 50))
    if draw(st.integers(0, 9)):
        return t, {k: draw(finite) for k in LAYOUT}
    keys = draw(st.lists(st.sampled_from(METRICS), unique=True, min_size=1))
    return t, {k: draw(anything) for k in keys}


def _fold(bins: list[list[tuple[int, dict[str, float]]]], columnar: bool) -> _Bin:
    made = []
    for samples in bins:
        (t, first), *rest = samples
        b = _Bin(t, dict(first), columnar=columnar)
        for t, values in rest:
            b.fold(t, dict(values))
        made.append(b)
    for other in made[1:]:
        made[0].merge(other)
    return made[0]


def _plain(values: dict[str, float]) -> list[tuple[str, object]]:
    return [(k, "nan" if v != v else float(v)) for k, v in values.items()]


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.lists(sample(), min_size=1, max_size=6), min_size=1, max_size=4))
def test_columnar_bins_equal_general_ones(bins):
    columnar, general = _fold(bins, True), _fold(bins, False)
    assert columnar.t == general.t
    assert _plain(columnar.result()) == _plain(general.result())


def test_a_sidecars_series_folds_columnar_and_keeps_each_rule():
    """Three samples of one layout stay columnar: the counter's last value, the rate's mean,
    the least available memory and the peak RSS."""
    b = _Bin(0, {"cpu_s": 1, "cpu_percent": 10.0, "mem_available_bytes": 5, "rss_bytes": 7})
    b.fold(2, {"cpu_s": 3, "cpu_percent": 40.0, "mem_available_bytes": 2, "rss_bytes": 9})
    b.fold(1, {"cpu_s": 2, "cpu_percent": 70.0, "mem_available_bytes": 4, "rss_bytes": 8})
    assert b.plan is not None, "it turned general"
    assert b.t == 2
    assert b.result() == {"cpu_s": 3, "cpu_percent": 40.0, "mem_available_bytes": 2,
                          "rss_bytes": 9}
    assert [fold_rule(k) for k in METRICS[:4]] == [0, 1, 2, 3]


def test_a_counter_the_latest_sample_lacks_is_the_latest_that_has_it():
    """Out of order: the latest sample (t 3) has no counter; of the two that have it, the one
    at t 2 folded before the one at t 1. The counter is t 2's, folded one by one or bins
    merged, in either order (it was t 1's when it came after the latest)."""
    a, b, c = (3, {"rss_bytes": 7.0}), (2, {"cpu_s": 20.0}), (1, {"cpu_s": 10.0})
    for order in ((a, b, c), (a, c, b), (c, a, b), (b, a, c)):
        one = _Bin(*order[0])
        for t, values in order[1:]:
            one.fold(t, values)
        merged = _Bin(*order[0])
        for t, values in order[1:]:
            merged.merge(_Bin(t, values))
        for got in (one, merged):
            assert got.t == 3
            assert got.result() == {"rss_bytes": 7.0, "cpu_s": 20.0}, order


# -- SampleBins: samples folded a run of rows at a time equal the plain fold of each -----------
KEYS = (("w1", "tree", 1, None), ("w1", "proc", 2, None), ("w2", "thread", 3, 4))


@st.composite
def stream(draw: st.DrawFn) -> list[Sample]:
    """Samples of a few series, in runs shuffled (so out of time order now and then), each
    series in time order or not; times unique within a series (the order of equal times is
    not what is tested)."""
    out = []
    for key in KEYS:
        times = draw(st.lists(st.integers(0, 4_000), unique=True, min_size=1, max_size=40))
        if draw(st.booleans()):
            times.sort()  # a sidecar's series: in order
        for t in times:
            values = draw(sample())[1]
            out.append(Sample(key[0], t * 1_000, key[1], key[2], values, key[3]))
    # Interleaved in runs (as frames of many workers come), each series in its own order.
    rnd = draw(st.randoms(use_true_random=False))
    chunk = draw(st.integers(1, 20))
    runs = [out[i:i + chunk] for i in range(0, len(out), chunk)]
    rnd.shuffle(runs)
    return [s for run in runs for s in run]


def _binned(samples: list[Sample]) -> dict[tuple, tuple[Sample, list[Sample]]]:
    """Each series' earliest sample (the first to come of its time) and its others."""
    first: dict[tuple, Sample] = {}
    rest: dict[tuple, list[Sample]] = {}
    for s in samples:
        key = (s.worker, s.scope, s.pid, s.tid)
        if key not in first:
            first[key] = s
            continue
        if s.t_ns < first[key].t_ns:
            s, first[key] = first[key], s
        rest.setdefault(key, []).append(s)
    return {key: (first[key], rest.get(key, [])) for key in first}


def _check_bin(got: Sample, members: list[Sample]) -> None:
    """A bin of these samples, whichever order they were folded in: at the latest time; a
    metric wherever one had it; of the finite values, the mean of a rate, the min of what
    runs out, the max of other gauges, and of a counter the latest sample's that has a finite
    one; a metric with no finite value: not finite, or left out (which, depends on the order
    they were folded in)."""
    latest = max(members, key=lambda s: s.t_ns)
    assert got.t_ns == latest.t_ns
    keys = {k for s in members for k in s.values}
    counted = {k for s in members for k, v in s.values.items() if math.isfinite(v)}
    assert counted <= set(got.values) <= keys
    for k in keys & set(got.values):
        finite_ = [s.values[k] for s in members if k in s.values and math.isfinite(s.values[k])]
        v = got.values[k]
        if not finite_:
            assert not math.isfinite(v), (k, v)
            continue
        rule = fold_rule(k)
        if rule == 1:
            want = sum(finite_) / len(finite_)
            assert math.isclose(v, want, rel_tol=1e-9, abs_tol=1e-3), (k, v, want)
        elif rule == 2:
            assert v == min(finite_), (k, v)
        elif rule == 3:
            assert v == max(finite_), (k, v)
        else:  # a counter: the latest sample's that has one (times are unique in a series)
            have = [s for s in members if k in s.values and math.isfinite(s.values[k])]
            assert v == max(have, key=lambda s: s.t_ns).values[k], (k, v)


@settings(max_examples=EXAMPLES, deadline=None)
@given(stream(), st.integers(2, 60), st.booleans())
def test_bins_equal_the_plain_fold_of_each_sample(samples, budget, hinted):
    """Whatever the order, layouts and values, SampleBins (runs of one series' rows in one bin
    folded a column at a time, bins widened as the samples come, or sized at once from how
    much of the input is read) keeps each series' earliest sample as it came, and a bin of
    its final width for each of the others' times, holding what fold_rule says of them."""
    fed = [0]
    bins = SampleBins(budget * sample_bytes(LAYOUT),
                      progress=(lambda: fed[0] / len(samples)) if hinted else None)
    for s in samples:
        fed[0] += 1
        bins.add(s)
    kept = bins.samples()
    assert bins.seen == len(samples)
    if not bins.width:  # within the budget: every sample as it came
        assert sorted(kept, key=id) == sorted(samples, key=id) or kept == samples
        return
    want = _binned(samples)
    got: dict[tuple, list[Sample]] = {}
    for s in kept:
        got.setdefault((s.worker, s.scope, s.pid, s.tid), []).append(s)
    assert got.keys() == want.keys()
    for key, (first, rest) in want.items():
        mine = got[key]
        assert mine[0] == first
        members: dict[int, list[Sample]] = {}
        for s in rest:
            members.setdefault(s.t_ns // bins.width, []).append(s)
        assert len(mine) - 1 == len(members)
        for b in mine[1:]:
            _check_bin(b, members[b.t_ns // bins.width])


# -- SampleBins with the part of the file read: binned early only when far past the budget ----
def _held_plain(budgets: float, limit: int = 1 << 20) -> tuple[int, SampleBins]:
    """A file whose samples take `budgets` times `limit`, fed in time order with how much of it
    is read: (the most bytes held as they came before binning began, the bins)."""
    size = sample_bytes(LAYOUT)
    total = int(budgets * limit / size)
    fed = [0]
    bins = SampleBins(limit, progress=lambda: fed[0] / total)
    most = 0
    for i in range(total):
        fed[0] += 1
        bins.add(Sample("w1", i * 1_000_000, "tree", 1, dict(LAYOUT), None))
        if not bins.width:
            most = bins.bytes
    return most, bins


def test_a_file_far_past_its_budget_is_binned_from_early_on():
    """Ten budgets of samples: binning starts once the part read says so (1/64 of the file
    read, here 10/64 of a budget held), not after a budget's worth of Sample objects has been
    built as they came (a long record's load held 221 MiB, 147 with this)."""
    most, bins = _held_plain(10)
    assert bins.width
    assert most <= (1 << 20) // 5, most
    assert bins.bytes <= 1 << 20


def test_a_file_within_its_budget_or_just_past_it_waits_for_the_budget():
    """0.9 budgets keep every sample; 1.3 (within the margin of EARLY_FACTOR, where samples
    coming sparser later could still fit) are binned only once a budget is held."""
    most, bins = _held_plain(0.9)
    assert not bins.width and bins.kept == bins.seen
    most, bins = _held_plain(1.3)
    assert bins.width and most >= (1 << 20) - sample_bytes(LAYOUT)
