"""One frozen settings object, each setting declared once. Arguments come first; WORKERSCOPE_*
variables override them.

Overriding lets an operator turn a deployed job to heavy mode, or point it at a driver,
without touching its code: the variables are read in the worker, where the job runs.

Each setting is one field of Config, and its metadata says everything else about it: the
variable that overrides it, its parser (type and range), whether it belongs to the sidecar
(LINK: fixed when a worker's sidecar starts, so jobs that differ in it get a sidecar of their
own) or to each job (JOB: it travels in the job's job_start), and whether it is secret (the
endpoint carries a private key: never in a repr, a log line or an error message). The
variable table, the sidecar's key, the options profiled, monitor and the engine wrappers take
(Options) and the README's table are all derived from it, and tests check that they are.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

from .errors import ConfigError

MODES = ("heavy", "light", "off")
MIN_INTERVAL = 0.01
MAX_INTERVAL = 3600.0
PREFIX = "WORKERSCOPE_"

class Scope(str, enum.Enum):
    """Where a setting takes effect."""

    LINK = "link"  # a worker's sidecar, from its start: another value means another sidecar
    JOB = "job"  # each job: sent with its start


Parser = Callable[[str, object], Any]


def _choice(*allowed: str) -> Parser:
    def parse(name: str, raw: object) -> str:
        value = str(raw).strip().lower()
        if value not in allowed:
            raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {raw!r}")
        return value
    return parse


def _seconds(low: float, high: float) -> Parser:
    def parse(name: str, raw: object) -> float:
        try:
            value = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from err
        if not low <= value <= high:  # NaN fails this too
            raise ConfigError(f"{name} must be between {low:g} and {high:g} seconds, got {raw!r}")
        return value
    return parse


def _count(high: int, low: int = 1) -> Parser:
    def parse(name: str, raw: object) -> int:
        try:
            value = int(str(raw))
        except ValueError as err:
            raise ConfigError(f"{name} must be a whole number, got {raw!r}") from err
        if not low <= value <= high:
            raise ConfigError(f"{name} must be between {low} and {high}, got {value}")
        return value
    return parse


def _fraction(name: str, raw: object) -> float:
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{name} must be a fraction between 0 and 1, got {raw!r}") from err
    if not 0 <= value <= 1:  # NaN fails this too
        raise ConfigError(f"{name} must be a fraction between 0 and 1, got {raw!r}")
    return value


def _flag(name: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false (1/0, yes/no, on/off), got {raw!r}")


def _text(name: str, raw: object) -> str:
    return str(raw)


def _endpoint(name: str, raw: object) -> str:
    endpoint = str(raw)
    split_endpoint(endpoint)
    return endpoint


def _out(name: str, raw: object) -> str:
    template = str(raw)
    if template:
        try:
            template.format(pid=0, job=0, host="h")
        except (KeyError, IndexError, ValueError) as err:
            raise ConfigError(f"out path {template!r}: only {{pid}}, {{job}} and {{host}} may "
                              "be filled in") from err
    return template


def _setting(default: Any, scope: Scope, parse: Parser, doc: str, secret: bool = False) -> Any:
    return dataclasses.field(default=default, metadata={
        "scope": scope, "parse": parse, "doc": doc, "secret": secret})


MOST_RING_RECORDS = 1 << 24  # the ring_records setting's bound (a full ring's note sizes to it)


@dataclasses.dataclass(frozen=True, repr=False)
class Config:
    mode: str = _setting(
        "light", Scope.JOB, _choice(*MODES),
        "heavy (a sidecar samples the whole process tree), light (counters at the job's start "
        "and end, no extra process) or off (the function runs bare)")
    interval: float = _setting(
        1.0, Scope.LINK, _seconds(MIN_INTERVAL, MAX_INTERVAL),
        "seconds between two samples of a heavy job (0.01 to 3600)")
    endpoint: str | None = _setting(
        None, Scope.LINK, _endpoint,
        "the driver's endpoint, whole (sub.endpoint, or what `workerscope listen` prints): "
        "it carries a key, so treat it like a password", secret=True)
    out: str | None = _setting(
        None, Scope.JOB, _out,
        "a file per job (.wsc, .json, .pftrace, .html, ...), written by the sidecar even if the "
        "worker is killed; {pid}, {job} and {host} are filled in")
    node: str | None = _setting(
        None, Scope.LINK, _text, "a name for this machine, prefixed to its worker ids")
    bye_timeout: float = _setting(
        2.0, Scope.LINK, _seconds(0, 3600),
        "seconds a sidecar waits for the driver to acknowledge its last frame before it exits")
    ring_records: int = _setting(
        65_536, Scope.LINK, _count(MOST_RING_RECORDS),
        "span records each worker process's ring holds for the sidecar (48 bytes each, twice "
        "that with span_cpu); a ring "
        "that fills counts what it overwrote in spans_lost, and a note of the sidecar's gives "
        "the size that would have held it")
    samples_per_frame: int = _setting(
        1, Scope.LINK, _count(10_000),
        "sample N times, send one frame with the last, min, mean and max of each metric")
    send_queue: int = _setting(
        10_000, Scope.LINK, _count(10_000_000),
        "frames a sidecar queues for a slow or absent driver before it drops (and counts) them")
    span_cpu: bool = _setting(
        False, Scope.LINK, _flag,
        "read each sync span's thread CPU time at its begin and end: the functions' CPU "
        "measured, not estimated from the samples (two clock reads, ~0.5 us more a span)")
    reset_peak: bool = _setting(
        True, Scope.JOB, _flag,
        "reset the kernel's RSS high-water mark at each job's start, so a warm worker reports "
        "each job's own peak (the lifetime peak read just before is kept in the stats)")
    stacks_memory: float = _setting(
        0.9, Scope.LINK, _fraction,
        "take every thread's Python stack when the worker's memory cgroup's working set "
        "reaches this share of its limit, so an OOM kill comes with what ran just before; once "
        "a crossing (0: never)")
    stacks_after: float = _setting(
        0.0, Scope.JOB, _seconds(0, 10**7),
        "take every thread's Python stack once when a job has run this many seconds (0: never)")
    stacks_every: float = _setting(
        30.0, Scope.LINK, _seconds(0, 10**7),
        "each trigger (memory, stacks_after, a straggler) takes at most one dump of stacks "
        "every this many seconds per worker; the ones skipped are counted in a note")
    allocations: int = _setting(
        0, Scope.JOB, _count(1000, low=0),
        "trace allocations (tracemalloc) and mark the top N sites at each job's end and when "
        "the memory cgroup's working set passes stacks_memory of its limit (0: off; while on, "
        "every allocation of the process costs more)")
    gpus: str = _setting(
        "used", Scope.LINK, _choice("used", "all"),
        "the GPUs a heavy job's samples report: used (those CUDA_VISIBLE_DEVICES or "
        "NVIDIA_VISIBLE_DEVICES names and those a process of the tree holds a context on) or "
        "all (every GPU of the machine)")

    def __repr__(self) -> str:
        """The settings, the endpoint's secret key left out."""
        return "Config(" + ", ".join(
            f"{s.name}={shown(s, getattr(self, s.name))!r}" for s in SETTINGS) + ")"


