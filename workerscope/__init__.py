"""workerscope: see what happens inside each worker of a distributed job."""

from .client.subscriber import Subscriber
from .decorators import mark, monitor, profiled, span, timed
from .timeline import Timeline, load

__all__ = sorted(["Subscriber", "Timeline", "load", "mark", "monitor", "profiled", "span", "timed"])
__version__ = "0.1.0"
