"""Opens a transport from a broker URL."""
from __future__ import annotations

from ..errors import ConfigError
from .base import Transport

DEFAULT_EMBEDDED_DIR = ".streamkit"


def embedded_directory(url: str) -> str:
    """The directory of an ``embedded://`` URL (``embedded:///abs``, ``embedded://rel``)."""
    path = url[len("embedded://"):]
    return path or DEFAULT_EMBEDDED_DIR


def open_transport(url: str) -> Transport:
    """``embedded://DIR`` → the embedded log in DIR; ``kafka://...`` arrives with the Kafka transport."""
    if url.startswith("embedded://"):
        from .embedded.transport import EmbeddedTransport

        return EmbeddedTransport(embedded_directory(url))
    if url.startswith("kafka://"):
        raise ConfigError(f"broker {url}: the Kafka transport is not part of this release yet; "
                          "use an embedded:// broker")
    raise ConfigError(f"broker URL {url!r} is not understood: use embedded:///path/to/dir or kafka://host:port")
