"""aiokafka clients that never create topics by asking for their metadata.

A broker with ``auto.create.topics.enable`` (Kafka's default, and Tansu) creates a
topic that a Metadata request names, unless the request says
``allow_auto_topic_creation=False``. aiokafka 0.14 always says True and has no
setting for it (the Java clients' ``allow.auto.create.topics``), so a consumer of a
deleted source topic would re-create it with the broker's default partition count,
and a producer would write to it. Kafka Streams turns auto-creation off in all its
clients; streamkit does the same: :func:`no_topic_auto_creation` makes every
connection of one client instance (nothing global) send its Metadata requests with
auto-creation off.
"""
from __future__ import annotations

import logging
from typing import Any, TypeVar, Union

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest

log = logging.getLogger(__name__)

Client = TypeVar("Client", bound=Union[AIOKafkaConsumer, AIOKafkaProducer, AIOKafkaAdminClient])


def no_topic_auto_creation(owner: Client) -> Client:
    """``owner`` (an aiokafka consumer, producer or admin client, not started yet), whose
    metadata requests never make the broker create a topic. Returns ``owner``."""
    client = getattr(owner, "_client", None) or getattr(owner, "client", None)
    if not isinstance(client, AIOKafkaClient) or not hasattr(client, "_get_conn") \
            or not hasattr(MetadataRequest(), "_allow_auto_topic_creation"):
        log.warning("cannot turn topic auto-creation off in %s (unexpected aiokafka internals): "
                    "a broker with auto.create.topics.enable may create topics it is asked about",
                    type(owner).__name__)
        return owner
    open_connection = client._get_conn

    async def connection_without_auto_creation(*args: Any, **kwargs: Any) -> Any:
        conn = await open_connection(*args, **kwargs)
        if conn is not None and not getattr(conn, "streamkit_no_auto_create", False):
            send = conn.send

            def send_without_auto_creation(request: Any, *more: Any, **options: Any) -> Any:
                if isinstance(request, MetadataRequest):
                    request._allow_auto_topic_creation = False
                return send(request, *more, **options)
            conn.send = send_without_auto_creation
            conn.streamkit_no_auto_create = True
        return conn

    client._get_conn = connection_without_auto_creation
    client.streamkit_no_auto_create = True
    return owner
