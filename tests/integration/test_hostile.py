"""Hostile input: frames and pipe messages no honest peer sends must cost a ProtocolError,
never another exception, a dead receive thread or a lost job."""

from __future__ import annotations

import msgpack
import pytest
import zmq
from helpers import eventually

from workerscope import Subscriber, profiled, protocol
from workerscope.errors import ProtocolError
from workerscope.transport import dealer

# Each shape once crashed a decoder with something other than ProtocolError.
UNHASHABLE_KINDS = [
    [1, [], "w", 0, {}],
    [1, {}, "w", 0, {}],
    [1, [1, 2], "w", 0, {}],
]


@pytest.mark.parametrize("msg", UNHASHABLE_KINDS)
def test_decode_frame_with_unhashable_kind_raises_protocol_error(msg):
    """A list or map where the kind belongs is a ProtocolError, not a TypeError."""
    with pytest.raises(ProtocolError):
        protocol.decode_frame(msgpack.packb(msg))


@pytest.mark.parametrize("kind", [[], {}, [1]])
def test_pipe_reader_with_unhashable_kind_raises_protocol_error(kind):
    """The worker<->sidecar pipe reader refuses an unhashable kind with ProtocolError."""
    payload = msgpack.packb([kind, {}])
    data = len(payload).to_bytes(4, "big") + payload
    with pytest.raises(ProtocolError):
        protocol.PipeReader().feed(data)


def test_driver_survives_unhashable_kind_and_still_gets_a_real_job(clean_env):
    """The 7-byte frame [1, [], "w", 0, {}] is counted as bad; a real job after it arrives."""
    with Subscriber() as sub:
        ctx = zmq.Context()
        sock = dealer(ctx, sub.endpoint)
        try:
            for msg in UNHASHABLE_KINDS:
                sock.send(msgpack.packb(msg))
        finally:
            sock.close(linger=5000)  # deliver them before the context ends
            ctx.term()
        assert eventually(lambda: sub.bad_frames >= len(UNHASHABLE_KINDS)), sub.last_error
        job = profiled(sum, mode="heavy", interval=0.05, endpoint=sub.endpoint)
        assert job([1, 2]) == 3
        assert sub.wait(jobs=1, timeout=30), "the job after the bad frames never arrived"
