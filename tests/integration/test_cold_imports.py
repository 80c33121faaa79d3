"""A heavy job's first call in a fresh process imports only what it uses: not asyncio (~30 ms
of its cold start), which a coroutine function alone needs."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys, workerscope
assert workerscope.profiled(lambda: 7, mode="heavy")() == 7
print("asyncio" in sys.modules)

async def job():
    return 8

import asyncio
wrapped = workerscope.profiled(job, mode="heavy")
print(asyncio.iscoroutinefunction(wrapped), asyncio.run(wrapped()))
"""


def test_a_heavy_job_does_not_import_asyncio(clean_env):
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == ["False", "True", "8"], out
