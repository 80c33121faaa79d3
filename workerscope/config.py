"""One frozen settings object. Arguments come first; WORKERSCOPE_* variables override them.

Overriding lets an operator turn a deployed job to heavy mode, or point it at a driver,
without touching its code: the variables are read in the worker, where the job runs.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import re
from collections.abc import Mapping

from .errors import ConfigError

MODES = ("heavy", "light", "off")
MIN_INTERVAL = 0.01
MAX_INTERVAL = 3600.0


@dataclasses.dataclass(frozen=True)
class Config:
    mode: str = "light"
    interval: float = 1.0
    endpoint: str | None = None
    out: str | None = None
    node: str | None = None
    # How long a sidecar waits for the driver to acknowledge its last frame before it exits.
    bye_timeout: float = 2.0
    # Span records each worker process's ring holds for the sidecar to read (a power of two,
    # 48 bytes each). The sidecar reads every 50 ms; a ring that fills counts what it overwrote.
    ring_records: int = 65_536
    # Sample this many times per frame sent (last, min, mean, max of each metric).
    samples_per_frame: int = 1
    # Frames a sidecar queues for a slow or absent driver before it drops (and counts) them.
    send_queue: int = 10_000
    # Reset the kernel's RSS high-water mark (VmHWM, clear_refs 5) at each job's start, so a
    # warm worker reports each job's own peak. It resets ru_maxrss and `/usr/bin/time -v` for
    # the process too; the lifetime peak read just before is kept in the stats. See METRICS.md.
    reset_peak: bool = True


_ENV = {
    "mode": "WORKERSCOPE_MODE",
    "interval": "WORKERSCOPE_INTERVAL",
    "endpoint": "WORKERSCOPE_ENDPOINT",
    "out": "WORKERSCOPE_OUT",
    "node": "WORKERSCOPE_NODE",
    "bye_timeout": "WORKERSCOPE_BYE_TIMEOUT",
    "ring_records": "WORKERSCOPE_RING_RECORDS",
    "samples_per_frame": "WORKERSCOPE_SAMPLES_PER_FRAME",
    "send_queue": "WORKERSCOPE_SEND_QUEUE",
    "reset_peak": "WORKERSCOPE_RESET_PEAK",
}


def env_names() -> dict[str, str]:
    """Each setting and the variable that overrides it."""
    return dict(_ENV)


def _as_float(name: str, raw: object) -> float:
    try:
        return float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from err


def _as_bool(name: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false (1/0, yes/no, on/off), got {raw!r}")


def resolve(environ: Mapping[str, str] | None = None, /, **given: object) -> Config:
    """Build a Config from arguments (None means 'not given'), then apply WORKERSCOPE_* overrides.
    A bad variable's error names it, so an operator knows which one to fix."""
    env = os.environ if environ is None else environ
    unknown = set(given) - set(_ENV)
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    overrides = {key: env[var] for key, var in _ENV.items() if env.get(var, "") != ""}
    for key, raw in overrides.items():
        try:
            _build({key: raw})
        except ConfigError as err:
            raise ConfigError(f"{_ENV[key]}={raw!r}: {err}") from err
    values: dict[str, object] = {k: v for k, v in given.items() if v is not None}
    return _build({**values, **overrides})


