"""The root of scalecua's error tree and the two errors the contract itself raises.

They live on the lowest floor so that topics/ imports nothing above it; runtime/errors.py
builds the whole tree on them and is where everything else imports them from.
"""

from __future__ import annotations

__all__ = ["ConfigError", "ScaleCUAError", "SchemaError"]


class ScaleCUAError(Exception):
    """Base class of every error scalecua raises on purpose."""


class ConfigError(ScaleCUAError):
    """A setting is missing or invalid."""


class SchemaError(ScaleCUAError):
    """Bytes do not decode to the topic's event type."""
