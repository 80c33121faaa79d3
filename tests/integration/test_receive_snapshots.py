"""What a user reads of a Subscriber while frames arrive: copies, never the receive thread's own
dicts, so reading them never races the thread that adds workers to them."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import zmq
from helpers import eventually

from workerscope import Subscriber, protocol
from workerscope.transport import dealer

WORKERS = 400  # each on its own connection: a connection speaks for one worker only



@contextmanager
def _threads_swap_often() -> Iterator[None]:
    # A loaded machine switches threads mid-loop far more often than the default 5 ms lets
    # an idle one: make that the common case, so a race shows on every run.
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _read_until(sub: Subscriber, stop: threading.Event, errors: list[BaseException]) -> None:
    while not stop.is_set():
        try:
            for counts in (sub.lost, sub.received, sub.dropped, sub.refused):
                for wid in counts:
                    counts.get(wid)
                sum(counts.values())
        except RuntimeError as err:  # "dictionary changed size during iteration"
            errors.append(err)


def test_counters_can_be_iterated_while_400_workers_say_hello(clean_env):
    """Iterating sub.lost, sub.received, sub.dropped and sub.refused on another thread while
    400 workers, each on its own connection, say hello and send a heartbeat raises nothing."""
    errors: list[BaseException] = []
    stop = threading.Event()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    socks: list[zmq.Socket[bytes]] = []
    with Subscriber("ipc://") as sub, _threads_swap_often():
        reader = threading.Thread(target=_read_until, args=(sub, stop, errors))
        reader.start()
        try:
            anchor = [time.time_ns(), time.monotonic_ns()]
            for i in range(WORKERS):
                sock = dealer(ctx, sub.endpoint, linger_ms=0)
                socks.append(sock)
                wid = f"h:{1000 + i}:{2000 + i}"
                sock.send(protocol.encode_frame(protocol.HELLO, wid, 0, {
                    "host": "h", "pid": 1000 + i, "anchor": anchor}))
                sock.send(protocol.encode_frame(protocol.HEARTBEAT, wid, 1, {"dropped": i}))
            arrived = eventually(lambda: len(sub.dropped) == WORKERS)
        finally:
            stop.set()
            reader.join()
            for sock in socks:
                sock.close(linger=0)
            ctx.term()
        assert arrived, f"{len(sub.received)} of {WORKERS} workers heard from"
        assert sum(sub.received.values()) == 2 * WORKERS and not any(sub.lost.values())
        assert sub.dropped == {f"h:{1000 + i}:{2000 + i}": i for i in range(WORKERS)}
    assert errors == [], f"{len(errors)} reads raised, the first: {errors[0]!r}"


def test_a_counter_read_is_a_copy(clean_env):
    """What sub.lost, sub.received, sub.dropped and sub.refused return is the user's to
    change: a change does not reach the driver's own counts."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    with Subscriber("ipc://") as sub:
        sock = dealer(ctx, sub.endpoint, linger_ms=0)
        try:
            sock.send(protocol.encode_frame(protocol.HEARTBEAT, "h:1:2", 3, {"dropped": 5}))
            assert eventually(lambda: sub.dropped == {"h:1:2": 5})
        finally:
            sock.close(linger=0)
            ctx.term()
        for counts in (sub.lost, sub.received, sub.dropped, sub.refused):
            counts.clear()
        assert sub.received == {"h:1:2": 1} and sub.lost == {"h:1:2": 0}
        assert sub.dropped == {"h:1:2": 5} and sub.refused["identity"] == 0
