"""The per-job RSS peak reset (clear_refs 5) is explicit: the lifetime peak is kept in the
stats, and reset_peak=False leaves the kernel's high-water mark to other tools."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

MB = 1 << 20

SCRIPT = """
import json, resource, sys
from workerscope import profiled

big = bytearray(300 * 2**20)
for i in range(0, len(big), 4096):
    big[i] = 1  # touch every page: 300 MiB resident
del big

def small():
    return sum(range(1000))

job = profiled(small, mode="light", reset_peak={reset!r})
job()
print(json.dumps({{"stats": job.last_stats,
                  "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""


def run(reset: object) -> dict[str, object]:
    r = subprocess.run([sys.executable, "-c", SCRIPT.format(reset=reset)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_lifetime_peak_survives_the_per_job_reset(clean_env):
    """With the reset (the default), the job's own peak is small, and the process's lifetime
    peak of 300 MiB, read just before the reset, is in the stats."""
    out = run(None)
    stats = out["stats"]
    assert stats["peak_rss_bytes"] < 200 * MB
    assert stats["lifetime_peak_rss_bytes"] >= 290 * MB


def test_reset_peak_false_leaves_other_tools_their_peak(clean_env):
    """reset_peak=False: ru_maxrss (what /usr/bin/time -v reports) still shows 300 MiB."""
    out = run(False)
    assert out["ru_maxrss"] >= 290 * MB
    assert out["stats"]["lifetime_peak_rss_bytes"] >= 290 * MB
    assert "peak_rss_bytes" not in out["stats"], "without a reset there is no per-job peak"


@pytest.mark.parametrize("value", ["0", "no", "off", "false"])
def test_the_variable_turns_it_off(clean_env, value):
    """WORKERSCOPE_RESET_PEAK=0 (or no/off/false) turns the reset off where the job runs."""
    from workerscope.config import resolve

    clean_env.setenv("WORKERSCOPE_RESET_PEAK", value)
    assert resolve().reset_peak is False


def test_heavy_mode_honours_reset_peak_false(clean_env):
    """The sidecar, told reset_peak=False in its hello, leaves the worker's peak alone."""
    script = SCRIPT.replace('mode="light"', 'mode="heavy", interval=0.05')
    r = subprocess.run([sys.executable, "-c", script.format(reset=False)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["ru_maxrss"] >= 290 * MB
