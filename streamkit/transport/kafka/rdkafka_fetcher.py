"""Fetching assigned partitions with librdkafka (confluent-kafka), for asyncio.

Threads: librdkafka's own threads fetch in the background (the next fetch request goes
out as soon as a response is in, whatever the worker is doing) into its queue.
:meth:`RdKafkaFetcher.fetch` first takes what is queued with a non-blocking
``consume(n, 0)`` on the event loop; only when nothing is queued does it wait, on a helper
thread, with ``poll(max_wait)`` (which returns as soon as one record arrives; the rest
queued then comes with a second ``consume(n, 0)``). The loop is never blocked.

Assignment is manual (``incremental_assign`` with the positions the caller gives); the
consumer never joins a group. Partitions of a topic this client has not looked up yet are
handed to librdkafka only once it knows their leaders (a metadata look-up on the helper
thread, awaited by the next fetch): asked for the log start (``OFFSET_BEGINNING``) of a
partition whose leader it does not know yet, librdkafka retries only after a fixed 500 ms,
and the fetch then in flight for the other partitions (held up to ``fetch.wait.max.ms``)
delayed it about as long again: a worker's first records of such a partition came ~1 s
late. A wait left running by a cancelled fetch is picked up by the next one; records it
returns for partitions whose assignment changed since it started are dropped (they are
read again from the new position).

A position outside the log is reported by librdkafka (``auto.offset.reset=error``) and
handled as the aiokafka consumer does: below the log start, the range in between is
recorded as lost (:meth:`take_lost`) and reading goes on from the start; past the end, a
WARNING and reading starts over from the start.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ...errors import StreamkitError
from ..base import FetchedBatch, TopicPartition
from .config import KafkaClientConfig
from .rdkafka_common import HelperThread, confluent_kafka, describe_error, with_logger

log = logging.getLogger(__name__)

MAX_RECORDS_PER_FETCH = 10_000
WATERMARK_TIMEOUT_S = 10.0
FETCH_QUEUE_BACKOFF_MS = 10
"""How soon librdkafka fetches again once its queue holds ``queued.min.messages`` (100,000).
Its default, 1000 ms since librdkafka 2.3, left the fetcher idle for most of a second each
time the worker fell that far behind: a restore read 132k instead of 318k records/s, and a
worker's 200,000-event backlog stalled ~0.4 s with nothing queued."""
LOOKUP_TIMEOUT_S = 2.0
"""Longest a new topic's metadata look-up may take; past it, its partitions are handed to
librdkafka anyway (which then finds the leaders itself, retrying every 500 ms)."""
WARN_EVERY_S = 10.0
"""A recurring client error (broker unreachable) is logged at most this often."""

Lost = List[Tuple[TopicPartition, int, int]]


