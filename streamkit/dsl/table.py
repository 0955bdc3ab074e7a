"""Table: the latest value per key, as a stream of updates (Kafka Streams' KTable)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple

from ..serdes import Serde
from ..topology import nodes as ir
from .draft import TopologyDraft, check_callable, check_serde

if TYPE_CHECKING:
    from .grouped import GroupedTable
    from .stream import Stream


class Table:
    """A changelog view of a keyed dataset: every update of a key is forwarded
    downstream (new value; ``None`` when the key is deleted)."""

    def __init__(self, draft: TopologyDraft, node: str) -> None:
        self._draft = draft
        self._node = node

    @property
    def name(self) -> str:
        return self._node

    def _then(self, node: ir.Node) -> "Table":
        self._draft.append(node)
        return Table(self._draft, node.name)

    def filter(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> "Table":
        """Keep rows for which ``predicate(key, value)`` holds; a row that stops matching
        is deleted downstream (a ``None`` update). Stateless."""
        node = self._draft.name_for(name, self._node, "filter")
        check_callable(predicate, "filter predicate", ("key", "value"), node)
        return self._then(ir.TableFilterNode(node, (self._node,), predicate=predicate))

    def filter_not(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> "Table":
        """Drop rows for which ``predicate(key, value)`` holds. Stateless."""
        node = self._draft.name_for(name, self._node, "filter_not")
        check_callable(predicate, "filter_not predicate", ("key", "value"), node)
        return self._then(ir.TableFilterNode(node, (self._node,), predicate=predicate, negate=True))

    def map_values(self, mapper: Callable[[Any], Any], *, name: Optional[str] = None) -> "Table":
        """Replace each row's value by ``mapper(value)``. Stateless."""
        node = self._draft.name_for(name, self._node, "map_values")
        check_callable(mapper, "map_values function", ("value",), node)
        return self._then(ir.TableMapValuesNode(node, (self._node,), mapper=mapper))

    def to_stream(self, *, name: Optional[str] = None) -> "Stream":
        """The table's updates as a stream of (key, new value); deletes are ``None`` values."""
        from .stream import Stream

        node = self._draft.name_for(name, self._node, "to_stream")
        self._draft.append(ir.ToStreamNode(node, (self._node,)))
        return Stream(self._draft, node)

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
