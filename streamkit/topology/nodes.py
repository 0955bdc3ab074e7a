"""The topology IR: immutable nodes that every backend walks.

A node names its parents by name; the DSL only appends nodes, never runs them.
Streams carry ``(key, value, timestamp)``; nodes marked ``emits_changes`` carry
table updates as :class:`Change` values (new and old value of a key).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional, Tuple

from ..serdes import Serde
from .aggregations import Aggregation


@dataclass(frozen=True)
class Node:
    """Base of every IR node."""

    name: str
    parents: Tuple[str, ...]

    kind: ClassVar[str] = "node"
    changes_key: ClassVar[bool] = False
    """True when the node may give records a new key (a later stateful op repartitions)."""
    stateful: ClassVar[bool] = False
    """True when the node keeps per-key state and so needs co-located keys."""
    emits_changes: ClassVar[bool] = False
    """True when the node forwards table updates (Change values) rather than plain values."""

    @property
    def stores(self) -> Tuple[str, ...]:
        return ()


@dataclass(frozen=True)
class SourceNode(Node):
    """Reads a topic (a user topic or an internal repartition topic)."""

    topic: str = ""
    key_serde: Serde = field(default=None)  # type: ignore[assignment]
    value_serde: Serde = field(default=None)  # type: ignore[assignment]
    timestamp_extractor: Optional[Callable[[Any, Any], Any]] = None
    internal: bool = False
    carries_changes: bool = False
    external: Any = None
    """A :class:`streamkit.sources.Source` read instead of the (empty anchor) topic."""
    kind: ClassVar[str] = "source"


@dataclass(frozen=True)
class SinkNode(Node):
    """Writes to a topic; terminal."""

    topic: str = ""
    key_serde: Serde = field(default=None)  # type: ignore[assignment]
    value_serde: Serde = field(default=None)  # type: ignore[assignment]
    kind: ClassVar[str] = "sink"


@dataclass(frozen=True)
class ExternalSinkNode(Node):
    """Delivers to a sink outside the broker (files, a database, a function); terminal.
    ``sink`` is a :class:`streamkit.sinks.Sink`; each task opens its own writer."""

    sink: Any = None
    kind: ClassVar[str] = "external-sink"


@dataclass(frozen=True)
class RepartitionNode(Node):
    """Routes records through ``<app-id>-<name>`` so each key lands on one task.

    The sub-topology split turns it into a sink in the upstream sub-topology and a
    source in the downstream one.
    """

    topic_suffix: str = ""
    partitions: Optional[int] = None
    key_serde: Serde = field(default=None)  # type: ignore[assignment]
    value_serde: Serde = field(default=None)  # type: ignore[assignment]
    carries_changes: bool = False
    kind: ClassVar[str] = "repartition"


@dataclass(frozen=True)
class FilterNode(Node):
    predicate: Callable[[Any, Any], bool] = None  # type: ignore[assignment]
    negate: bool = False
    kind: ClassVar[str] = "filter"


@dataclass(frozen=True)
class MapNode(Node):
    mapper: Callable[[Any, Any], Tuple[Any, Any]] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "map"
    changes_key: ClassVar[bool] = True


@dataclass(frozen=True)
class MapValuesNode(Node):
    mapper: Callable[[Any], Any] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "map_values"


@dataclass(frozen=True)
class FlatMapNode(Node):
    mapper: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "flat_map"
    changes_key: ClassVar[bool] = True


@dataclass(frozen=True)
class FlatMapValuesNode(Node):
    mapper: Callable[[Any], Any] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "flat_map_values"


@dataclass(frozen=True)
class SelectKeyNode(Node):
    selector: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "select_key"
    changes_key: ClassVar[bool] = True


@dataclass(frozen=True)
class PeekNode(Node):
    """Calls ``action(key, value)`` and passes the record on (``foreach`` when terminal)."""

    action: Callable[[Any, Any], None] = None  # type: ignore[assignment]
    terminal: bool = False
    kind: ClassVar[str] = "peek"


@dataclass(frozen=True)
class SplitNode(Node):
    """Routes each record to the first branch whose predicate holds (None = default)."""

    branches: Tuple[Tuple[str, Optional[Callable[[Any, Any], bool]]], ...] = ()
    kind: ClassVar[str] = "split"


@dataclass(frozen=True)
class BranchNode(Node):
    """The output of one branch of a :class:`SplitNode`."""

    index: int = 0
    kind: ClassVar[str] = "branch"


@dataclass(frozen=True)
class MergeNode(Node):
    kind: ClassVar[str] = "merge"


@dataclass(frozen=True)
class ProcessNode(Node):
    """A Processor-API function ``fn(ctx, key, value)`` with the stores it declared."""

    processor: Any = None  # streamkit.processor.ProcessorDefinition
    store_names: Tuple[str, ...] = ()
    kind: ClassVar[str] = "process"
    changes_key: ClassVar[bool] = True  # ctx.forward may set any key
    stateful: ClassVar[bool] = False  # Kafka Streams does not repartition before process()

    @property
    def stores(self) -> Tuple[str, ...]:
        return self.store_names


@dataclass(frozen=True)
class AggregateNode(Node):
    """An aggregation of a grouped stream (``aggregation``: count, reduce, aggregate …);
    emits every update as a Change.

    ``key_serde``/``value_serde`` are the grouped stream's: they serialize the
    repartition topic (if one is needed) and the store's keys.
    """

    store: str = ""
    aggregation: Aggregation = field(default=None)  # type: ignore[assignment]
    key_serde: Serde = field(default=None)  # type: ignore[assignment]
    value_serde: Serde = field(default=None)  # type: ignore[assignment]
    kind: ClassVar[str] = "aggregate"
    stateful: ClassVar[bool] = True
    emits_changes: ClassVar[bool] = True

    @property
    def stores(self) -> Tuple[str, ...]:
        return (self.store,)


@dataclass(frozen=True)
class TableSourceNode(Node):
    """Materializes a topic as a table; emits each update as a Change."""

    store: str = ""
    kind: ClassVar[str] = "table_source"
    emits_changes: ClassVar[bool] = True

    @property
    def stores(self) -> Tuple[str, ...]:
        return (self.store,)


@dataclass(frozen=True)
class TableFilterNode(Node):
    predicate: Callable[[Any, Any], bool] = None  # type: ignore[assignment]
    negate: bool = False
    kind: ClassVar[str] = "table_filter"
    emits_changes: ClassVar[bool] = True


@dataclass(frozen=True)
class TableMapValuesNode(Node):
    mapper: Callable[[Any], Any] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "table_map_values"
    emits_changes: ClassVar[bool] = True


@dataclass(frozen=True)
class ToStreamNode(Node):
    kind: ClassVar[str] = "to_stream"


@dataclass(frozen=True)
class TableGroupByNode(Node):
    """Re-keys table updates: an update retracts the old row's group and adds the new one."""

    selector: Callable[[Any, Any], Tuple[Any, Any]] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "table_group_by"
    changes_key: ClassVar[bool] = True
    emits_changes: ClassVar[bool] = True


