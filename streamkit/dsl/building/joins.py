"""Joins: a stream with a stream (windowed, both sides buffered), a table or a global
table; a table with a table, by key or by foreign key."""
from __future__ import annotations

from typing import Any, Callable, Optional

from ...core.names import repartition_suffix
from ...errors import TopologyError
from ...serdes import Bytes, Json, Serde
from ...stores import StoreSpec
from ...topology import nodes as ir
from ...topology.fk_serdes import ResponseSerde, SubscriptionSerde
from ...windowing.join_windows import JoinWindows
from ..draft import check_callable, check_serde
from ..global_table import GlobalTable
from . import stream_ops
from .states import StreamState, TableState
from .table_ops import TableView, materialized_view

Joiner = Callable[[Any, Any], Any]
KeySelector = Callable[[Any, Any], Any]
OPERATIONS = {"inner": "join", "left": "left_join", "outer": "outer_join"}
"""The method name of each kind of join, by ``how``."""


def join_stream(stream: StreamState, other: object, joiner: Optional[Joiner], windows: Optional[JoinWindows],
                key_selector: Optional[KeySelector], name: Optional[str], key_serde: Optional[Serde],
                value_serde: Optional[Serde], other_value_serde: Optional[Serde],
                late_records_topic: Optional[str], *, how: str) -> StreamState:
    """``stream`` joined (``how``: inner, left, outer) with ``other``: a stream's or a table's
    state, a global table, else what the user passed (an error)."""
    operation = OPERATIONS[how]
    node = stream_ops.named(stream, name, operation)
    if joiner is None:
        raise TopologyError(f"{node}: {operation}() needs a joiner: joiner(value, other_value) -> result")
    if isinstance(other, StreamState):
        if windows is None:
            raise TopologyError(f"{node}: a stream-stream {operation}() needs windows: "
                                "sk.JoinWindows.of(timedelta(...), grace=timedelta(...))")
        if key_selector is not None:
            raise TopologyError(f"{node}: key_selector is for global-table joins only")
        return _stream_stream(stream, other, joiner, windows, node, key_serde, value_serde, other_value_serde,
                              late_records_topic, how)
    if windows is not None or late_records_topic is not None or other_value_serde is not None:
        raise TopologyError(f"{node}: windows, late_records_topic and other_value_serde are for "
                            "stream-stream joins; a table join reads the table's current value")
    if how == "outer":
        raise TopologyError(f"{node}: outer_join() joins two streams; a stream has no outer join "
                            "with a table (use left_join)")
    if isinstance(other, GlobalTable):
        return _stream_global_table(stream, other, joiner, key_selector, node, left=how == "left")
    if key_selector is not None:
        raise TopologyError(f"{node}: key_selector is for global-table joins (b.global_table(...)); "
                            "to join a table on another key, select_key(...) first")
    if not isinstance(other, TableState):
        raise TopologyError(
            f"{node}: {operation}() takes a stream, a table or a global table of the same topology; got {other!r}")
    return _stream_table(stream, other, joiner, node, key_serde, value_serde, left=how == "left")


def _stream_global_table(stream: StreamState, table: GlobalTable, joiner: Joiner,
                         key_selector: Optional[KeySelector], node: str, *, left: bool) -> StreamState:
    if table._draft is not stream.draft:
        raise TopologyError(f"{node}: the global table belongs to another topology")
    if key_selector is None:
        raise TopologyError(f"{node}: a global-table join needs key_selector=lambda key, value: <the "
                            "table's key for this record>")
    check_callable(key_selector, "key_selector", ("key", "value"), node)
    check_callable(joiner, "joiner", ("value", "table_value"), node)
    return stream_ops.then(stream, ir.GlobalTableJoinNode(node, (stream.node,), global_store=table.store,
                                                          key_selector=key_selector, joiner=joiner, left=left))


def _stream_stream(stream: StreamState, other: StreamState, joiner: Joiner, windows: JoinWindows, node: str,
                   key_serde: Optional[Serde], value_serde: Optional[Serde], other_value_serde: Optional[Serde],
                   late_records_topic: Optional[str], how: str) -> StreamState:
    from ...state.value_list import ValueListSerde  # here: `import streamkit` loads no state module

    draft = stream.draft
    if other.draft is not draft:
        raise TopologyError(f"{node}: the other stream belongs to another topology")
    if not isinstance(windows, JoinWindows):
        raise TopologyError(f"{node}: windows must be sk.JoinWindows.of(...), got {windows!r}")
    for side in (stream, other):
        if side.keyless:
            raise TopologyError(f"{node}: stream '{side.node}' has no key (Void key serde): "
                                "select_key(...) before the join")
    check_callable(joiner, "joiner", ("value", "other_value"), node)
    for serde, what in ((key_serde, "key_serde"), (value_serde, "value_serde"),
                        (other_value_serde, "other_value_serde")):
        check_serde(serde, what)
    # A repartitioned side must place keys as the other side's topic does: its key serde.
    keys = key_serde or draft.source_key_serde(stream.node) or draft.source_key_serde(other.node) or Json()
    left_values, right_values = value_serde or Json(), other_value_serde or Json()
    retention = max(1, windows.retention_ms)
    size = max(1, windows.size_ms)
    left_store, right_store = f"{node}-left-buffer", f"{node}-right-buffer"
    draft.add_store(StoreSpec(left_store, "window", keys, ValueListSerde(left_values),
                              retention_ms=retention, window_size_ms=size), node)
    draft.add_store(StoreSpec(right_store, "window", keys, ValueListSerde(right_values),
                              retention_ms=retention, window_size_ms=size), node)
    unmatched = None
    if how != "inner":
        unmatched = f"{node}-unmatched"
        draft.add_store(StoreSpec(unmatched, "key_value", Bytes(), Bytes()), node)
    if late_records_topic is not None:
        draft.resolve_topic(late_records_topic)
    return stream_ops.then(stream, ir.StreamStreamJoinNode(
        node, (stream.node, other.node), windows=windows, joiner=joiner, how=how, left_store=left_store,
        right_store=right_store, unmatched_store=unmatched, key_serde=keys, value_serde=left_values,
        other_value_serde=right_values, late_records_topic=late_records_topic), keyless=False)


