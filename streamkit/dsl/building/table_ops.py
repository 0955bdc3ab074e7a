"""The operations of one table (filter, map_values, suppress, to_stream, group_by), the
table an aggregation's results make, and where a join reads a table's rows from."""
from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from ...errors import TopologyError
from ...serdes import Serde
from ...stores import StoreSpec
from ...topology import nodes as ir
from ...topology.aggregations import Aggregation
from ...windowing import WindowedSerde
from ...windowing.suppressed import Suppressed
from ..draft import TopologyDraft, check_callable, check_serde
from .states import GroupedState, StreamState, TableState

TableView = Tuple[Tuple[str, Any, bool], ...]
"""The stateless steps from a store's rows to a table: ``(kind, function, negate)``."""


def then(table: TableState, node: ir.Node, *, same_values: bool = False) -> TableState:
    """Append ``node`` (reading ``table``) and return the table it produces: same keys and
    windows, same value serde if ``same_values`` (else JSON)."""
    table.draft.append(node)
    return TableState.of(table.draft, node.name, key_serde=table.key_serde, windows=table.windows,
                         value_serde=table.value_serde if same_values else None)


def table_key_serde(table: TableState) -> Serde:
    """The serde of the table's keys: ``Windowed`` around the key serde for a windowed table."""
    if table.windows is None:
        return table.key_serde
    return WindowedSerde(table.key_serde)


def suppress(table: TableState, suppressed: Suppressed, name: Optional[str],
             value_serde: Optional[Serde]) -> TableState:
    draft = table.draft
    node = draft.name_for(name, table.node, "suppress")
    if not isinstance(suppressed, Suppressed):
        raise TopologyError(
            f"{node}: suppress() takes sk.Suppressed.until_window_closes() or "
            f"sk.Suppressed.until_time_limit(...), got {suppressed!r}")
    if suppressed.final_results and table.windows is None:
        raise TopologyError(
            f"{node}: Suppressed.until_window_closes() needs a windowed table, but '{table.node}' is not "
            "windowed; use group_by(...).windowed_by(...) first, or Suppressed.until_time_limit(...)")
    check_serde(value_serde, "value_serde")
    values = value_serde or table.value_serde
    draft.add_store(StoreSpec(node, "suppression", table_key_serde(table), values), node)
    draft.append(ir.SuppressNode(node, (table.node,), store=node, suppressed=suppressed, windows=table.windows))
    return TableState.of(draft, node, key_serde=table.key_serde, value_serde=values, windows=table.windows)


def filter_rows(table: TableState, predicate: Callable[[Any, Any], bool], name: Optional[str], *,
                negate: bool = False) -> TableState:
    operation = "filter_not" if negate else "filter"
    node = table.draft.name_for(name, table.node, operation)
    check_callable(predicate, f"{operation} predicate", ("key", "value"), node)
    return then(table, ir.TableFilterNode(node, (table.node,), predicate=predicate, negate=negate), same_values=True)


def map_values(table: TableState, mapper: Callable[[Any], Any], name: Optional[str]) -> TableState:
    node = table.draft.name_for(name, table.node, "map_values")
    check_callable(mapper, "map_values function", ("value",), node)
    return then(table, ir.TableMapValuesNode(node, (table.node,), mapper=mapper))


def to_stream(table: TableState, name: Optional[str]) -> StreamState:
    """The table's updates as a stream; a windowed table's keys keep their serde for ``to()``."""
    node = table.draft.name_for(name, table.node, "to_stream")
    table.draft.append(ir.ToStreamNode(node, (table.node,)))
    return StreamState(table.draft, node, key_serde_hint=table_key_serde(table) if table.windows else None)


def group_by(table: TableState, selector: Callable[[Any, Any], Tuple[Any, Any]], key_serde: Optional[Serde],
             value_serde: Optional[Serde], name: Optional[str]) -> GroupedState:
    node = table.draft.name_for(name, table.node, "group_by")
    check_callable(selector, "group_by function", ("key", "value"), node)
    check_serde(key_serde, "key_serde")
    check_serde(value_serde, "value_serde")
    table.draft.append(ir.TableGroupByNode(node, (table.node,), selector=selector))
    return GroupedState.of(table.draft, node, key_serde, value_serde, of_table=True)


def aggregation_result(draft: TopologyDraft, node: str, aggregation: Aggregation, key_serde: Serde,
                       value_serde: Optional[Serde], windows: Any = None) -> TableState:
    """The table of aggregation ``node``'s results: its store's rows, or, when the aggregation
    stores something else than it emits (``aggregation.result``: count_distinct keeps a set,
    emits its size), a view ``<node>.result`` of them (which joins read through too)."""
    table = TableState.of(draft, node, key_serde=key_serde, value_serde=value_serde, windows=windows)
    if aggregation.result is None:
        return table
    return then(table, ir.TableMapValuesNode(draft.name_for(None, node, "result"), (node,),
                                             mapper=aggregation.result))


def materialized_view(table: TableState, where: str) -> Tuple[str, str, TableView]:
    """The node and store holding ``table``'s rows, and the stateless steps (filter,
    map_values) from there to the table, for a join at ``where`` to read it."""
    steps = []
    node = table.draft.names[table.node]
    while isinstance(node, (ir.TableFilterNode, ir.TableMapValuesNode)):
        if isinstance(node, ir.TableFilterNode):
            steps.append(("filter", node.predicate, node.negate))
        else:
            steps.append(("map_values", node.mapper, False))
        node = table.draft.names[node.parents[0]]
    if not isinstance(node, (ir.TableSourceNode, ir.AggregateNode, ir.TableAggregateNode, ir.ForeignKeyJoinNode)):
        raise TopologyError(
            f"{where}: table '{table.node}' cannot be joined: it is not backed by a store ({node.kind}); "
            "join the table it comes from, or materialize it with to_stream().to(topic) and b.table(topic)")
    return node.name, node.stores[0], tuple(reversed(steps))
