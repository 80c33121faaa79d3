"""ipc:// paths a driver listens on: claimed with care, left as found.

libzmq unlinks whatever is at an ipc path before it binds (and, in 4.3.5, leaves its socket
file behind at close). So a driver asked for an explicit path would replace a user's regular
file there and take over the socket of a driver already listening on it. Here: a path that
exists must be a socket nobody answers on; the socket is made with umask 0o077 (private from
its first instant: a chmod after bind left a window in which any local user could connect);
and at close only the file we made is removed, not one someone else has put there since.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import threading
from collections.abc import Iterator

from ..errors import WorkerscopeError

_umask_lock = threading.Lock()


def check_free(path: str) -> None:
    """Refuse a path that exists and is not a socket, or a socket someone listens on."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise WorkerscopeError(f"cannot listen on ipc://{path}: {err}") from err
    if not stat.S_ISSOCK(st.st_mode):
        raise WorkerscopeError(f"cannot listen on ipc://{path}: it exists and is not a socket "
                               "(it would be replaced); choose another path")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError as err:
        if err.errno == errno.ECONNREFUSED:
            return  # a socket left behind by a driver that is gone: safe to replace
        raise WorkerscopeError(f"cannot listen on ipc://{path}: {err}") from err
    finally:
        probe.close()
    raise WorkerscopeError(f"cannot listen on ipc://{path}: another process is listening on it "
                           "(a driver already running?); choose another path")


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """umask 0o077 while a socket file is made, so it is 0600 from the start. The umask is
    the process's: files other threads create meanwhile (a bind takes microseconds) are made
    private too, never more open."""
    with _umask_lock:
        old = os.umask(0o077)
        try:
            yield
        finally:
            os.umask(old)


def identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file at path, or None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def remove_if_ours(path: str, ours: tuple[int, int] | None) -> None:
    """Remove the socket file at path if it is still the one we made (libzmq leaves it)."""
    if ours is not None and identity(path) == ours:
        with contextlib.suppress(OSError):
            os.unlink(path)
