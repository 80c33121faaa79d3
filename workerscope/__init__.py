"""workerscope: see what happens inside each worker of a distributed job."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .driver.subscriber import Subscriber
    from .record import load
    from .timeline import Timeline
    from .worker.instruments import mark, span, timed
    from .worker.jobs import monitor, profiled

    __version__: str

__all__ = ["Subscriber", "Timeline", "load", "mark", "monitor", "profiled", "span", "timed"]


def __getattr__(name: str) -> object:
    # Each name is imported on first use (PEP 562): `python -m workerscope.sidecar` and the CLI
    # import this package too, and must not pay for the timeline and the views (~20 ms), the
    # worker's asyncio (~20 ms), the driver's pyzmq (~13 ms) or importlib.metadata. Issue 11.
    value: object
    if name == "Timeline":
        from .timeline import Timeline

        value = Timeline
    elif name == "load":
        from .record import load

        value = load
    elif name in ("mark", "span", "timed"):
        from .worker import instruments

        value = getattr(instruments, name)
    elif name in ("monitor", "profiled"):
        from .worker import jobs

        value = getattr(jobs, name)
    elif name == "Subscriber":
        from .driver.subscriber import Subscriber

        value = Subscriber
    elif name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("workerscope")
        except PackageNotFoundError:  # imported from a source tree that was never installed
            value = "0+unknown"
    else:
        raise AttributeError(f"module 'workerscope' has no attribute {name!r}")
    from .export import files  # noqa: F401 - registers the views' file formats with Timeline.save

    globals()[name] = value  # once: later lookups find it without coming here
    return value
