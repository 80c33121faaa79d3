"""`listen` records every frame though nobody reads its output, and Ctrl-C still ends it."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

from helpers import python_script

from workerscope import load


def test_listen_records_every_job_with_its_stdout_unread(clean_env, tmp_path):
    """`listen -o rec.wsc` whose stdout pipe nobody reads (as `listen | less` left alone):
    all 1,000 jobs of a worker are recorded (the record stopped when the pipe filled), and
    SIGINT ends listen within seconds (it did not end)."""
    record = tmp_path / "rec.wsc"
    listen = subprocess.Popen([sys.executable, "-m", "workerscope", "listen", "-o", str(record)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert listen.stdout is not None
        first = listen.stdout.readline()
        endpoint = re.search(r"listening on (\S+)", first)
        assert endpoint, first
        code = f"""
            from workerscope import profiled
            job = profiled(lambda i: i, mode="light", endpoint={endpoint.group(1)!r})
            for i in range(1000):
                job(i)
        """
        worker = subprocess.run(python_script(code), capture_output=True, text=True, timeout=120)
        assert worker.returncode == 0, worker.stderr
        deadline = time.monotonic() + 60
        ended = 0
        while time.monotonic() < deadline:
            if record.exists():
                ended = len(load(record).jobs)
                if ended >= 1000:
                    break
            time.sleep(0.2)
        assert ended == 1000
        listen.send_signal(signal.SIGINT)
        assert listen.wait(timeout=20) == 0
    finally:
        listen.kill()
        listen.wait()
        for pipe in (listen.stdout, listen.stderr):
            if pipe is not None:
                pipe.close()
