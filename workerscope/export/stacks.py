"""A dump of stacks (a mark named "stacks": sidecar/stacks.py) as text for a terminal: each
process, each thread innermost frame first, as Python prints a traceback but in the order
faulthandler gives. Every name is made printable (units.printable): they come from frames."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..protocol import STACKS_MARK
from ..timeline import Mark
from ..units import printable


def stacks_text(dump: Mapping[str, Any]) -> str:
    """The dump (Subscriber.stacks' dict, or a stacks mark's attrs) as lines of text."""
    lines: list[str] = []
    reason = dump.get("reason")
    if reason:
        lines.append(f"stacks ({printable(str(reason))})")
    if dump.get("error"):
        lines.append(f"  {printable(str(dump['error']))}")
    for proc in dump.get("processes") or ():
        if not isinstance(proc, Mapping):
            continue
        threads = proc.get("threads")
        if threads is None:  # a process without workerscope: what /proc says of it
            what = ", ".join(f"{k} {printable(str(proc[k]))}" for k in ("state", "wchan")
                             if proc.get(k))
            lines.append(f"process {proc.get('pid')}: {printable(str(proc.get('command', '')))}"
                         f" (no workerscope: {what or 'nothing more known'})")
            continue
        head = f"process {proc.get('pid')}"
        if proc.get("error"):
            head += f": {printable(str(proc['error']))}"
        lines.append(head)
        for thread in threads:
            if not isinstance(thread, Mapping):
                continue
            who = printable(str(thread.get("thread")))
            if thread.get("name"):
                who = f"{printable(str(thread['name']))} ({who}, tid {thread.get('tid')})"
            if thread.get("span"):
                who += f" in span {printable(str(thread['span']))}"
            current = " (the one the signal interrupted)" if thread.get("current") else ""
            lines.append(f"  thread {who}{current}, innermost first:")
            for frame in thread.get("frames") or ():
                if isinstance(frame, Mapping):
                    lines.append(f"    {printable(str(frame.get('function')))}  "
                                 f"{printable(str(frame.get('file')))}:{frame.get('line')}")
            if thread.get("truncated"):
                lines.append("    ...")
    return "\n".join(lines)


def is_stacks(mark: Mark) -> bool:
    """Whether a mark is a dump of stacks (its attrs the dump)."""
    return mark.name == STACKS_MARK and isinstance(mark.attrs, Mapping)


def mark_args(mark: Mark) -> dict[str, Any]:
    """A mark's arguments in a trace (.json, .pftrace): a dump of stacks as its reason and
    the stacks as text, which Perfetto's UI shows as they read; any other mark's attrs."""
    if not is_stacks(mark):
        return dict(mark.attrs or {})
    dump = mark.attrs or {}
    args = {k: dump[k] for k in ("reason", "error", "skipped") if dump.get(k) is not None}
    args["stacks"] = stacks_text({**dump, "reason": None})
    return args
