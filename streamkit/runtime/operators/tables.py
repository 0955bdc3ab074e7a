"""Compiled table operators: stream aggregation (any :class:`Aggregation`), table
source, table filter and map_values views, to_stream, table group_by and table
aggregation (add and subtract)."""
from __future__ import annotations

from typing import Any

from ...topology import nodes as ir
from .base import CompileEnv, Downstream, forwards_new_values, new_values_target, user_error

_user_error = user_error


def _forward_on_flush(store: Any, downstream: Downstream, env: CompileEnv) -> bool:
    """With caching on, a stateful node forwards each key once per commit, when its store
    is flushed; returns whether it must forward each update itself instead."""
    if not env.task.caching:
        return True
    store.on_flush(lambda key, new, old, timestamp: downstream(key, ir.Change(new, old), timestamp))
    return False


def compile_aggregate(node: ir.AggregateNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    """A grouped stream's aggregation: each record's value is added to its key's aggregate.
    A result's timestamp is the largest of its inputs' (so a late record never moves it
    back); records with a None key or value are skipped."""
    task = env.task
    store = task.stores[node.store]
    forward_each = _forward_on_flush(store, downstream, env)
    forward_new = new_values_target(downstream) if forward_each else None
    serialize_key, get, put = store.serialize_key, store.get_serialized, store.put_serialized
    name = node.name
    add = node.aggregation.add

    def aggregate(key: Any, value: Any, timestamp: int) -> None:
        if key is None:
            env.task.drop_null_key(node.name)
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
            new = add(key, value, old)
        except Exception as exc:
            raise _user_error(name, exc) from exc
        put(key_bytes, new, timestamp)
        if forward_new is not None:
            forward_new(key, new, timestamp)
        elif forward_each:
            downstream(key, ir.Change(new, old), timestamp)
    return aggregate


def compile_table_source(node: ir.TableSourceNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    store = env.task.stores[node.store]
    get, put = store.get, store.put_with_timestamp
    forward_each = _forward_on_flush(store, downstream, env)

    def table_source(key: Any, value: Any, timestamp: int) -> None:
        if key is None:
            env.task.drop_null_key(node.name)
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
    return forwards_new_values(to_stream, downstream)


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
        if new_key is None:
            env.task.drop_null_key(name)
            return None
        if new_value is None:
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
    """A grouped table's aggregation: an update's old row is subtracted from the aggregate,
    its new row added; the result's timestamp is the largest of its inputs'."""
    task = env.task
    store = task.stores[node.store]
    get, put = store.get_with_timestamp, store.put_with_timestamp
    name = node.name
    forward_each = _forward_on_flush(store, downstream, env)
    add, subtract = node.aggregation.add, node.aggregation.subtract

    def combine(key: Any, agg: Any, value: Any, adding: bool) -> Any:
        try:
            return add(key, value, agg) if adding else subtract(key, value, agg)
        except Exception as exc:
            raise _user_error(name, exc) from exc

    def table_aggregate(key: Any, change: ir.Change, timestamp: int) -> None:
        if key is None:
            env.task.drop_null_key(node.name)
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
