"""The one formatter per unit every view uses (workerscope/export/units.py)."""

from __future__ import annotations

import math

import pytest

from workerscope.units import (
    MISSING,
    binary_scale,
    fmt_bytes,
    fmt_percent,
    fmt_rate,
    fmt_seconds,
    short_worker,
)

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"),
    (1, "1 B"),
    (1023, "1023 B"),
    (1024, "1 KiB"),
    (1536, "1.5 KiB"),  # 1536 / 1024 = 1.5
    (10 * KiB + 512, "10.5 KiB"),
    (1.5 * MiB, "1.5 MiB"),
    (300 * MiB, "300 MiB"),
    (2.25 * GiB, "2.25 GiB"),
    (5 * TiB, "5 TiB"),
    (2048 * TiB, "2048 TiB"),  # no unit past TiB, and never "2.05e+03"
    (-1536, "-1.5 KiB"),  # an RSS that shrank
    (1000 * KiB, "1000 KiB"),  # three digits, no exponent: as +x.toPrecision(3) in report.js
    (123_456_789, "118 MiB"),  # 117.74 MiB to three significant digits
])
def test_fmt_bytes(n, text):
    """Binary units, three significant digits, a space before the unit."""
    assert fmt_bytes(n) == text


@pytest.mark.parametrize("missing", [None, math.nan, math.inf])
def test_missing_values(missing):
    """An absent or non-finite value is the same mark in every formatter."""
    assert MISSING == "-"
    for fmt in (fmt_bytes, fmt_rate, fmt_seconds, fmt_percent):
        assert fmt(missing) == MISSING


def test_fmt_rate():
    """A rate is the byte count per second."""
    assert fmt_rate(1.5 * MiB) == "1.5 MiB/s"
    assert fmt_rate(0) == "0 B/s"


@pytest.mark.parametrize(("s", "text"), [
    (0, "0 s"),
    (412e-9, "412 ns"),
    (12.3e-6, "12.3 µs"),
    (0.0015, "1.5 ms"),
    (0.25, "250 ms"),
    (0.9996, "1 s"),  # rounds up into the next unit, not "1000 ms"
    (1, "1 s"),
    (9.75, "9.75 s"),
    (12.345, "12.3 s"),
    (100, "100 s"),
    (1234, "1,234 s"),
])
def test_fmt_seconds(s, text):
    """Durations in ns, µs, ms or s, three significant digits; thousands of seconds whole."""
    assert fmt_seconds(s) == text


def test_fmt_percent():
    """Percentages are whole; above 100 is more than one core."""
    assert fmt_percent(42.4) == "42%"
    assert fmt_percent(250.0) == "250%"
    assert fmt_percent(0) == "0%"


def test_short_worker_and_axis_scale():
    """A worker's label is host:pid of its id; an axis in MiB scales by 2**20."""
    assert short_worker("n1/a:100:101") == "n1/a:100"
    assert short_worker("solo") == "solo"
    assert binary_scale("MiB") == binary_scale("MiB/s") == MiB
    assert binary_scale("GiB") == GiB
    assert binary_scale("% of a core") == 1