class Options(TypedDict, total=False):
    """The keyword options of profiled, monitor and the engine wrappers: one per setting (a
    unit test checks the two agree)."""

    mode: str | None
    interval: float | None
    endpoint: str | None
    out: str | None
    node: str | None
    bye_timeout: float | None
    ring_records: int | None
    samples_per_frame: int | None
    send_queue: int | None
    span_cpu: bool | None
    reset_peak: bool | None
    stacks_memory: float | None
    stacks_after: float | None
    stacks_every: float | None
    allocations: int | None
    gpus: str | None


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting as Config declares it."""

    name: str
    env: str
    scope: Scope
    parse: Parser
    doc: str
    default: Any
    secret: bool


SETTINGS: tuple[Setting, ...] = tuple(
    Setting(f.name, PREFIX + f.name.upper(), f.metadata["scope"], f.metadata["parse"],
            f.metadata["doc"], f.default, f.metadata["secret"])
    for f in dataclasses.fields(Config))
_BY_NAME = {s.name: s for s in SETTINGS}
LINK_SETTINGS = tuple(s.name for s in SETTINGS if s.scope is Scope.LINK)
JOB_SETTINGS = tuple(s.name for s in SETTINGS if s.scope is Scope.JOB)

# Variables that set up a process rather than a job: not options, never given as arguments.
PROCESS_VARIABLES = {
    PREFIX + "RINGS": "set by `workerscope run` for its command: where the command's Python "
                      "processes record their spans (the sidecar's ring folder)",
    PREFIX + "PURE_PYTHON": "1: record and read spans with the pure-Python ring writer and "
                            "reader even where their C fast paths are built",
    PREFIX + "STACKS_SIGNAL": "the signal a sidecar asks a worker process for every thread's "
                              "Python stack with (a number or a name such as SIGUSR2; default "
                              "SIGRTMIN+7); a handler the job installed first is chained to, "
                              "never replaced",
    PREFIX + "TEST_CLOCK_SKEW_NS": "for workerscope's own tests only: the sidecar pretends its "
                                   "wall clock is off by this many ns",
}


def env_names() -> dict[str, str]:
    """Each setting and the variable that overrides it."""
    return {s.name: s.env for s in SETTINGS}


def variables() -> dict[str, str]:
    """Every WORKERSCOPE_* variable workerscope reads, and what it does."""
    return {**{s.env: s.doc for s in SETTINGS}, **PROCESS_VARIABLES}


def stacks_signal(environ: Mapping[str, str] | None = None) -> int | None:
    """The signal a sidecar asks a worker process for its stacks with (WORKERSCOPE_STACKS_SIGNAL:
    a number or a name; SIGRTMIN+7 when unset); None where it names no usable signal."""
    import signal

    value = process_variable(PREFIX + "STACKS_SIGNAL", environ).strip()
    if not value:
        return int(signal.SIGRTMIN) + 7
    try:
        number = int(value)
    except ValueError:
        member = getattr(signal.Signals, value.upper(), None)
        number = -1 if member is None else int(member)
    # faulthandler keeps the fatal signals for itself; SIGKILL and SIGSTOP cannot be caught.
    unusable = {signal.SIGSEGV, signal.SIGFPE, signal.SIGABRT, signal.SIGBUS, signal.SIGILL,
                signal.SIGKILL, signal.SIGSTOP}
    if not 0 < number < signal.NSIG or number in unusable:
        return None
    return number


def process_variable(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of one of PROCESS_VARIABLES ("" when unset)."""
    if name not in PROCESS_VARIABLES:
        raise KeyError(f"{name} is not declared in PROCESS_VARIABLES")
    return (os.environ if environ is None else environ).get(name, "")


