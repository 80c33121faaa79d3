"""An ipc:// endpoint in a folder every user can write to (as /tmp is): another local user who
binds the path first must not receive the worker's frames. The worker checks who owns the
socket it would connect to."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from helpers import wait_until

from workerscope import profiled
from workerscope.worker import light, link

OTHER_UID = 54_321

ATTACKER = textwrap.dedent("""
    import os, sys, zmq
    os.setgid({uid}); os.setuid({uid})
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.bind("ipc://" + sys.argv[1])
    print("bound", flush=True)
    got = 0
    while sock.poll(3000):
        sock.recv_multipart()
        got += 1
    print(got, flush=True)
""").format(uid=OTHER_UID)


@pytest.mark.parametrize("mode", ["light", "heavy"])
def test_a_socket_another_user_bound_first_gets_no_frames(clean_env, caplog, mode):
    """Neither a light worker nor a heavy job's sidecar sends to it; the job runs, and the
    worker (light) says why, once (a sidecar says it on the worker's stderr)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the other local user's process (setuid)")
    # Under /tmp itself: the other user must reach the folder (pytest's tmp_path is private).
    folder = Path(tempfile.mkdtemp(prefix="workerscope-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    path = folder / "driver.ipc"
    attacker = subprocess.Popen([sys.executable, "-c", ATTACKER, str(path)],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert attacker.stdout is not None and attacker.stdout.readline().strip() == "bound"
        assert os.stat(path).st_uid == OTHER_UID
        endpoint = f"ipc://{path}"
        with caplog.at_level(logging.WARNING, logger="workerscope"):
            # The job runs regardless.
            assert profiled(lambda: 7, endpoint=endpoint, mode=mode, interval=0.05)() == 7
            light._close_senders()
            link.close_all(wait=True)
        out, _ = attacker.communicate(timeout=60)
    finally:
        if attacker.poll() is None:
            attacker.kill()
            attacker.wait()
        shutil.rmtree(folder, ignore_errors=True)
    assert out.strip() == "0", "the other user's socket received the worker's frames"
    if mode == "heavy":
        return
    said = [r.getMessage() for r in caplog.records if "owned by uid" in r.getMessage()]
    assert len(said) == 1 and str(OTHER_UID) in said[0], [r.getMessage() for r in caplog.records]


def _shared_folder() -> Path:
    """A folder under /tmp every user may write to (pytest's tmp_path is private)."""
    folder = Path(tempfile.mkdtemp(prefix="workerscope-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    return folder


def test_a_socket_another_user_binds_after_the_driver_left_gets_no_frames(clean_env):
    """The worker connected to its driver's socket; the driver closes (its socket goes), and
    another user binds the same path: ZeroMQ would reconnect there on its own. A sender in a
    folder others may write to never reconnects, so the other user receives nothing."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the other local user's process (setuid)")
    import zmq

    from workerscope import Subscriber, protocol
    from workerscope.transport import dealer

    folder = _shared_folder()
    path = folder / "driver.ipc"
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    attacker = None
    try:
        with Subscriber(f"ipc://{path}") as sub:
            sock = dealer(ctx, sub.endpoint)
            sock.send(protocol.encode_frame("hello", "h:1:2", 0, {"host": "h", "pid": 1}))
            wait_until(lambda: "h:1:2" in sub.received, "the hello", timeout=30, step=0.02)
            assert "h:1:2" in sub.received
        assert not path.exists()
        attacker = subprocess.Popen([sys.executable, "-c", ATTACKER, str(path)],
                                    stdout=subprocess.PIPE, text=True)
        assert attacker.stdout is not None and attacker.stdout.readline().strip() == "bound"
        for seq in range(1, 6):
            try:
                sock.send(protocol.encode_frame("heartbeat", "h:1:2", seq, {}), zmq.NOBLOCK)
            except zmq.Again:
                pass
        sock.close(linger=2000)
        out, _ = attacker.communicate(timeout=60)
    finally:
        if attacker is not None and attacker.poll() is None:
            attacker.kill()
            attacker.wait()
        ctx.destroy(linger=0)
        shutil.rmtree(folder, ignore_errors=True)
    assert out.strip() == "0", "the other user's socket received the worker's frames"


def test_no_socket_yet_in_a_shared_folder_is_refused(clean_env):
    """A path with no socket yet, in a folder others may write to: whoever binds it first would
    receive the frames, so the sender refuses it, saying why."""
    import zmq

    from workerscope.transport import dealer

    folder = _shared_folder()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        with pytest.raises(zmq.ZMQError, match="other users may write"):
            dealer(ctx, f"ipc://{folder}/driver.ipc")
        private = Path(tempfile.mkdtemp(prefix="workerscope-private-", dir="/tmp"))
        try:  # in a folder of one's own, a driver may come later: the frames wait for it
            dealer(ctx, f"ipc://{private}/driver.ipc").close(linger=0)
        finally:
            shutil.rmtree(private, ignore_errors=True)
    finally:
        ctx.destroy(linger=0)
        shutil.rmtree(folder, ignore_errors=True)


def test_no_socket_yet_in_another_user_s_folder_is_refused(clean_env):
    """A folder of another user's, even one only they may write to, is theirs to bind in."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder of another local user's (chown)")
    import zmq

    from workerscope.transport import dealer

    folder = Path(tempfile.mkdtemp(prefix="workerscope-theirs-", dir="/tmp"))
    folder.chmod(0o755)
    os.chown(folder, OTHER_UID, OTHER_UID)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        with pytest.raises(zmq.ZMQError, match="other users may write"):
            dealer(ctx, f"ipc://{folder}/driver.ipc")
    finally:
        ctx.destroy(linger=0)
        shutil.rmtree(folder, ignore_errors=True)
