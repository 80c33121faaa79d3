"""`workerscope listen`: collect the streams of many workers into one timeline."""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..timeline import check_output_path
from ..units import printable
from ._common import restore_ctrl_c, save, stop_on_ctrl_c

if TYPE_CHECKING:
    import argparse

    from .. import protocol
    from ..driver.otlp import OtlpCounts
    from ..driver.subscriber import Subscriber
    from ._common import Subparsers


def add_parser(subparsers: Subparsers) -> None:
    """The `listen` command and its options."""
    p = subparsers.add_parser("listen", help="collect the streams of many workers",
                              description="Receives the frames of many workers' sidecars and "
                                          "merges them into one timeline. Its first line is "
                                          "'listening on ENDPOINT': give the workers that "
                                          "endpoint (run/attach --endpoint, "
                                          "WORKERSCOPE_ENDPOINT, or profiled(..., endpoint=)). "
                                          "Stops after --jobs jobs have ended, or on Ctrl-C.")
    p.add_argument("--bind", default="tcp://127.0.0.1:0",
                   help="address to listen on (default: a free loopback port)")
    p.add_argument("-o", "--output", help="a .wsc: record every frame there as it arrives "
                   "(readable even if this is killed); another format: write the merged "
                   "timeline there at the end")
    p.add_argument("--key-file", help="keep the driver's key here (made 0600 on first use): "
                   "listen again with it and the endpoint stays the same")
    p.add_argument("--insecure", action="store_true", help="tcp:// in plain text, no key: "
                   "anyone who can reach the port can send frames")
    p.add_argument("--jobs", type=int, help="stop after this many jobs ended")
    p.add_argument("-q", "--quiet", action="store_true", help="no line per frame")
    p.add_argument("--live", action="store_true",
                   help="a live table of all workers, redrawn every second")
    p.add_argument("--prometheus", metavar="ADDR",
                   help="serve /metrics for Prometheus on HOST:PORT (loopback where only "
                   ":PORT is given; any other address is reachable from elsewhere)")
    p.add_argument("--otlp", metavar="URL", help="send what arrives, as it arrives, to the "
                   "OpenTelemetry collector at URL over OTLP/HTTP (e.g. http://localhost:4318)")
    p.add_argument("--otlp-service", default="workerscope", metavar="NAME",
                   help="service.name of what --otlp sends (default: workerscope)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Listen until --jobs jobs ended or Ctrl-C, printing a line per frame or a live view;
    record every frame to a .wsc as it comes, or write the merged timeline at the end."""
    from ..driver.keys import key_from_file
    from ..driver.subscriber import Subscriber
    from ..export.terminal import frame_line

    if args.output:
        check_output_path(args.output)
    key = key_from_file(args.key_file) if args.key_file else None
    quiet = args.quiet or args.live
    record = args.output if args.output and args.output.lower().endswith(".wsc") else None
    lines = _FrameLines(frame_line)
    sub = Subscriber(args.bind, on_frame=None if quiet else lines, key=key,
                     insecure=args.insecure, record=record, prometheus=args.prometheus,
                     otlp=args.otlp, otlp_service=args.otlp_service)
    lines.sub = sub
    stop = stop_on_ctrl_c()
    try:
        with sub:
            print(f"listening on {sub.endpoint}", flush=True)
            if sub.prometheus_url:
                print(f"metrics at {sub.prometheus_url}", flush=True)
            if args.live:
                _live(sub, args.jobs, stop)
            else:
                _wait(sub, args.jobs, stop)
            if stop.is_set():
                print("stopped", file=sys.stderr)
            if lines.printer is not None:
                lines.printer.drain(1.0)  # not for ever: stdout may be read by nobody
            if record is None and args.output:
                # Everything received so far is in the timeline, Ctrl-C or not.
                timeline = sub.timeline()
    finally:
        restore_ctrl_c()
    sent = sub.otlp_counts
    if sent is not None:
        print(otlp_line(sent), file=sys.stderr)
    if record is not None:
        print(f"workerscope: recorded {sub.record_frames} frame(s) to {record}", file=sys.stderr)
    elif args.output:
        save(timeline, args.output, f"workerscope-listen-{os.getpid()}")
    return 0


def otlp_line(c: OtlpCounts) -> str:
    line = (f"workerscope: sent {c.spans} span(s) and {c.points} point(s) to {c.url} in "
            f"{c.requests} request(s)")
    missed = [f"{n} {what}" for n, what in ((c.frames_dropped, "frame(s) dropped, the queue full"),
                                            (c.spans_dropped, "span(s)"),
                                            (c.points_dropped, "point(s)")) if n]
    if missed:
        line += f"; not sent: {', '.join(missed)} (last error: {c.last_error})"
    return line


LOST_EVERY = 0.25  # seconds between two looks at the workers' counts of lost frames


MAX_LINES = 10_000  # lines waiting for stdout; past them, lines are counted, not kept


class _Printer:
    """Lines to stdout from a thread of their own: the receive thread hands them over and goes
    on, so a stdout nobody reads (`listen | less` left alone, Ctrl-S) never stalls what the
    driver records. Past MAX_LINES waiting, lines are dropped and the count said once stdout
    takes lines again. os.write, not print: a write blocked in this (daemon) thread holds no
    lock the interpreter's exit would wait on."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lines: collections.deque[str] = collections.deque()
        self.dropped = 0
        self.writing = 0  # lines taken from the queue and not written yet
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="workerscope-listen-out",
                                       daemon=True)
        self.thread.start()

    def put(self, line: str) -> None:
        if len(self.lines) >= MAX_LINES:
            self.dropped += 1
        else:
            self.lines.append(line)
        self.ready.set()

    def _run(self) -> None:
        while True:
            self.ready.wait()
            self.ready.clear()
            while self.lines:
                self.writing = n = min(len(self.lines), 256)
                batch = [self.lines.popleft() for _ in range(n)]
                if self.dropped:
                    batch.append(f"... {self.dropped} line(s) not shown: stdout was not read "
                                 "fast enough (every frame is in the record)")
                    self.dropped = 0
                data = ("\n".join(batch) + "\n").encode(errors="replace")
                try:
                    while data:
                        data = data[os.write(self.fd, data):]
                except OSError:
                    self.writing = 0
                    return  # stdout closed (a pipe's reader quit): nothing more to show
                self.writing = 0

    def drain(self, timeout: float) -> None:
        """Wait up to `timeout` s for the lines waiting to be written."""
        deadline = time.monotonic() + timeout
        while (self.lines or self.writing) and time.monotonic() < deadline:
            time.sleep(0.01)


