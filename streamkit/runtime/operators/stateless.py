"""Compiled stateless operators: source, filter, map(s), flat maps, select_key, peek,
split/branch/merge, sinks (topics and external) and the Processor API node."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from ...errors import SerializationError, StreamkitError, TopologyError, UserFunctionError
from ...serdes import Json, String
from ...sinks.base import SinkRecord
from ...topology import Topology
from ...topology import nodes as ir
from ...core.partitioner import cached_key_hash, partition_for_key
from ...windowing.windowed_keys import WindowedSerde
from ..context.task_context import NodeProcessorContext
from ...core.names import parse_task_id
from ..ordering.repartition_stamps import merged_topics, with_writer_header, writer_rank
from .base import CompileEnv, Downstream, noop, user_error

_user_error = user_error
_KEY_CACHING_SERDES = (Json, String)
"""Key serdes whose bytes for a str key depend on the key alone (a sink may remember them)."""
_PLACED_KEYS = 100_000


def compile_source(node: ir.SourceNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    return downstream  # deserialization and timestamps are handled by the task's source loop


def compile_filter(node: ir.FilterNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    predicate, name, negate = node.predicate, node.name, node.negate

    def filter_(key: Any, value: Any, timestamp: int) -> None:
        try:
            keep = predicate(key, value)
        except Exception as exc:
            raise _user_error(name, exc) from exc
        if keep if not negate else not keep:
            downstream(key, value, timestamp)
    return filter_


def compile_map(node: ir.MapNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    mapper, name = node.mapper, node.name

    def map_(key: Any, value: Any, timestamp: int) -> None:
        try:
            new_key, new_value = mapper(key, value)
        except Exception as exc:
            raise _user_error(name, exc) from exc
        downstream(new_key, new_value, timestamp)
    return map_


def compile_map_values(node: ir.MapValuesNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    mapper, name = node.mapper, node.name

    def map_values(key: Any, value: Any, timestamp: int) -> None:
        try:
            new_value = mapper(value)
        except Exception as exc:
            raise _user_error(name, exc) from exc
        downstream(key, new_value, timestamp)
    return map_values


def compile_flat_map(node: ir.FlatMapNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    mapper, name = node.mapper, node.name

    def flat_map(key: Any, value: Any, timestamp: int) -> None:
        try:
            pairs = list(mapper(key, value) or ())
        except Exception as exc:
            raise _user_error(name, exc) from exc
        for pair in pairs:
            try:
                new_key, new_value = pair
            except (TypeError, ValueError) as exc:
                raise _user_error(name, TypeError(
                    f"flat_map must yield (key, value) pairs, got {pair!r}")) from exc
            downstream(new_key, new_value, timestamp)
    return flat_map


def compile_flat_map_values(node: ir.FlatMapValuesNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    mapper, name = node.mapper, node.name

    def flat_map_values(key: Any, value: Any, timestamp: int) -> None:
        try:
            values = list(mapper(value) or ())
        except Exception as exc:
            raise _user_error(name, exc) from exc
        for new_value in values:
            downstream(key, new_value, timestamp)
    return flat_map_values


def compile_select_key(node: ir.SelectKeyNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    selector, name = node.selector, node.name

    def select_key(key: Any, value: Any, timestamp: int) -> None:
        try:
            new_key = selector(key, value)
        except Exception as exc:
            raise _user_error(name, exc) from exc
        downstream(new_key, value, timestamp)
    return select_key


def compile_peek(node: ir.PeekNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    action, name = node.action, node.name

    def peek(key: Any, value: Any, timestamp: int) -> None:
        try:
            action(key, value)
        except Exception as exc:
            raise _user_error(name, exc) from exc
        downstream(key, value, timestamp)
    return peek


def compile_split(node: ir.SplitNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    name = node.name
    routes = []
    for index, (branch, predicate) in enumerate(node.branches):
        target = env.children.get(f"{name}-{branch}", noop)
        routes.append((predicate, target))

    def split(key: Any, value: Any, timestamp: int) -> None:
        for predicate, target in routes:
            try:
                matched = predicate is None or predicate(key, value)
            except Exception as exc:
                raise _user_error(name, exc) from exc
            if matched:
                target(key, value, timestamp)
                return
    return split


def compile_passthrough(node: ir.Node, downstream: Downstream, env: CompileEnv) -> Downstream:
    return downstream


def compile_sink(node: ir.SinkNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    task = env.task
    topic = node.topic
    partitions = task.partitions[topic]
    buffers = task.collector.buffers_for(topic, partitions)
    key_serialize = node.key_serde.serialize
    value_serialize = node.value_serde.serialize
    key_fast = node.key_serde.output_serializer()
    value_fast = node.value_serde.output_serializer()
    own_partition = task.partition % partitions
    name = node.name
    # A repartition topic's records also carry the writing task and its stream time (see
    # ..ordering.repartition_stamps): the reading task orders its writers by them.
    rank = writer_rank(*parse_task_id(task.task_id)) if topic in merged_topics(env.topology) else None
    spec = env.topology.topics.get(topic)
    windowed_partition = (_partition_by_base_key(node.key_serde, partitions, own_partition)
                          if isinstance(node.key_serde, WindowedSerde) and not (spec is not None and spec.internal)
                          else None)

    null_key_reader = _null_key_dropping_reader(env.topology, topic)
    # Aggregations write the same keys again and again: a str key's bytes and partition are
    # remembered, for the serdes whose bytes depend on the key alone.
    remember_keys = windowed_partition is None and type(node.key_serde) in _KEY_CACHING_SERDES
    placed: Dict[str, Tuple[bytes, int]] = {}

    def sink(key: Any, value: Any, timestamp: int) -> None:
        if task.muted:
            return
        known = placed.get(key) if key.__class__ is str else None
        if known is not None:
            key_bytes, partition = known
            try:
                value_bytes = None if value is None else value_fast(value)
            except Exception:
                try:  # the serde's own method, for the proper error (or a stricter fast path)
                    value_bytes = value_serialize(value)
                except Exception as exc:
                    raise _user_error(name, SerializationError(f"writing to topic '{topic}': {exc}")) from exc
        else:
            if key is None and null_key_reader is not None:
                # Dropped here, not by the aggregation reading the topic: the error handler
                # then names the input record, not its copy in the repartition topic.
                task.drop_null_key(null_key_reader)
                return
            try:
                key_bytes = None if key is None else key_fast(key)
                value_bytes = None if value is None else value_fast(value)
            except Exception:
                try:  # the serde's own methods, for the proper error (or a stricter fast path)
                    key_bytes = key_serialize(key)
                    value_bytes = value_serialize(value)
                except Exception as exc:
                    raise _user_error(name, SerializationError(f"writing to topic '{topic}': {exc}")) from exc
            if key_bytes is None:
                partition = own_partition
            elif windowed_partition is not None:
                partition = windowed_partition(key)
            else:
                cached = cached_key_hash(key_bytes)
                partition = partition_for_key(key_bytes, partitions) if cached is None else cached % partitions
                if remember_keys and key.__class__ is str:
                    if len(placed) >= _PLACED_KEYS:
                        placed.clear()
                    placed[key] = (key_bytes, partition)
        record = task.record
        headers = None if record is None else record[4]
        if rank is not None:
            headers = with_writer_header(headers, rank, task.stream_time)
        buffers[partition].append((key_bytes, value_bytes, timestamp, headers))
    return sink


def _null_key_dropping_reader(topology: Topology, topic: str) -> Optional[str]:
    """If ``topic`` is an internal topic read only by aggregations (a ``group_by``'s
    repartition), the first of them: it would drop a record with a None key."""
    spec = topology.topics.get(topic)
    if spec is None or not spec.internal:
        return None
    readers = [child for node in topology.nodes.values()
               if isinstance(node, ir.SourceNode) and node.topic == topic
               for child in topology.children[node.name]]
    if readers and all(isinstance(topology.nodes[name], (ir.AggregateNode, ir.WindowAggregationNode))
                       for name in readers):
        return readers[0]
    return None


_BASE_KEY_CACHE_LIMIT = 100_000


def _partition_by_base_key(serde: WindowedSerde, partitions: int, own_partition: int) -> Any:
    """Where a windowed result written to a topic goes: Kafka Streams' rule (its
    WindowedStreamPartitioner, used by ``to()`` whenever the key serde is windowed) hashes
    the record key alone, not the window, so every window of a key lands on one partition.
    A key serializing to None stays on the task's partition. (Repartition topics hash the
    whole key, as Kafka Streams does.)"""
    inner_serialize = serde.inner.serialize
    known: dict = {}  # str/int record key -> partition (other types: a JSON 1 and 1.0 differ)

    def partition_of(windowed: Any) -> int:
        key = windowed.key
        cacheable = type(key) is str or type(key) is int
        if cacheable:
            partition = known.get(key)
            if partition is not None:
                return partition
        data = inner_serialize(key)
        partition = own_partition if data is None else partition_for_key(data, partitions)
        if cacheable:
            if len(known) >= _BASE_KEY_CACHE_LIMIT:
                known.clear()
            known[key] = partition
        return partition
    return partition_of


def compile_external_sink(node: ir.ExternalSinkNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    task = env.task
    write = task.sink_writers[node.name].write
    partition = task.partition
    name = node.name

    def sink(key: Any, value: Any, timestamp: int) -> None:
        if task.muted:
            return
        record = task.record
        if record is not None:
            origin = SinkRecord(key, value, timestamp, task.topic, partition, record[0], record[4])
        elif task.last_origin is not None:  # a cache flush or punctuation: after the last input record
            origin = SinkRecord(key, value, timestamp, task.last_origin[0], partition, task.last_origin[1])
        else:
            origin = SinkRecord(key, value, timestamp, None, partition, None)
        try:
            write(origin)
        except Exception as exc:  # the record cannot be taken: its error handler decides
            raise _user_error(name, exc) from exc
    return sink


def compile_process(node: ir.ProcessNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    definition = node.processor
    fn, name = definition.fn, node.name

    def punctuation_failed(exc: BaseException) -> None:
        raise _user_error(name, exc) from exc  # type: ignore[arg-type]

    ctx = NodeProcessorContext(env.task, name, node.store_names, dict(env.children), downstream,
                               punctuation_failed)
    if definition.init is not None:
        try:
            definition.init(ctx)
        except Exception as exc:
            raise StreamkitError(f"init of processor '{name}' failed: {type(exc).__name__}: {exc}") from exc

    def process(key: Any, value: Any, timestamp: int) -> None:
        ctx._timestamp = timestamp
        try:
            fn(ctx, key, value)
        except (UserFunctionError, TopologyError):
            raise
        except Exception as exc:
            raise _user_error(name, exc) from exc
    return process
