"""aiokafka clients that never create topics by asking for their metadata.

A broker with ``auto.create.topics.enable`` (Kafka's default, and Tansu) creates a
topic that a Metadata request names, unless the request says
``allow_auto_topic_creation=False``. aiokafka 0.14 always says True and has no
setting for it (the Java clients' ``allow.auto.create.topics``), so a consumer of a
deleted source topic would re-create it with the broker's default partition count,
and a producer would write to it. Kafka Streams turns auto-creation off in all its
clients; streamkit does the same: :func:`no_topic_auto_creation` replaces the
metadata update of one client instance (nothing global) with aiokafka's own logic,
asking with auto-creation off.
"""
from __future__ import annotations

import asyncio
import logging
import random
import types
from typing import TypeVar, Union

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.cluster import ClusterMetadata
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest

log = logging.getLogger(__name__)

Client = TypeVar("Client", bound=Union[AIOKafkaConsumer, AIOKafkaProducer, AIOKafkaAdminClient])


def no_topic_auto_creation(owner: Client) -> Client:
    """``owner`` (an aiokafka consumer, producer or admin client, not started yet), whose
    metadata requests never make the broker create a topic. Returns ``owner``."""
    client = getattr(owner, "_client", None) or getattr(owner, "client", None)
    if not isinstance(client, AIOKafkaClient) or not hasattr(client, "_metadata_update"):
        log.warning("cannot turn topic auto-creation off in %s (unexpected aiokafka internals): "
                    "a broker with auto.create.topics.enable may create topics it is asked about",
                    type(owner).__name__)
        return owner
    client._metadata_update = types.MethodType(_metadata_update, client)
    client.streamkit_no_auto_create = True
    return owner


async def _metadata_update(self: AIOKafkaClient, cluster_metadata: ClusterMetadata, topics) -> bool:
    """aiokafka 0.14's ``AIOKafkaClient._metadata_update`` with auto-creation off."""
    assert isinstance(cluster_metadata, ClusterMetadata)
    metadata_request = MetadataRequest(list(topics) if topics else None, allow_auto_topic_creation=False)
    nodeids = [b.nodeId for b in self.cluster.brokers()]
    bootstrap_id = ("bootstrap", ConnectionGroup.DEFAULT)
    if bootstrap_id in self._conns:
        nodeids.append("bootstrap")
    random.shuffle(nodeids)
    for node_id in nodeids:
        conn = await self._get_conn(node_id)
        if conn is None:
            continue
        try:
            metadata = await conn.send(metadata_request)
        except (KafkaError, asyncio.TimeoutError) as err:
            log.warning("Unable to request metadata from node with id %s: %r", node_id, err)
            continue
        if not metadata.brokers:
            return False
        cluster_metadata.update_metadata(metadata)
        if bootstrap_id in self._conns and len(self.cluster.brokers()):
            self._conns.pop(bootstrap_id).close()
        break
    else:
        log.error("Unable to update metadata from %s", nodeids)
        cluster_metadata.failed_update(None)
        return False
    return True