@dataclass(frozen=True)
class TableAggregateNode(Node):
    """An aggregation of a grouped table: an update's old row is subtracted from its group
    (``aggregation.subtract``), its new row added."""

    store: str = ""
    aggregation: Aggregation = field(default=None)  # type: ignore[assignment]
    key_serde: Serde = field(default=None)  # type: ignore[assignment]
    value_serde: Serde = field(default=None)  # type: ignore[assignment]
    kind: ClassVar[str] = "table_aggregate"
    stateful: ClassVar[bool] = True
    emits_changes: ClassVar[bool] = True

    @property
    def stores(self) -> Tuple[str, ...]:
        return (self.store,)


@dataclass(frozen=True)
class WindowAggregationNode(Node):
    """What windowed and session aggregations share: the aggregation, a store of windows,
    the window definition, the grouped stream's serdes, the late-records topic and idle close."""

    store: str = ""
    aggregation: Aggregation = field(default=None)  # type: ignore[assignment]
    windows: Any = None  # a streamkit.windowing window definition
    key_serde: Serde = field(default=None)  # type: ignore[assignment]
    value_serde: Serde = field(default=None)  # type: ignore[assignment]
    late_records_topic: Optional[str] = None
    close_idle_after_ms: Optional[int] = None
    stateful: ClassVar[bool] = True
    emits_changes: ClassVar[bool] = True

    @property
    def stores(self) -> Tuple[str, ...]:
        return (self.store,)


