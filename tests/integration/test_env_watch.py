"""Settings are read again only after the environment changed, and always after it did."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import workerscope
from workerscope.config import ENV


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
    before = ENV.changes
    t = threading.Thread(target=os.environ.update, args=({"WORKERSCOPE_MODE": "light"},))
    t.start()
    t.join()
    assert ENV.changes > before
    fn()
    assert fn.last_stats is not None
    os.environ.pop("WORKERSCOPE_MODE")
    seen = fn.last_stats
    fn()
    assert fn.last_stats is seen


def test_a_refused_hook_leaves_the_variables_read_at_each_call():
    """Where another audit hook refuses ours, the variables are read at each call instead."""
    script = textwrap.dedent("""
        import os, sys
        def guard(event, args):
            if event == "sys.addaudithook":
                raise RuntimeError("no more hooks")
        sys.addaudithook(guard)
        import workerscope
        from workerscope.config import ENV
        fn = workerscope.profiled(lambda: 1, mode="off")
        fn()
        assert ENV.watching is False, "the hook was refused but said added"
        os.environ["WORKERSCOPE_MODE"] = "light"
        fn()
        assert fn.last_stats is not None, "the mode set was not seen"
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERSCOPE_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
