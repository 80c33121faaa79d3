"""A time bin of samples gives one result whichever form folded it: columnar (every sample of
one key layout, all finite, folded a tuple per rule in C) or general (a map per metric)."""

from __future__ import annotations

import math
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from workerscope.builder import _Bin, fold_rule

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
