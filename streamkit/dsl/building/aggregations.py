"""Unwindowed aggregations of grouped streams and grouped tables: each validates its
functions, declares a key-value store named like its node and appends the node that
carries its :class:`~streamkit.topology.aggregations.Aggregation`."""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

from ...serdes import Json, Serde
from ...stores import StoreSpec
from ...topology import nodes as ir
from ...topology.aggregations import Aggregate, Aggregation, Count, CountDistinct, Reduce
from ..draft import check_callable, check_serde, check_value_of
from .states import GroupedState, TableState
from .table_ops import aggregation_result

ValueOf = Union[str, Callable[[Any], Any]]


def aggregate_with(grouped: GroupedState, aggregation: Aggregation, name: Optional[str],
                   value_serde: Optional[Serde], changelog: bool) -> TableState:
    """Append ``aggregation`` of ``grouped`` (a grouped table's if ``grouped.of_table``) with
    its store, and return the table of its results."""
    check_serde(value_serde, "value_serde")
    draft = grouped.draft
    node = draft.name_for(name, grouped.parent, aggregation.name)
    draft.add_store(StoreSpec(node, "key_value", grouped.key_serde, value_serde or Json(),
                              changelog=changelog, timestamped=True), node)
    kind = ir.TableAggregateNode if grouped.of_table else ir.AggregateNode
    draft.append(kind(node, (grouped.parent,), store=node, aggregation=aggregation,
                      key_serde=grouped.key_serde, value_serde=grouped.value_serde))
    return aggregation_result(draft, node, aggregation, grouped.key_serde, value_serde)


def count(grouped: GroupedState, name: Optional[str], changelog: bool) -> TableState:
    return aggregate_with(grouped, Count(), name, None, changelog)


def count_distinct(grouped: GroupedState, value_of: ValueOf, name: Optional[str], changelog: bool) -> TableState:
    check_value_of(value_of, name or f"{grouped.parent}.count_distinct")
    return aggregate_with(grouped, CountDistinct(value_of), name, None, changelog)


def reduce_stream(grouped: GroupedState, reducer: Callable[[Any, Any], Any], name: Optional[str],
                  value_serde: Optional[Serde], changelog: bool) -> TableState:
    check_callable(reducer, "reducer", ("aggregate", "value"), name or f"{grouped.parent}.reduce")
    return aggregate_with(grouped, Reduce(reducer), name, value_serde, changelog)


def aggregate_stream(grouped: GroupedState, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                     name: Optional[str], value_serde: Optional[Serde], changelog: bool) -> TableState:
    where = name or f"{grouped.parent}.aggregate"
    check_callable(initializer, "initializer", (), where)
    check_callable(aggregator, "aggregator", ("key", "value", "aggregate"), where)
    return aggregate_with(grouped, Aggregate(initializer, aggregator), name, value_serde, changelog)


def reduce_table(grouped: GroupedState, adder: Callable[[Any, Any], Any], subtractor: Callable[[Any, Any], Any],
                 name: Optional[str], value_serde: Optional[Serde], changelog: bool) -> TableState:
    where = name or f"{grouped.parent}.reduce"
    check_callable(adder, "adder", ("aggregate", "value"), where)
    check_callable(subtractor, "subtractor", ("aggregate", "value"), where)
    return aggregate_with(grouped, Reduce(adder, subtractor), name, value_serde, changelog)


def aggregate_table(grouped: GroupedState, initializer: Callable[[], Any], adder: Callable[[Any, Any, Any], Any],
                    subtractor: Callable[[Any, Any, Any], Any], name: Optional[str], value_serde: Optional[Serde],
                    changelog: bool) -> TableState:
    where = name or f"{grouped.parent}.aggregate"
    check_callable(initializer, "initializer", (), where)
    check_callable(adder, "adder", ("key", "value", "aggregate"), where)
    check_callable(subtractor, "subtractor", ("key", "value", "aggregate"), where)
    return aggregate_with(grouped, Aggregate(initializer, adder, subtractor=subtractor), name, value_serde, changelog)
