"""Counts the changes of this process's environment, so a profiled function reads its
settings again only after one: reading the WORKERSCOPE_* variables costs ~0.3 us each, ~7 us
a call, against a bare call's 0.03 us.

os.environ's writes and deletes call os.putenv and os.unsetenv, which raise audit events of
those names (PEP 578); a hook counts them. The hook is C where the fast path is built (two
compares on each audited event of the process: open, import, sys._getframe), else a Python
function (~160 ns an event). An audit hook cannot be removed, and another hook may refuse it:
`start()` then says False and callers read the variables each time.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from .recorder import fast

_ENV_EVENTS = frozenset(("os.putenv", "os.unsetenv"))
_PROBE = "workerscope.envwatch"
_py_changes = 0
_py_watching = False
_py_asked = False


def _hook(event: str, args: tuple[object, ...]) -> None:
    global _py_changes, _py_watching
    if event in _ENV_EVENTS:
        _py_changes += 1
    elif event == _PROBE:
        _py_watching = True


def _py_start() -> bool:
    global _py_asked
    if not _py_asked:
        _py_asked = True
        sys.addaudithook(_hook)
        sys.audit(_PROBE)  # the hook says it was added: a refused one is not told
    return _py_watching


def _py_count() -> int:
    return _py_changes


_c = fast is not None and hasattr(fast, "watch_env")
# start() -> whether the changes are counted (adds the hook, once a process).
start: Callable[[], bool] = fast.watch_env if _c else _py_start
# changes() -> the changes counted so far.
changes: Callable[[], int] = fast.env_changes if _c else _py_count
