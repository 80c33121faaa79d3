"""workerscope: see what happens inside each worker of a distributed job."""

from typing import TYPE_CHECKING

from .decorators import mark, monitor, profiled, span, timed
from .timeline import Timeline, load

if TYPE_CHECKING:
    from .client.subscriber import Subscriber

__all__ = ["Subscriber", "Timeline", "load", "mark", "monitor", "profiled", "span", "timed"]
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Subscriber pulls in pyzmq (~13 ms): only drivers pay for it, not every worker import.
    if name == "Subscriber":
        from .client.subscriber import Subscriber

        return Subscriber
    raise AttributeError(f"module 'workerscope' has no attribute {name!r}")
