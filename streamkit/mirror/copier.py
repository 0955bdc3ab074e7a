"""The mirror's copy loop: source records into the target, exactly once.

Every round is one transaction of the mirror's transactional producer on the target
(``streamkit-mirror.<name>``), holding:

1. the records fetched from the source (read_committed), with their key, value,
   timestamp and headers, each into the same-numbered partition of the same topic (or,
   with ``repartition``, the partition Kafka's partitioner picks for its key);
2. one offset sync per target partition written (see :mod:`.offset_syncs`; 1:1 only);
3. the source position after those records (see :mod:`.checkpoints`).

All three become visible together or not at all, on Apache Kafka and on the embedded
broker alike (both have transactions). A mirror killed at any point restarts from the
last committed position: its new producer fences the old one and aborts what it left
open, so no record is lost and none is copied twice. Readers of the target must read
committed (streamkit's consumers and workers do) not to see an aborted copy.

The mirror must be the only writer of the target topics: the offset map assumes a
transaction's records of a partition are contiguous.

Running continuously, the mirror looks at the source's topics every ``rescan_interval``:
a new topic that matches is created on the target and copied from its start; a topic
whose partition count grew gets the same partitions on the target (Kafka's
CreatePartitions, or the embedded equivalent) and its new partitions are copied from
their start, each into the same-numbered one. With ``repartition`` the target keeps
its own count: the new source partitions are read too, and their records placed by key
among the target's partitions as every other record.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..core.records import OutgoingRecord, TopicPartition
from ..transport.base import Consumer, FetchedBatch, Producer, Transport
from ..core.partitioner import partition_for_key
from .checkpoints import check_fits, checkpoint, read_positions
from .offset_syncs import encode_sync, runs_of
from .selection import (MirroredTopic, TopicSelection, grow_target_topic, mirror_group, offset_syncs_topic,
                        prepare_target_topics, select_topics, transactional_id)

log = logging.getLogger(__name__)

OFFSET_SYNCS_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1"}
"""The offset syncs are kept as long as the group offsets they translate may matter."""


@dataclass(frozen=True)
class MirrorOptions:
    """How a mirror copies (see :class:`Mirror`)."""

    name: str = "mirror"
    """Names the mirror's group, transactional id and offset-syncs topic on the target:
    a restart with the same name resumes; two mirrors running at once need two names."""
    selection: TopicSelection = TopicSelection()
    repartition: bool = False
    """Place records by key with Kafka's partitioner (records without a key keep their
    partition modulo the target's count) instead of keeping their partition. Consumer
    groups of a re-partitioned topic cannot be translated."""
    fetch_wait: float = 0.5
    """Seconds a fetch waits for records when there are none."""
    rescan_interval: float = 30.0
    """Seconds between two looks for new source topics and partitions (continuous mode)."""
    lag_interval: float = 5.0
    """Seconds between two readings of the source's end offsets (lag) and lag log lines."""


@dataclass
class MirrorProgress:
    """Where the mirror stands, per source partition (read by ``/metrics`` and ``--status``)."""

    positions: Dict[TopicPartition, int] = field(default_factory=dict)
    """The next source offset to copy: as committed on the target, or the partition's start
    on the source until a first commit (a partition mirrored from its start)."""
    ends: Dict[TopicPartition, int] = field(default_factory=dict)
    """The source's end offsets, last read."""
    copied: Dict[TopicPartition, int] = field(default_factory=dict)
    """Records copied by this process."""
    lost: Dict[TopicPartition, int] = field(default_factory=dict)
    """Records deleted on the source (retention) before the mirror could copy them."""
    partitions: Dict[str, Tuple[int, int]] = field(default_factory=dict)
    """Per mirrored topic, its partition count on the source and on the target."""
    translations: Dict[Tuple[str, str], int] = field(default_factory=dict)
    """Per (consumer group, outcome), how many times its offsets were translated: outcome
    ``moved`` (offsets committed on the target), ``unchanged`` or ``refused`` (live there)."""

    def lag(self) -> Dict[TopicPartition, int]:
        """Offsets between the position and the end (transaction markers included)."""
        return {tp: max(0, self.ends.get(tp, pos) - pos) for tp, pos in self.positions.items()}


