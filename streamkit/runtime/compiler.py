"""Compiles a sub-topology into plain callables, once per task.

Each node kind has one function ``compile_<kind>(node, downstream, env)`` that
returns ``fn(key, value, timestamp)``. The chain is composed leaves first, so
processing a record is a sequence of direct calls with no per-record dispatch
on node types. User functions are wrapped only to name the node in errors.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Tuple

from ..errors import SerializationError, StreamkitError, TopologyError, UserFunctionError
from ..sinks.base import SinkRecord
from ..topology import Topology
from ..topology import nodes as ir
from ..topology.model import SubTopology
from ..transport.partitioner import cached_key_hash, partition_for_key
from .context import Downstream, NodeProcessorContext, TaskContext
from .progress import merged_topics, parse_ids, with_writer_header, writer_rank

Compiler = Callable[[Any, Downstream, "CompileEnv"], Downstream]


class CompileEnv:
    """What a node compiler may use: the task context, its compiled children by name,
    and the topology."""

    def __init__(self, task: TaskContext, children: Mapping[str, Downstream], topology: Topology) -> None:
        self.task = task
        self.children = children
        self.topology = topology

    def feeds(self, node: str, kind: type) -> bool:
        """Whether a node of ``kind`` is downstream of ``node`` in the same task."""
        children, nodes = self.topology.children, self.topology.nodes
        pending, seen = list(children[node]), set()
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            if isinstance(nodes[name], kind):
                return True
            pending.extend(children[name])
        return False


def _noop(key: Any, value: Any, timestamp: int) -> None:
    return None


def fan_out(targets: List[Downstream]) -> Downstream:
    """One callable that calls every target in order (values are shared, not copied)."""
    if not targets:
        return _noop
    if len(targets) == 1:
        return targets[0]

    def fan(key: Any, value: Any, timestamp: int) -> None:
        for target in targets:
            target(key, value, timestamp)
    return fan


def compile_sub_topology(topology: Topology, sub: SubTopology, task: TaskContext) -> Dict[str, Downstream]:
    """Compile every node of ``sub``; return the entry callable of each source node by name."""
    compiled, _downstreams = compile_nodes(topology, sub, task)
    return {name: compiled[name] for name in sub.node_names
            if isinstance(topology.nodes[name], ir.SourceNode)}


def compile_nodes(topology: Topology, sub: SubTopology, task: TaskContext
                  ) -> Tuple[Dict[str, Any], Dict[str, Downstream]]:
    """Compile every node of ``sub``: each node's callable, and what each node calls (its
    children, fanned out) by node name."""
    compiled: Dict[str, Any] = {}
    downstreams: Dict[str, Downstream] = {}
    for name in reversed(sub.node_names):
        node = topology.nodes[name]
        children = {child: _entry(compiled[child], topology.nodes[child].parents, name)
                    for child in topology.children[name]}
        downstream = downstreams[name] = fan_out(list(children.values()))
        compiled[name] = COMPILERS[type(node)](node, downstream, CompileEnv(task, children, topology))
    return compiled, downstreams


def _entry(compiled: Any, parents: Tuple[str, ...], parent: str) -> Downstream:
    """What ``parent`` calls: a two-input node (a join) compiles to one callable per
    input, ``(left, right)``, matched to its parents by position."""
    if not isinstance(compiled, tuple):
        return compiled
    return fan_out([side for side, name in zip(compiled, parents) if name == parent])


def user_error(node: str, exc: Exception) -> UserFunctionError:
    """``exc`` raised by the user function of ``node``, named for the error handlers."""
    return UserFunctionError(node, exc)


_user_error = user_error


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
        target = env.children.get(f"{name}-{branch}", _noop)
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
    # .progress): the reading task orders its writers by them.
    rank = writer_rank(*parse_ids(task.task_id)) if topic in merged_topics(env.topology) else None

    def sink(key: Any, value: Any, timestamp: int) -> None:
        if task.muted:
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
        else:
            cached = cached_key_hash(key_bytes)
            partition = partition_for_key(key_bytes, partitions) if cached is None else cached % partitions
        record = task.record
        headers = None if record is None else record[4]
        if rank is not None:
            headers = with_writer_header(headers, rank, task.stream_time)
        buffers[partition].append((key_bytes, value_bytes, timestamp, headers))
    return sink


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


def _forward_on_flush(store: Any, downstream: Downstream, env: CompileEnv) -> bool:
    """With caching on, a stateful node forwards each key once per commit, when its store
    is flushed; returns whether it must forward each update itself instead."""
    if not env.task.caching:
        return True
    store.on_flush(lambda key, new, old, timestamp: downstream(key, ir.Change(new, old), timestamp))
    return False


def compile_aggregate(node: ir.AggregateNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    """count/reduce/aggregate. A result's timestamp is the largest of its inputs' (so a
    late record never moves it back); records with a None key or value are skipped."""
    task = env.task
    store = task.stores[node.store]
    forward_each = _forward_on_flush(store, downstream, env)
    serialize_key, get, put = store.serialize_key, store.get_serialized, store.put_serialized
    metrics = task.metrics
    name = node.name
    initializer, aggregator = node.initializer, node.aggregator

    if node.operation == "count":
        def step(key: Any, value: Any, old: Any) -> Any:
            return 1 if old is None else old + 1
    elif node.operation == "reduce":
        def step(key: Any, value: Any, old: Any) -> Any:
            return value if old is None else aggregator(old, value)
    else:
        def step(key: Any, value: Any, old: Any) -> Any:
            return aggregator(key, value, initializer() if old is None else old)

    def aggregate(key: Any, value: Any, timestamp: int) -> None:
        if key is None:
            metrics.null_key_records_dropped += 1
            return
        if value is None:
            return  # Kafka Streams' count, reduce and aggregate ignore null values
        try:
            key_bytes = serialize_key(key)
        except Exception as exc:
            raise _user_error(name, exc) from exc
        prior = get(key_bytes)
        if prior is None:
            old = None
        else:
            old, old_timestamp = prior
            if old_timestamp > timestamp:
                timestamp = old_timestamp
        try:
            new = step(key, value, old)
        except Exception as exc:
            raise _user_error(name, exc) from exc
        put(key_bytes, new, timestamp)
        if forward_each:
            downstream(key, ir.Change(new, old), timestamp)
    return aggregate


def compile_table_source(node: ir.TableSourceNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    store = env.task.stores[node.store]
    get, put = store.get, store.put_with_timestamp
    metrics = env.task.metrics
    forward_each = _forward_on_flush(store, downstream, env)

    def table_source(key: Any, value: Any, timestamp: int) -> None:
        if key is None:
            metrics.null_key_records_dropped += 1
            return
        old = get(key)
        if old is None and value is None:
            return
        put(key, value, timestamp)
        if forward_each:
            downstream(key, ir.Change(value, old), timestamp)
    return table_source


def compile_table_filter(node: ir.TableFilterNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    predicate, name, negate = node.predicate, node.name, node.negate

    def keep(key: Any, value: Any) -> Any:
        if value is None:
            return None
        try:
            matched = predicate(key, value)
        except Exception as exc:
            raise _user_error(name, exc) from exc
        return value if (not matched if negate else matched) else None

    def table_filter(key: Any, change: ir.Change, timestamp: int) -> None:
        new, old = keep(key, change.new), keep(key, change.old)
        if new is None and old is None:
            return
        downstream(key, ir.Change(new, old), timestamp)
    return table_filter


def compile_table_map_values(node: ir.TableMapValuesNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    mapper, name = node.mapper, node.name

    def apply(value: Any) -> Any:
        if value is None:
            return None
        try:
            return mapper(value)
        except Exception as exc:
            raise _user_error(name, exc) from exc

    def table_map_values(key: Any, change: ir.Change, timestamp: int) -> None:
        downstream(key, ir.Change(apply(change.new), apply(change.old)), timestamp)
    return table_map_values


def compile_to_stream(node: ir.ToStreamNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    def to_stream(key: Any, change: ir.Change, timestamp: int) -> None:
        downstream(key, change.new, timestamp)
    return to_stream


def compile_table_group_by(node: ir.TableGroupByNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    """Re-key table updates. A row that stays in its group travels as one Change (old and
    new, KIP-904); a row that moves retracts from the old group, then adds to the new.
    Pairs with a None key or value are dropped (counted), as Kafka Streams does."""
    selector, name = node.selector, node.name
    metrics = env.task.metrics

    def select(key: Any, value: Any) -> Any:
        if value is None:
            return None
        try:
            new_key, new_value = selector(key, value)
        except Exception as exc:
            raise _user_error(name, exc) from exc
        if new_key is None or new_value is None:
            metrics.null_key_records_dropped += 1
            return None
        return new_key, new_value

    def table_group_by(key: Any, change: ir.Change, timestamp: int) -> None:
        old, new = select(key, change.old), select(key, change.new)
        if old is not None and new is not None and old[0] == new[0]:
            downstream(new[0], ir.Change(new[1], old[1]), timestamp)
            return
        if old is not None:
            downstream(old[0], ir.Change(None, old[1]), timestamp)
        if new is not None:
            downstream(new[0], ir.Change(new[1], None), timestamp)
    return table_group_by


def compile_table_aggregate(node: ir.TableAggregateNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    task = env.task
    store = task.stores[node.store]
    get, put = store.get_with_timestamp, store.put_with_timestamp
    metrics = task.metrics
    name, operation = node.name, node.operation
    forward_each = _forward_on_flush(store, downstream, env)
    initializer, adder, subtractor = node.initializer, node.adder, node.subtractor

    def combine(key: Any, agg: Any, value: Any, adding: bool) -> Any:
        if operation == "count":
            return (0 if agg is None else agg) + (1 if adding else -1)
        try:
            if operation == "reduce":
                if agg is None:
                    return value if adding else None
                return adder(agg, value) if adding else subtractor(agg, value)
            base = initializer() if agg is None else agg
            return adder(key, value, base) if adding else subtractor(key, value, base)
        except Exception as exc:
            raise _user_error(name, exc) from exc

    def table_aggregate(key: Any, change: ir.Change, timestamp: int) -> None:
        if key is None:
            metrics.null_key_records_dropped += 1
            return
        prior = get(key)
        old = None
        if prior is not None:
            old, old_timestamp = prior
            if old_timestamp > timestamp:
                timestamp = old_timestamp
        new = old
        if change.old is not None:
            new = combine(key, new, change.old, False)
        if change.new is not None:
            new = combine(key, new, change.new, True)
        put(key, new, timestamp)
        if forward_each:
            downstream(key, ir.Change(new, old), timestamp)
    return table_aggregate


COMPILERS: Dict[type, Compiler] = {
    ir.SourceNode: compile_source,
    ir.SinkNode: compile_sink,
    ir.ExternalSinkNode: compile_external_sink,
    ir.FilterNode: compile_filter,
    ir.MapNode: compile_map,
    ir.MapValuesNode: compile_map_values,
    ir.FlatMapNode: compile_flat_map,
    ir.FlatMapValuesNode: compile_flat_map_values,
    ir.SelectKeyNode: compile_select_key,
    ir.PeekNode: compile_peek,
    ir.SplitNode: compile_split,
    ir.BranchNode: compile_passthrough,
    ir.MergeNode: compile_passthrough,
    ir.ProcessNode: compile_process,
    ir.AggregateNode: compile_aggregate,
    ir.TableSourceNode: compile_table_source,
    ir.TableFilterNode: compile_table_filter,
    ir.TableMapValuesNode: compile_table_map_values,
    ir.ToStreamNode: compile_to_stream,
    ir.TableGroupByNode: compile_table_group_by,
    ir.TableAggregateNode: compile_table_aggregate,
}

# Compilers of windowed operations and joins live in their own modules (they import this one).
from .joins import compile_global_table_join, compile_stream_table_join  # noqa: E402
from .stream_joins import compile_stream_stream_join  # noqa: E402
from .table_joins import (compile_fk_join, compile_fk_right_updates, compile_fk_subscribe,  # noqa: E402
                          compile_fk_subscriptions, compile_table_table_join)
from .suppression import compile_suppress  # noqa: E402
from .windowed_aggregates import compile_session_aggregate, compile_windowed_aggregate  # noqa: E402

COMPILERS.update({
    ir.WindowedAggregateNode: compile_windowed_aggregate,
    ir.SessionAggregateNode: compile_session_aggregate,
    ir.SuppressNode: compile_suppress,
    ir.StreamTableJoinNode: compile_stream_table_join,
    ir.StreamStreamJoinNode: compile_stream_stream_join,
    ir.GlobalTableJoinNode: compile_global_table_join,
    ir.TableTableJoinNode: compile_table_table_join,
    ir.ForeignKeySubscribeNode: compile_fk_subscribe,
    ir.ForeignKeySubscriptionNode: compile_fk_subscriptions,
    ir.ForeignKeyRightUpdateNode: compile_fk_right_updates,
    ir.ForeignKeyJoinNode: compile_fk_join,
})
