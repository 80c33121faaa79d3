"""Engine integrations: workerscope where Dask, Ray and Lithops users already are, with no
function of theirs wrapped by hand.

    from workerscope.engines import WorkerscopePlugin        # Dask: every task a job
    client.register_plugin(WorkerscopePlugin(endpoint=sub.endpoint))

Each engine's module imports its engine, so each name here is imported on first use: workerscope
imports without any engine installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .dask import WorkerscopePlugin
    from .lithops import profiled_executor
    from .ray import profiled_remote

__all__ = ["WorkerscopePlugin", "profiled_executor", "profiled_remote"]

_WHERE = {"WorkerscopePlugin": "dask", "profiled_executor": "lithops",
          "profiled_remote": "ray"}


def __getattr__(name: str) -> object:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'workerscope.engines' has no attribute {name!r}")
    from importlib import import_module

    value: object = getattr(import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value