@dataclass(frozen=True)
class WindowedAggregateNode(WindowAggregationNode):
    """An aggregation of a grouped stream per time window (tumbling, hopping or
    sliding); emits every update of a window as a Change keyed by ``Windowed``.

    A record whose every window is closed is late: dropped, counted, and written to
    ``late_records_topic`` when set.
    """

    kind: ClassVar[str] = "windowed_aggregate"


@dataclass(frozen=True)
class SessionAggregateNode(WindowAggregationNode):
    """An aggregation of a grouped stream per session. A record bridging sessions
    merges them (``aggregation.merge``); each merged-away session is retracted downstream."""

    kind: ClassVar[str] = "session_aggregate"


@dataclass(frozen=True)
class SuppressNode(Node):
    """Holds back table updates in a changelogged buffer: until the window closes
    (one final result per window) or for a time limit per key (rate limiting)."""

    store: str = ""
    suppressed: Any = None  # streamkit.windowing.Suppressed
    windows: Any = None  # the upstream windows, for until_window_closes
    kind: ClassVar[str] = "suppress"
    emits_changes: ClassVar[bool] = True

    @property
    def stores(self) -> Tuple[str, ...]:
        return (self.store,)


@dataclass(frozen=True)
class StreamTableJoinNode(Node):
    """Joins each stream record with the table's current value for its key (the table is
    read, never triggered: table updates emit nothing). ``left``: a record without a
    table value is joined with ``None`` instead of dropped. ``table_view`` replays the
    table's stateless steps (filter, map_values) over its store's value."""

    table: str = ""
    store: str = ""
    table_view: Tuple[Tuple[str, Callable[..., Any], bool], ...] = ()
    joiner: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    left: bool = False
    key_serde: Serde = field(default=None)  # type: ignore[assignment]
    value_serde: Serde = field(default=None)  # type: ignore[assignment]
    kind: ClassVar[str] = "stream_table_join"
    stateful: ClassVar[bool] = True  # co-located with the table: a changed key repartitions

    @property
    def stores(self) -> Tuple[str, ...]:
        return (self.store,)


@dataclass(frozen=True)
class StreamStreamJoinNode(Node):
    """Joins two streams within ``windows`` (a :class:`~streamkit.windowing.JoinWindows`);
    ``parents`` are (left, right). Each side is buffered in a window store; ``how`` is
    "inner", "left" or "outer". A left/outer result for a record without a partner is
    emitted once its window closes (stream time past its end plus grace), from the
    ``unmatched_store``."""

    windows: Any = None
    joiner: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    how: str = "inner"
    left_store: str = ""
    right_store: str = ""
    unmatched_store: Optional[str] = None
    key_serde: Serde = field(default=None)  # type: ignore[assignment]
    value_serde: Serde = field(default=None)  # type: ignore[assignment]
    other_value_serde: Serde = field(default=None)  # type: ignore[assignment]
    late_records_topic: Optional[str] = None
    kind: ClassVar[str] = "stream_stream_join"
    stateful: ClassVar[bool] = True

    @property
    def stores(self) -> Tuple[str, ...]:
        own = (self.left_store, self.right_store)
        return own + ((self.unmatched_store,) if self.unmatched_store else ())


@dataclass(frozen=True)
class TableTableJoinNode(Node):
    """Joins two tables on their key; ``parents`` are (left, right), each forwarding its
    updates. An update of either side emits the new joined value (or its deletion) as a
    Change, reading the other side's store through its stateless steps (``*_view``).

    A self-join (both sides views of one store) has one parent, the store's owner: each
    of its updates ``Change(new, old)`` emits ``Change(join(left(new), right(new)),
    join(left(old), right(old)))`` once."""

    joiner: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    how: str = "inner"
    left_store: str = ""
    right_store: str = ""
    left_view: Tuple[Tuple[str, Callable[..., Any], bool], ...] = ()
    right_view: Tuple[Tuple[str, Callable[..., Any], bool], ...] = ()
    kind: ClassVar[str] = "table_table_join"
    stateful: ClassVar[bool] = True
    emits_changes: ClassVar[bool] = True

    @property
    def stores(self) -> Tuple[str, ...]:
        return (self.left_store, self.right_store)

    @property
    def self_join(self) -> bool:
        return len(self.parents) == 1


