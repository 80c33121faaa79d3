"""Each engine wrapper defaults to the mode that fits how its engine runs calls."""

from __future__ import annotations

import pytest


def test_lithops_defaults_to_light_and_takes_heavy(clean_env):
    """profiled_executor is light unless told: each Lithops call is a process of its own,
    where a heavy job would start a sidecar per call."""
    pytest.importorskip("lithops")
    from workerscope.engines import profiled_executor

    assert profiled_executor(object()).options["mode"] == "light"
    assert profiled_executor(object(), mode="heavy").options["mode"] == "heavy"


def test_dask_defaults_to_heavy(clean_env):
    """WorkerscopePlugin is heavy unless told: a Dask worker process runs many tasks on one
    sidecar."""
    pytest.importorskip("distributed")
    from workerscope.engines import WorkerscopePlugin

    assert WorkerscopePlugin().options["mode"] == "heavy"
