"""Table: the latest value per key, as a stream of updates (Kafka Streams' KTable)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple

from ..core.names import repartition_suffix
from ..errors import TopologyError
from ..serdes import Json, Serde
from ..stores import StoreSpec
from ..topology import nodes as ir
from ..topology.aggregations import Aggregation
from .draft import TopologyDraft, check_callable, check_serde

if TYPE_CHECKING:
    from ..windowing.suppressed import Suppressed
    from .grouped import GroupedTable
    from .stream import Stream


class Table:
    """A changelog view of a keyed dataset: every update of a key is forwarded
    downstream (new value; ``None`` when the key is deleted)."""

    def __init__(self, draft: TopologyDraft, node: str, *, key_serde: Optional[Serde] = None,
                 value_serde: Optional[Serde] = None, windows: Any = None) -> None:
        self._draft = draft
        self._node = node
        self._key_serde = key_serde or Json()
        self._value_serde = value_serde or Json()
        self._windows = windows
        """The windows of a windowed table (keys are ``Windowed``), else None."""

    @property
    def windowed(self) -> bool:
        """Whether the keys are ``sk.Windowed`` (the table is a windowed aggregation)."""
        return self._windows is not None

    @property
    def name(self) -> str:
        return self._node

    def _then(self, node: ir.Node, *, same_values: bool = False) -> "Table":
        self._draft.append(node)
        return Table(self._draft, node.name, key_serde=self._key_serde, windows=self._windows,
                     value_serde=self._value_serde if same_values else None)

    def _table_key_serde(self) -> Serde:
        if self._windows is None:
            return self._key_serde
        from ..windowing import WindowedSerde
        return WindowedSerde(self._key_serde)

    def suppress(self, suppressed: "Suppressed", *, name: Optional[str] = None,
                 value_serde: Optional[Serde] = None) -> "Table":
        """Hold updates back: ``sk.Suppressed.until_window_closes()`` forwards each window's
        final result once, when it closes; ``sk.Suppressed.until_time_limit(t)`` forwards
        a key's latest value at most once per ``t`` of stream time. The buffer is a
        changelogged store named like the node, so a restart neither repeats nor loses
        a result under exactly_once. ``value_serde``: how the buffer stores values (default:
        the table's)."""
        from ..windowing.suppressed import Suppressed

        node = self._draft.name_for(name, self._node, "suppress")
        if not isinstance(suppressed, Suppressed):
            raise TopologyError(
                f"{node}: suppress() takes sk.Suppressed.until_window_closes() or "
                f"sk.Suppressed.until_time_limit(...), got {suppressed!r}")
        if suppressed.final_results and self._windows is None:
            raise TopologyError(
                f"{node}: Suppressed.until_window_closes() needs a windowed table, but '{self._node}' is not "
                "windowed; use group_by(...).windowed_by(...) first, or Suppressed.until_time_limit(...)")
        check_serde(value_serde, "value_serde")
        values = value_serde or self._value_serde
        self._draft.add_store(StoreSpec(node, "suppression", self._table_key_serde(), values), node)
        self._draft.append(ir.SuppressNode(node, (self._node,), store=node, suppressed=suppressed,
                                           windows=self._windows))
        return Table(self._draft, node, key_serde=self._key_serde, value_serde=values, windows=self._windows)

    def filter(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> "Table":
        """Keep rows for which ``predicate(key, value)`` holds; a row that stops matching
        is deleted downstream (a ``None`` update). Stateless."""
        node = self._draft.name_for(name, self._node, "filter")
        check_callable(predicate, "filter predicate", ("key", "value"), node)
        return self._then(ir.TableFilterNode(node, (self._node,), predicate=predicate), same_values=True)

    def filter_not(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> "Table":
        """Drop rows for which ``predicate(key, value)`` holds. Stateless."""
        node = self._draft.name_for(name, self._node, "filter_not")
        check_callable(predicate, "filter_not predicate", ("key", "value"), node)
        return self._then(ir.TableFilterNode(node, (self._node,), predicate=predicate, negate=True),
                          same_values=True)

    def map_values(self, mapper: Callable[[Any], Any], *, name: Optional[str] = None) -> "Table":
        """Replace each row's value by ``mapper(value)``. Stateless."""
        node = self._draft.name_for(name, self._node, "map_values")
        check_callable(mapper, "map_values function", ("value",), node)
        return self._then(ir.TableMapValuesNode(node, (self._node,), mapper=mapper))

    def _materialized_view(self, where: str) -> Tuple[str, str, Tuple[Tuple[str, Any, bool], ...]]:
        """The node and store holding this table's rows, and the stateless steps (filter,
        map_values) from there to this table, for a join to read it."""
        steps = []
        node = self._draft.names[self._node]
        while isinstance(node, (ir.TableFilterNode, ir.TableMapValuesNode)):
            if isinstance(node, ir.TableFilterNode):
                steps.append(("filter", node.predicate, node.negate))
            else:
                steps.append(("map_values", node.mapper, False))
            node = self._draft.names[node.parents[0]]
        if not isinstance(node, (ir.TableSourceNode, ir.AggregateNode, ir.TableAggregateNode, ir.ForeignKeyJoinNode)):
            raise TopologyError(
                f"{where}: table '{self._node}' cannot be joined: it is not backed by a store ({node.kind}); "
                "join the table it comes from, or materialize it with to_stream().to(topic) and b.table(topic)")
        return node.name, node.stores[0], tuple(reversed(steps))

    def join(self, other: "Table", joiner: Callable[[Any, Any], Any], *,
             foreign_key_extractor: Optional[Callable[[Any], Any]] = None, name: Optional[str] = None,
             value_serde: Optional[Serde] = None) -> "Table":
        """Join with ``other``: ``joiner(value, other_value)`` for keys with a row on both
        sides. An update or delete on either side emits the new result or its deletion.

        With ``foreign_key_extractor(value)``, each row joins the row of ``other`` whose key
        the extractor returns (many-to-one); the tables need not be co-partitioned. A row
        whose foreign key changes has its old result replaced (or deleted). The results
        are kept in a store named like the join (``value_serde`` stores them)."""
        return self._join(other, joiner, foreign_key_extractor, name, value_serde, how="inner")

    def left_join(self, other: "Table", joiner: Callable[[Any, Any], Any], *,
                  foreign_key_extractor: Optional[Callable[[Any], Any]] = None, name: Optional[str] = None,
                  value_serde: Optional[Serde] = None) -> "Table":
        """As :meth:`join`, but every row of this table has a result: ``joiner(value, None)``
        while ``other`` has no matching row."""
        return self._join(other, joiner, foreign_key_extractor, name, value_serde, how="left")

    def outer_join(self, other: "Table", joiner: Callable[[Any, Any], Any], *,
                   name: Optional[str] = None) -> "Table":
        """Key join where a key with a row on either side has a result (``None`` for the
        missing side)."""
        return self._join(other, joiner, None, name, None, how="outer")

    def _join(self, other: "Table", joiner: Callable[[Any, Any], Any],
              extractor: Optional[Callable[[Any], Any]], name: Optional[str], value_serde: Optional[Serde], *,
              how: str) -> "Table":
        operation = {"inner": "join", "left": "left_join", "outer": "outer_join"}[how]
        node = self._draft.name_for(name, self._node, operation)
        if not isinstance(other, Table) or other._draft is not self._draft:
            raise TopologyError(f"{node}: Table.{operation}() takes a table of the same topology, got {other!r}")
        if self.windowed or other.windowed:
            raise TopologyError(f"{node}: windowed tables cannot be joined")
        check_callable(joiner, "joiner", ("value", "other_value"), node)
        check_serde(value_serde, "value_serde")
        left_node, left_store, left_view = self._materialized_view(node)
        right_node, right_store, right_view = other._materialized_view(node)
        if extractor is None:
            # A self-join (both sides views of one store) reads the store owner's own
            # updates, so each update is joined once, old view with old view.
            parents = (left_node,) if left_node == right_node else (self._node, other._node)
            self._draft.append(ir.TableTableJoinNode(
                node, parents, joiner=joiner, how=how, left_store=left_store,
                right_store=right_store, left_view=left_view, right_view=right_view))
            return Table(self._draft, node, key_serde=self._key_serde)
        return self._foreign_key_join(other, joiner, extractor, node, value_serde, left_store, left_view,
                                      right_store, right_view, left=how == "left")

    def _foreign_key_join(self, other: "Table", joiner: Callable[[Any, Any], Any], extractor: Callable[[Any], Any],
                          node: str, value_serde: Optional[Serde], left_store: str, left_view: Any,
                          right_store: str, right_view: Any, *, left: bool) -> "Table":
        from ..serdes import Bytes
        from ..topology.fk_serdes import ResponseSerde, SubscriptionSerde

        check_callable(extractor, "foreign_key_extractor", ("value",), node)
        draft = self._draft
        subscribe = draft.append(ir.ForeignKeySubscribeNode(
            f"{node}-subscribe", (self._node,), extractor=extractor, left_key_serde=self._key_serde,
            left_value_serde=self._value_serde, right_key_serde=other._key_serde, left=left))
        registration = draft.append(ir.RepartitionNode(
            repartition_suffix(f"{node}-subscription"), (subscribe.name,), topic_suffix=repartition_suffix(f"{node}-subscription"),
            key_serde=Bytes(), value_serde=SubscriptionSerde()))
        subscriptions = f"{node}-subscriptions"
        draft.add_store(StoreSpec(subscriptions, "key_value", Bytes(), Bytes()), node)
        answers = draft.append(ir.ForeignKeySubscriptionNode(
            subscriptions, (registration.name,), store=subscriptions, right_store=right_store,
            right_view=right_view, right_key_serde=other._key_serde, right_value_serde=other._value_serde))
        updates = draft.append(ir.ForeignKeyRightUpdateNode(
            f"{node}-right-updates", (other._node,), store=subscriptions, right_key_serde=other._key_serde,
            right_value_serde=other._value_serde))
        responses = draft.append(ir.RepartitionNode(
            repartition_suffix(f"{node}-response"), (answers.name, updates.name),
            topic_suffix=repartition_suffix(f"{node}-response"), key_serde=Bytes(), value_serde=ResponseSerde()))
        results = value_serde or Json()
        draft.add_store(StoreSpec(node, "key_value", self._key_serde, results), node)
        draft.append(ir.ForeignKeyJoinNode(
            node, (responses.name,), store=node, left_store=left_store, left_view=left_view,
            left_key_serde=self._key_serde, left_value_serde=self._value_serde,
            right_value_serde=other._value_serde, joiner=joiner, left=left))
        return Table(draft, node, key_serde=self._key_serde, value_serde=results)

    def to_stream(self, *, name: Optional[str] = None) -> "Stream":
        """The table's updates as a stream of (key, new value); deletes are ``None`` values."""
        from .stream import Stream

        node = self._draft.name_for(name, self._node, "to_stream")
        self._draft.append(ir.ToStreamNode(node, (self._node,)))
        return Stream(self._draft, node, key_serde_hint=self._table_key_serde() if self._windows else None)

    def group_by(self, selector: Callable[[Any, Any], Tuple[Any, Any]], *,
                 key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None,
                 name: Optional[str] = None) -> "GroupedTable":
        """Re-key rows with ``selector(key, value) -> (group_key, group_value)``, for
        count/reduce/aggregate with a subtractor. Key-changing: repartitions."""
        from .grouped import GroupedTable

        node = self._draft.name_for(name, self._node, "group_by")
        check_callable(selector, "group_by function", ("key", "value"), node)
        check_serde(key_serde, "key_serde")
        check_serde(value_serde, "value_serde")
        self._draft.append(ir.TableGroupByNode(node, (self._node,), selector=selector))
        return GroupedTable(self._draft, node, key_serde, value_serde)

    def __repr__(self) -> str:
        return f"<Table {self._node!r}>"


def aggregation_table(draft: TopologyDraft, node: str, aggregation: Aggregation, key_serde: Serde,
                      value_serde: Optional[Serde], windows: Any = None) -> Table:
    """The table of aggregation ``node``'s results: its store's rows, or, when the aggregation
    stores something else than it emits (``aggregation.result``: count_distinct keeps a set,
    emits its size), a view ``<node>.result`` of them (which joins read through too)."""
    table = Table(draft, node, key_serde=key_serde, value_serde=value_serde or Json(), windows=windows)
    if aggregation.result is None:
        return table
    return table._then(ir.TableMapValuesNode(draft.name_for(None, node, "result"), (node,), mapper=aggregation.result))
