"""profiled() calls what it was given, and copies by value the way the engines copy functions."""

from __future__ import annotations

import functools
import pickle

import cloudpickle

from workerscope import profiled


def scale(factor: int, x: int) -> int:
    return factor * x


class Doubler:
    """A callable object whose own attributes are named like profiled's."""

    def __init__(self) -> None:
        self.fn = abs
        self.options = {"mode": "nonsense"}

    def __call__(self, x: int) -> int:
        return 2 * x


def test_a_callable_object_with_fn_and_options_attributes_is_called(clean_env):
    """profiled(obj) calls obj, not an attribute of it named fn, and ignores its options."""
    assert profiled(Doubler())(-3) == -6
    assert profiled(Doubler(), mode="light")(-3) == -6


def test_a_partial_is_profiled_and_copied_by_cloudpickle(clean_env):
    """profiled(functools.partial(f, 2)) runs, and cloudpickle (loky, Dask, Ray, Lithops)
    copies it, before and after a call."""
    wrapped = profiled(functools.partial(scale, 2))
    assert wrapped(5) == 10
    assert wrapped.__name__ == "scale"
    copy = cloudpickle.loads(cloudpickle.dumps(wrapped))
    assert copy(6) == 12


def test_a_called_profiled_function_still_pickles(clean_env):
    """After a light job (whose ring is a memory map) the function still pickles, by value and
    by reference, and its copies start with no calls of their own."""
    wrapped = profiled(scale, mode="light")
    assert wrapped(3, 4) == 12 and wrapped.last_stats is not None
    assert cloudpickle.loads(cloudpickle.dumps(wrapped))(2, 2) == 4
    again = pickle.loads(pickle.dumps(wrapped))
    assert again.last_stats is None and again(1, 1) == 1
