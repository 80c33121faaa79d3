"""A driver slower than its worker gets every frame the sidecar queued before the bye: the
sidecar waits for the bye's acknowledgement as long as the driver says it is reading its
frames (a progress acknowledgement about once a second), not only bye_timeout. Four workers
flooding spans on two loaded CPUs once lost every job's end and bye: the sidecars waited 2 s
for the ack, then closed with hundreds of frames still queued."""

from __future__ import annotations

import subprocess
import sys
import time

from jobs import spanner_script

from workerscope import Subscriber

WORKER = spanner_script(200_000, ring_records=1 << 20)


def test_a_slow_driver_gets_the_job_end_and_bye_of_a_worker_that_left(clean_env):
    slow = 0.03  # s a frame: the receive thread spends this long on each, like a busy driver

    def busy(frame) -> None:
        time.sleep(slow)

    with Subscriber(on_frame=busy) as sub:
        proc = subprocess.run([sys.executable, "-c", WORKER, sub.endpoint], timeout=300)
        assert proc.returncode == 0
        left = time.monotonic()
        # Every frame reaches it, however long the driver takes: the queue behind the bye
        # is seconds of frames at this pace, past the bye_timeout (0.3 s in tests, 2 s by
        # default).
        ended = -1
        while not sub.wait(jobs=1, byes=1, timeout=30):
            received = sum(sub.received.values())
            assert received > ended, "the driver stopped receiving"
            ended = received
        behind = time.monotonic() - left
        t = sub.timeline()
    assert behind > 2.0, behind  # it was behind for longer than the bye timeout
    (job,) = t.jobs
    assert job.status == "ok"
    (w,) = t.workers.values()
    assert w.status == "exited"
    ticks = [s for s in t.spans if s.name == "tick"]
    assert len(ticks) + w.spans_lost == 200_000, (len(ticks), w.spans_lost)


def _acking_driver(stop, acked_upto: list[int]):
    """A bare ROUTER on loopback (plain tcp, as an insecure driver) that acks each frame's
    seq as it reads it, a progress ack, and never the bye; returns its endpoint."""
    import threading

    import zmq

    from workerscope import protocol

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    ready = threading.Event()

    def serve() -> None:
        ready.set()
        while not stop.is_set():
            if not sock.poll(50):
                continue
            ident, data = sock.recv_multipart()
            frame = protocol.decode_frame(data)
            if frame.kind != protocol.BYE:
                sock.send_multipart([ident, protocol.encode_frame(
                    protocol.ACK, "driver", 0, {"seq": frame.seq})])
                acked_upto.append(frame.seq)
        sock.close(linger=0)
        ctx.term()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ready.wait(10)
    return f"tcp://127.0.0.1:{port}", thread


def _outbox_after_progress(endpoint: str, acked_upto: list[int]):
    from workerscope import protocol
    from workerscope.transport import Outbox

    box = Outbox(endpoint)
    for seq in range(3):
        box.send(protocol.encode_frame(protocol.SAMPLE, "w", seq, {"t": 0}))
    deadline = time.monotonic() + 30
    while box.read_seq < 2 and time.monotonic() < deadline:  # the driver's acks came
        box.receive()
        time.sleep(0.01)
    assert box.read_seq == 2, acked_upto
    box.send(protocol.encode_frame(protocol.BYE, "w", 3, {"t": 0, "status": "exited"}))
    return box


def test_a_bye_wait_extends_past_progress_only_for_a_sidecar():
    """Light mode waits its half second for the bye's ack whatever came before (its exit
    must stay cheap); a sidecar's bye waits PROGRESS_WAIT_S past the driver's last word
    that it was reading."""
    import threading

    from workerscope import transport

    stop = threading.Event()
    acked: list[int] = []
    try:
        endpoint, server = _acking_driver(stop, acked)
        box = _outbox_after_progress(endpoint, acked)
        began = time.monotonic()
        assert not box.wait_ack(3, 0.2)  # as light mode: no extension
        light = time.monotonic() - began
        assert box.bye_wait == "timed out"
        began = time.monotonic()
        assert not box.wait_ack(3, 0.2, progress=True)
        sidecar = time.monotonic() - began
        box.close()
    finally:
        stop.set()
        server.join(10)
    # The sidecar's wait ran to its last progress ack + PROGRESS_WAIT_S, the light one not.
    assert sidecar > light and sidecar > transport.PROGRESS_WAIT_S - light - 1.0, (light, sidecar)
