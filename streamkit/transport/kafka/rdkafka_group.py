"""Group membership on aiokafka, input fetching on librdkafka (``kafka_client = "librdkafka"``).

librdkafka cannot run streamkit's own group assignor (``streamkit-tasks``, see
assignor.py), so the group member stays the aiokafka consumer of
:class:`~.membership.KafkaGroupMembership`: it joins, heartbeats, receives whole tasks
and runs the revocation handshake exactly as without librdkafka, with the same rebalance
timeout, ``max_poll_interval_ms`` (which librdkafka would use too, as its
``max.poll.interval.ms``; its fetcher never joins a group, so none is set there). Its partitions stay
paused (it fetches nothing); the worker's inputs are read by a librdkafka consumer with
manual assignment (:class:`~.rdkafka_fetcher.RdKafkaFetcher`), positioned by the worker.

Who does what:

* fetch: librdkafka (its threads; the wait on a helper thread). Each ``fetch`` also lets
  the aiokafka member poll (a non-blocking ``getmany`` of its paused partitions, at most
  every KEEPALIVE_S): that keeps it inside ``max_poll_interval_ms`` and surfaces group
  errors, as when it fetched itself. Partitions the group no longer assigns to the
  member are dropped from librdkafka's assignment before each fetch.
* commit, committed offsets: the aiokafka member (:class:`~.membership.KafkaGroupConsumer`),
  so every commit carries the member's generation and a member the group moved on
  without is refused (TaskMigratedError / RebalanceInProgressError) as before. Offsets
  are the worker's processed positions, so nothing is committed past unprocessed records.
"""
from __future__ import annotations

import asyncio
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from aiokafka import AIOKafkaConsumer

from ..base import Consumer, FetchedBatch, GroupPlan, TopicPartition
from .config import KafkaClientConfig
from .membership import KafkaGroupConsumer, KafkaGroupMembership
from .rdkafka_fetcher import RdKafkaFetcher
from .records import Lost, fetch_batches

KEEPALIVE_S = 0.05
"""How often a fetch lets the aiokafka group member poll (its errors surface this late at most)."""


class RdKafkaGroupConsumer(Consumer):
    """The group member's input consumer when librdkafka fetches (see the module doc)."""

    def __init__(self, member: KafkaGroupConsumer, kafka: AIOKafkaConsumer, fetcher: RdKafkaFetcher,
                 group: str) -> None:
        self._member = member
        self._kafka = kafka
        self._fetcher = fetcher
        self._group = group
        self._next_keepalive = 0.0
        self._lost: Lost = []

    def assign(self, partitions: Sequence[TopicPartition], positions: Mapping[TopicPartition, int]) -> None:
        """Read ``partitions`` (given to this member by the group) from ``positions``."""
        self._fetcher.assign(partitions, positions)

    def unassign(self, partitions: Sequence[TopicPartition]) -> None:
        self._fetcher.unassign(partitions)

    async def fetch(self, max_wait: float) -> List[FetchedBatch]:
        now = time.monotonic()
        if now >= self._next_keepalive:
            self._next_keepalive = now + KEEPALIVE_S
            # Every partition of the member is paused: this returns at once, with nothing.
            await fetch_batches(self._kafka, 0, f"group {self._group}: polling the group member", self._lost)
        owned = self._kafka.assignment()
        revoked = [tp for tp in self._fetcher.assigned if tp not in owned]
        if revoked:
            self._fetcher.unassign(revoked)
        if not self._fetcher.assigned:
            # No task (yet), or all paused: wait as a fetch would, or the worker loop spins.
            await asyncio.sleep(max_wait)
            return []
        return await self._fetcher.fetch(max_wait)

    def position(self, partition: TopicPartition) -> int:
        return self._fetcher.position(partition)

    def has_unread(self, partition: TopicPartition) -> Optional[bool]:
        return self._fetcher.has_unread(partition)

    def take_lost(self) -> List[Tuple[TopicPartition, int, int]]:
        lost, self._lost = self._lost, []
        return lost + self._fetcher.take_lost()

    async def commit(self, offsets: Mapping[TopicPartition, int],
                     metadata: Optional[Mapping[TopicPartition, str]] = None) -> None:
        """Through the aiokafka group member: fenced by its generation."""
        await self._member.commit(offsets, metadata)

    async def committed(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        return await self._member.committed(partitions)

    async def committed_metadata(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, str]:
        return await self._member.committed_metadata(partitions)

    def close(self) -> None:
        self._fetcher.close()

    async def aclose(self) -> None:
        await self._fetcher.aclose()


class RdKafkaGroupMembership(KafkaGroupMembership):
    """:class:`KafkaGroupMembership` whose tasks' inputs are fetched by librdkafka."""

    def __init__(self, config: KafkaClientConfig, group: str, plan: GroupPlan) -> None:
        super().__init__(config, group, plan)
        # Its own group.id: the fetcher never joins or commits, and must not be mistaken for
        # a member of the app's group.
        fetcher = RdKafkaFetcher(config, f"{group}-librdkafka-fetcher", read_committed=True,
                                 what=f"group {group}: fetching")
        self._inputs = RdKafkaGroupConsumer(self._consumer, self._kafka, fetcher, group)

    def consumer(self) -> Consumer:
        return self._inputs

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            await self._inputs.aclose()