def _stream_table(stream: StreamState, table: TableState, joiner: Joiner, node: str, key_serde: Optional[Serde],
                  value_serde: Optional[Serde], *, left: bool) -> StreamState:
    if table.draft is not stream.draft:
        raise TopologyError(f"{node}: the table belongs to another topology")
    if table.windowed:
        raise TopologyError(f"{node}: a windowed table cannot be joined with a stream")
    if stream.keyless:
        raise TopologyError(f"{node}: this stream has no key (Void key serde): select_key(...) before the join")
    check_callable(joiner, "joiner", ("value", "table_value"), node)
    check_serde(key_serde, "key_serde")
    check_serde(value_serde, "value_serde")
    table_node, store, view = materialized_view(table, node)
    return stream_ops.then(stream, ir.StreamTableJoinNode(
        node, (stream.node,), table=table_node, store=store, table_view=view, joiner=joiner, left=left,
        # a repartitioned stream must place keys as the table's topic does: with its key serde
        key_serde=key_serde or table.key_serde, value_serde=value_serde or Json()))


def join_table(table: TableState, other: object, joiner: Joiner, extractor: Optional[Callable[[Any], Any]],
               name: Optional[str], value_serde: Optional[Serde], *, how: str) -> TableState:
    """``table`` joined (``how``: inner, left, outer) with ``other`` (a table's state, else
    what the user passed: an error), by key, or by the foreign key ``extractor`` returns."""
    operation = OPERATIONS[how]
    draft = table.draft
    node = draft.name_for(name, table.node, operation)
    if not isinstance(other, TableState) or other.draft is not draft:
        raise TopologyError(f"{node}: Table.{operation}() takes a table of the same topology, got {other!r}")
    if table.windowed or other.windowed:
        raise TopologyError(f"{node}: windowed tables cannot be joined")
    check_callable(joiner, "joiner", ("value", "other_value"), node)
    check_serde(value_serde, "value_serde")
    left_node, left_store, left_view = materialized_view(table, node)
    right_node, right_store, right_view = materialized_view(other, node)
    if extractor is None:
        # A self-join (both sides views of one store) reads the store owner's own
        # updates, so each update is joined once, old view with old view.
        parents = (left_node,) if left_node == right_node else (table.node, other.node)
        draft.append(ir.TableTableJoinNode(node, parents, joiner=joiner, how=how, left_store=left_store,
                                           right_store=right_store, left_view=left_view, right_view=right_view))
        return TableState.of(draft, node, key_serde=table.key_serde)
    return _foreign_key(table, other, joiner, extractor, node, value_serde, left_store, left_view, right_store,
                        right_view, left=how == "left")


def _foreign_key(table: TableState, other: TableState, joiner: Joiner, extractor: Callable[[Any], Any], node: str,
                 value_serde: Optional[Serde], left_store: str, left_view: TableView, right_store: str,
                 right_view: TableView, *, left: bool) -> TableState:
    """The foreign-key join's five steps: subscribe (left rows, repartitioned by foreign key),
    answer subscriptions from the right store, push right updates to subscribers, send the
    responses back to the left rows' partitions, and join there."""
    check_callable(extractor, "foreign_key_extractor", ("value",), node)
    draft = table.draft
    subscribe = draft.append(ir.ForeignKeySubscribeNode(
        f"{node}-subscribe", (table.node,), extractor=extractor, left_key_serde=table.key_serde,
        left_value_serde=table.value_serde, right_key_serde=other.key_serde, left=left))
    registration = draft.append(ir.RepartitionNode(
        repartition_suffix(f"{node}-subscription"), (subscribe.name,),
        topic_suffix=repartition_suffix(f"{node}-subscription"), key_serde=Bytes(), value_serde=SubscriptionSerde()))
    subscriptions = f"{node}-subscriptions"
    draft.add_store(StoreSpec(subscriptions, "key_value", Bytes(), Bytes()), node)
    answers = draft.append(ir.ForeignKeySubscriptionNode(
        subscriptions, (registration.name,), store=subscriptions, right_store=right_store,
        right_view=right_view, right_key_serde=other.key_serde, right_value_serde=other.value_serde))
    updates = draft.append(ir.ForeignKeyRightUpdateNode(
        f"{node}-right-updates", (other.node,), store=subscriptions, right_key_serde=other.key_serde,
        right_value_serde=other.value_serde))
    responses = draft.append(ir.RepartitionNode(
        repartition_suffix(f"{node}-response"), (answers.name, updates.name),
        topic_suffix=repartition_suffix(f"{node}-response"), key_serde=Bytes(), value_serde=ResponseSerde()))
    results = value_serde or Json()
    draft.add_store(StoreSpec(node, "key_value", table.key_serde, results), node)
    draft.append(ir.ForeignKeyJoinNode(
        node, (responses.name,), store=node, left_store=left_store, left_view=left_view,
        left_key_serde=table.key_serde, left_value_serde=table.value_serde,
        right_value_serde=other.value_serde, joiner=joiner, left=left))
    return TableState.of(draft, node, key_serde=table.key_serde, value_serde=results)
