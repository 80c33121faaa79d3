"""Subscriber.frames(): every frame handed to any number of asyncio consumers.

The receive thread must never wait on a consumer: each consumer has a bounded queue on its own
event loop, filled through `call_soon_threadsafe`, and a consumer that falls behind loses the
newest frames (counted) rather than slowing the receive thread.
"""

from __future__ import annotations

import asyncio
import threading

from .. import protocol

# A consumer's queue: frames, then None for "the Subscriber has closed".
_Queue = asyncio.Queue[protocol.Frame | None]
_Entry = tuple[asyncio.AbstractEventLoop, _Queue]


class FrameFanout:
    """The async consumers of one Subscriber. publish() and close() run on the receive (or
    closing) thread; the queue operations run on each consumer's own loop."""

    def __init__(self) -> None:
        self.dropped = 0  # frames a consumer was too far behind to be given
        self._lock = threading.Lock()
        self._entries: list[_Entry] = []
        self._closed = False

    @property
    def active(self) -> bool:
        """Whether a consumer is listening: frames must then be decoded whole."""
        return bool(self._entries)

    def subscribe(self, loop: asyncio.AbstractEventLoop, maxsize: int) -> _FrameQueue:
        """A new consumer on `loop`, registered at once, so no frame published after this call
        is missed. After close(), an iterator that ends at once."""
        queue: _Queue = asyncio.Queue(maxsize)
        entry = (loop, queue)
        with self._lock:  # close() either sees this entry or we see it closed, never neither
            closed = self._closed
            if not closed:
                self._entries.append(entry)
        return _FrameQueue(self, entry, done=closed)

    def publish(self, frame: protocol.Frame) -> None:
        """Give this frame to every consumer (dropped and counted where one is full)."""
        with self._lock:
            entries = list(self._entries)
        for entry in entries:
            self._call(entry, frame)

    def close(self) -> None:
        """End every consumer's iteration, after the frames already queued for it."""
        with self._lock:
            self._closed = True
            entries = list(self._entries)
        for entry in entries:
            self._call(entry, None)

    def forget(self, entry: _Entry) -> None:
        with self._lock:
            if entry in self._entries:
                self._entries.remove(entry)

    def _call(self, entry: _Entry, item: protocol.Frame | None) -> None:
        """Put `item` (None: the end marker) into the consumer's queue, on its loop; a loop
        that has ended (its consumer stopped iterating without the Subscriber closing) is
        forgotten."""
        loop, queue = entry
        try:
            if item is None:
                loop.call_soon_threadsafe(self._end_queue, queue)
            else:
                loop.call_soon_threadsafe(self._put, queue, item)
        except RuntimeError:  # "Event loop is closed"
            self.forget(entry)

    def _put(self, queue: _Queue, frame: protocol.Frame) -> None:
        try:
            queue.put_nowait(frame)
        except asyncio.QueueFull:
            self._count_drop()

    def _end_queue(self, queue: _Queue) -> None:
        """Put the end marker in, making room by dropping (and counting) the oldest frame."""
        while True:
            try:
                queue.put_nowait(None)
                return
            except asyncio.QueueFull:
                queue.get_nowait()
                self._count_drop()

    def _count_drop(self) -> None:
        with self._lock:  # consumers on several loops, in several threads, may drop at once
            self.dropped += 1


class _FrameQueue:
    """The async iterator of Subscriber.frames()."""

    def __init__(self, fanout: FrameFanout, entry: _Entry, done: bool) -> None:
        self.fanout = fanout
        self.entry = entry
        self.done = done

    def __aiter__(self) -> _FrameQueue:
        return self

    async def __anext__(self) -> protocol.Frame:
        if not self.done:
            frame = await self.entry[1].get()
            if frame is not None:
                return frame
            self.done = True
        self.fanout.forget(self.entry)
        raise StopAsyncIteration
