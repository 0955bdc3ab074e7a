"""Test topics that keep their records (``retention.ms=-1``), on any test broker.

Many Kafka tests write event times from 2023 (``1_700_000_000_000``) or 1970 (small
integers) as record timestamps, and apps stamp their outputs with those event times.
Under a broker's default ``retention.ms`` (Apache Kafka: 7 days) a retention check that
falls inside the test deletes them, and output topics read back empty. So every topic a
test creates, or lets an app's worker create, is created here first, with
:data:`~tests.kafka.broker.KEEP_RECORDS` added to its config:

* :func:`create_test_topic`: one topic the test itself uses;
* :func:`create_app_topics`: every topic an app's worker would create at start, through
  streamkit's own ``prepare_topics`` (same partition counts, the DLQ when a handler is
  ``dead_letter``, internal topics with their own configs), with ``retention.ms=-1`` added
  to each topic whose config neither sets ``retention.ms`` nor compacts it. The worker then
  finds them all and creates none with the broker's defaults.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional

import streamkit as sk
from streamkit.runtime.worker.topics import prepare_topics
from streamkit.transport.kafka.config import KafkaClientConfig
from streamkit.transport.kafka.transport import KafkaTransport

from .broker import KEEP_RECORDS, KafkaTestBroker


def kept(config: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """``config`` plus ``retention.ms=-1``, unless it sets a retention or compacts."""
    result = dict(config or {})
    if "retention.ms" not in result and "compact" not in result.get("cleanup.policy", "delete"):
        result.update(KEEP_RECORDS)
    return result


@contextlib.contextmanager
def kafka_transport(broker: KafkaTestBroker, **settings: Any) -> Iterator[KafkaTransport]:
    """streamkit's Kafka transport for ``broker`` (its TLS settings included; the process
    environment's ``STREAMKIT_KAFKA_*`` variables are ignored, except ``STREAMKIT_KAFKA_CLIENT``,
    which runs these tests with the librdkafka client)."""
    client = os.environ.get("STREAMKIT_KAFKA_CLIENT", "").strip()
    if client:
        settings = {"kafka_client": client, **settings}
    settings = {**broker.streamkit_settings(), **settings}
    config = KafkaClientConfig.from_sources(broker.url, app_settings=settings, environ={})
    transport = KafkaTransport(config)
    try:
        yield transport
    finally:
        transport.close()


def create_test_topic(admin: Any, name: str, partitions: int,
                      config: Optional[Mapping[str, str]] = None, *, exist_ok: bool = False) -> Any:
    """Create ``name`` with streamkit's admin (``transport.admin``), keeping its records."""
    return admin.create_topic(name, partitions, kept(config), exist_ok=exist_ok)


class _KeepingAdmin:
    """streamkit's Admin, whose created topics keep their records."""

    def __init__(self, admin: Any) -> None:
        self._admin = admin

    def __getattr__(self, name: str) -> Any:
        return getattr(self._admin, name)

    def create_topic(self, name: str, partitions: int, config: Optional[Mapping[str, str]] = None,
                     *, exist_ok: bool = False) -> Any:
        return create_test_topic(self._admin, name, partitions, config, exist_ok=exist_ok)


def create_app_topics(broker: KafkaTestBroker, app: sk.App) -> Dict[str, int]:
    """Create every topic ``app``'s worker would create, as it would, but keeping records;
    returns each topic's partition count. Existing topics are left as they are."""
    with_dlq = "dead_letter" in (app.deserialization_error_handler, app.processing_error_handler)
    with kafka_transport(broker) as transport:
        return prepare_topics(app.build(), _KeepingAdmin(transport.admin), with_dlq=with_dlq)


def load_app(path: Path, attribute: str = "app") -> sk.App:
    """The ``sk.App`` an app module file defines (imported afresh, not registered)."""
    spec = importlib.util.spec_from_file_location(f"{path.stem}_{uuid.uuid4().hex[:8]}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, attribute)
