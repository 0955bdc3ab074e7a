"""Grouped streams and tables: the inputs of count, count_distinct, reduce and aggregate."""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

from ..serdes import Json, Serde
from ..stores import StoreSpec
from ..topology import nodes as ir
from ..topology.aggregations import Aggregate, Aggregation, Count, CountDistinct, Reduce
from .draft import TopologyDraft, check_callable, check_serde, check_value_of
from .table import Table, aggregation_table


def _store(draft: TopologyDraft, name: str, key_serde: Optional[Serde], value_serde: Optional[Serde],
           owner: str, changelog: bool) -> None:
    draft.add_store(StoreSpec(name, "key_value", key_serde or Json(), value_serde or Json(), changelog=changelog,
                              timestamped=True), owner)


class _Grouped:
    """What both grouped builders hold: the parent node and the grouping serdes
    (used for the repartition topic, if any, and the store's keys)."""

    def __init__(self, draft: TopologyDraft, parent: str, key_serde: Optional[Serde],
                 value_serde: Optional[Serde]) -> None:
        self._draft = draft
        self._parent = parent
        self._key_serde = key_serde or Json()
        self._value_serde = value_serde or Json()


class GroupedStream(_Grouped):
    """A stream grouped by key. Aggregations are stateful: one key-value store each,
    named after the operation, and every update is emitted downstream as the
    table's new value for the key. Records with a ``None`` key are dropped (counted)."""

    def _aggregate(self, name: Optional[str], aggregation: Aggregation, value_serde: Optional[Serde],
                   changelog: bool) -> Table:
        check_serde(value_serde, "value_serde")
        node = self._draft.name_for(name, self._parent, aggregation.name)
        _store(self._draft, node, self._key_serde, value_serde, node, changelog)
        self._draft.append(ir.AggregateNode(node, (self._parent,), store=node, aggregation=aggregation,
                                            key_serde=self._key_serde, value_serde=self._value_serde))
        return aggregation_table(self._draft, node, aggregation, self._key_serde, value_serde)

    def windowed_by(self, windows: Any):
        """Aggregate per time window (``sk.TumblingWindows``, ``sk.HoppingWindows``,
        ``sk.SlidingWindows``) or per session (``sk.SessionWindows``): the result is a
        table keyed by ``sk.Windowed(key, start, end)``."""
        from .windowed_streams import windowed_by
        return windowed_by(self._draft, self._parent, self._key_serde, self._value_serde, windows)

    def cogroup(self, aggregator: Callable[[Any, Any, Any], Any]):
        """Start a cogrouped aggregation (Kafka Streams' ``cogroup``): this stream's records are
        folded with ``aggregator(key, value, aggregate)``; add more grouped streams with
        ``.cogroup(other, other_aggregator)``, then ``.aggregate(initializer)`` (or
        ``.windowed_by(windows).aggregate(...)``). All inputs update one aggregate per key."""
        from .cogrouped import CogroupedStream

        check_callable(aggregator, "cogroup aggregator", ("key", "value", "aggregate"), self._parent)
        return CogroupedStream(self._draft, [(self, aggregator)])

    def count(self, *, name: Optional[str] = None, changelog: bool = True) -> Table:
        """Count records per key. ``name`` names the node and its store; ``changelog=False``
        keeps the store local (rebuilt from the input when lost)."""
        return self._aggregate(name, Count(), None, changelog)

    def count_distinct(self, value_of: Union[str, Callable[[Any], Any]], *, name: Optional[str] = None,
                       changelog: bool = True) -> Table:
        """Count the distinct values of ``value_of`` per key: a field name (``value[field]``) or
        a function of the value. Exact: the store keeps each key's distinct values (memory
        grows with their number; see :class:`~streamkit.topology.aggregations.CountDistinct`).
        A None value or field is not counted. Emits every changed count."""
        check_value_of(value_of, name or f"{self._parent}.count_distinct")
        return self._aggregate(name, CountDistinct(value_of), None, changelog)

    def reduce(self, reducer: Callable[[Any, Any], Any], *, name: Optional[str] = None,
               value_serde: Optional[Serde] = None, changelog: bool = True) -> Table:
        """Combine values per key: the first value as is, then ``reducer(aggregate, value)``."""
        check_callable(reducer, "reducer", ("aggregate", "value"), name or f"{self._parent}.reduce")
        return self._aggregate(name, Reduce(reducer), value_serde, changelog)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], *,
                  name: Optional[str] = None, value_serde: Optional[Serde] = None,
                  changelog: bool = True) -> Table:
        """Fold values per key: start from ``initializer()``, then ``aggregator(key, value, aggregate)``."""
        where = name or f"{self._parent}.aggregate"
        check_callable(initializer, "initializer", (), where)
        check_callable(aggregator, "aggregator", ("key", "value", "aggregate"), where)
        return self._aggregate(name, Aggregate(initializer, aggregator), value_serde, changelog)


class GroupedTable(_Grouped):
    """A re-keyed table. Aggregations take an adder and a subtractor: when a row
    changes, its old value is subtracted from its old group and the new one added."""

    def _aggregate(self, name: Optional[str], aggregation: Aggregation, value_serde: Optional[Serde],
                   changelog: bool) -> Table:
        check_serde(value_serde, "value_serde")
        node = self._draft.name_for(name, self._parent, aggregation.name)
        _store(self._draft, node, self._key_serde, value_serde, node, changelog)
        self._draft.append(ir.TableAggregateNode(node, (self._parent,), store=node, aggregation=aggregation,
                                                 key_serde=self._key_serde, value_serde=self._value_serde))
        return aggregation_table(self._draft, node, aggregation, self._key_serde, value_serde)

    def count(self, *, name: Optional[str] = None, changelog: bool = True) -> Table:
        """Count rows per group; a row moving to another group moves its count."""
        return self._aggregate(name, Count(), None, changelog)

    def reduce(self, adder: Callable[[Any, Any], Any], subtractor: Callable[[Any, Any], Any], *,
               name: Optional[str] = None, value_serde: Optional[Serde] = None, changelog: bool = True) -> Table:
        """``adder(aggregate, value)`` for new rows, ``subtractor(aggregate, old_value)`` for retractions."""
        where = name or f"{self._parent}.reduce"
        check_callable(adder, "adder", ("aggregate", "value"), where)
        check_callable(subtractor, "subtractor", ("aggregate", "value"), where)
        return self._aggregate(name, Reduce(adder, subtractor), value_serde, changelog)

    def aggregate(self, initializer: Callable[[], Any], adder: Callable[[Any, Any, Any], Any],
                  subtractor: Callable[[Any, Any, Any], Any], *, name: Optional[str] = None,
                  value_serde: Optional[Serde] = None, changelog: bool = True) -> Table:
        """Start from ``initializer()``; ``adder(key, value, agg)`` / ``subtractor(key, old_value, agg)``."""
        where = name or f"{self._parent}.aggregate"
        check_callable(initializer, "initializer", (), where)
        check_callable(adder, "adder", ("key", "value", "aggregate"), where)
        check_callable(subtractor, "subtractor", ("key", "value", "aggregate"), where)
        return self._aggregate(name, Aggregate(initializer, adder, subtractor=subtractor), value_serde, changelog)
