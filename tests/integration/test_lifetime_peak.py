"""The process's lifetime peak survives the resets of heavy and light jobs."""

from __future__ import annotations

import json
import subprocess

from helpers import python_script


def test_lifetime_peak_survives_a_heavy_job_s_reset():
    """After a 400 MiB peak, a heavy job (whose sidecar resets the high-water mark) and then a
    light job: the light stats' lifetime_peak_rss_bytes still holds the 400 MiB."""
    code = """
        import json
        from workerscope import monitor, profiled
        block = bytearray(400 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        del block
        with monitor(interval=0.5):
            pass
        wrapped = profiled(lambda: None, mode="light")
        wrapped()
        print(json.dumps(wrapped.last_stats["lifetime_peak_rss_bytes"]))
    """
    r = subprocess.run(python_script(code), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) >= 400 << 20
