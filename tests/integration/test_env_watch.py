"""Settings are read again only after the environment changed, and always after it did."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest

import workerscope
from workerscope.worker import envwatch


def noop() -> int:
    return 7


def test_an_off_function_follows_the_mode_set_and_unset_after_its_calls(clean_env):
    """WORKERSCOPE_MODE set after an off function's calls turns its next call light, and
    deleting it turns it off again: the quick path never keeps a stale mode."""
    fn = workerscope.profiled(noop, mode="off")
    assert fn() == 7 and fn() == 7
    assert fn.last_stats is None
    clean_env.setenv("WORKERSCOPE_MODE", "light")
    assert fn() == 7
    first = fn.last_stats
    assert first is not None and first["wall_s"] >= 0
    clean_env.delenv("WORKERSCOPE_MODE")
    assert fn() == 7 and fn() == 7
    assert fn.last_stats is first  # no light job since


def test_changes_through_update_clear_and_another_thread_are_seen(clean_env):
    """os.environ.update, a thread's write and a pop all count as changes."""
    fn = workerscope.profiled(noop, mode="off")
    fn()
    before = envwatch.changes()
    t = threading.Thread(target=os.environ.update, args=({"WORKERSCOPE_MODE": "light"},))
    t.start()
    t.join()
    assert envwatch.changes() > before
    fn()
    assert fn.last_stats is not None
    os.environ.pop("WORKERSCOPE_MODE")
    seen = fn.last_stats
    fn()
    assert fn.last_stats is seen


# Off calls, then the mode set and unset, in a new interpreter: argv[1] "refuse" adds a hook
# that refuses every later one first. Prints which hook counted.
SCRIPT = textwrap.dedent("""
    import os, sys
    def guard(event, args):
        if event == "sys.addaudithook":
            raise RuntimeError("no more hooks")
    if sys.argv[1] == "refuse":
        sys.addaudithook(guard)
    import workerscope
    from workerscope.worker import envwatch, recorder
    fn = workerscope.profiled(lambda: 1, mode="off")
    fn()
    assert envwatch.start() is (sys.argv[1] != "refuse"), "the hook said added or not wrongly"
    os.environ["WORKERSCOPE_MODE"] = "light"
    fn()
    first = fn.last_stats
    assert first is not None, "the mode set was not seen"
    del os.environ["WORKERSCOPE_MODE"]
    fn()
    assert fn.last_stats is first, "the mode unset was not seen"
    print("C" if recorder.fast is not None else "Python")
""")


@pytest.mark.parametrize(("how", "pure", "hook"), [
    ("refuse", "0", None), ("refuse", "1", None), ("add", "0", "C"), ("add", "1", "Python")])
def test_the_watch_in_c_in_python_and_refused(how, pure, hook):
    """The C hook, the Python one (WORKERSCOPE_PURE_PYTHON=1) and, where another audit hook
    refuses ours, the variables read at each call: each sees the mode set and unset."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERSCOPE_")}
    env["WORKERSCOPE_PURE_PYTHON"] = pure
    done = subprocess.run([sys.executable, "-c", SCRIPT, how], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    if hook is not None:
        assert done.stdout.strip() == hook