def shown(setting: Setting, value: object) -> object:
    """A value fit for a repr, a log line or an error message."""
    if setting.secret and isinstance(value, str):
        return public_endpoint(value)
    return value


def resolve(environ: Mapping[str, str] | None = None, /, **given: object) -> Config:
    """Build a Config from arguments (None means 'not given'), then apply WORKERSCOPE_* overrides.
    A bad variable's error names it, so an operator knows which one to fix."""
    env = os.environ if environ is None else environ
    unknown = set(given) - _BY_NAME.keys()
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}; the settings are "
                          f"{', '.join(_BY_NAME)}")
    values: dict[str, Any] = {}
    for s in SETTINGS:
        raw = env.get(s.env, "")
        if raw != "":
            try:
                values[s.name] = s.parse(s.name, raw)
            except ConfigError as err:
                raise ConfigError(f"{s.env}={shown(s, raw)!r}: {err}") from err
    for name, value in given.items():
        if value is not None:
            # Checked even where a variable overrides it here: the same call elsewhere, where
            # no variable does, would take it.
            parsed = _BY_NAME[name].parse(name, value)
            values.setdefault(name, parsed)
    if environ is None:
        _warn_unknown(env)
    return Config(**values)


_warned: set[str] = set()


def _warn_unknown(env: Mapping[str, str]) -> None:
    """Say once, for each WORKERSCOPE_* variable that is no setting (a typo), that it is
    ignored: an operator's WORKERSCOPE_INTERVALL=0.1 would otherwise do nothing unseen."""
    for name in env:
        if name.startswith(PREFIX) and name not in _KNOWN and name not in _warned:
            _warned.add(name)
            import difflib  # only for a variable that is no setting
            import logging

            near = difflib.get_close_matches(name, sorted(_KNOWN), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            logging.getLogger("workerscope").warning(
                "workerscope: %s is not a workerscope setting%s; it is ignored", name, hint)


_KNOWN = frozenset(variables())


def link_key(config: Config) -> tuple[object, ...]:
    """What makes a worker's sidecar: jobs whose settings agree on these share one."""
    return tuple(getattr(config, name) for name in LINK_SETTINGS)


def job_values(config: Config) -> dict[str, Any]:
    """The settings each job carries to its sidecar in its job_start."""
    return {name: getattr(config, name) for name in JOB_SETTINGS}


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
    """The settings as plain values, for the pipe hello to the sidecar (a private pipe: the
    endpoint goes whole)."""
    return dataclasses.asdict(config)


def config_from_dict(values: Mapping[str, object]) -> Config:
    """The inverse of to_dict, validated as resolve() validates arguments; the environment is
    not read again (the worker already applied it)."""
    if not isinstance(values, Mapping):
        raise ConfigError("settings must be a map")
    return resolve({}, **{k: v for k, v in values.items() if k in _BY_NAME})
