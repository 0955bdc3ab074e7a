"""Compiled table-table joins: on the key (inner, left, outer) and on a foreign key.

Key join: an update of either side (``Change(new, old)``) is joined with the other
side's current row, giving ``Change(joined new, joined old)``: the old result is what
was last emitted for the key, because the other side has not changed since. A
result that does not exist (an inner join without both rows, a left join without a
left row) is ``None``: a deletion downstream.

Foreign-key join (left rows refer to right rows by ``extractor(left_value)``), over two
internal topics, as Kafka Streams does it:

1. Left task: each left update subscribes the left key to its foreign key (and
   unsubscribes it from the previous one), sending the hash of the new left value.
2. Right task: the subscription store maps (foreign key, left key) → hash; a
   subscription is answered with the right row, and each right update is sent to
   every subscribed left key.
3. Left task: a response is joined with the current left row, unless that row has
   changed since (its hash differs: a newer response is on its way). A result is
   stamped with the later of the left update and the right row it joined (a right
   update's own timestamp when the right side changed), as in Kafka Streams. Results are
   kept in a store, so each update carries the previous result and a foreign-key
   change retracts the old result.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Optional, Tuple

from ...topology import nodes as ir
from ...topology.fk_serdes import (ANSWER_NONE, SUBSCRIBE, UNSUBSCRIBE, UNSUBSCRIBE_AND_ANSWER_NONE, Response,
                                    Subscription, value_hash)
from .base import CompileEnv, Downstream, user_error
from .joins import apply_view, table_reader

_LENGTH = struct.Struct(">I")


def _result_rule(how: str, join: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    if how == "inner":
        return lambda left, right: None if left is None or right is None else join(left, right)
    if how == "left":
        return lambda left, right: None if left is None else join(left, right)
    return lambda left, right: None if left is None and right is None else join(left, right)


def unchanged(new: Any, old: Any) -> bool:
    """Whether a join result is the one already emitted: an update that leaves it as
    it was (a no-op update of either side) emits nothing, unlike Kafka Streams, which
    forwards the same result again."""
    if new is old:
        return True
    try:
        return bool(type(new) is type(old) and new == old)
    except Exception:  # values without a truth-valued ==, e.g. arrays: treat as changed
        return False


def _row_reader(name: str, store: Any, steps: Tuple[Tuple[str, Callable[..., Any], bool], ...]
                ) -> Callable[[Any], Tuple[Any, int]]:
    """``read(key) -> (value through the table's steps or None, its timestamp or -1)``,
    with one store read."""
    get = getattr(store, "get_with_timestamp", None)
    if get is None:
        plain = store.get
        return lambda key: (apply_view(name, steps, key, plain(key)), -1)

    def read(key: Any) -> Tuple[Any, int]:
        found = get(key)
        if found is None:
            return None, -1
        return apply_view(name, steps, key, found[0]), found[1]
    return read


def compile_table_table_join(node: ir.TableTableJoinNode, downstream: Downstream,
                             env: CompileEnv) -> Tuple[Downstream, Downstream]:
    task = env.task
    name, joiner = node.name, node.joiner

    def join(left: Any, right: Any) -> Any:
        try:
            return joiner(left, right)
        except Exception as exc:
            raise user_error(name, exc) from exc

    result = _result_rule(node.how, join)
    if node.self_join:
        return _self_join(node, result, downstream)
    stores = task.stores
    read = (_row_reader(name, stores[node.left_store], node.left_view),
            _row_reader(name, stores[node.right_store], node.right_view))
    Change = ir.Change

    def side(is_left: bool) -> Downstream:
        read_other = read[1] if is_left else read[0]

        def table_table_join(key: Any, change: ir.Change, timestamp: int) -> None:
            if key is None:
                return
            other, other_time = read_other(key)
            if is_left:
                new, old = result(change.new, other), result(change.old, other)
            else:
                new, old = result(other, change.new), result(other, change.old)
            if unchanged(new, old):
                return
            if other is not None and other_time > timestamp:
                timestamp = other_time
            downstream(key, Change(new, old), timestamp)
        return table_table_join

    return side(True), side(False)


def _self_join(node: ir.TableTableJoinNode, result: Callable[[Any, Any], Any], downstream: Downstream
               ) -> Downstream:
    """A table joined with a view of itself: fed by the store's owner, so both sides
    of the old result are the row before the update (reading the store would give the
    updated row for both), and each update is emitted once."""
    name, left_view, right_view = node.name, node.left_view, node.right_view
    Change = ir.Change

    def joined(key: Any, value: Any) -> Any:
        if value is None:
            return None
        return result(apply_view(name, left_view, key, value), apply_view(name, right_view, key, value))

    def table_self_join(key: Any, change: ir.Change, timestamp: int) -> None:
        if key is None:
            return
        new, old = joined(key, change.new), joined(key, change.old)
        if unchanged(new, old):
            return
        downstream(key, Change(new, old), timestamp)
    return table_self_join


def compile_fk_subscribe(node: ir.ForeignKeySubscribeNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    name, extractor, left_join = node.name, node.extractor, node.left
    left_key_bytes, left_value_bytes = node.left_key_serde.serialize, node.left_value_serde.serialize
    right_key_bytes = node.right_key_serde.serialize

    def foreign_key(value: Any) -> Any:
        if value is None:
            return None
        try:
            return extractor(value)
        except Exception as exc:
            raise user_error(name, exc) from exc

    def serialize(serialize_fn: Callable[[Any], Optional[bytes]], obj: Any, what: str) -> bytes:
        try:
            data = serialize_fn(obj)
        except Exception as exc:
            raise user_error(name, type(exc)(f"serializing the {what} {obj!r}: {exc}")) from exc
        if data is None:
            raise user_error(name, ValueError(f"the {what} {obj!r} serializes to None"))
        return data

    def fk_subscribe(key: Any, change: ir.Change, timestamp: int) -> None:
        if key is None:
            return
        kb = serialize(left_key_bytes, key, "left key")
        new_fk, old_fk = foreign_key(change.new), foreign_key(change.old)
        new_fkb = None if new_fk is None else serialize(right_key_bytes, new_fk, "foreign key")
        old_fkb = None if old_fk is None else serialize(right_key_bytes, old_fk, "foreign key")
        if new_fkb is None:
            digest = None if change.new is None else value_hash(serialize(left_value_bytes, change.new, "left value"))
            if old_fkb is not None and not left_join:
                # As Kafka Streams: an inner join's answer comes from the old foreign key's row,
                # so the deleted result is as of the later of this update and that row.
                downstream(old_fkb, Subscription(UNSUBSCRIBE_AND_ANSWER_NONE, digest, kb), timestamp)
                return
            if old_fkb is not None:
                downstream(old_fkb, Subscription(UNSUBSCRIBE, None, kb), timestamp)
            # No foreign key (or no left row): the answer is "no right row", routed by the left key.
            downstream(kb, Subscription(ANSWER_NONE, digest, kb), timestamp)
            return
        if old_fkb is not None and old_fkb != new_fkb:
            downstream(old_fkb, Subscription(UNSUBSCRIBE, None, kb), timestamp)
        digest = value_hash(serialize(left_value_bytes, change.new, "left value"))
        downstream(new_fkb, Subscription(SUBSCRIBE, digest, kb), timestamp)
    return fk_subscribe


def _subscription_key(fk_bytes: bytes, left_key: bytes) -> bytes:
    return _LENGTH.pack(len(fk_bytes)) + fk_bytes + left_key


def compile_fk_subscriptions(node: ir.ForeignKeySubscriptionNode, downstream: Downstream,
                             env: CompileEnv) -> Downstream:
    task = env.task
    subscriptions = task.stores[node.store]
    read_right = _row_reader(node.name, task.stores[node.right_store], node.right_view)
    deserialize_fk = node.right_key_serde.deserialize
    serialize_value = node.right_value_serde.serialize

    def fk_subscriptions(fk_bytes: bytes, message: Subscription, timestamp: int) -> None:
        if message.instruction == ANSWER_NONE:
            downstream(message.left_key, Response(message.hash, None), timestamp)
            return
        entry = _subscription_key(fk_bytes, message.left_key)
        if message.instruction in (UNSUBSCRIBE, UNSUBSCRIBE_AND_ANSWER_NONE):
            subscriptions.delete(entry)
            if message.instruction == UNSUBSCRIBE:
                return
            row, row_time = read_right(deserialize_fk(fk_bytes))
            downstream(message.left_key, Response(message.hash, None),
                       timestamp if row is None else max(timestamp, row_time))
            return
        subscriptions.put(entry, message.hash or b"")
        row, row_time = read_right(deserialize_fk(fk_bytes))
        if row is None:
            downstream(message.left_key, Response(message.hash, None), timestamp)
        else:  # the result is as of the later of the left update and the right row, as in Kafka Streams
            downstream(message.left_key, Response(message.hash, serialize_value(row)), max(timestamp, row_time))
    return fk_subscriptions


def compile_fk_right_updates(node: ir.ForeignKeyRightUpdateNode, downstream: Downstream,
                             env: CompileEnv) -> Downstream:
    subscriptions = env.task.stores[node.store]
    serialize_fk, serialize_value = node.right_key_serde.serialize, node.right_value_serde.serialize

    def fk_right_updates(key: Any, change: ir.Change, timestamp: int) -> None:
        if key is None:
            return
        fk_bytes = serialize_fk(key)
        if fk_bytes is None:
            return
        prefix = _LENGTH.pack(len(fk_bytes)) + fk_bytes
        value = None if change.new is None else serialize_value(change.new)
        for entry, digest in list(subscriptions.prefix_scan(prefix)):
            downstream(entry[len(prefix):], Response(digest or None, value), timestamp)
    return fk_right_updates


def compile_fk_join(node: ir.ForeignKeyJoinNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    task = env.task
    name, joiner, left_join = node.name, node.joiner, node.left
    results = task.stores[node.store]
    read_left = table_reader(name, task.stores[node.left_store], node.left_view)
    deserialize_key = node.left_key_serde.deserialize
    serialize_left = node.left_value_serde.serialize
    deserialize_right = node.right_value_serde.deserialize
    Change = ir.Change

    def fk_join(key_bytes: bytes, response: Response, timestamp: int) -> None:
        key = deserialize_key(key_bytes)
        left = read_left(key)
        if left is not None and value_hash(serialize_left(left)) != response.hash:
            return  # answers an older left value; the answer to the current one follows
        if left is None:
            new = None
        else:
            right = None if response.right_value is None else deserialize_right(response.right_value)
            if right is None and not left_join:
                new = None
            else:
                try:
                    new = joiner(left, right)
                except Exception as exc:
                    raise user_error(name, exc) from exc
        old = results.get(key)
        if unchanged(new, old):
            return
        results.put(key, new)
        downstream(key, Change(new, old), timestamp)
    return fk_join
