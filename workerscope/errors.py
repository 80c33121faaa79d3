"""The exceptions workerscope raises. All derive from WorkerscopeError and pickle cleanly."""

from __future__ import annotations


class WorkerscopeError(Exception):
    """Base class of every error workerscope raises on purpose."""


class ConfigError(WorkerscopeError, ValueError):
    """A setting (argument or WORKERSCOPE_* variable) is out of range or malformed."""


class ProtocolError(WorkerscopeError):
    """Bytes from a pipe or socket are not a valid workerscope frame."""


class SidecarError(WorkerscopeError):
    """The sampler process could not be started or stopped answering."""
