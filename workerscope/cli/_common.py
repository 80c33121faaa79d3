"""What the commands share: exit statuses, job names, the summary line, writing the output and
the partial record, Ctrl-C as an event, and the sidecar that `run` and `attach` serve."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..errors import WorkerscopeError
from ..export import files as _files  # noqa: F401 - registers the formats -o may name
from ..protocol import Status
from ..units import fmt_bytes, fmt_percent

if TYPE_CHECKING:
    import argparse
    import socket
    from typing import TypeAlias

    from ..timeline import Timeline
    from ..worker.link import SidecarLink

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

EXIT_ERROR = 2
"""What a command exits with when a WorkerscopeError other than a UsageError ends it: the
same status as a bad command line, which scripts already test for."""


def summary(timeline: Timeline) -> str:
    """The one line that says what a timeline holds, printed when it is written."""
    tree = [s for s in timeline.samples if s.scope == "tree"]
    peak_cpu = max((s.values.get("cpu_percent", 0.0) for s in tree), default=None)
    peak_rss = max((s.values.get("rss_bytes", 0) for s in tree), default=None)
    procs = {(s.worker, s.pid) for s in timeline.samples if s.scope == "proc"}
    return (f"{len(timeline.workers)} worker(s), {len(procs)} process(es), "
            f"{len(timeline.jobs)} job(s), {len(timeline.spans)} span(s), "
            f"{len(tree)} samples; peak tree CPU {fmt_percent(peak_cpu)}, "
            f"peak tree RSS {fmt_bytes(peak_rss)}")


def shell_code(rc: int) -> int:
    """A Popen return code as a shell reports it: a death by signal N reads as 128+N."""
    return 128 - rc if rc < 0 else rc


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


def sidecar_here() -> Callable[[socket.socket], None]:
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


def end_job(link: SidecarLink, status: Status, error: str | None) -> list[bytes]:
    """End the job of `run` or `attach` and close its sidecar: the job's frames, or none
    (and a line on stderr) if the sidecar could not deliver them."""
    try:
        return link.job_end(1, status, error, True) or []
    except WorkerscopeError as err:
        print(f"workerscope: sampling lost at the end: {err}", file=sys.stderr)
        return []
    finally:
        link.close(wait=True)


def partial_path(out: str) -> str:
    """Where `run` and `attach` record the frames as they come, beside their output: what a
    kill -9 of them leaves (`workerscope report` reads it). Removed once the output is
    written."""
    stem = os.path.splitext(out)[0]
    path = f"{stem}.partial.wsc"
    return path if path != out else f"{out}.partial.wsc"


def write_and_end(timeline: Timeline, out: str, stem: str, partial: str) -> None:
    """The last steps of `run` and `attach`: write the output, drop the partial record it
    now holds, and spare the process the cost of its exit."""
    save(timeline, out, stem)
    _remove(partial)
    _ending()


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
    17-process tree). Everything is written and closed by now."""
    settle()


def settle() -> None:
    """What the command holds now stays until it ends (a loaded timeline, say): move it out
    of the garbage collector's sight (gc.freeze), so that the collections while views are
    built from it, and the last one at exit, do not walk every span and sample again (on a
    long record, a quarter of the terminal Gantt's CPU)."""
    import gc

    gc.freeze()


def save(timeline: Timeline, out: str, stem: str) -> None:
    """Save, or if that fails for any reason, keep the data in a .wsc in the temp folder."""
    try:
        timeline.save(out)
        print(f"workerscope: {summary(timeline)}; wrote {out}", file=sys.stderr)
    except Exception as err:  # noqa: BLE001 - whatever went wrong, what was recorded must not be lost
        import tempfile

        fallback = os.path.join(tempfile.gettempdir(), f"{stem}.wsc")
        print(f"workerscope: could not write {out} ({err!r}); saving to {fallback}",
              file=sys.stderr)
        timeline.save(fallback)


def stop_on_ctrl_c() -> threading.Event:
    """Ctrl-C sets an event instead of raising KeyboardInterrupt wherever the main thread
    happens to be (inside a lock, say), and every wait has a timeout so the main thread sees
    it even when the signal lands on another thread."""
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    return stop


def restore_ctrl_c() -> None:
    """Ctrl-C raises KeyboardInterrupt again, as before stop_on_ctrl_c."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