class Mirror:
    """Copies the selected topics of ``source`` into ``target`` (see the module docstring)."""

    def __init__(self, source: Transport, target: Transport, options: MirrorOptions = MirrorOptions()) -> None:
        self.source = source
        self.target = target
        self.options = options
        self.topics: Dict[str, MirroredTopic] = {}
        self.skipped: Dict[str, str] = {}
        self.progress = MirrorProgress()
        self._committed: Dict[TopicPartition, int] = {}
        self._group = mirror_group(options.name)
        self._consumer: Optional[Consumer] = None
        self._producer: Optional[Producer] = None

    @property
    def embedded_target(self) -> bool:
        return self.target.url.startswith("embedded://")

    # -- topics -----------------------------------------------------------------------
    def prepare(self) -> Tuple[List[TopicPartition], bool]:
        """Find the source topics to mirror that are not mirrored yet, and the new partitions
        of those that are; create them on the target (and the offset-syncs topic). Return the
        source partitions to start copying, and whether target topics gained partitions
        (producers may need to learn of them). Runs in a thread while group translations
        read :attr:`topics`: that is replaced whole, never changed in place."""
        sources, skipped = select_topics(self.source.admin, self.options.selection)
        for name, reason in sorted(skipped.items()):
            if name not in self.skipped:
                log.info("not mirroring topic '%s': %s", name, reason)
        self.skipped = skipped
        new = [meta for meta in sources if meta.name not in self.topics]
        grown = [meta for meta in sources if meta.name in self.topics
                 and meta.partitions > self.topics[meta.name].source_partitions]
        for meta in new + grown:
            check_fits(meta.name, meta.partitions)
        if new and not self.options.repartition:
            self.target.admin.create_topic(offset_syncs_topic(self.options.name), 1, OFFSET_SYNCS_CONFIG,
                                           exist_ok=True)
        start: List[TopicPartition] = []
        target_grew = False
        topics = dict(self.topics)
        for topic in prepare_target_topics(new, self.target, embedded_target=self.embedded_target,
                                           repartition=self.options.repartition):
            topics[topic.name] = topic
            target_grew |= topic.target_grew
            start += [TopicPartition(topic.name, p) for p in range(topic.source_partitions)]
        for meta in grown:
            before = topics[meta.name]
            after = grow_target_topic(before, meta.partitions, self.target, repartition=self.options.repartition)
            topics[meta.name] = after
            target_grew |= after.target_grew
            start += [TopicPartition(meta.name, p) for p in range(before.source_partitions, meta.partitions)]
        self.topics = topics
        self.progress.partitions = {t.name: (t.source_partitions, t.target_partitions) for t in topics.values()}
        return start, target_grew

    def source_ends(self) -> Dict[TopicPartition, int]:
        """The end offset of every mirrored source partition."""
        return {TopicPartition(name, p): self.source.admin.partition_offsets(name, p).end
                for name, topic in self.topics.items() for p in range(topic.source_partitions)}

    # -- the loop ---------------------------------------------------------------------
    async def run(self, *, until_caught_up: bool, stop: Optional[asyncio.Event] = None) -> None:
        """Copy until ``stop`` is set or, with ``until_caught_up``, until every partition
        reached the end offset it had when the mirror started."""
        stop = stop or asyncio.Event()
        partitions, _target_grew = self.prepare()
        if not self.topics:
            log.warning("no source topic to mirror on %s (skipped: %s)", self.source.url,
                        ", ".join(sorted(self.skipped)) or "none")
        self._producer = self.target.producer(transactional_id=transactional_id(self.options.name))
        self._consumer = self.source.consumer(self._group, read_committed=True)
        try:
            # Beginning first takes the transactional id over: whatever a killed mirror left
            # open is aborted (or, past its commit point, completed) before its position is read.
            await self._producer.begin_transaction()
            await self._assign(partitions)
            goal = self.source_ends() if until_caught_up else {}
            self.progress.ends = dict(goal) or self.source_ends()
            next_rescan = next_lag = time.monotonic()
            while not stop.is_set():
                if until_caught_up and self._caught_up(goal):
                    break
                await self._round()
                now = time.monotonic()
                if not until_caught_up and now >= next_rescan:
                    next_rescan = now + self.options.rescan_interval
                    await self._rescan()
                if now >= next_lag:
                    next_lag = now + self.options.lag_interval
                    self.progress.ends = await asyncio.to_thread(self.source_ends)
                    self._log_lag()
            self.progress.ends = await asyncio.to_thread(self.source_ends)
            self._log_lag()
        finally:
            await self._close()

    async def _rescan(self) -> None:
        """Start copying the source's new topics and partitions (see the module docstring)."""
        partitions, target_grew = await asyncio.to_thread(self.prepare)
        if target_grew:
            await self._renew_producer()
        await self._assign(partitions)
        if partitions:
            self.progress.ends = await asyncio.to_thread(self.source_ends)

    async def _renew_producer(self) -> None:
        """A new producer (same transactional id), between two transactions: a client may
        keep the target's partition counts from before partitions were added."""
        assert self._producer is not None
        await self._producer.abort_transaction()  # begun, nothing sent yet
        await self._producer.aclose()
        self._producer = self.target.producer(transactional_id=transactional_id(self.options.name))
        await self._producer.begin_transaction()

    async def _assign(self, partitions: Sequence[TopicPartition]) -> None:
        if not partitions:
            return
        assert self._consumer is not None
        topics = sorted({tp.topic for tp in partitions})
        reader = self.target.consumer(self._group)
        try:
            committed = await read_positions(reader, topics)
        finally:
            await reader.aclose()
        self._consumer.assign(partitions, committed)
        for tp in partitions:
            if tp in committed:
                self.progress.positions[tp] = self._committed[tp] = committed[tp]
            else:
                self.progress.positions[tp] = self.source.admin.partition_offsets(tp.topic, tp.partition).start
        resumed = sum(1 for tp in partitions if tp in committed)
        log.info("mirroring %d topic(s), %d partition(s) from %s to %s (%d resumed from the position "
                 "committed on the target, the others from their start)%s", len(topics), len(partitions),
                 self.source.url, self.target.url, resumed,
                 "".join(f"; {t}: {self.topics[t].source_partitions} partition(s) on the source, "
                         f"{self.topics[t].target_partitions} on the target" for t in topics))

    def _caught_up(self, goal: Mapping[TopicPartition, int]) -> bool:
        return all(end == 0 or self.progress.positions.get(tp, -1) >= end for tp, end in goal.items())

    async def _round(self) -> None:
        """Fetch, copy and commit one transaction (nothing when nothing moved)."""
        consumer, producer = self._consumer, self._producer
        assert consumer is not None and producer is not None
        batches = await consumer.fetch(self.options.fetch_wait)
        for tp, first, end in consumer.take_lost():
            log.error("%s[%d]: records at offsets %d..%d were deleted on the source (retention) before the "
                      "mirror copied them: they are missing on the target", tp.topic, tp.partition, first, end - 1)
            self.progress.lost[tp] = self.progress.lost.get(tp, 0) + end - first
        if batches:
            await self._copy(batches)
        positions = {tp: consumer.position(tp) for tp in self._assigned()}
        moved = {tp for tp, offset in positions.items() if self._committed.get(tp) != offset}
        if not moved and not batches:
            return
        touched = {tp.topic for tp in moved} | {b.topic for b in batches}
        offsets, metadata = checkpoint({tp: o for tp, o in positions.items() if tp.topic in touched})
        await producer.commit_transaction(self._group, offsets, metadata)
        self._committed.update(positions)
        self.progress.positions.update(positions)
        for batch in batches:
            tp = TopicPartition(batch.topic, batch.partition)
            self.progress.copied[tp] = self.progress.copied.get(tp, 0) + len(batch.records)
        await producer.begin_transaction()

    def _assigned(self) -> List[TopicPartition]:
        return [TopicPartition(name, p) for name, topic in self.topics.items() for p in range(topic.source_partitions)]

    async def _copy(self, batches: Sequence[FetchedBatch]) -> None:
        """Send the records of ``batches`` and, copied 1:1, their offset syncs."""
        producer = self._producer
        assert producer is not None
        out: Dict[TopicPartition, List[OutgoingRecord]] = {}
        source_offsets: Dict[TopicPartition, List[int]] = {}
        for batch in batches:
            topic = self.topics[batch.topic]
            for offset, timestamp, key, value, headers in batch.records:
                partition = self._partition(topic, batch.partition, key)
                tp = TopicPartition(batch.topic, partition)
                out.setdefault(tp, []).append((key, value, timestamp, headers))
                source_offsets.setdefault(tp, []).append(offset)
        ends = await producer.send([(tp.topic, tp.partition, records) for tp, records in out.items()])
        if self.options.repartition:
            return
        ends.update(await producer.delivered())
        syncs = []
        for tp, records in out.items():
            key, value = encode_sync(tp, runs_of(source_offsets[tp], ends[tp] - len(records)))
            syncs.append((key, value, int(time.time() * 1000), None))
        await producer.send([(offset_syncs_topic(self.options.name), 0, syncs)])

    def _partition(self, topic: MirroredTopic, partition: int, key: Optional[bytes]) -> int:
        if not self.options.repartition:
            return partition
        if key is None:
            return partition % topic.target_partitions
        return partition_for_key(key, topic.target_partitions)

    def _log_lag(self) -> None:
        lag = self.progress.lag()
        behind = {tp: n for tp, n in lag.items() if n}
        log.info("mirror %s: %d record(s) copied, total lag %d over %d partition(s)%s", self.options.name,
                 sum(self.progress.copied.values()), sum(lag.values()), len(lag),
                 "".join(f"; {tp.topic}[{tp.partition}] {n}" for tp, n in sorted(behind.items())[:10]))

    async def _close(self) -> None:
        if self._producer is not None:
            try:
                await self._producer.abort_transaction()
            finally:
                await self._producer.aclose()
        if self._consumer is not None:
            await self._consumer.aclose()


def read_progress(source: Transport, target: Transport, name: str, topics: Sequence[Tuple[str, int]]
                  ) -> MirrorProgress:
    """The committed position and the lag of mirror ``name`` over ``topics`` ((name, partitions)),
    without copying (``--status``)."""
    async def positions() -> Dict[TopicPartition, int]:
        consumer = target.consumer(mirror_group(name))
        try:
            return await read_positions(consumer, [t for t, _ in topics])
        finally:
            await consumer.aclose()

    committed = asyncio.run(positions())
    progress = MirrorProgress()
    for topic, partitions in topics:
        for p in range(partitions):
            tp = TopicPartition(topic, p)
            progress.positions[tp] = committed.get(tp, source.admin.partition_offsets(topic, p).start)
            progress.ends[tp] = source.admin.partition_offsets(topic, p).end
    return progress