class RdKafkaFetcher:
    """Reads the partitions it is given from the positions it is given (the start of the log
    where none is given). Creates its librdkafka consumer on first use."""

    def __init__(self, config: KafkaClientConfig, group: str, read_committed: bool, what: str,
                 settings: Optional[Mapping[str, Any]] = None) -> None:
        self._ck = confluent_kafka()
        self._conf = with_logger({**config.librdkafka_consumer(group, read_committed),
                                  "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS, **(settings or {})}, "consumer")
        self.what = what
        self._kafka: Any = None
        self._thread: Optional[HelperThread] = None
        self._assigned: Set[TopicPartition] = set()
        self._handles: Dict[TopicPartition, Any] = {}
        """confluent_kafka.TopicPartition per assigned partition (for the watermark look-ups)."""
        self._unstarted: Dict[TopicPartition, Any] = {}
        """Assigned partitions (with their start) whose topic's metadata look-up is pending:
        not handed to librdkafka yet (see _start_unstarted)."""
        self._lookups: Dict[str, concurrent.futures.Future] = {}
        """Per topic, its metadata look-up on the helper thread (done once per client)."""
        self._positions: Dict[TopicPartition, int] = {}
        """The next offset to hand out, per partition, where known."""
        self._epoch = 0
        self._epochs: Dict[TopicPartition, int] = {}
        """Per partition, the epoch of its last assign/unassign (see _stale)."""
        self._waiting: Optional[concurrent.futures.Future] = None
        self._waiting_since = 0
        self._out_of_range: List[Tuple[TopicPartition, int]] = []
        self._lost: Lost = []
        self._warned: Dict[int, float] = {}
        self._closed = False

    # -- the client ---------------------------------------------------------------------
    def client(self) -> Any:
        """The librdkafka consumer (created on first use)."""
        if self._closed:
            raise StreamkitError(f"{self.what}: the consumer is closed")
        if self._kafka is None:
            self._kafka = self._ck.Consumer(self._conf)
            self._thread = HelperThread("rdkafka-fetch")
        return self._kafka

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a blocking librdkafka call on the helper thread (after any call in flight)."""
        self.client()
        assert self._thread is not None
        return await asyncio.wrap_future(self._thread.submit(lambda: fn(*args, **kwargs)))

    # -- assignment ----------------------------------------------------------------------
    def assign(self, partitions: Sequence[TopicPartition], positions: Mapping[TopicPartition, int]) -> None:
        """Read ``partitions`` from ``positions`` (the log start where absent); a partition
        assigned already restarts at its new position."""
        if not partitions:
            return
        kafka, ck = self.client(), self._ck
        again = [self._handles[tp] for tp in partitions if tp in self._assigned and tp not in self._unstarted]
        if again:
            kafka.incremental_unassign(again)
        handles = []
        new_topics: Set[str] = set()
        for tp in partitions:
            offset = positions.get(tp)
            self._epoch += 1
            self._epochs[tp] = self._epoch
            if offset is None:
                self._positions.pop(tp, None)
            else:
                self._positions[tp] = offset
            self._assigned.add(tp)
            self._handles[tp] = ck.TopicPartition(tp.topic, tp.partition)
            start = ck.TopicPartition(tp.topic, tp.partition, ck.OFFSET_BEGINNING if offset is None else offset)
            lookup = self._lookups.get(tp.topic)
            if lookup is not None and lookup.done():
                self._unstarted.pop(tp, None)
                handles.append(start)
            else:
                self._unstarted[tp] = start
                if lookup is None:
                    new_topics.add(tp.topic)
        if handles:
            kafka.incremental_assign(handles)
        if new_topics:
            assert self._thread is not None
            lookup = self._thread.submit(self._look_up, sorted(new_topics))
            for topic in new_topics:
                self._lookups[topic] = lookup

    def unassign(self, partitions: Sequence[TopicPartition]) -> None:
        gone = [tp for tp in partitions if tp in self._assigned]
        if not gone or self._kafka is None:
            return
        started = [self._handles[tp] for tp in gone if tp not in self._unstarted]
        if started:
            self._kafka.incremental_unassign(started)
        for tp in gone:
            self._unstarted.pop(tp, None)
            self._epoch += 1
            self._epochs[tp] = self._epoch
            self._assigned.discard(tp)
            self._handles.pop(tp, None)
            self._positions.pop(tp, None)

    @property
    def assigned(self) -> Set[TopicPartition]:
        return self._assigned

    # -- reading --------------------------------------------------------------------------
    async def fetch(self, max_wait: float) -> List[FetchedBatch]:
        """Records queued now, else the first to arrive within ``max_wait`` s (with whatever
        arrived with it), grouped per partition in offset order."""
        if self._unstarted:
            started = time.monotonic()
            await self._start_unstarted(max_wait)
            max_wait = max(0.0, max_wait - (time.monotonic() - started))
        if self._waiting is not None:  # left by a cancelled fetch: its records are ours
            since = self._waiting_since
            messages = await asyncio.wrap_future(self._waiting)
            self._waiting = None
            out = self._batches(messages, since)
        elif not self._assigned:
            return []
        else:
            messages = self.client().consume(MAX_RECORDS_PER_FETCH, 0)
            if not messages and max_wait > 0:
                assert self._thread is not None
                self._waiting_since = since = self._epoch
                self._waiting = self._thread.submit(self._wait, max_wait)
                messages = await asyncio.wrap_future(self._waiting)
                self._waiting = None
                out = self._batches(messages, since)
            else:
                out = self._batches(messages, None)
        if self._out_of_range:
            await self._recover()
        return out

    def _look_up(self, topics: List[str]) -> None:
        """On the helper thread: have librdkafka fetch the metadata (partition leaders) of
        ``topics``; a failure is left to librdkafka's own retries."""
        for topic in topics:
            try:
                self._kafka.list_topics(topic, timeout=LOOKUP_TIMEOUT_S)
            except self._ck.KafkaException as exc:
                log.debug("%s: looking up topic %s: %s (librdkafka finds its leaders itself)", self.what, topic, exc)

    async def _start_unstarted(self, max_wait: float) -> None:
        """Hand librdkafka the assigned partitions whose topic look-up is done, after waiting
        at most ``max_wait`` for the pending look-ups."""
        pending = {id(f): f for f in (self._lookups[tp.topic] for tp in self._unstarted) if not f.done()}
        if pending and max_wait > 0:
            await asyncio.wait([asyncio.wrap_future(f) for f in pending.values()], timeout=max_wait)
        ready = [tp for tp in self._unstarted if self._lookups[tp.topic].done()]
        if ready:
            self.client().incremental_assign([self._unstarted.pop(tp) for tp in ready])

    def _wait(self, max_wait: float) -> list:
        """On the helper thread: the first record within ``max_wait`` and all queued with it."""
        kafka = self._kafka
        first = kafka.poll(max_wait)
        if first is None:
            return []
        rest = kafka.consume(MAX_RECORDS_PER_FETCH - 1, 0)
        rest.insert(0, first)
        return rest

    def _batches(self, messages: list, since: Optional[int]) -> List[FetchedBatch]:
        """librdkafka messages → FetchedBatches of ``(offset, timestamp, key, value, headers)``;
        with ``since``, those of partitions (re)assigned after that epoch are dropped."""
        grouped: Dict[Tuple[str, int], list] = {}
        for m in messages:
            if m.error() is not None:
                self._on_error(m)
                continue
            where = (m.topic(), m.partition())
            records = grouped.get(where)
            if records is None:
                records = grouped[where] = []
            headers = m.headers()
            records.append((m.offset(), m.timestamp()[1], m.key(), m.value(), tuple(headers) if headers else None))
        out = []
        for (topic, partition), records in grouped.items():
            tp = TopicPartition(topic, partition)
            if tp not in self._assigned or (since is not None and self._epochs.get(tp, 0) > since):
                continue  # unassigned or moved since the wait began: read again from the new position
            self._positions[tp] = records[-1][0] + 1
            out.append(FetchedBatch(topic, partition, records))
        return out

    def _on_error(self, message: Any) -> None:
        error = message.error()
        code = error.code()
        if code == self._ck.KafkaError._AUTO_OFFSET_RESET:
            tp = TopicPartition(message.topic(), message.partition())
            if tp in self._assigned:
                self._out_of_range.append((tp, message.offset()))
            return
        if error.fatal():
            raise StreamkitError(f"{self.what} failed: {describe_error(error)}")
        now = time.monotonic()
        if now - self._warned.get(code, -WARN_EVERY_S) >= WARN_EVERY_S:
            self._warned[code] = now
            log.warning("%s: %s (librdkafka retries)", self.what, describe_error(error))

    async def _recover(self) -> None:
        """Go on from the log start of each partition whose position was outside the log."""
        pending, self._out_of_range = self._out_of_range, []
        for tp, offset in pending:
            if tp not in self._assigned:
                continue
            try:
                start, end = await self.call(self.client().get_watermark_offsets, self._handles[tp],
                                             timeout=WATERMARK_TIMEOUT_S, cached=False)
            except self._ck.KafkaException as exc:
                raise StreamkitError(f"{self.what}: offset {offset} of {tp.topic}[{tp.partition}] is out of "
                                     f"range and its log start could not be read: {exc}") from None
            if 0 <= offset < start:
                self._lost.append((tp, offset, start))
            else:
                log.warning("%s: offset %d of %s[%d] is outside the log (%d to %d): reading it from its start; "
                            "was the topic re-created?", self.what, offset, tp.topic, tp.partition, start, end)
            self.assign([tp], {tp: start})

    def take_lost(self) -> Lost:
        lost, self._lost = [(tp, first, end) for tp, first, end in self._lost if tp in self._assigned], []
        return lost

    # -- where reading stands ----------------------------------------------------------------
    def position(self, partition: TopicPartition) -> int:
        """The next offset a fetch of ``partition`` returns: after the last record handed out,
        or past transaction markers when librdkafka's own position is further."""
        mine = self._positions.get(partition)
        if partition in self._assigned and partition not in self._unstarted and self._waiting is None:
            (theirs,) = self._kafka.position([self._handles[partition]])
            if theirs.offset >= 0 and (mine is None or theirs.offset > mine):
                return theirs.offset
        return 0 if mine is None else mine

    def has_unread(self, partition: TopicPartition) -> Optional[bool]:
        """Whether the last fetch response's end (the last stable offset when reading
        committed, else the high watermark) is past what was handed out; True when not
        known yet (as the aiokafka consumer), None when not assigned."""
        handle = self._handles.get(partition)
        if handle is None:
            return None
        if partition in self._unstarted:
            return True
        _start, end = self._kafka.get_watermark_offsets(handle, cached=True)
        position = self._positions.get(partition)
        if end is None or end < 0 or position is None:
            return True
        return position < end

    # -- closing ------------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for the helper's call in flight (at most one fetch wait), then close."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._thread.shutdown()
        if self._kafka is not None:
            self._kafka.close()
        self._assigned.clear()
        self._handles.clear()
        self._unstarted.clear()

    async def aclose(self) -> None:
        if self._waiting is not None:
            try:
                await asyncio.wrap_future(self._waiting)
            except Exception:  # noqa: BLE001 - closing
                pass
            self._waiting = None
        self.close()
