"""A task: one partition of one sub-topology, with its stores, stream time and timers."""
from __future__ import annotations

import logging
import math
from datetime import datetime
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from ...core.names import task_id
from ...errors import UserFunctionError
from ...processor import Punctuation
from ...sinks.base import SinkTask
from ...sinks.collecting import CollectingSinkWriter
from ...state.task_stores import TaskStores
from ...topology import Topology
from ...topology.model import SubTopology
from ...topology.nodes import ExternalSinkNode, SourceNode, SuppressNode, WindowAggregationNode
from ...core.records import RawRecord, TopicPartition
from ..context.collector import RecordCollector
from ..operators.compiler import compile_sub_topology
from ..context.task_context import TaskContext
from .error_policy import ErrorPolicy
from ..context.task_metrics import TaskMetrics

log = logging.getLogger(__name__)

SourceLoop = Callable[[Sequence[RawRecord]], None]

MAX_TIMESTAMP = 2 ** 63 - 1
"""The largest record timestamp (ms): Kafka stores it as a signed 64-bit number."""


class Task:
    """Processes batches of raw records of its input partitions.

    For each record: deserialize key and value, extract the timestamp, advance
    stream time, run the compiled chain, fire due stream-time punctuations.
    Failures go to the :class:`ErrorPolicy`. ``positions`` holds, per input
    partition, the next offset to commit.
    """

    def __init__(self, topology: Topology, sub: SubTopology, partition: int, *,
                 stores: TaskStores, collector: RecordCollector,
                 partitions: Mapping[str, int], wall_clock: Callable[[], int], caching: bool = False,
                 deserialization_error_handler: str = "fail", processing_error_handler: str = "fail",
                 close_idle_windows_after_ms: Optional[int] = None,
                 global_stores: Optional[Mapping[str, Any]] = None) -> None:
        self.id = task_id(sub.id, partition)
        self.sub_topology = sub
        self.partition = partition
        self.metrics = TaskMetrics()
        self.stores = stores
        """The task's stores as one unit (caches, changelog batches, persisting, closing);
        each store by name is ``stores.by_name[name]``, as operators see it in the context."""
        self.collector = collector
        self.context = TaskContext(app_id=topology.app_id, task_id=self.id, partition=partition,
                                   stores=stores.by_name, collector=collector, partitions=partitions,
                                   wall_clock=wall_clock, metrics=self.metrics, caching=caching,
                                   global_stores=global_stores)
        dlq = f"{topology.app_id}-dlq"
        self.errors = ErrorPolicy(deserialization=deserialization_error_handler,
                                  processing=processing_error_handler, dlq_topic=dlq,
                                  dlq_partitions=partitions.get(dlq, 1), collector=collector,
                                  metrics=self.metrics, muted=lambda: self.context.muted)
        self.context.drop_null_key = lambda node: self.errors.null_key_dropped(
            self.context.topic, partition, self.context.record, node)
        self.positions: Dict[TopicPartition, int] = {}
        self._forwarding_since_persist = False
        """Records processed (not muted) since the stores last persisted: their writes are
        still to be forwarded and logged."""
        self.rebuild_until: Dict[str, int] = {}
        """Per input topic: offsets below this were processed before; re-reading them
        rebuilds state with every sink muted (see :meth:`rebuild_from_input`)."""
        self._rebuilt_to: Dict[TopicPartition, int] = {}
        """Per input partition still being rebuilt: the offset its replay into the stores
        reached. ``positions`` holds the offset to commit there instead, never below the
        old commit; the stores record what they reflect (see :meth:`persist`)."""
        for store in self.stores.by_name.values():
            if hasattr(store, "stream_time_source"):  # window and session stores
                store.stream_time_source = self._current_stream_time
        self.idle_close_ms = _idle_close_ms(topology, sub, close_idle_windows_after_ms)
        """Advance stream time by the wall clock after this long without input (None: never)."""
        self._last_input = self._idle_mark = wall_clock()
        self._stream_time_recovered = False
        self.sinks = self._open_sinks(topology, sub, partitions)
        """External sink writers by node name; they deliver at :meth:`commit_sinks`."""
        self.context.sink_writers = self.sinks
        entries = compile_sub_topology(topology, sub, self.context)
        self._loops: Dict[str, SourceLoop] = {}
        for topic, node in topology.source_nodes(sub).items():
            if partition < partitions[topic]:
                self._loops[topic] = self._source_loop(node, entries[node.name])

    def _open_sinks(self, topology: Topology, sub: SubTopology, partitions: Mapping[str, int]) -> Dict[str, Any]:
        inputs = tuple(TopicPartition(topic, self.partition) for topic in sorted(topology.source_nodes(sub))
                       if self.partition < partitions[topic])
        writers: Dict[str, Any] = {}
        try:
            for name in sub.node_names:
                node = topology.nodes[name]
                if isinstance(node, ExternalSinkNode):
                    if self.delivers_to(node.sink):
                        writer = writers[name] = node.sink.open(SinkTask(topology.app_id, self.id, name, inputs))
                        writer.start()
                    else:
                        writers[name] = CollectingSinkWriter()
        except BaseException:
            for writer in writers.values():
                writer.discard()
                writer.close()
            self.stores.close()
            raise
        return writers

    def delivers_to(self, sink: Any) -> bool:
        """Whether this task delivers to ``sink`` (else its records are collected in a
        :class:`~streamkit.sinks.collecting.CollectingSinkWriter`): a worker's task always does."""
        return True

    def commit_sinks(self) -> None:
        """Deliver what the task wrote to external sinks (blocking I/O: the worker runs it
        in a thread), before the task's offsets are committed."""
        for writer in self.sinks.values():
            writer.commit(self.positions)

    def close_sinks(self, *, dirty: bool) -> None:
        """Close the sink writers; dirty: drop what they hold undelivered."""
        for name, writer in self.sinks.items():
            if dirty:
                writer.discard()
            try:
                writer.close()
            except Exception as exc:  # noqa: BLE001 - closing must not stop the other writers
                log.warning("task %s: closing sink '%s' failed: %s", self.id, name, exc)

    @property
    def input_partitions(self) -> list:
        return [TopicPartition(topic, self.partition) for topic in self._loops]

    @property
    def stream_time(self) -> int:
        return self.context.stream_time

    def _current_stream_time(self) -> int:
        return self.context.stream_time

    def process(self, topic: str, records: Sequence[RawRecord]) -> None:
        """Process a batch of records of ``topic`` (this task's partition), in offset order."""
        if not records:
            return
        if not self._stream_time_recovered:
            self._recover_stream_time()
        if self.idle_close_ms is not None:
            self._last_input = self._idle_mark = self.context.wall_clock()
        position = records[-1][0] + 1
        if self.rebuild_until:
            # Offsets up to the old commit were processed before: never commit below it.
            position = max(position, self.rebuild_until.get(topic, 0))
            self._rebuild(topic, records)
        else:
            self._loops[topic](records)
            self._forwarding_since_persist = True
        self.positions[TopicPartition(topic, self.partition)] = position

    def persist(self, changelog_ends: Mapping[TopicPartition, int]) -> None:
        """Step 5 of a commit: the stores' buffered writes go to their persistent stores,
        stores without a changelog with the input positions they reflect: those just
        committed, or where a rebuild under way has replayed to."""
        self.stores.persist(changelog_ends, self.store_positions)
        self._forwarding_since_persist = False

    @property
    def store_positions(self) -> Dict[TopicPartition, int]:
        """Per input partition, the next offset whose record the stores have not applied."""
        return {**self.positions, **self._rebuilt_to}

    def rebuild_from_input(self, processed: Dict[TopicPartition, int],
                           replay_from: Optional[Mapping[TopicPartition, int]] = None) -> None:
        """Re-read the task's input: records below the ``processed`` offsets only rebuild
        state (sinks, dead letters and late-record topics are muted), later ones run
        normally. From the start with every store emptied; or, with ``replay_from`` (the
        positions the task's stores, all without changelog, reflect), from there with the
        stores as they are."""
        if replay_from is None:
            self.stores.reset()
        else:
            self.positions.update(replay_from)
        self.rebuild_until = {tp.topic: offset for tp, offset in processed.items()
                              if offset > (replay_from or {}).get(tp, 0)}

    def _rebuild(self, topic: str, records: Sequence[RawRecord]) -> None:
        until = self.rebuild_until.get(topic, 0)
        split = 0
        while split < len(records) and records[split][0] < until:
            split += 1
        if split:
            self.context.muted = True
            try:
                self._loops[topic](records[:split])
            finally:
                self.context.muted = False
            self._rebuilt_to[TopicPartition(topic, self.partition)] = records[split - 1][0] + 1
            if not self._forwarding_since_persist:
                # The rebuilt state is what the committed offsets stand for: the next commit
                # must not forward it again (record caches) nor log it again.
                self.stores.adopt_pending(self.store_positions)
            else:
                log.warning("task %s: input past the committed offsets of one topic ran before the rebuild of "
                            "another ended; the next commit forwards the rebuilt aggregates again", self.id)
        if split < len(records):
            self.rebuild_until.pop(topic, None)
            self._rebuilt_to.pop(TopicPartition(topic, self.partition), None)
            self._loops[topic](records[split:])
            self._forwarding_since_persist = True

    def punctuate_wall_clock(self) -> int:
        """Fire due wall-clock punctuations and, for an idle task with
        ``close_idle_windows_after``, advance its stream time; return how many punctuations ran."""
        if self.idle_close_ms is not None:
            self._advance_idle_stream_time()
        if not self.context.punctuations.schedules:
            return 0
        return self.context.punctuations.fire(Punctuation.WALL_CLOCK, self.context.wall_clock())

    def _advance_idle_stream_time(self) -> None:
        """After ``idle_close_ms`` of wall-clock time without input, stream time moves on by the
        wall-clock time that passed, so windows close and suppressed results go out. The new
        stream time is written to the windowed stores' changelogs at the next commit."""
        if not self._stream_time_recovered:
            self._recover_stream_time()
        now = self.context.wall_clock()
        if now - self._last_input < self.idle_close_ms or now <= self._idle_mark:  # type: ignore[operator]
            return
        ctx = self.context
        if ctx.stream_time < 0:
            return  # no record yet: no window to close
        ctx.advance_idle(now - self._idle_mark)
        self._idle_mark = now
        self.metrics.idle_stream_time_advances += 1
        log.debug("task %s: input idle for %d ms: stream time advanced to %d", self.id, now - self._last_input,
                  ctx.stream_time)
        if ctx.stream_time >= ctx.punctuations.next_stream_time:
            ctx.punctuations.fire(Punctuation.STREAM_TIME, ctx.stream_time)

    def _recover_stream_time(self) -> None:
        """Resume at the stream time the restored windowed stores recorded. Called when the
        task first runs, after its restore: only from then on can its input be idle."""
        self._stream_time_recovered = True
        self._last_input = self._idle_mark = self.context.wall_clock()
        recorded = self.stores.stream_time()
        if recorded > self.context.stream_time:
            self.context.stream_time = recorded
        for clock in self.context.operator_times.values():
            clock.recover()

    def prepare_commit(self) -> None:
        """Step 1 of a commit: record stream time in the windowed stores, flush the caches."""
        ctx = self.context
        own = {store.name: clock.time for clock in ctx.operator_times.values() for store in clock.stores}
        self.stores.record_stream_time(ctx.stream_time, own)
        self.stores.flush()

    def _source_loop(self, node: SourceNode, chain: Callable[[Any, Any, int], None]) -> SourceLoop:
        ctx = self.context
        errors = self.errors
        metrics = self.metrics
        topic, partition = node.topic, self.partition
        key_deserialize = node.key_serde.deserialize
        value_deserialize = node.value_serde.deserialize
        key_fast = node.key_serde.fast_deserializer()
        value_fast = node.value_serde.fast_deserializer()
        extractor = _named_extractor(node)
        punctuations = ctx.punctuations
        fire = punctuations.fire
        STREAM_TIME = Punctuation.STREAM_TIME

        def run(records: Sequence[RawRecord]) -> None:
            ctx.topic = topic
            stream_time = ctx.stream_time
            for record in records:
                ctx.record = record
                raw_key, raw_value = record[2], record[3]
                try:
                    key = None if raw_key is None else key_fast(raw_key)
                    value = None if raw_value is None else value_fast(raw_value)
                except Exception:
                    try:  # the serde's own methods, for the proper error (or a stricter fast path)
                        key = key_deserialize(raw_key)
                        value = value_deserialize(raw_value)
                    except Exception as exc:
                        errors.deserialization_failed(topic, partition, record, exc)
                        continue
                try:
                    if extractor is None:
                        timestamp = record[1]
                    else:
                        timestamp = extractor(key, value)
                        if timestamp.__class__ is not int or not 0 <= timestamp <= MAX_TIMESTAMP:
                            timestamp = to_millis(timestamp, node.name)
                    if timestamp > stream_time:
                        stream_time = ctx.stream_time = timestamp
                    chain(key, value, timestamp)
                except Exception as exc:
                    errors.processing_failed(topic, partition, record, exc)
                # Outside the record's try: a failing punctuation is not this record's fault
                # and fails the task whatever the record handlers say.
                if stream_time >= punctuations.next_stream_time:
                    fire(STREAM_TIME, stream_time)
            metrics.records_processed += len(records)
            ctx.record = None
            ctx.last_origin = (topic, records[-1][0])
        return run


