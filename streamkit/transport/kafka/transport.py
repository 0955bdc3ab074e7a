"""``kafka://host:port[,host:port...]``: Apache Kafka (or a Kafka-compatible broker) via aiokafka."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from ..base import Consumer, GroupPlan, Membership, Producer, Transport
from .admin import KafkaAdmin
from .config import KafkaClientConfig
from .consumer import KafkaAssignedConsumer
from .membership import KafkaGroupMembership
from .producer import KafkaProducer


class KafkaTransport(Transport):
    """Admin on a private loop; consumers, producers and the group member on the caller's loop."""

    def __init__(self, config: KafkaClientConfig) -> None:
        self.config = config
        self.transaction_timeout_ms = config.transaction_timeout_ms
        self.url = "kafka://" + ",".join(config.bootstrap_servers)
        self.admin = KafkaAdmin(config)
        self.admin.connect()

    def consumer(self, group: str, *, read_committed: bool = True) -> Consumer:
        return KafkaAssignedConsumer(self.config, group, read_committed)

    def reader(self, *, read_committed: bool = True) -> Consumer:
        """A consumer outside any group (restore, standbys)."""
        return KafkaAssignedConsumer(self.config, None, read_committed)

    def producer(self, *, transactional_id: Optional[str] = None) -> Producer:
        return KafkaProducer(self.config, transactional_id)

    def membership(self, group: str, plan: GroupPlan) -> Membership:
        return KafkaGroupMembership(self.config, group, plan)

    def transactional_id_per_task(self) -> bool:
        return True

    def describe(self) -> Mapping[str, Any]:
        """The client settings, secrets masked."""
        return self.config.describe()

    def close(self) -> None:
        self.admin.close()