@dataclass(frozen=True)
class GlobalTableJoinNode(Node):
    """Joins each stream record with the row of a global table (fully replicated on every
    worker) whose key is ``key_selector(key, value)``. Needs no co-partitioning."""

    global_store: str = ""
    key_selector: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    joiner: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    left: bool = False
    kind: ClassVar[str] = "global_table_join"


@dataclass(frozen=True)
class ForeignKeySubscribeNode(Node):
    """Left side of a foreign-key join: turns each update of a left row into subscription
    messages (keyed by the foreign key's bytes, or by the left key's when there is no
    foreign key) for the right side's task."""

    extractor: Callable[[Any], Any] = None  # type: ignore[assignment]
    left_key_serde: Serde = field(default=None)  # type: ignore[assignment]
    left_value_serde: Serde = field(default=None)  # type: ignore[assignment]
    right_key_serde: Serde = field(default=None)  # type: ignore[assignment]
    left: bool = False
    """A left join: a left row losing its foreign key is answered by its own key at once;
    an inner join's answer comes from the row its old foreign key referred to."""
    kind: ClassVar[str] = "fk_subscribe"


@dataclass(frozen=True)
class ForeignKeySubscriptionNode(Node):
    """Right side of a foreign-key join: records which left keys refer to each right key
    (the subscription store) and answers each subscription with the right row."""

    store: str = ""
    right_store: str = ""
    right_view: Tuple[Tuple[str, Callable[..., Any], bool], ...] = ()
    right_key_serde: Serde = field(default=None)  # type: ignore[assignment]
    right_value_serde: Serde = field(default=None)  # type: ignore[assignment]
    kind: ClassVar[str] = "fk_subscriptions"
    stateful: ClassVar[bool] = True

    @property
    def stores(self) -> Tuple[str, ...]:
        return (self.store, self.right_store)


@dataclass(frozen=True)
class ForeignKeyRightUpdateNode(Node):
    """Right side of a foreign-key join: an update of a right row is sent to every left
    key subscribed to it."""

    store: str = ""
    right_key_serde: Serde = field(default=None)  # type: ignore[assignment]
    right_value_serde: Serde = field(default=None)  # type: ignore[assignment]
    kind: ClassVar[str] = "fk_right_updates"
    stateful: ClassVar[bool] = True

    @property
    def stores(self) -> Tuple[str, ...]:
        return (self.store,)


@dataclass(frozen=True)
class ForeignKeyJoinNode(Node):
    """Left side of a foreign-key join: joins each response with the left row it answers,
    dropping responses to a left value that has changed since (a hash check), and keeps
    the result in ``store`` so that each update carries the previous result."""

    store: str = ""
    left_store: str = ""
    left_view: Tuple[Tuple[str, Callable[..., Any], bool], ...] = ()
    left_key_serde: Serde = field(default=None)  # type: ignore[assignment]
    left_value_serde: Serde = field(default=None)  # type: ignore[assignment]
    right_value_serde: Serde = field(default=None)  # type: ignore[assignment]
    joiner: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    left: bool = False
    kind: ClassVar[str] = "fk_join"
    stateful: ClassVar[bool] = True
    emits_changes: ClassVar[bool] = True

    @property
    def stores(self) -> Tuple[str, ...]:
        return (self.store, self.left_store)


class Change:
    """A table update: the key's ``new`` and ``old`` value (``None`` = absent)."""

    __slots__ = ("new", "old")

    def __init__(self, new: Any, old: Any) -> None:
        self.new = new
        self.old = old

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Change) and self.new == other.new and self.old == other.old

    def __repr__(self) -> str:
        return f"Change(new={self.new!r}, old={self.old!r})"
