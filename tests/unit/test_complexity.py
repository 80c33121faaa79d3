"""The functions every tick, every drain and every frame run stay simple enough to change."""

from __future__ import annotations

import os

import pytest

radon = pytest.importorskip("radon.complexity")

PACKAGE = os.path.join(os.path.dirname(__file__), "..", "..", "workerscope")
# (module, class or None, function): the sampler's tick, the ring reader, the receive fold.
HOT = [
    ("sidecar/tree.py", "ProcessTree", "read"),
    ("sidecar/tree.py", "ProcessTree", "_read_whole"),
    ("sidecar/tree.py", "ProcessTree", "_read_quiet"),
    ("sidecar/tree.py", "ProcessTree", "_read_tiers"),
    ("sidecar/tree.py", "ProcessTree", "_tree_values"),
    ("sidecar/tree.py", "ProcessTree", "read_threads"),
    ("sidecar/service.py", "Sidecar", "sample"),
    ("sidecar/service.py", "Sidecar", "loop"),
    ("spanring.py", "RingReader", "read"),
    ("driver/receive.py", "Receiver", "_fold"),
    ("driver/receive.py", "Receiver", "_handle"),
]


def _blocks(path: str) -> list:
    with open(os.path.join(PACKAGE, path), encoding="utf-8") as f:
        return radon.cc_visit(f.read())


def _find(path: str, cls: str | None, name: str):
    for block in _blocks(path):
        if block.name == name and getattr(block, "classname", None) == cls:
            return block
        for method in getattr(block, "methods", ()):
            if block.name == cls and method.name == name:
                return method
    raise AssertionError(f"{path}: no {cls}.{name}")


@pytest.mark.parametrize(("path", "cls", "name"), HOT)
def test_hot_functions_stay_at_complexity_20_or_below(path, cls, name):
    """Each function on the tick, the ring read or the receive fold: cyclomatic complexity at
    most 20 (radon's), so a new metric or frame kind does not hide in a 77-branch function."""
    assert _find(path, cls, name).complexity <= 20


def test_the_tick_s_read_is_under_60_lines():
    """ProcessTree.read, the function every tick runs, fits on a screen."""
    block = _find("sidecar/tree.py", "ProcessTree", "read")
    assert block.endline - block.lineno + 1 < 60
