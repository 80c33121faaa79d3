"""A light worker whose endpoint nobody listens on says so once and does not wait at exit for
a bye acknowledgement that cannot come (issue 14)."""

from __future__ import annotations

import logging
import socket

from workerscope import Subscriber, profiled
from workerscope.worker import light


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def one_job(endpoint):
    wrapped = profiled(lambda: 1, endpoint=endpoint)
    assert wrapped() == 1
    return light._senders[(endpoint, None)]


def test_nobody_listening_is_said_once_and_the_bye_wait_skipped(clean_env, caplog, tmp_path):
    """tcp to a closed port, and an ipc path nobody binds: at exit the sender has seen no
    driver, skips the bye wait (it ends for that reason, not a timeout) and warns once."""
    clean_env.setenv("WORKERSCOPE_BYE_TIMEOUT", "30")  # a wait would be for nothing
    for endpoint in (f"tcp://127.0.0.1:{closed_port()}", f"ipc://{tmp_path}/nobody.ipc"):
        caplog.clear()
        sender = one_job(endpoint)
        with caplog.at_level(logging.WARNING, logger="workerscope"):
            light._close_senders()
        assert sender.bye_wait == "nobody listened", endpoint
        said = [r.getMessage() for r in caplog.records if "nobody listened" in r.getMessage()]
        assert len(said) == 1 and endpoint in said[0], said


def test_a_listening_driver_still_gets_the_bye(clean_env, caplog):
    """With a driver there, the sender waits for its acknowledgement as before, and warns of
    nothing."""
    with Subscriber() as sub:
        sender = one_job(sub.endpoint)
        assert sub.wait(jobs=1, timeout=10)
        with caplog.at_level(logging.WARNING, logger="workerscope"):
            light._close_senders()
        assert sender.bye_wait == "acknowledged"
        assert sub.wait(byes=1, timeout=10)
    assert not [r for r in caplog.records if "nobody listened" in r.getMessage()]


def test_a_heavy_worker_s_sidecar_says_nobody_listened_and_does_not_wait(clean_env, tmp_path):
    """A heavy job's sidecar whose endpoint nobody listens on says so once at its bye, on the
    worker's stderr, and skips the wait for an acknowledgement (bye_timeout 30 s here)."""
    import subprocess

    from helpers import python_script

    endpoint = f"tcp://127.0.0.1:{closed_port()}"
    script = python_script(f"""
        from workerscope import profiled
        from workerscope.worker import link
        assert profiled(sum, mode="heavy", interval=0.05, endpoint={endpoint!r})([1, 2]) == 3
        link.close_all(wait=True)
        print("done", flush=True)
    """)
    env = {**clean_env_vars(), "WORKERSCOPE_BYE_TIMEOUT": "30"}
    r = subprocess.run(script, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr
    said = [line for line in r.stderr.splitlines() if "nobody listened" in line]
    assert len(said) == 1 and "127.0.0.1" in said[0], r.stderr


def clean_env_vars():
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("WORKERSCOPE_")}
