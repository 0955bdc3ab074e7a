"""Opens a transport from a broker URL."""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional

from ..errors import ConfigError
from .base import Transport

DEFAULT_EMBEDDED_DIR = ".streamkit"


def embedded_directory(url: str) -> str:
    """The directory of an ``embedded://`` URL (``embedded:///abs``, ``embedded://rel``)."""
    path = url[len("embedded://"):]
    return path or DEFAULT_EMBEDDED_DIR


def open_transport(url: str, *, kafka_config: Optional[Mapping[str, Any]] = None,
                   config_file: Optional[str] = None) -> Transport:
    """``embedded://DIR`` → the embedded log in DIR; ``kafka://h1:9092,h2:9092`` → Kafka, with
    client settings from ``kafka_config`` (the app's), then ``config_file`` (TOML; default
    ``$STREAMKIT_CONFIG``), then ``STREAMKIT_KAFKA_*`` environment variables."""
    if url.startswith("embedded://"):
        from .embedded.transport import EmbeddedTransport

        return EmbeddedTransport(embedded_directory(url))
    if url.startswith("kafka://"):
        from .kafka.config import KafkaClientConfig
        from .kafka.transport import KafkaTransport

        config = KafkaClientConfig.from_sources(url, app_settings=kafka_config,
                                                config_file=config_file or os.environ.get("STREAMKIT_CONFIG"),
                                                environ=os.environ)
        return KafkaTransport(config)
    raise ConfigError(f"broker URL {url!r} is not understood: use embedded:///path/to/dir or kafka://host:port")


def configured_broker() -> Optional[str]:
    """``$STREAMKIT_BROKER``, else ``broker`` in the config file named by ``$STREAMKIT_CONFIG``."""
    if os.environ.get("STREAMKIT_BROKER"):
        return os.environ["STREAMKIT_BROKER"]
    path = os.environ.get("STREAMKIT_CONFIG")
    if path:
        from .kafka.config import read_config_file

        return read_config_file(path).get("broker")
    return None
