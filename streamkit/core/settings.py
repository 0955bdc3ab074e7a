"""The app's configuration values and their validation, shared by the API (``App``),
the runtime and the state layer without either importing the other."""
from __future__ import annotations

from ..errors import ConfigError

GUARANTEES = ("at_least_once", "exactly_once")
"""Processing guarantees a worker can run with."""

STORE_BACKENDS = ("rocksdb", "memory")
"""Where task state lives."""

ERROR_HANDLERS = ("fail", "log_and_skip", "dead_letter")
"""What happens to a record that cannot be deserialized or processed."""


def check_handler(name: str, setting: str) -> str:
    """``name`` if it is an error handler, else a ConfigError naming ``setting``."""
    if name not in ERROR_HANDLERS:
        raise ConfigError(f"{setting}={name!r} is not a handler: use one of {', '.join(ERROR_HANDLERS)}")
    return name


def check_store_backend(name: str) -> str:
    if name not in STORE_BACKENDS:
        raise ConfigError(f"store_backend={name!r}: use one of {', '.join(STORE_BACKENDS)}")
    return name
