"""workerscope: see what happens inside each worker of a distributed job."""

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from .export import files as _files  # registers the views' file formats with Timeline.save
from .timeline import Timeline, load
from .worker.instruments import mark, span, timed
from .worker.jobs import monitor, profiled

if TYPE_CHECKING:
    from .driver.subscriber import Subscriber

__all__ = ["Subscriber", "Timeline", "load", "mark", "monitor", "profiled", "span", "timed"]

try:
    __version__ = version("workerscope")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

del _files


def __getattr__(name: str) -> object:
    # Subscriber pulls in pyzmq (~13 ms): only drivers pay for it, not every worker import.
    if name == "Subscriber":
        from .driver.subscriber import Subscriber

        return Subscriber
    raise AttributeError(f"module 'workerscope' has no attribute {name!r}")
