"""workerscope: see what happens inside each worker of a distributed job."""

from typing import TYPE_CHECKING

from .errors import (
    ConfigError,
    FileFormatError,
    MissingExtraError,
    OutputPathError,
    ProtocolError,
    SidecarError,
    UsageError,
    WorkerscopeError,
)

if TYPE_CHECKING:
    from .driver.subscriber import Subscriber
    from .protocol import Status
    from .record import load
    from .timeline import Job, Mark, Sample, Span, Timeline, Worker
    from .worker.instruments import mark, span, timed
    from .worker.jobs import monitor, profiled

    __version__: str

__all__ = [
    "ConfigError", "FileFormatError", "Job", "Mark", "MissingExtraError", "OutputPathError",
    "ProtocolError", "Sample", "SidecarError", "Span", "Status", "Subscriber", "Timeline",
    "UsageError", "Worker", "WorkerscopeError", "load", "mark", "monitor", "profiled", "span",
    "timed",
]

# Where each lazily imported name lives (PEP 562): `python -m workerscope.sidecar` and the CLI
# import this package too, and must not pay for the timeline and the views (~20 ms), the
# worker's asyncio (~20 ms), the driver's pyzmq (~13 ms) or importlib.metadata.
_LAZY = {
    "Timeline": "timeline", "Worker": "timeline", "Job": "timeline", "Span": "timeline",
    "Mark": "timeline", "Sample": "timeline", "Status": "protocol", "load": "record",
    "mark": "worker.instruments", "span": "worker.instruments", "timed": "worker.instruments",
    "monitor": "worker.jobs", "profiled": "worker.jobs", "Subscriber": "driver.subscriber",
}


def __getattr__(name: str) -> object:
    value: object
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    elif name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("workerscope")
        except PackageNotFoundError:  # imported from a source tree that was never installed
            value = "0+unknown"
    else:
        raise AttributeError(f"module 'workerscope' has no attribute {name!r}")
    globals()[name] = value  # once: later lookups find it without coming here
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])
