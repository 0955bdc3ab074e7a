"""Table: the latest value per key, as a stream of updates (Kafka Streams' KTable)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple

from ..errors import TopologyError
from ..serdes import Json, Serde
from ..stores import StoreSpec
from ..topology import nodes as ir
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
        if not isinstance(node, (ir.TableSourceNode, ir.AggregateNode, ir.TableAggregateNode)):
            raise TopologyError(
                f"{where}: table '{self._node}' cannot be joined: it is not backed by a store ({node.kind}); "
                "join the table it comes from, or materialize it with to_stream().to(topic) and b.table(topic)")
        return node.name, node.stores[0], tuple(reversed(steps))

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
