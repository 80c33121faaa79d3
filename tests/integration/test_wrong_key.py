"""A worker with keys the driver does not know is told so, and so is the driver."""

from __future__ import annotations

import logging

from helpers import wait_until

from workerscope import Subscriber, profiled
from workerscope.worker import light


def _with_foreign_client_key(endpoint: str, other: str) -> str:
    """endpoint with its client secret swapped for the one of another driver's endpoint."""
    address, _, keys = endpoint.partition("?curve=")
    server, _ = keys.split(",")
    _, _, theirs = other.partition("?curve=")
    return f"{address}?curve={server},{theirs.split(',')[1]}"


def test_a_worker_with_a_wrong_key_is_told_how_to_fix_it(clean_env, caplog):
    """A light worker whose client key the driver refuses says, at its bye, that the driver
    refused its keys and how to give it the right endpoint (it said nobody listened); the
    driver says once that it refused a handshake, and how to fix it (it said nothing)."""
    with Subscriber() as sub, Subscriber() as other:
        bad = _with_foreign_client_key(sub.endpoint, other.endpoint)
        with caplog.at_level(logging.WARNING, logger="workerscope"):
            profiled(lambda: 1, mode="light", endpoint=bad)()
            profiled(lambda: 1, mode="heavy", endpoint=bad, interval=0.5)()
            wait_until(lambda: sub.refused["handshakes"] > 0, "a refused handshake",
                       timeout=30, step=0.05)
            light._close_senders()
        said = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert any("refused this worker's keys" in m and "?curve=" in m for m in said), said
        assert not any("nobody listened" in r.getMessage() for r in caplog.records)
        assert sub.refused["handshakes"] >= 1
        driver = [r.getMessage() for r in caplog.records if r.name == "workerscope.driver"
                  and "handshake failed" in r.getMessage()]
        assert len(driver) == 1 and "?curve=" in driver[0], driver
