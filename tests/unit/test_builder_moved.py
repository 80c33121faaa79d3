"""builder.moved, the copy with changed times that puts a record's millions of events on the
driver's clock, makes exactly what dataclasses.replace makes, for every event class, and
those classes stay of the kind it relies on (no __post_init__, every field in __init__)."""

from __future__ import annotations

import dataclasses

import pytest

from workerscope.builder import moved
from workerscope.protocol import Status
from workerscope.timeline import Job, Mark, Sample, Span

EVENTS = [
    Span("w", 3, 7, 2, "f", 100, 200, 11, 12, {"k": [1, 2]}, "ValueError: x", "job",
         cut_short=True, cpu_ns=55),
    Sample("w", 150, "thread", 11, {"rss_bytes": 1.0}, tid=12),
    Mark("w", 3, "epoch", 120, 11, 12, {"n": 1}),
    Job("w", 3, "job", 90, 210, Status.OK, "err", 11, 12, {"cpu_s": 1.0}, {"oom": 1}, 80),
]
CHANGES = {Span: {"start_ns": 40, "end_ns": 140}, Sample: {"t_ns": 90}, Mark: {"t_ns": 60},
           Job: {"start_ns": 30, "end_ns": None}}


def _non_default(event: object) -> None:
    """Every field differs from its default: a field moved() dropped would show."""
    for f in dataclasses.fields(event):  # type: ignore[arg-type]
        if f.default is not dataclasses.MISSING:
            assert getattr(event, f.name) != f.default, f.name


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_moved_is_dataclasses_replace(event):
    _non_default(event)
    changes = CHANGES[type(event)]
    got, want = moved(event, **changes), dataclasses.replace(event, **changes)
    assert type(got) is type(want)
    assert got == want
    assert vars(got) == vars(want)
    assert got is not event and event == dataclasses.replace(want, **{
        k: getattr(event, k) for k in changes})  # the original is left as it was
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.worker = "other"  # type: ignore[misc]


@pytest.mark.parametrize("cls", [Span, Sample, Mark, Job], ids=lambda c: c.__name__)
def test_the_event_classes_stay_what_moved_relies_on(cls):
    """A __post_init__, an init=False field or __slots__ would make moved() differ from
    dataclasses.replace: change moved() with them."""
    assert not hasattr(cls, "__post_init__")
    assert all(f.init for f in dataclasses.fields(cls))
    assert "__slots__" not in vars(cls)
    assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
