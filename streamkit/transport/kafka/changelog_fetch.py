"""Reading changelog partitions for restore: Fetch requests on the consumer's aiokafka
client, decoded straight into the last value per key.

aiokafka's ``getmany`` makes a ``ConsumerRecord`` for every record (then the runtime a
tuple): about 2 µs a record, most of a restore's time. A restore needs neither: only
each key's last value in a run of records, and where reading goes on. Here each Fetch
response's record batches are checked (CRC), filtered as ``read_committed`` requires
(batches of aborted transactions and control batches skipped, as Kafka's own consumer
decides it from the response's aborted transactions) and folded into one dict. The next
Fetch request goes out before a response is handed over, so the broker reads while the
caller writes the store; it is held back once a response shows the partition's readable
end (the last stable offset when reading committed) was reached.
"""
from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any, Dict, List, Optional, Tuple

import aiokafka.errors as aiokafka_errors
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords

from ...errors import StreamkitError
from ..base import ChangelogChunk, TopicPartition

log = logging.getLogger(__name__)

PARTITION_FETCH_BYTES = 4 * 1024 * 1024
"""Bytes a restore fetch asks for per partition (Kafka's consumer default is 1 MiB): fewer
round trips; a response is decoded into one dict, so this bounds its size too."""
FETCH_MAX_BYTES = 50 * 1024 * 1024
"""Bytes a restore fetch asks for in all (Kafka's ``fetch.max.bytes`` default)."""
RETRY_BACKOFF = 0.1  # s after a retriable error before the partition is fetched again
READ_COMMITTED, READ_UNCOMMITTED = 1, 0
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_ABORT_MARKER = 0
_REFRESH_METADATA = (aiokafka_errors.NotLeaderForPartitionError, aiokafka_errors.UnknownTopicOrPartitionError,
                     aiokafka_errors.LeaderNotAvailableError, aiokafka_errors.KafkaStorageError,
                     aiokafka_errors.ReplicaNotAvailableError)


class OutOfRange(Exception):
    """The fetch offset of a partition is outside its log (raised to the consumer, which
    moves the position as for any fetch)."""

    def __init__(self, tp: TopicPartition, offset: int) -> None:
        super().__init__(f"{tp.topic}[{tp.partition}] offset {offset} is out of range")
        self.tp, self.offset = tp, offset


class ChangelogFetcher:
    """Fetches partitions at positions the caller keeps, one request per partition leader
    in flight ahead of the caller (see the module's docstring)."""

    def __init__(self, kafka: AIOKafkaConsumer, read_committed: bool) -> None:
        self._kafka = kafka
        self._isolation = READ_COMMITTED if read_committed else READ_UNCOMMITTED
        self._ahead: Dict[TopicPartition, Tuple[int, "asyncio.Future[Any]"]] = {}
        """Per partition: the offset a request in flight fetches from, and its response."""

    async def fetch(self, positions: Dict[TopicPartition, int], max_wait: float,
                    ) -> Tuple[List[ChangelogChunk], Dict[TopicPartition, int]]:
        """Chunks of the partitions in ``positions`` from there, waiting up to ``max_wait`` s
        for some, and each partition's new position (past skipped batches too)."""
        self.forget([tp for tp in self._ahead if tp not in positions])
        chunks: List[ChangelogChunk] = []
        moved: Dict[TopicPartition, int] = {}
        waits = {tp: self._request(tp, offset, max_wait) for tp, offset in positions.items()}
        for tp, response in waits.items():
            try:
                result = await response
            except asyncio.CancelledError:
                self.forget(list(waits))
                raise
            finally:
                self._ahead.pop(tp, None)
            if result is None:
                continue
            chunk, position, readable_end = _decode(tp, positions[tp], result, self._isolation)
            moved[tp] = position
            if position < readable_end:  # more is there already: have the broker read it meanwhile
                self._ahead[tp] = (position, asyncio.ensure_future(self._send(tp, position, max_wait)))
            if chunk is not None:
                chunks.append(chunk)
        return chunks, moved

    def _request(self, tp: TopicPartition, offset: int, max_wait: float) -> "asyncio.Future[Any]":
        ahead = self._ahead.get(tp)
        if ahead is not None and ahead[0] == offset:
            return ahead[1]
        if ahead is not None:
            _drop(ahead[1])
        future = asyncio.ensure_future(self._send(tp, offset, max_wait))
        self._ahead[tp] = (offset, future)
        return future

    async def _send(self, tp: TopicPartition, offset: int, max_wait: float) -> Optional[Tuple[int, list]]:
        """The response's (version, partition entry), or None after a retriable error."""
        client = self._kafka._client
        ktp = KafkaTopicPartition(tp.topic, tp.partition)
        leader = client.cluster.leader_for_partition(ktp)
        if leader is None or leader < 0:
            try:
                await asyncio.wait_for(client.add_topic(tp.topic), max(max_wait, RETRY_BACKOFF))
                await asyncio.wait_for(client.force_metadata_update(), max(max_wait, RETRY_BACKOFF))
            except asyncio.TimeoutError:
                pass  # asked again with the next fetch
            leader = client.cluster.leader_for_partition(ktp)
            if leader is None or leader < 0:
                await asyncio.sleep(RETRY_BACKOFF)
                return None
        request = FetchRequest(int(max_wait * 1000), 1, FETCH_MAX_BYTES, self._isolation,
                               [(tp.topic, [(tp.partition, offset, PARTITION_FETCH_BYTES)])])
        try:
            response = await client.send(leader, request)
        except aiokafka_errors.KafkaError as exc:
            if not exc.retriable and not isinstance(exc, aiokafka_errors.KafkaConnectionError):
                raise StreamkitError(f"reading {tp.topic}[{tp.partition}] from offset {offset} failed: "
                                     f"{type(exc).__name__}: {exc}") from exc
            log.info("reading %s[%d] from broker %s failed (%s); trying again", tp.topic, tp.partition, leader,
                     type(exc).__name__)
            client.force_metadata_update()
            await asyncio.sleep(RETRY_BACKOFF)
            return None
        for _topic, partitions in response.topics:
            for entry in partitions:
                if entry[0] != tp.partition:
                    continue
                error = aiokafka_errors.for_code(entry[1])
                if error is aiokafka_errors.NoError:
                    return response.API_VERSION, entry
                if error is aiokafka_errors.OffsetOutOfRangeError:
                    raise OutOfRange(tp, offset)
                if issubclass(error, _REFRESH_METADATA) or error.retriable:
                    log.info("reading %s[%d] at offset %d: %s; trying again", tp.topic, tp.partition, offset,
                             error.__name__)
                    client.force_metadata_update()
                    await asyncio.sleep(RETRY_BACKOFF)
                    return None
                raise StreamkitError(f"reading {tp.topic}[{tp.partition}] from offset {offset} failed: "
                                     f"{error.__name__}") from error()
        return None

    def forget(self, partitions: List[TopicPartition]) -> None:
        """Drop the requests in flight for ``partitions`` (unassigned, or moved elsewhere)."""
        for tp in partitions:
            ahead = self._ahead.pop(tp, None)
            if ahead is not None:
                _drop(ahead[1])

    def close(self) -> None:
        self.forget(list(self._ahead))


