"""A driver's CURVE keys, the endpoint that carries what a sidecar needs, and the ZAP handler
that lets in only the holders of that endpoint.

Two keypairs: the driver's (the server's) and one client keypair that every sidecar of this
driver shares. The endpoint a user hands to profiled()/monitor()/WORKERSCOPE_ENDPOINT carries
the driver's public key and the client's secret key (config.split_endpoint), so it travels to
Dask, Ray and Lithops workers with the function, through the engine's own channel, and is a
secret in the way a password is. The driver allows exactly one client public key.

The driver's key (`Subscriber.key`, `workerscope listen --key-file`) is the two secret keys;
a driver restarted with it hands out the same endpoint, and the sidecars of the previous run
reconnect to it by themselves.
"""

from __future__ import annotations

import base64
import os
import re
import stat
from dataclasses import dataclass

import zmq
from zmq.utils import z85

from ..config import CURVE_PARAM
from ..errors import ConfigError

KEY_BYTES = 32
ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # RFC 27: where ZeroMQ asks who may connect
ZAP_DOMAIN = "workerscope"
_KEY_TEXT = re.compile(r"[A-Za-z0-9_-]{86}")  # two keys of 32 bytes, URL-safe base64


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class DriverKeys:
    """The secret keys of a driver (its own, and its sidecars' shared client key), raw."""

    server_secret: bytes
    client_secret: bytes

    @classmethod
    def new(cls) -> DriverKeys:
        (_, server), (_, client) = zmq.curve_keypair(), zmq.curve_keypair()
        return cls(z85.decode(server), z85.decode(client))

    @classmethod
    def parse(cls, text: str) -> DriverKeys:
        """The keys of a key string (`Subscriber.key`); ConfigError if it is not one."""
        text = text.strip()
        if not _KEY_TEXT.fullmatch(text):
            raise ConfigError("a driver key is 86 characters of URL-safe base64, as "
                              "Subscriber.key or `workerscope listen --key-file` wrote it")
        raw = base64.urlsafe_b64decode(text + "==")
        return cls(raw[:KEY_BYTES], raw[KEY_BYTES:])

    def text(self) -> str:
        return _b64(self.server_secret + self.client_secret)

    @property
    def server_public(self) -> bytes:
        return z85.decode(zmq.curve_public(z85.encode(self.server_secret)))

    @property
    def client_public(self) -> bytes:
        return z85.decode(zmq.curve_public(z85.encode(self.client_secret)))

    def endpoint(self, address: str) -> str:
        """What a sidecar needs to reach the driver listening at `address`."""
        return f"{address}{CURVE_PARAM}{_b64(self.server_public)},{_b64(self.client_secret)}"

    def serve(self, sock: zmq.Socket[bytes]) -> None:
        """Make a ROUTER (before bind) a CURVE server with these keys, asking ZAP who may in."""
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, z85.encode(self.server_secret))
        sock.setsockopt_string(zmq.ZAP_DOMAIN, ZAP_DOMAIN)


def new_key() -> str:
    """A fresh driver key: keep it like a password (whoever has it can read the frames)."""
    return DriverKeys.new().text()


def endpoint_for(address: str, key: str) -> str:
    """The endpoint a driver with this key hands out when it listens at `address`
    (tcp://HOST:PORT), known before it starts."""
    return DriverKeys.parse(key).endpoint(address)


class ZapHandler:
    """ZeroMQ's authentication handler (RFC 27) for one context: lets in CURVE clients with
    the one allowed public key, refuses everyone else. Not a thread of its own: the receive
    thread polls `socket` and calls handle(), so a handshake waits at most one poll round."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], allowed: bytes) -> None:
        self.allowed = allowed
        self.refused = 0
        self.socket = ctx.socket(zmq.REP)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(ZAP_ENDPOINT)

    def handle(self) -> None:
        """Answer every request waiting, without blocking."""
        while True:
            try:
                request = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            ok = (len(request) == 7 and request[0] == b"1.0" and request[5] == b"CURVE"
                  and request[6] == self.allowed)
            if not ok:
                self.refused += 1
            request_id = request[1] if len(request) > 1 else b""
            status = (b"200", b"OK") if ok else (b"400", b"not a key of this driver")
            self.socket.send_multipart([b"1.0", request_id, *status, b"", b""])

    def close(self) -> None:
        self.socket.close(0)


def key_from_file(path: str) -> str:
    """The driver key kept in `path`, made there (0600) on first use: a driver started again
    with it hands out the same endpoint. Refuses a file other users can read."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = os.stat(path).st_mode
        if mode & 0o077:
            raise ConfigError(f"key file {path} can be read by other users "
                              f"(mode {stat.S_IMODE(mode):o}): chmod 600 it") from None
        with open(path, encoding="ascii") as f:
            return DriverKeys.parse(f.read()).text()
    except OSError as err:
        raise ConfigError(f"cannot make key file {path}: {err}") from err
    key = new_key()
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(key + "\n")
    return key
