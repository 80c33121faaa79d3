"""Fixtures of the tests that start processes."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _mp_resource_tracker():
    """multiprocessing's tracker keeps a pipe open for the session once a spawn pool starts it:
    start it first, so it is not counted as a test's leak."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