class _FrameLines:
    """The on_frame of a listen that is not quiet: a line per frame, and a `lost` line when
    a worker's count of lost frames grows, written by a _Printer."""

    def __init__(self, frame_line: Callable[[protocol.Frame], str]) -> None:
        self.frame_line = frame_line
        self.sub: Subscriber | None = None  # set once the Subscriber it serves is made
        self.lost_seen: dict[str, int] = {}
        self.looked = 0.0  # when sub.lost was last looked at
        self.printer: _Printer | None = None  # made at the first frame

    def _print(self, line: str) -> None:
        if self.printer is None:
            try:
                fd = sys.stdout.fileno()
            except (AttributeError, OSError, ValueError):
                print(line, flush=True)  # a stdout that is no file (captured): as it is
                return
            sys.stdout.flush()  # what print() wrote before goes first
            self.printer = _Printer(fd)
        self.printer.put(line)

    def __call__(self, frame: protocol.Frame) -> None:
        try:
            line = self.frame_line(frame)
        except (TypeError, ValueError):
            line = printable(f"{frame.kind:<9} {frame.worker}  (body not shown: unexpected values)")
        self._print(line)
        now = time.monotonic()
        if self.sub is None or now - self.looked < LOST_EVERY:
            return
        # sub.lost is a copy of every worker's count: taken a few times a second, not per frame
        self.looked = now
        for wid, lost in self.sub.lost.items():
            seen = self.lost_seen.get(wid, 0)
            if lost > seen:
                self._print(printable(f"lost      {wid}  {lost - seen} frame(s)"))
                self.lost_seen[wid] = lost