def _build(values: dict[str, object]) -> Config:
    """Validate and convert settings (given or from the environment) into a Config."""
    if "mode" in values:
        mode = str(values["mode"]).strip().lower()
        if mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {values['mode']!r}")
        values["mode"] = mode
    for key in ("interval", "bye_timeout"):
        if key in values:
            values[key] = _as_float(key, values[key])
    interval = values.get("interval", Config.interval)
    if not MIN_INTERVAL <= interval <= MAX_INTERVAL:  # type: ignore[operator]
        raise ConfigError(
            f"interval must be between {MIN_INTERVAL} and {MAX_INTERVAL:g} seconds, got {interval!r}"
        )
    if "bye_timeout" in values and not 0 <= values["bye_timeout"] <= 3600:  # type: ignore[operator]
        raise ConfigError(f"bye_timeout must be between 0 and 3600 seconds, got {values['bye_timeout']!r}")
    for key, top in (("samples_per_frame", 10_000), ("send_queue", 10_000_000),
                     ("ring_records", 1 << 24)):
        if key in values:
            raw = values[key]
            try:
                n = int(str(raw))
            except ValueError as err:
                raise ConfigError(f"{key} must be a whole number, got {raw!r}") from err
            if not 1 <= n <= top:
                raise ConfigError(f"{key} must be between 1 and {top}, got {n}")
            values[key] = n
    if "reset_peak" in values:
        values["reset_peak"] = _as_bool("reset_peak", values["reset_peak"])
    for key in ("endpoint", "out", "node"):
        if key in values:
            values[key] = str(values[key])
    if values.get("out"):
        try:
            str(values["out"]).format(pid=0, job=0, host="h")
        except (KeyError, IndexError, ValueError) as err:
            raise ConfigError(
                f"out path {values['out']!r}: only {{pid}}, {{job}} and {{host}} may be filled in"
            ) from err
    endpoint = values.get("endpoint")
    if endpoint is not None:
        split_endpoint(str(endpoint))
    return Config(**values)  # type: ignore[arg-type]


# A driver that authenticates (CURVE, the default on tcp://) hands out endpoints of the form
# tcp://HOST:PORT?curve=SERVER_PUBLIC,CLIENT_SECRET: each key 32 bytes in URL-safe base64 without
# padding (43 characters). Not Z85, ZeroMQ's own text form: its alphabet has $ ! & ? * and <,
# which shells and URLs read as their own. See docs/SECURITY.md.
CURVE_PARAM = "?curve="
KEY_CHARS = 43
_KEY = re.compile(f"[A-Za-z0-9_-]{{{KEY_CHARS - 1}}}[AEIMQUYcgkosw048]")  # 256 bits


def split_endpoint(endpoint: str) -> tuple[str, tuple[bytes, bytes] | None]:
    """(the ZeroMQ address, (the driver's public key, this client's secret key) or None for a
    driver without authentication) of an endpoint. ConfigError if it is not one."""
    if not endpoint.startswith(("tcp://", "ipc://")):
        raise ConfigError("endpoint must be a ZeroMQ address like tcp://HOST:PORT or ipc:///path, "
                          f"got {public_endpoint(endpoint)!r}")
    if not endpoint.startswith("tcp://") or "?" not in endpoint:
        return endpoint, None
    address, _, query = endpoint.partition("?")
    keys = query.removeprefix(CURVE_PARAM[1:]).split(",")
    if not query.startswith(CURVE_PARAM[1:]) or len(keys) != 2 or not all(map(_KEY.fullmatch, keys)):
        raise ConfigError(f"endpoint {public_endpoint(endpoint)!r}: expected ?curve=KEY,KEY "
                          f"(two keys of {KEY_CHARS} characters); copy it whole from the driver")
    server, client = (base64.urlsafe_b64decode(k + "=") for k in keys)
    return address, (server, client)


def public_endpoint(endpoint: str) -> str:
    """The endpoint fit for logs and files: its secret key left out."""
    address, sep, _ = endpoint.partition("?")
    return address + (sep + "curve=..." if sep else "")


def to_dict(config: Config) -> dict[str, object]:
    """The settings as plain values, for the pipe hello to the sidecar."""
    return dataclasses.asdict(config)


def config_from_dict(values: Mapping[str, object]) -> Config:
    """The inverse of to_dict, validated as resolve() validates arguments; the environment is
    not read again (the worker already applied it)."""
    if not isinstance(values, Mapping):
        raise ConfigError("settings must be a map")
    return resolve({}, **{k: v for k, v in values.items() if k in _ENV})
