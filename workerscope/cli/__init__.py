"""workerscope's command line: run | attach | listen | report | demo."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .. import protocol
from ..config import resolve
from ..errors import WorkerscopeError
from ..export import files as _files  # noqa: F401 - registers the formats -o may name
from ..protocol import Status
from ..timeline import Timeline, check_output_path
from ..units import fmt_bytes, fmt_percent

if TYPE_CHECKING:
    from ..driver.subscriber import Subscriber
    from ..worker.link import SidecarLink


def _summary(timeline: Timeline) -> str:
    tree = [s for s in timeline.samples if s.scope == "tree"]
    peak_cpu = max((s.values.get("cpu_percent", 0.0) for s in tree), default=None)
    peak_rss = max((s.values.get("rss_bytes", 0) for s in tree), default=None)
    procs = {(s.worker, s.pid) for s in timeline.samples if s.scope == "proc"}
    return (f"{len(timeline.workers)} worker(s), {len(procs)} process(es), "
            f"{len(timeline.jobs)} job(s), {len(timeline.spans)} span(s), "
            f"{len(tree)} samples; peak tree CPU {fmt_percent(peak_cpu)}, "
            f"peak tree RSS {fmt_bytes(peak_rss)}")


def _shell_code(rc: int) -> int:
    return 128 - rc if rc < 0 else rc  # a signal death reads as a shell reports it


def job_name(cmd: Sequence[str], width: int = 80) -> str:
    """A readable job name for a command line: `python -c SCRIPT` shows the script's first
    line, and the whole stays within `width` characters."""
    parts = list(cmd)
    if len(parts) >= 3 and parts[1] == "-c":
        first = parts[2].strip().splitlines()[0] if parts[2].strip() else ""
        more = " ..." if parts[2].strip().count("\n") or len(parts) > 3 else ""
        parts = [os.path.basename(parts[0]), "-c", first + more]
    else:
        parts[0] = os.path.basename(parts[0])
    name = shlex.join(parts)
    return name if len(name) <= width else name[: width - 3] + "..."


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _end(link: SidecarLink, child: subprocess.Popen[bytes]) -> list[bytes]:
    """End the run's job while the command is a zombie, and close the sidecar."""
    status = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert status is not None  # only WNOHANG returns None
    rc = status.si_status if status.si_code == os.CLD_EXITED else -status.si_status
    if rc == 0:
        error = None
    elif rc < 0:
        error = f"killed by {_signal_name(-rc)} (exit status {_shell_code(rc)})"
    else:
        error = f"exit status {rc}"
    try:
        return link.job_end(1, Status.OK if rc == 0 else Status.ERROR, error, True) or []
    except WorkerscopeError as err:
        print(f"workerscope: sampling lost at the end: {err}", file=sys.stderr)
        return []
    finally:
        link.close(wait=True)


def _sidecar_here() -> Callable[[socket.socket], None]:
    """How `run` and `attach` serve their sidecar: in a thread of this process, which only
    waits for its command meanwhile (see SidecarLink.spawn). Imported here, in the main thread,
    before that thread starts."""
    import logging

    from ..sidecar.service import Sidecar

    # What the sidecar must say goes to stderr, as it did from a process of its own.
    logging.basicConfig(format="workerscope: %(message)s", level=logging.WARNING)

    def serve(sock: socket.socket) -> None:
        try:
            Sidecar(sock, os.getpid()).run()  # the hello names the target
        finally:
            sock.close()  # EOF for the link, whatever happened

    return serve


