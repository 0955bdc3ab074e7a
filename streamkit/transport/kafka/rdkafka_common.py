"""What the librdkafka (confluent-kafka) clients share: loading the library, its log, a
helper thread for the calls that block.

confluent-kafka is an optional extra (``librdkafka``). It is imported here on first use
only, never by ``import streamkit``.
"""
from __future__ import annotations

import concurrent.futures
import logging
from types import ModuleType
from typing import Any, Callable, TypeVar

from ...errors import ConfigError
from .config_settings import LIBRDKAFKA_EXTRA

log = logging.getLogger("streamkit.transport.kafka.librdkafka")

T = TypeVar("T")


def confluent_kafka() -> ModuleType:
    """The confluent_kafka module, or a ConfigError naming the extra that installs it."""
    try:
        import confluent_kafka as module
    except ImportError as exc:
        raise ConfigError(f"kafka_client 'librdkafka' needs the confluent-kafka package ({exc}): "
                          f"pip install 'streamkit[{LIBRDKAFKA_EXTRA}]', or use kafka_client 'aiokafka'") from None
    return module


class HelperThread:
    """One daemon thread that runs a client's blocking librdkafka calls (a fetch's wait,
    flush, commit) so the event loop never blocks; calls run one at a time, in order.
    librdkafka releases the GIL while it waits."""

    def __init__(self, name: str) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    def submit(self, fn: Callable[..., T], *args: Any) -> "concurrent.futures.Future[T]":
        return self._pool.submit(fn, *args)

    def shutdown(self) -> None:
        """Wait for the call running (if any), then stop the thread."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def with_logger(conf: dict, name: str) -> dict:
    """``conf`` with librdkafka's log routed to Python logging (else it goes to stderr)."""
    return {**conf, "logger": logging.getLogger(f"{log.name}.{name}")}


def describe_error(error: Any) -> str:
    """A KafkaError as ``NAME: reason``."""
    try:
        return f"{error.name()}: {error.str()}"
    except AttributeError:
        return str(error)
