"""A job that closes descriptors it did not open (as daemonising code does, closerange(3, ...))
and then opens its log: the log may get the number of the worker's pipe to its sidecar.
workerscope must then neither write its messages into the log nor close it."""

from __future__ import annotations

import subprocess

from helpers import python_script

SCRIPT = """
    import os, sys
    from workerscope import profiled
    from workerscope.worker import link

    log_path = sys.argv[1]

    def daemonish():
        (lk,) = link._links.values()
        fd = lk._sock.fileno()
        os.close(fd)  # closerange(3, ...) does this to every descriptor
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        assert log == fd, (log, fd)  # the lowest number free: the pipe's
        os.write(log, b"job line\\n")
        return log

    assert profiled(lambda: 1, mode="heavy", interval=0.05)() == 1  # the sidecar is up
    log = profiled(daemonish, mode="heavy", interval=0.05)()
    profiled(lambda: 2, mode="heavy", interval=0.05)()  # the next job, a sidecar anew
    os.write(log, b"after\\n")  # the job's log is still open, and still its own
    link.close_all(wait=True)
    os.close(log)
    print("done", flush=True)
"""


def test_a_reused_pipe_number_is_not_written_to_nor_closed(clean_env, tmp_path):
    log = tmp_path / "job.log"
    r = subprocess.run([*python_script(SCRIPT), str(log)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr[-3000:]
    assert log.read_bytes() == b"job line\nafter\n"