def _wait(sub: Subscriber, jobs: int | None, stop: threading.Event) -> None:
    """Wait until `jobs` jobs ended, or Ctrl-C."""
    while not stop.is_set():
        if jobs is not None and sub.wait(jobs=jobs, timeout=0.5):
            return
        if jobs is None:
            stop.wait(0.5)


STACKS_ASKED = 4  # running workers whose stacks the live view's `s` key asks for


def _live(sub: Subscriber, jobs: int | None, stop: threading.Event) -> None:
    """Redraw the live view about once a second until `jobs` jobs ended, or Ctrl-C. On a
    terminal, the `s` key shows what the running workers are doing (their stacks)."""
    import shutil

    from ..export.live import CLEAR, render

    keys = _Keys.open()
    shown = ""
    try:
        while not stop.is_set():
            width = shutil.get_terminal_size((100, 24)).columns
            screen = render(sub.live(), sub.endpoint, width, sub.jobs_ended)
            if keys is not None:
                screen += "press s for every running worker's Python stacks\n" + shown
            sys.stdout.write((CLEAR if sys.stdout.isatty() else "") + screen)
            sys.stdout.flush()
            if jobs is not None and sub.wait(jobs=jobs, timeout=0 if keys else 1.0):
                sys.stdout.write(render(sub.live(), sub.endpoint, width, sub.jobs_ended))
                return
            if keys is None:
                if jobs is None:
                    stop.wait(1.0)
            elif keys.read(1.0) == "s":
                shown = _running_stacks(sub)
    finally:
        if keys is not None:
            keys.close()


def _running_stacks(sub: Subscriber) -> str:
    """What the running workers (the first STACKS_ASKED) are doing, as text."""
    from ..export.stacks import stacks_text

    running = [w for w, state in sub.states().items() if state == "running"]
    if not running:
        return "no worker is running a job\n"
    asked = running[:STACKS_ASKED]
    got: dict[str, dict[str, Any] | None] = {}

    def ask(wid: str) -> None:
        got[wid] = sub.stacks(wid, timeout=3.0, reason="asked from listen --live")

    # All at once: the view waits 3 s at most, however many are asked.
    threads = [threading.Thread(target=ask, args=(wid,), daemon=True) for wid in asked]
    for t in threads:
        t.start()
    for t in threads:
        t.join(4.0)
    out = []
    for wid in asked:
        dump = got.get(wid)
        out.append(printable(f"{wid}:") + "\n" + (
            "  no answer within 3 s" if dump is None else stacks_text(dump)))
    if len(running) > STACKS_ASKED:
        out.append(f"({len(running) - STACKS_ASKED} more running worker(s) not asked)")
    return "\n".join(out) + "\n"


class _Keys:
    """Single key presses from a terminal's stdin (cbreak mode: no Enter needed, Ctrl-C
    still a signal), restored at close."""

    def __init__(self, fd: int, saved: list[Any]) -> None:
        self.fd, self.saved = fd, saved

    @classmethod
    def open(cls) -> _Keys | None:
        """None where stdin is no terminal (a pipe, a file, a job without one)."""
        try:
            import termios
            import tty

            fd = sys.stdin.fileno()
            if not os.isatty(fd):
                return None
            saved = termios.tcgetattr(fd)
            tty.setcbreak(fd)
        except (OSError, ValueError, ImportError, AttributeError):
            return None
        return cls(fd, saved)

    def read(self, timeout: float) -> str:
        """A key pressed within `timeout` s ("" if none)."""
        import select

        try:
            ready, _, _ = select.select([self.fd], [], [], timeout)
            return os.read(self.fd, 16).decode(errors="replace")[-1:] if ready else ""
        except (OSError, InterruptedError):
            return ""

    def close(self) -> None:
        import termios

        try:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
        except (OSError, termios.error):
            return  # the terminal went away: nothing is left to restore