def cmd_run(args: argparse.Namespace) -> int:
    from ..builder import build
    from ..worker.link import SidecarLink

    if not args.cmd:
        raise WorkerscopeError("nothing to run: give a command after --, e.g. workerscope run -- make")
    config = resolve(interval=args.interval, endpoint=args.endpoint, node=args.node)
    if args.output:
        check_output_path(args.output)  # before the command runs, not after
    link: SidecarLink | None = None
    try:
        starting = SidecarLink(config)
        starting.make_ring(own=False)  # where the command's Python processes record
        starting.spawn(_sidecar_here())
        link = starting
    except WorkerscopeError as err:
        print(f"workerscope: sampling off: {err}", file=sys.stderr)
    try:
        env = None
        if link is not None and link.rings is not None:
            env = dict(os.environ, WORKERSCOPE_RINGS=link.rings)
        started = time.monotonic_ns()
        child = subprocess.Popen(args.cmd, env=env)
    except OSError as err:
        if link is not None:
            link.close(wait=True)
        raise WorkerscopeError(f"cannot start {args.cmd[0]!r}: {err}") from err
    # Ctrl-C reaches the command itself (same process group); SIGTERM and SIGHUP sent to us
    # are passed on to it: it ends as it would without us, and we still write what we saw.
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    forwarded = {sig: signal.signal(sig, lambda signum, _: child.send_signal(signum))
                 for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        out = args.output or f"workerscope-{child.pid}.json"
        partial = partial_path(out)
        if link is not None:
            try:
                link.handshake(child.pid)
                link.job_start(1, job_name(args.cmd), None, pid=child.pid, t=started,
                               record=partial)
            except WorkerscopeError as err:
                print(f"workerscope: sampling off: {err}", file=sys.stderr)
                link = None
        # Wait without reaping: the last sample then still sees the command's own CPU times
        # (as a zombie), which reaping would hand to us and out of its tree.
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        if link is not None:
            frames = _end(link, child)
        rc = child.wait()
    finally:
        signal.signal(signal.SIGINT, old)
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
    code = _shell_code(rc)
    if link is None:
        return code
    timeline = build(frames)
    for worker in timeline.workers.values():
        worker.status = Status.EXITED  # the command has ended; its frames came before its bye
    _save(timeline, out, f"workerscope-{child.pid}")
    _remove(partial)
    _ending()
    return code


def partial_path(out: str) -> str:
    """Where `run` and `attach` record the frames as they come, beside their output: what a
    kill -9 of them leaves (`workerscope report` reads it). Removed once the output is
    written."""
    stem = os.path.splitext(out)[0]
    path = f"{stem}.partial.wsc"
    return path if path != out else f"{out}.partial.wsc"


def _remove(path: str) -> None:
    """Remove the partial record once the output holds everything. One that was never
    written (the sidecar said why when it could not open it) is left alone."""
    if not os.path.lexists(path):
        return
    try:
        os.unlink(path)
    except OSError as err:
        print(f"workerscope: could not remove {path} (the output holds all it did): {err}",
              file=sys.stderr)


def _ending() -> None:
    """`run` and `attach` end their process next: spare it the interpreter's last garbage
    collection, over all that was loaded and built (~10 ms of CPU, as much as 15 samples of a
    17-process tree; issue 11). Everything is written and closed by now."""
    import gc

    gc.freeze()


def _wait_exit(pid: int, seconds: float | None, stop: threading.Event) -> bool:
    """Wait until pid exits (True), or `seconds` pass or `stop` is set (False). Works for
    processes that are not our children, through a pidfd where the kernel has them."""
    import select

    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = 0.5 if left is None else min(0.5, left)  # short steps: Ctrl-C is seen at once
            if fd is not None:
                if select.select([fd], [], [], step)[0]:
                    return True
            else:
                threading.Event().wait(step)
                if not os.path.exists(f"/proc/{pid}"):
                    return True
            if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                return False
    finally:
        if fd is not None:
            os.close(fd)


def cmd_attach(args: argparse.Namespace) -> int:
    """Sample a process tree that is already running, until it exits, --duration passes or
    Ctrl-C; then write the timeline."""
    from ..builder import build
    from ..worker.link import SidecarLink

    if not os.path.exists(f"/proc/{args.pid}"):
        raise WorkerscopeError(f"no process {args.pid}")
    config = resolve(interval=args.interval, endpoint=args.endpoint, node=args.node)
    if args.output:
        check_output_path(args.output)
    link = SidecarLink(config)
    link.spawn(_sidecar_here())
    link.handshake(args.pid)
    name = _process_name(args.pid)
    out = args.output or f"workerscope-{args.pid}.json"
    partial = partial_path(out)
    link.job_start(1, f"attach {args.pid} ({name})", None, record=partial)
    print(f"workerscope: sampling {args.pid} ({name}) and its children every "
          f"{config.interval:g} s; Ctrl-C stops", file=sys.stderr, flush=True)
    stop = _stop_on_ctrl_c()
    try:
        exited = _wait_exit(args.pid, args.duration, stop)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if stop.is_set():
        print("stopped", file=sys.stderr)
    try:
        frames = link.job_end(1, Status.OK, None if not exited else "the process exited", True) or []
    except WorkerscopeError as err:
        print(f"workerscope: sampling lost at the end: {err}", file=sys.stderr)
        frames = []
    finally:
        link.close(wait=True)
    _save(build(frames), out, f"workerscope-{args.pid}")
    _remove(partial)
    _ending()
    return 0


def _process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _save(timeline: Timeline, out: str, stem: str) -> None:
    """Save, or if that fails for any reason, keep the data in a .wsc in the temp folder."""
    try:
        timeline.save(out)
        print(f"workerscope: {_summary(timeline)}; wrote {out}", file=sys.stderr)
    except Exception as err:  # noqa: BLE001 - whatever went wrong, what was recorded must not be lost
        import tempfile

        fallback = os.path.join(tempfile.gettempdir(), f"{stem}.wsc")
        print(f"workerscope: could not write {out} ({err!r}); saving to {fallback}",
              file=sys.stderr)
        timeline.save(fallback)


def cmd_listen(args: argparse.Namespace) -> int:
    from ..driver.keys import key_from_file
    from ..driver.subscriber import Subscriber
    from ..export.terminal import frame_line

    if args.output:
        check_output_path(args.output)
    key = key_from_file(args.key_file) if args.key_file else None
    lost_seen: dict[str, int] = {}

    def on_frame(frame: protocol.Frame) -> None:
        try:
            line = frame_line(frame)
        except (TypeError, ValueError):
            line = f"{frame.kind:<9} {frame.worker}  (body not shown: unexpected values)"
        print(line, flush=True)
        lost = sub.lost.get(frame.worker, 0)
        if lost > lost_seen.get(frame.worker, 0):
            print(f"lost      {frame.worker}  {lost - lost_seen.get(frame.worker, 0)} frame(s)",
                  flush=True)
            lost_seen[frame.worker] = lost

    quiet = args.quiet or args.live
    record = args.output if args.output and args.output.lower().endswith(".wsc") else None
    sub = Subscriber(args.bind, on_frame=None if quiet else on_frame, key=key,
                     insecure=args.insecure, record=record)
    stop = _stop_on_ctrl_c()
    try:
        with sub:
            print(f"listening on {sub.endpoint}", flush=True)
            if args.live:
                _live(sub, args.jobs, stop)
            else:
                while not stop.is_set():
                    if args.jobs is not None and sub.wait(jobs=args.jobs, timeout=0.5):
                        break
                    if args.jobs is None:
                        stop.wait(0.5)
            if stop.is_set():
                print("stopped", file=sys.stderr)
            if record is None and args.output:
                # Everything received so far is in the timeline, Ctrl-C or not.
                timeline = sub.timeline()
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if record is not None:
        print(f"workerscope: recorded {sub.record_frames} frame(s) to {record}", file=sys.stderr)
    elif args.output:
        _save(timeline, args.output, f"workerscope-listen-{os.getpid()}")
    return 0


def _stop_on_ctrl_c() -> threading.Event:
    """Ctrl-C sets an event instead of raising KeyboardInterrupt wherever the main thread
    happens to be (inside a lock, say), and every wait has a timeout so the main thread sees
    it even when the signal lands on another thread."""
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    return stop


def _live(sub: Subscriber, jobs: int | None, stop: threading.Event) -> None:
    """Redraw the live view about once a second until `jobs` jobs ended, or Ctrl-C."""
    import shutil

    from ..export.live import CLEAR, render

    while not stop.is_set():
        width = shutil.get_terminal_size((100, 24)).columns
        screen = render(sub.live(), sub.endpoint, width, sub.jobs_ended)
        sys.stdout.write((CLEAR if sys.stdout.isatty() else "") + screen)
        sys.stdout.flush()
        if jobs is not None and sub.wait(jobs=jobs, timeout=1.0):
            sys.stdout.write(render(sub.live(), sub.endpoint, width, sub.jobs_ended))
            return
        if jobs is None:
            stop.wait(1.0)


def cmd_report(args: argparse.Namespace) -> int:
    from ..record import load

    outputs = [path for path in (args.html, args.json, args.pftrace, args.csv, args.wsc, args.png)
               if path]
    for path in outputs:
        check_output_path(path)  # before the (possibly long) load
    if args.max_sample_mib is None:
        timeline = load(args.file)
    else:
        if args.max_sample_mib < 0:
            raise WorkerscopeError("--max-sample-mib must be 0 (every sample) or more")
        budget = int(args.max_sample_mib * 2**20) or None
        timeline = load(args.file, max_sample_bytes=budget)
    wrote = [timeline.save(path) for path in outputs]
    if wrote:
        for path in wrote:
            print(f"wrote {path}")
        return 0
    import shutil

    from ..export.terminal import report

    width = shutil.get_terminal_size((100, 24)).columns
    sys.stdout.write(report(timeline, width=width, color=sys.stdout.isatty()))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import jobs_seconds, run_demo

    t0 = time.perf_counter()
    timeline, paths = run_demo(args.output_dir, workers=args.workers, tasks=args.tasks)
    print(f"workerscope demo: {_summary(timeline)}; jobs ran {jobs_seconds(timeline):.1f} s "
          f"({time.perf_counter() - t0:.1f} s in all, with the process pool's start-up and "
          f"writing the files)")
    for p in paths:
        print(f"  wrote {p}")
    print("  open the .html in a browser; the .json in https://ui.perfetto.dev (Open trace file);")
    print(f"  or see it here: workerscope report {paths[0]}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="workerscope", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="sample a command's process tree",
                         usage="workerscope run [--interval S] [-o FILE] [--endpoint ADDR] -- CMD ARGS...",
                         description="Run CMD and sample its whole process tree (CPU, memory, IO, "
                                     "network, GPU) every --interval seconds, with the spans of "
                                     "any Python process in it that uses @timed, until it exits; "
                                     "then write the timeline (-o, else workerscope-PID.json) and "
                                     "a one-line summary. Exits with CMD's own status.")
    run.add_argument("--interval", type=float, default=None, help="seconds between samples (default 1.0)")
    run.add_argument("-o", "--output", help="timeline file, .json (Perfetto) or .wsc")
    run.add_argument("--endpoint", help="also stream to a listening driver at this address")
    run.add_argument("--node", help="node name recorded with the samples")
    run.add_argument("cmd", nargs=argparse.REMAINDER)
    run.set_defaults(func=cmd_run)
    attach = sub.add_parser("attach", help="sample a process tree that is already running",
                            description="Samples PID and its descendants until PID exits, "
                                        "--duration passes or Ctrl-C, then writes the timeline.")
    attach.add_argument("pid", type=int)
    attach.add_argument("--interval", type=float, default=None, help="seconds between samples")
    attach.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    attach.add_argument("-o", "--output", help="timeline file, .json, .html, .csv or .wsc")
    attach.add_argument("--endpoint", help="also stream to a listening driver at this address")
    attach.add_argument("--node", help="node name recorded with the samples")
    attach.set_defaults(func=cmd_attach)
    listen = sub.add_parser("listen", help="collect the streams of many workers",
                            description="Receives the frames of many workers' sidecars and "
                                        "merges them into one timeline. Its first line is "
                                        "'listening on ENDPOINT': give the workers that endpoint "
                                        "(run/attach --endpoint, WORKERSCOPE_ENDPOINT, or "
                                        "profiled(..., endpoint=)). Stops after --jobs jobs have "
                                        "ended, or on Ctrl-C.")
    listen.add_argument("--bind", default="tcp://127.0.0.1:0",
                        help="address to listen on (default: a free loopback port)")
    listen.add_argument("-o", "--output", help="a .wsc: record every frame there as it "
                        "arrives (readable even if this is killed); another format: write "
                        "the merged timeline there at the end")
    listen.add_argument("--key-file", help="keep the driver's key here (made 0600 on first "
                        "use): listen again with it and the endpoint stays the same")
    listen.add_argument("--insecure", action="store_true", help="tcp:// in plain text, no key: "
                        "anyone who can reach the port can send frames")
    listen.add_argument("--jobs", type=int, help="stop after this many jobs ended")
    listen.add_argument("-q", "--quiet", action="store_true", help="no line per frame")
    listen.add_argument("--live", action="store_true",
                        help="a live table of all workers, redrawn every second")
    listen.set_defaults(func=cmd_listen)
    rep = sub.add_parser("report", help="show a saved timeline, or convert it",
                         description="With no output flag: a Gantt per worker and summary tables "
                                     "in the terminal.")
    rep.add_argument("file", help="a .wsc timeline or record (from run, listen, demo, "
                     "Timeline.save or Subscriber(record=))")
    rep.add_argument("--html", help="write a self-contained HTML report")
    rep.add_argument("--json", help="write a Chrome trace (chrome://tracing; small traces in "
                     "Perfetto)")
    rep.add_argument("--pftrace", help="write Perfetto's protobuf trace: opens at any size in "
                     "ui.perfetto.dev (needs 'workerscope[trace]')")
    rep.add_argument("--csv", help="write the samples as CSV")
    rep.add_argument("--png", help="write resource plots and the Gantt as one PNG (needs matplotlib)")
    rep.add_argument("--wsc", help="write a copy in the native format")
    rep.add_argument("--max-sample-mib", type=float, default=None, metavar="MIB",
                     help="memory for the samples of a record (default 256); past it they are "
                          "folded into time bins, as each worker's notes then say; 0 keeps "
                          "every sample")
    rep.set_defaults(func=cmd_report)
    demo = sub.add_parser("demo", help="run the embedded demo job and write its timeline",
                          description="Run a small job on a process pool (CPU, memory and IO "
                                      "work under @timed functions, each worker sampled by a "
                                      "sidecar) and write its HTML report, Perfetto trace and "
                                      ".wsc timeline into --output-dir.")
    demo.add_argument("-o", "--output-dir", default="workerscope-demo")
    demo.add_argument("--workers", type=int, default=3)
    demo.add_argument("--tasks", type=int, default=6)
    demo.set_defaults(func=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "cmd", None) and args.cmd[0] == "--":
        args.cmd = args.cmd[1:]
    try:
        return int(args.func(args))
    except WorkerscopeError as err:
        print(f"workerscope: {err}", file=sys.stderr)
        return 2