def _idle_close_ms(topology: Topology, sub: SubTopology, app_default_ms: Optional[int]) -> Optional[int]:
    """The shortest ``close_idle_windows_after`` of the task's windowed operations (the
    app's default for those that set none; a suppression follows its aggregation's);
    None if stream time should never advance by idleness."""
    values, suppresses = [], False
    for name in sub.node_names:
        node = topology.nodes[name]
        if isinstance(node, WindowAggregationNode):
            value = node.close_idle_after_ms or app_default_ms
            if value is not None:
                values.append(value)
        suppresses = suppresses or isinstance(node, SuppressNode)
    if not values and suppresses:
        return app_default_ms  # a time-limited suppression of a plain table: the app's setting
    return min(values, default=None)


def _named_extractor(node: SourceNode) -> Optional[Callable[[Any, Any], Any]]:
    extractor = node.timestamp_extractor
    if extractor is None:
        return None
    where = f"{node.name} (timestamp extractor)"

    def extract(key: Any, value: Any) -> Any:
        try:
            return extractor(key, value)
        except Exception as exc:
            raise UserFunctionError(where, exc) from exc
    return extract


def to_millis(timestamp: Any, node: str) -> int:
    """Check an extracted timestamp (epoch ms as an int, or an aware datetime) and return
    it as int ms; reject anything else, floats included (a Kafka record timestamp is a
    signed 64-bit integer: a float would be rounded or truncated silently), and values
    outside 0..2^63-1."""
    if isinstance(timestamp, datetime):
        if timestamp.tzinfo is None:
            raise UserFunctionError(node, ValueError(
                f"timestamp extractor returned a naive datetime {timestamp!r}: give it a timezone"))
        millis = int(timestamp.timestamp() * 1000)
    elif isinstance(timestamp, float):
        what = "a non-finite timestamp" if not math.isfinite(timestamp) else "a float timestamp"
        raise UserFunctionError(node, TypeError(
            f"timestamp extractor returned {what} {timestamp!r}: return int epoch milliseconds "
            "(e.g. int(seconds * 1000)) or an aware datetime"))
    elif isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise UserFunctionError(node, TypeError(
            f"timestamp extractor must return epoch milliseconds (int) or a datetime, got {timestamp!r}"))
    else:
        millis = timestamp
    if millis < 0:
        raise UserFunctionError(node, ValueError(f"timestamp extractor returned a negative timestamp {timestamp!r}"))
    if millis > MAX_TIMESTAMP:
        raise UserFunctionError(node, ValueError(
            f"timestamp extractor returned {timestamp!r}, beyond the largest record timestamp {MAX_TIMESTAMP}"))
    return millis
