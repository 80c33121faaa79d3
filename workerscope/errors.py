"""The exceptions workerscope raises. All derive from WorkerscopeError and pickle cleanly (a
pool sends a worker's exception back to its parent by pickling it)."""

from __future__ import annotations


class WorkerscopeError(Exception):
    """Base class of every error workerscope raises on purpose."""


class ConfigError(WorkerscopeError, ValueError):
    """A setting (argument or WORKERSCOPE_* variable) is out of range or malformed."""


class ProtocolError(WorkerscopeError):
    """Bytes from a pipe or socket are not a valid workerscope frame."""


class SidecarError(WorkerscopeError):
    """The sampler process could not be started or stopped answering."""


class FileFormatError(WorkerscopeError):
    """A file to read is damaged, of another format, or of a version this release cannot
    read (a .json trace given to load(), a record cut mid-entry, a hand-edited .wsc)."""


class OutputPathError(WorkerscopeError, ValueError):
    """A file cannot be written where it was asked for: an unknown extension, a folder that
    does not exist, an `out` template with fields other than {pid}, {job} and {host}."""


class MissingExtraError(WorkerscopeError, ImportError):
    """A format or exporter needs a package that is not installed; the message names the
    extra to install (pip install 'workerscope[trace]', say)."""


class UsageError(WorkerscopeError):
    """A command line that cannot be run as given; `exit_status` is what the command exits
    with (2, as argparse does for a bad command line)."""

    def __init__(self, message: str, exit_status: int = 2) -> None:
        super().__init__(message)
        self.exit_status = exit_status

    def __reduce__(self) -> tuple[type[UsageError], tuple[str, int]]:
        return type(self), (str(self), self.exit_status)


__all__ = ["ConfigError", "FileFormatError", "MissingExtraError", "OutputPathError",
           "ProtocolError", "SidecarError", "UsageError", "WorkerscopeError"]
