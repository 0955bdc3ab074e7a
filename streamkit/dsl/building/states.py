"""What each DSL kind is, as plain data: the draft it appends to, the node it reads and
the serdes and options later operations need. A kind holds one state; the building
functions take states and return new ones."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

from ...serdes import Json, Serde
from ...windowing import SessionWindows
from ..draft import TopologyDraft

Aggregator = Callable[[Any, Any, Any], Any]


@dataclass(frozen=True, eq=False)
class StreamState:
    """A record stream: the node producing it."""

    draft: TopologyDraft
    node: str
    keyless: bool = False
    """True when the keys come from a topic whose key serde is Void (nothing to group by)."""
    key_serde_hint: Optional[Serde] = None
    """The serde ``to()`` uses for keys by default (``Windowed`` keys of a windowed table)."""

    def __repr__(self) -> str:
        return f"<Stream {self.node!r}>"


@dataclass(frozen=True, eq=False)
class TableState:
    """A table: the node forwarding its updates, its serdes and, if windowed, its windows."""

    draft: TopologyDraft
    node: str
    key_serde: Serde
    value_serde: Serde
    windows: Any = None
    """The windows of a windowed table (keys are ``Windowed``), else None."""

    @classmethod
    def of(cls, draft: TopologyDraft, node: str, *, key_serde: Optional[Serde] = None,
           value_serde: Optional[Serde] = None, windows: Any = None) -> "TableState":
        """A table state whose missing serdes are JSON."""
        return cls(draft, node, key_serde or Json(), value_serde or Json(), windows)

    @property
    def windowed(self) -> bool:
        return self.windows is not None

    def __repr__(self) -> str:
        return f"<Table {self.node!r}>"


@dataclass(frozen=True, eq=False)
class GroupedState:
    """A grouped stream or table: the node it groups and the grouping serdes (of the
    repartition topic, if any, and the store's keys)."""

    draft: TopologyDraft
    parent: str
    key_serde: Serde
    value_serde: Serde
    of_table: bool = False
    """True for a re-keyed table (aggregated with a subtractor), False for a grouped stream."""

    @classmethod
    def of(cls, draft: TopologyDraft, parent: str, key_serde: Optional[Serde], value_serde: Optional[Serde], *,
           of_table: bool = False) -> "GroupedState":
        """A grouped state whose missing serdes are JSON."""
        return cls(draft, parent, key_serde or Json(), value_serde or Json(), of_table)

    def __repr__(self) -> str:
        return f"<{'GroupedTable' if self.of_table else 'GroupedStream'} after {self.parent!r}>"


@dataclass(frozen=True, eq=False)
class WindowedState:
    """A grouped stream cut into time windows or sessions."""

    grouped: GroupedState
    windows: Any

    @property
    def sessions(self) -> bool:
        """Whether the windows are sessions (else tumbling, hopping or sliding windows)."""
        return isinstance(self.windows, SessionWindows)


@dataclass(frozen=True, eq=False)
class CogroupState:
    """Grouped streams to aggregate together, each with its own aggregator."""

    draft: TopologyDraft
    inputs: Tuple[Tuple[GroupedState, Aggregator], ...]

    def __repr__(self) -> str:
        return f"<CogroupedStream of {[grouped.parent for grouped, _ in self.inputs]}>"
