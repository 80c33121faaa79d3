"""A pong with an absurd time is refused where it enters, so that closing and saving work."""

from __future__ import annotations

import time

import pytest
import zmq
from helpers import wait_until

from workerscope import Subscriber, protocol
from workerscope.driver.clock import ClockSync
from workerscope.transport import dealer


@pytest.mark.parametrize("t1", [-2**63, 2**64 - 1, 2**63, 10**30])
def test_clock_sync_refuses_an_absurd_pong(t1):
    """ClockSync keeps no sample whose time is outside int64 or a century off."""
    clocks = ClockSync(now=lambda: 1_700_000_000 * 10**9)
    ping = clocks.ping("w")
    assert clocks.pong("w", ping["id"], t1) is False
    assert clocks.offsets()["w"] == (0, None)


@pytest.mark.parametrize("t1", [-2**63, 2**64 - 1])
def test_a_driver_given_an_absurd_pong_closes_and_saves(clean_env, tmp_path, t1):
    """A key holder's pong with t1 = -2**63 or 2**64-1: the driver closes without raising,
    and its timeline saves as .wsc and .pftrace (close raised OverflowError, saves failed)."""
    sub = Subscriber()
    sub.start()
    ctx = zmq.Context()
    sock = dealer(ctx, sub.endpoint)
    try:
        wid = "otherhost:42:43"
        hello = {"host": "otherhost", "pid": 42, "sidecar_pid": 43, "boot_id": "another-boot",
                 "anchor": [time.time_ns(), time.monotonic_ns()]}
        sock.send(protocol.encode_frame(protocol.HELLO, wid, 0, hello))
        assert sock.poll(30_000), "the driver pings a worker of another host"
        ping = protocol.decode_frame(sock.recv())
        assert ping.kind == protocol.PING
        pong = {"id": ping.body["id"], "t0": ping.body["t0"], "t1": t1}
        sock.send(protocol.encode_frame(protocol.PONG, wid, 1, pong))
        wait_until(lambda: sub.received.get(wid, 0) >= 2, "the hello and the pong",
                   timeout=30)
    finally:
        sock.close(0)
        ctx.term()
    sub.close()
    t = sub.timeline()
    assert wid in t.workers
    t.save(str(tmp_path / "x.wsc"))
    pytest.importorskip("perfetto")
    t.save(str(tmp_path / "x.pftrace"))
