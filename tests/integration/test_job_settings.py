"""Job settings travel with each job to a warm sidecar; link settings pick the sidecar."""

from __future__ import annotations

import json
import subprocess

from helpers import python_script


def test_reset_peak_is_each_job_s_own():
    """A job with reset_peak=False on a sidecar started by a job with reset_peak=True keeps
    the peak reached before it (300 MiB allocated and freed between the two jobs)."""
    code = """
        import json
        from workerscope import monitor
        with monitor(interval=0.5, reset_peak=True) as a:
            pass
        block = bytearray(300 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        del block
        with monitor(interval=0.5, reset_peak=False) as b:
            pass
        with monitor(interval=0.5, reset_peak=True) as c:
            pass
        peak = lambda m: max(v for _, v in m.timeline.series("tree", "peak_rss_bytes"))
        print(json.dumps([peak(a), peak(b), peak(c)]))
    """
    r = subprocess.run(python_script(code), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    a, b, c = json.loads(r.stdout.strip().splitlines()[-1])
    assert b >= a + (290 << 20), (a, b)  # kept: the 300 MiB are in it
    assert c < b - (200 << 20), (b, c)  # reset again for the third job
