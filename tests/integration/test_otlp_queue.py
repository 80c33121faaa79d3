"""The live OTLP exporter's queue, in front of its process: bounded in bytes, with room of its
own for the frames that anchor and end jobs, and an exporter process that dies costs the
driver nothing but counted drops."""

from __future__ import annotations

import pytest
from helpers import wait_until

pytest.importorskip("opentelemetry.proto")


def test_a_full_export_queue_still_takes_the_frames_that_anchor_and_end_jobs():
    """Dropped, a hello would leave its worker off the clock and a job_end its job open in
    the exporter for good: they have room of their own past the queue's bound."""
    from factories import frame

    from workerscope import protocol
    from workerscope.driver.otlp import LiveOtlp

    live = LiveOtlp("http://127.0.0.1:9", "t", dict, queue_bytes=4096, flush_s=3600)
    try:
        sample = frame(protocol.SAMPLE, body={"t": 0, "pad": "x" * 1000})
        while live.frames_dropped == 0:
            live.put(protocol.SAMPLE, sample)
        queued = live.frames
        for kind in (protocol.HELLO, protocol.JOB_START, protocol.JOB_END, protocol.BYE):
            live.put(kind, frame(kind, body={"t": 0}))
        assert live.frames == queued + 4 and live.frames_dropped == 1
        live.put(protocol.SAMPLE, sample)
        assert live.frames_dropped == 2
    finally:
        live.close(within=0)  # nothing to send: no retries at close


def test_an_exporter_process_that_dies_is_said_and_its_frames_counted(clean_env):
    from factories import frame

    from workerscope import protocol
    from workerscope.driver.otlp import LiveOtlp

    live = LiveOtlp("http://127.0.0.1:9", "t", dict, flush_s=3600)
    try:
        live._child.kill()
        # The reader thread sees the pipe close.
        wait_until(lambda: live.counts().last_error is not None, "the exporter's exit",
                   timeout=30, step=0.05)
        assert "exited" in (live.counts().last_error or ""), live.counts()
        for _ in range(10):
            live.put(protocol.SAMPLE, frame(protocol.SAMPLE, body={"t": 0}))
        c = live.counts()
        assert c.frames == 0 and c.frames_dropped == 10, c
    finally:
        live.close(within=0)
