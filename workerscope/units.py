"""How every value is written (views, notes, messages): one formatter per unit, one convention for
the whole product, in the core so that every layer uses it.

Bytes in binary units spelled B, KiB, MiB, GiB, TiB, as memory is sized (a 2 GiB limit
shows as "2 GiB", not "2.15 GB"): three significant digits and a space before the unit, as
fmtBytes in report.js prints them, so the page and the terminal agree: 1536 -> "1.5 KiB". A
rate is bytes per second: "1.5 MiB/s". Seconds in ns, µs, ms or s, three significant digits.
A value that is absent (None) or not finite is MISSING.
"""

from __future__ import annotations

import math

MISSING = "-"

# The binary byte units, in bytes; plots.py scales its axes by these.
BYTE_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_TIME_UNITS = (("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3))


def _sig3(x: float) -> str:
    """x to three significant digits, trailing zeros dropped and never in exponent form:
    what `+x.toPrecision(3)` prints in report.js (1.50 -> "1.5", 1010 -> "1010")."""
    return f"{float(f'{x:.3g}'):g}"


def fmt_bytes(n: float | None) -> str:
    """A byte count: "512 B", "1.5 KiB", "300 MiB", "2.25 GiB"."""
    if n is None or not math.isfinite(n):
        return MISSING
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(x) < 1024:
            return f"{x:.0f} {unit}" if unit == "B" else f"{_sig3(x)} {unit}"
        x /= 1024
    return f"{_sig3(x) if abs(x) < 1000 else f'{x:.0f}'} TiB"


def fmt_rate(bytes_per_s: float | None) -> str:
    """A byte rate: "1.5 MiB/s"."""
    text = fmt_bytes(bytes_per_s)
    return text if text == MISSING else f"{text}/s"


def fmt_seconds(seconds: float | None) -> str:
    """A duration: "0 s", "412 ns", "12.3 µs", "1.5 ms", "9.75 s", "1,234 s"."""
    if seconds is None or not math.isfinite(seconds):
        return MISSING
    x = float(seconds)
    if x == 0:
        return "0 s"
    for unit, size in _TIME_UNITS:
        # Rounded first, so 0.9996 s reads "1 s", not "1000 ms".
        if abs(float(f"{x / size:.3g}")) < 1000:
            return f"{_sig3(x / size)} {unit}"
    if abs(float(f"{x:.3g}")) < 1000:
        return f"{_sig3(x)} s"
    return f"{x:,.0f} s"


def fmt_percent(percent: float | None) -> str:
    """A percentage, whole: "42%" (CPU above 100% is more than one core)."""
    if percent is None or not math.isfinite(percent):
        return MISSING
    return f"{percent:.0f}%"


def fmt_share(percent: float | None) -> str:
    """A share that is often small, such as what a monitor uses of a core: two significant
    digits below 10% ("0.42%", "3.1%"), whole from there ("42%", as fmt_percent)."""
    if percent is None or not math.isfinite(percent):
        return MISSING
    if abs(percent) >= 9.95:
        return fmt_percent(percent)
    text = f"{float(f'{percent:.2g}'):f}".rstrip("0").rstrip(".")  # never in exponent form
    return f"{text if text not in ('', '-0') else '0'}%"


def short_worker(worker_id: str) -> str:
    """A worker's label in every view: host:pid of its id ([node/]host:pid:sidecar)."""
    parts = worker_id.split(":")
    return ":".join(parts[:2]) if len(parts) >= 2 else worker_id


def binary_scale(unit: str) -> int:
    """Bytes in the binary unit an axis is labelled with ("MiB" and "MiB/s": 2**20); 1 for a
    label that names no byte unit."""
    return BYTE_UNITS.get(unit.removesuffix("/s"), 1)


def fmt_signal(number: int) -> str:
    """A signal's name ("SIGKILL"), or "signal N" for a number this platform does not name."""
    import signal  # here: most users of this module format numbers, not signals

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# -- text and values from outside, made safe to show or to write --------------------------------
# Zero-width joiners shape letters (Persian, Indic scripts, emoji sequences) and move no cursor.
_JOINERS = frozenset("\u200c\u200d")


def printable(text: str) -> str:
    """`text` as a terminal can only show it: every control or format character (C0 ones
    \\t and \\n included, DEL, C1, bidi overrides, ...) written as its escape (ESC as "\\x1b");
    letters of every script and spaces kept. Names, errors and notes come from frames that
    anyone able to reach the driver can send: raw, ESC ] 52 writes the reader's clipboard.
    Escaping twice changes nothing."""
    if text.isprintable():  # C speed: the path of every ordinary name
        return text
    import unicodedata

    return "".join(c if c.isprintable() or c in _JOINERS or unicodedata.category(c) == "Zs"
                   else ascii(c)[1:-1] for c in text)


MAX_DEPTH = 32  # levels of nested containers a saved attr keeps (json_safe)
# What starts the text that stands for the levels past MAX_DEPTH; ASCII, so that it reads the
# same inside the JSON text a .pftrace annotation holds.
CUT = f"[cut: deeper than {MAX_DEPTH} levels] "
_NOT_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def json_safe(value: object, depth: int = MAX_DEPTH) -> object:
    """`value` as any JSON writer takes it: dict keys made strings, tuples lists, NaN and
    infinities their JavaScript names as strings ("NaN", "Infinity"; JSON has no such
    numbers), another object its repr, and containers nested past `depth` levels a string:
    CUT and a short repr of the rest (a writer's recursion ends near 1,000 levels)."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _NOT_FINITE.get(value, "NaN")
    if isinstance(value, (dict, list, tuple)):
        if depth <= 0:
            return CUT + _short_repr(value)
        if isinstance(value, dict):
            return {k if isinstance(k, str) else str(k): json_safe(v, depth - 1)
                    for k, v in value.items()}
        return [json_safe(v, depth - 1) for v in value]
    return repr(value)


def _short_repr(value: object) -> str:
    """A repr a few levels and items deep: repr() itself recurses, and fails as deep as json."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother = 3, 60, 60
    return r.repr(value)