def _drop(future: "asyncio.Future[Any]") -> None:
    """Cancel a request in flight; one that failed already was of no use either (its error
    is taken, so asyncio does not report it as never retrieved)."""
    if future.done():
        if not future.cancelled():
            future.exception()
    else:
        future.cancel()


def _decode(tp: TopicPartition, offset: int, result: Tuple[int, list], isolation: int,
            ) -> Tuple[Optional[ChangelogChunk], int, int]:
    """One partition's part of a Fetch response as (chunk or None, next position, readable end)."""
    version, entry = result
    high_watermark, raw = entry[2], entry[-1]
    if version >= 4:
        readable_end = entry[3] if isolation == READ_COMMITTED and entry[3] >= 0 else high_watermark
        aborted = sorted((entry[5] if version >= 5 else entry[4]) or (), key=lambda pair: pair[1])
    else:
        readable_end, aborted = high_watermark, []
    records = MemoryRecords(raw) if raw else None
    latest: Dict[bytes, Optional[bytes]] = {}
    count, first, last, position = 0, -1, -1, offset
    aborting: set = set()
    pending = list(aborted)
    while records is not None and records.has_next():
        batch = records.next_batch()
        if not batch.validate_crc():
            raise StreamkitError(f"reading {tp.topic}[{tp.partition}]: the record batch at offset "
                                 f"{batch.base_offset} is corrupt (CRC mismatch); nothing of it was applied")
        next_offset = batch.next_offset
        if isolation == READ_COMMITTED and batch.producer_id is not None and batch.producer_id >= 0:
            while pending and pending[0][1] <= next_offset - 1:
                aborting.add(pending.pop(0)[0])
            if batch.is_control_batch:
                marker = next(iter(batch), None)
                if marker is not None and marker.key is not None and len(marker.key) >= _CONTROL_KEY.size \
                        and _CONTROL_KEY.unpack_from(marker.key)[1] == _ABORT_MARKER:
                    aborting.discard(batch.producer_id)
            elif batch.is_transactional and batch.producer_id in aborting:
                position = max(position, next_offset)
                continue  # an aborted transaction's records
        if batch.is_control_batch:
            position = max(position, next_offset)
            continue
        if batch.base_offset >= offset:
            for record in batch:
                latest[record.key] = record.value
                count += 1
        else:  # the batch began before the position (the broker returns whole batches)
            for record in batch:
                if record.offset >= offset:
                    latest[record.key] = record.value
                    count += 1
        if count and first < 0:
            first = max(batch.base_offset, offset)
        last = next_offset - 1
        position = max(position, next_offset)
    if position == offset and raw and not count:
        raise StreamkitError(f"reading {tp.topic}[{tp.partition}] at offset {offset}: the broker returned "
                             f"{len(raw)} bytes holding no whole record batch (a batch larger than "
                             f"{PARTITION_FETCH_BYTES} bytes from a broker older than Kafka 0.10.1?)")
    chunk = ChangelogChunk(tp.topic, tp.partition, latest, count, first, last) if count else None
    return chunk, position, readable_end
