"""``kafka://host:port[,host:port...]``: Apache Kafka (or a Kafka-compatible broker) via aiokafka,
or, with ``kafka_client = "librdkafka"``, producing and fetching via librdkafka (group
membership and admin stay on aiokafka; see rdkafka_group.py)."""
from __future__ import annotations

import logging
from typing import Any, Mapping, Optional

from ...errors import ConfigError
from ..base import Consumer, GroupPlan, Membership, Producer, Transport
from .admin import KafkaAdmin
from .config import KafkaClientConfig
from .consumer import KafkaAssignedConsumer
from .membership import KafkaGroupMembership
from .producer import KafkaProducer

log = logging.getLogger(__name__)


class KafkaTransport(Transport):
    """Admin on a private loop; consumers, producers and the group member on the caller's loop."""

    def __init__(self, config: KafkaClientConfig) -> None:
        self.config = config
        self.transaction_timeout_ms = config.transaction_timeout_ms
        self.url = "kafka://" + ",".join(config.bootstrap_servers)
        self.admin = KafkaAdmin(config)
        self.admin.connect()
        if self.librdkafka:
            log.info("Kafka client: librdkafka (producers and fetching); group membership, offset commits "
                     "of the app's group and admin on aiokafka")

    @property
    def librdkafka(self) -> bool:
        """Whether producers and consumers are librdkafka's (``kafka_client``)."""
        return self.config.kafka_client == "librdkafka"

    def consumer(self, group: str, *, read_committed: bool = True) -> Consumer:
        if self.librdkafka:
            from .rdkafka_consumer import RdKafkaAssignedConsumer

            return RdKafkaAssignedConsumer(self.config, group, read_committed)
        return KafkaAssignedConsumer(self.config, group, read_committed)

    def reader(self, *, read_committed: bool = True) -> Consumer:
        """A consumer outside any group (restore, standbys)."""
        if self.librdkafka:
            from .rdkafka_consumer import RdKafkaAssignedConsumer

            return RdKafkaAssignedConsumer(self.config, None, read_committed)
        return KafkaAssignedConsumer(self.config, None, read_committed)

    def producer(self, *, transactional_id: Optional[str] = None) -> Producer:
        if self.librdkafka:
            from .rdkafka_producer import RdKafkaProducer

            return RdKafkaProducer(self.config, transactional_id)
        return KafkaProducer(self.config, transactional_id)

    def membership(self, group: str, plan: GroupPlan) -> Membership:
        if self.librdkafka:
            from .rdkafka_group import RdKafkaGroupMembership

            return RdKafkaGroupMembership(self.config, group, plan)
        return KafkaGroupMembership(self.config, group, plan)

    def transactional_id_per_task(self) -> bool:
        """True (aiokafka has no KIP-447). Asked only by an exactly_once worker, as it starts:
        with librdkafka, whose transactional producer is not implemented here yet, that
        worker fails at once with a ConfigError saying so."""
        if self.librdkafka:
            from .rdkafka_producer import EXACTLY_ONCE_UNSUPPORTED

            raise ConfigError(EXACTLY_ONCE_UNSUPPORTED)
        return True

    def describe(self) -> Mapping[str, Any]:
        """The client settings, secrets masked."""
        return self.config.describe()

    def close(self) -> None:
        self.admin.close()
