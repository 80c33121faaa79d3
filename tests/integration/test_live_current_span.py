"""The live view shows the span a running job is in, not only the last one it finished."""

from __future__ import annotations

import subprocess
import time

from helpers import python_script

from workerscope import Subscriber


def test_a_running_job_s_row_names_the_span_it_is_in(clean_env):
    """A job that finished `first_step` and is 2 s into `slow_step`: its live row says
    slow_step (it said first_step, the last span that ended)."""
    with Subscriber() as sub:
        code = f"""
            import sys, time
            from workerscope import monitor, timed
            @timed
            def first_step():
                pass
            @timed
            def slow_step():
                print("slow", flush=True)
                sys.stdin.readline()  # until the test has read the live row
            with monitor(interval=0.1, endpoint={sub.endpoint!r}):
                first_step()
                slow_step()
        """
        child = subprocess.Popen(python_script(code), stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "slow"
            seen: list[object] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                seen = [r["span"] for r in sub.live() if r["status"] == "running"]
                if seen == ["slow_step"]:
                    break
                time.sleep(0.05)
            assert seen == ["slow_step"], seen
            assert child.stdin is not None
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.wait(timeout=60) == 0
        finally:
            child.kill()
            child.wait()
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()
        assert sub.wait(jobs=1, timeout=30)
