"""Stream: an unbounded sequence of key-value records and its stateless operations."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from ..core.names import repartition_suffix
from ..errors import TopologyError
from ..processor import ProcessorDefinition
from ..serdes import Serde
from ..topics import TopicSpec
from ..topology import nodes as ir
from ..windowing.join_windows import JoinWindows
from .draft import TopologyDraft, check_callable, check_serde

if TYPE_CHECKING:
    from ..sinks.base import Sink
    from .global_table import GlobalTable
    from .grouped import GroupedStream
    from .table import Table

KV = Tuple[Any, Any]


class Stream:
    """A record stream (Kafka Streams' KStream). Every method appends to the topology
    and returns a new object; nothing runs until a worker or the test driver runs it.

    Operations here are stateless. Those marked *key-changing* make a later
    stateful operation (``group_by_key().count()`` …) repartition the stream
    through an internal topic first.
    """

    def __init__(self, draft: TopologyDraft, node: str, *, keyless: bool = False,
                 key_serde_hint: Optional[Serde] = None) -> None:
        self._draft = draft
        self._node = node
        self._keyless = keyless
        self._key_serde_hint = key_serde_hint
        """The serde ``to()`` uses for keys by default (``Windowed`` keys of a windowed table)."""

    @property
    def name(self) -> str:
        """The name of the node producing this stream."""
        return self._node

    def _then(self, node: ir.Node, *, keyless: Optional[bool] = None) -> "Stream":
        self._draft.append(node)
        hint = None if node.changes_key or isinstance(node, ir.MergeNode) else self._key_serde_hint
        return Stream(self._draft, node.name, keyless=self._keyless if keyless is None else keyless,
                      key_serde_hint=hint)

    def _named(self, name: Optional[str], kind: str) -> str:
        return self._draft.name_for(name, self._node, kind)

    def filter(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> "Stream":
        """Keep records for which ``predicate(key, value)`` is true. Stateless."""
        node = self._named(name, "filter")
        check_callable(predicate, "filter predicate", ("key", "value"), node)
        return self._then(ir.FilterNode(node, (self._node,), predicate=predicate))

    def filter_not(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> "Stream":
        """Drop records for which ``predicate(key, value)`` is true. Stateless."""
        node = self._named(name, "filter_not")
        check_callable(predicate, "filter_not predicate", ("key", "value"), node)
        return self._then(ir.FilterNode(node, (self._node,), predicate=predicate, negate=True))

    def map(self, mapper: Callable[[Any, Any], KV], *, name: Optional[str] = None) -> "Stream":
        """Replace each record by ``mapper(key, value) -> (new_key, new_value)``.
        Stateless, key-changing."""
        node = self._named(name, "map")
        check_callable(mapper, "map function", ("key", "value"), node)
        return self._then(ir.MapNode(node, (self._node,), mapper=mapper), keyless=False)

    def map_values(self, mapper: Callable[[Any], Any], *, name: Optional[str] = None) -> "Stream":
        """Replace each value by ``mapper(value)``; the key stays. Stateless."""
        node = self._named(name, "map_values")
        check_callable(mapper, "map_values function", ("value",), node)
        return self._then(ir.MapValuesNode(node, (self._node,), mapper=mapper))

    def flat_map(self, mapper: Callable[[Any, Any], Iterable[KV]], *, name: Optional[str] = None) -> "Stream":
        """Replace each record by the ``(key, value)`` pairs ``mapper(key, value)`` returns
        (none, one or many). Stateless, key-changing."""
        node = self._named(name, "flat_map")
        check_callable(mapper, "flat_map function", ("key", "value"), node)
        return self._then(ir.FlatMapNode(node, (self._node,), mapper=mapper), keyless=False)

    def flat_map_values(self, mapper: Callable[[Any], Iterable[Any]], *,
                        name: Optional[str] = None) -> "Stream":
        """Replace each record by one record per value in ``mapper(value)``, same key. Stateless."""
        node = self._named(name, "flat_map_values")
        check_callable(mapper, "flat_map_values function", ("value",), node)
        return self._then(ir.FlatMapValuesNode(node, (self._node,), mapper=mapper))

    def select_key(self, selector: Callable[[Any, Any], Any], *, name: Optional[str] = None) -> "Stream":
        """Set each record's key to ``selector(key, value)``. Stateless, key-changing."""
        node = self._named(name, "select_key")
        check_callable(selector, "select_key function", ("key", "value"), node)
        return self._then(ir.SelectKeyNode(node, (self._node,), selector=selector), keyless=False)

    def peek(self, action: Callable[[Any, Any], None], *, name: Optional[str] = None) -> "Stream":
        """Call ``action(key, value)`` for each record and pass it on unchanged. Stateless."""
        node = self._named(name, "peek")
        check_callable(action, "peek action", ("key", "value"), node)
        return self._then(ir.PeekNode(node, (self._node,), action=action))

    def foreach(self, action: Callable[[Any, Any], None], *, name: Optional[str] = None) -> None:
        """Call ``action(key, value)`` for each record; terminal. Side effects are
        at-least-once: after a crash, records since the last commit are seen again."""
        node = self._named(name, "foreach")
        check_callable(action, "foreach action", ("key", "value"), node)
        self._draft.append(ir.PeekNode(node, (self._node,), action=action, terminal=True))

    def split(self, *, name: Optional[str] = None) -> "BranchedStream":
        """Route each record to the first branch whose predicate holds. Stateless.

        >>> # branches = stream.split().branch(is_big, name="big").default_branch(name="rest")
        >>> # branches["big"].to("big-orders")
        """
        return BranchedStream(self, self._named(name, "split"))

    def merge(self, other: "Stream", *, name: Optional[str] = None) -> "Stream":
        """Interleave this stream with ``other`` (no ordering guarantee across them). Stateless."""
        if not isinstance(other, Stream) or other._draft is not self._draft:
            raise TopologyError(f"merge() takes a stream of the same topology, got {other!r}")
        node = self._named(name, "merge")
        return self._then(ir.MergeNode(node, (self._node, other._node)),
                          keyless=self._keyless and other._keyless)

    def repartition(self, *, partitions: Optional[int] = None, name: Optional[str] = None,
                    key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None) -> "Stream":
        """Send records through an internal topic ``<app-id>-<name>``, partitioned by key
        (``partitions`` defaults to the upstream task count)."""
        node = self._named(name, "repartition")
        check_serde(key_serde, "key_serde")
        check_serde(value_serde, "value_serde")
        if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
            raise TopologyError(f"{node}: partitions must be a positive int, got {partitions!r}")
        from ..serdes import Json
        suffix = repartition_suffix(node)
        return self._then(ir.RepartitionNode(node, (self._node,), topic_suffix=suffix, partitions=partitions,
                                             key_serde=key_serde or Json(), value_serde=value_serde or Json()))

    def process(self, processor: ProcessorDefinition, *, name: Optional[str] = None) -> "Stream":
        """Run a Processor-API function (see ``@app.processor``); the returned stream
        holds what it forwards. Stateful if the processor declared stores."""
        if not isinstance(processor, ProcessorDefinition):
            raise TopologyError(
                f"process() takes a function decorated with @app.processor(...), got {processor!r}")
        node = self._named(name, processor.display_name)
        for spec in processor.stores:
            self._draft.add_store(spec, node)
        return self._then(ir.ProcessNode(node, (self._node,), processor=processor,
                                         store_names=processor.store_names), keyless=False)

    def to(self, topic: Union[str, TopicSpec], *, key_serde: Optional[Serde] = None,
           value_serde: Optional[Serde] = None, name: Optional[str] = None) -> None:
        """Write every record to ``topic``; terminal. Serdes: those given here, else the
        topic's declared ones, else the app's defaults. Keys are placed with Kafka's
        default partitioner; records without a key stay on the task's partition. A
        windowed key (``Windowed``, from a windowed aggregation) is placed by its record
        key alone, so all of a key's windows share a partition (Kafka Streams' rule)."""
        check_serde(key_serde, "key_serde")
        check_serde(value_serde, "value_serde")
        if key_serde is None and self._key_serde_hint is not None and not isinstance(topic, TopicSpec) \
                and topic not in self._draft.declared_topics:
            key_serde = self._key_serde_hint  # Windowed keys: JSON {"key", "start", "end"}
        spec = self._draft.resolve_topic(topic, key_serde, value_serde)
        node = self._draft.name_for(name, self._node, f"to-{spec.name}")
        self._draft.append(ir.SinkNode(node, (self._node,), topic=spec.name, key_serde=spec.key_serde,
                                       value_serde=spec.value_serde))

    def sink(self, sink: "Sink", *, name: Optional[str] = None) -> None:
        """Deliver every record to ``sink`` (``sk.sinks.ParquetArchive``, ``JsonLines``,
        ``Database``, ``Callback`` …); terminal. Delivery happens at each commit, before
        the input offsets are committed."""
        from ..sinks.base import Sink

        if not isinstance(sink, Sink):
            raise TopologyError(f"sink() takes a sink such as sk.sinks.ParquetArchive(path), got {sink!r}")
        node = self._draft.name_for(name, self._node, f"sink-{type(sink).__name__.lower()}")
        target = sink.exclusive_target()
        for other in self._draft.nodes:
            if target is not None and isinstance(other, ir.ExternalSinkNode) and \
                    other.sink.exclusive_target() == target:
                raise TopologyError(f"sinks '{other.name}' and '{node}' both write {target}: their files would "
                                    "clash; give each sink its own directory")
        self._draft.append(ir.ExternalSinkNode(node, (self._node,), sink=sink))

    def group_by_key(self, *, key_serde: Optional[Serde] = None,
                     value_serde: Optional[Serde] = None) -> "GroupedStream":
        """Group records by their current key, for count/reduce/aggregate. Repartitions
        first only if an upstream operation changed the key."""
        from .grouped import GroupedStream

        if self._keyless:
            raise TopologyError(
                f"group_by_key() after '{self._node}': this stream has no key (its topic's key serde "
                "is Void), so a stateful operation cannot group it; use group_by(lambda key, value: ...) "
                "or select_key(...) first")
        check_serde(key_serde, "key_serde")
        check_serde(value_serde, "value_serde")
        return GroupedStream(self._draft, self._node, key_serde, value_serde)

    def join(self, other: Union["Stream", "Table", "GlobalTable"], joiner: Optional[Callable[[Any, Any], Any]] = None,
             windows: Optional[JoinWindows] = None, *, key_selector: Optional[Callable[[Any, Any], Any]] = None,
             name: Optional[str] = None, key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None,
             other_value_serde: Optional[Serde] = None, late_records_topic: Optional[str] = None) -> "Stream":
        """Inner join; ``joiner(value, other_value)`` makes each result.

        - With a stream and ``sk.JoinWindows``: records of the two streams with the same
          key and timestamps within the window join (every pair). Both sides are buffered
          in changelogged window stores; a record arriving after its window closed is
          late (dropped, counted, written to ``late_records_topic`` if given).
        - With a table: each record joins the table's current value for its key; records
          without a row are dropped and table updates emit nothing.
        - With a global table: each record joins the row whose key is
          ``key_selector(key, value)``; no co-partitioning is needed.

        Stream and table inputs must be co-partitioned; a key changed before the join
        repartitions the stream (``key_serde``, ``value_serde`` and, for the other
        stream, ``other_value_serde`` serialize those topics and the join's buffers).
        """
        return self._join(other, joiner, windows, key_selector, name, key_serde, value_serde, other_value_serde,
                          late_records_topic, how="inner")

    def left_join(self, other: Union["Stream", "Table", "GlobalTable"],
                  joiner: Optional[Callable[[Any, Any], Any]] = None, windows: Optional[JoinWindows] = None, *,
                  key_selector: Optional[Callable[[Any, Any], Any]] = None, name: Optional[str] = None,
                  key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None,
                  other_value_serde: Optional[Serde] = None, late_records_topic: Optional[str] = None) -> "Stream":
        """As :meth:`join`, but every record of this stream gives a result: one without a
        partner is joined with ``None``. For a stream-stream join, that result is emitted
        when the record's window closes (stream time past its end plus grace), and only
        if no partner arrived by then. A record with a ``None`` key can have no partner: it is
        joined with ``None`` at once (as Kafka Streams 3.7+ does); :meth:`join` drops it."""
        return self._join(other, joiner, windows, key_selector, name, key_serde, value_serde, other_value_serde,
                          late_records_topic, how="left")

    def outer_join(self, other: "Stream", joiner: Callable[[Any, Any], Any], windows: JoinWindows, *,
                   name: Optional[str] = None, key_serde: Optional[Serde] = None,
                   value_serde: Optional[Serde] = None, other_value_serde: Optional[Serde] = None,
                   late_records_topic: Optional[str] = None) -> "Stream":
        """Stream-stream join where a record of either side without a partner gives
        ``joiner(value, None)`` or ``joiner(None, other_value)`` when its window closes (at once
        for a record with a ``None`` key, which can have no partner)."""
        return self._join(other, joiner, windows, None, name, key_serde, value_serde, other_value_serde,
                          late_records_topic, how="outer")

    def _join(self, other: Any, joiner: Optional[Callable[[Any, Any], Any]], windows: Optional[JoinWindows],
              key_selector: Optional[Callable[[Any, Any], Any]], name: Optional[str], key_serde: Optional[Serde],
              value_serde: Optional[Serde], other_value_serde: Optional[Serde],
              late_records_topic: Optional[str], *, how: str) -> "Stream":
        from .global_table import GlobalTable
        from .table import Table

        operation = {"inner": "join", "left": "left_join", "outer": "outer_join"}[how]
        node = self._named(name, operation)
        if joiner is None:
            raise TopologyError(f"{node}: {operation}() needs a joiner: joiner(value, other_value) -> result")
        if isinstance(other, Stream):
            if windows is None:
                raise TopologyError(f"{node}: a stream-stream {operation}() needs windows: "
                                    "sk.JoinWindows.of(timedelta(...), grace=timedelta(...))")
            if key_selector is not None:
                raise TopologyError(f"{node}: key_selector is for global-table joins only")
            return self._stream_join(other, joiner, windows, node, key_serde, value_serde, other_value_serde,
                                     late_records_topic, how)
        if windows is not None or late_records_topic is not None or other_value_serde is not None:
            raise TopologyError(f"{node}: windows, late_records_topic and other_value_serde are for "
                                "stream-stream joins; a table join reads the table's current value")
        if how == "outer":
            raise TopologyError(f"{node}: outer_join() joins two streams; a stream has no outer join "
                                "with a table (use left_join)")
        if isinstance(other, GlobalTable):
            return self._global_join(other, joiner, key_selector, node, left=how == "left")
        if key_selector is not None:
            raise TopologyError(f"{node}: key_selector is for global-table joins (b.global_table(...)); "
                                "to join a table on another key, select_key(...) first")
        if not isinstance(other, Table):
            raise TopologyError(
                f"{node}: {operation}() takes a stream, a table or a global table of the same topology; "
                f"got {other!r}")
        return self._table_join(other, joiner, node, key_serde, value_serde, left=how == "left")

    def _global_join(self, table: "GlobalTable", joiner: Callable[[Any, Any], Any],
                     key_selector: Optional[Callable[[Any, Any], Any]], node: str, *, left: bool) -> "Stream":
        if table._draft is not self._draft:
            raise TopologyError(f"{node}: the global table belongs to another topology")
        if key_selector is None:
            raise TopologyError(f"{node}: a global-table join needs key_selector=lambda key, value: <the "
                                "table's key for this record>")
        check_callable(key_selector, "key_selector", ("key", "value"), node)
        check_callable(joiner, "joiner", ("value", "table_value"), node)
        return self._then(ir.GlobalTableJoinNode(node, (self._node,), global_store=table.store,
                                                 key_selector=key_selector, joiner=joiner, left=left))

    def _stream_join(self, other: "Stream", joiner: Callable[[Any, Any], Any], windows: JoinWindows, node: str,
                     key_serde: Optional[Serde], value_serde: Optional[Serde], other_value_serde: Optional[Serde],
                     late_records_topic: Optional[str], how: str) -> "Stream":
        from ..serdes import Bytes, Json
        from ..stores import StoreSpec
        from ..state.value_list import ValueListSerde

        if other._draft is not self._draft:
            raise TopologyError(f"{node}: the other stream belongs to another topology")
        if not isinstance(windows, JoinWindows):
            raise TopologyError(f"{node}: windows must be sk.JoinWindows.of(...), got {windows!r}")
        for stream in (self, other):
            if stream._keyless:
                raise TopologyError(f"{node}: stream '{stream._node}' has no key (Void key serde): "
                                    "select_key(...) before the join")
        check_callable(joiner, "joiner", ("value", "other_value"), node)
        for serde, what in ((key_serde, "key_serde"), (value_serde, "value_serde"),
                            (other_value_serde, "other_value_serde")):
            check_serde(serde, what)
        # A repartitioned side must place keys as the other side's topic does: its key serde.
        keys = (key_serde or self._draft.source_key_serde(self._node) or self._draft.source_key_serde(other._node)
                or Json())
        left_values, right_values = value_serde or Json(), other_value_serde or Json()
        retention = max(1, windows.retention_ms)
        size = max(1, windows.size_ms)
        left_store, right_store = f"{node}-left-buffer", f"{node}-right-buffer"
        self._draft.add_store(StoreSpec(left_store, "window", keys, ValueListSerde(left_values),
                                        retention_ms=retention, window_size_ms=size), node)
        self._draft.add_store(StoreSpec(right_store, "window", keys, ValueListSerde(right_values),
                                        retention_ms=retention, window_size_ms=size), node)
        unmatched = None
        if how != "inner":
            unmatched = f"{node}-unmatched"
            self._draft.add_store(StoreSpec(unmatched, "key_value", Bytes(), Bytes()), node)
        if late_records_topic is not None:
            self._draft.resolve_topic(late_records_topic)
        return self._then(ir.StreamStreamJoinNode(
            node, (self._node, other._node), windows=windows, joiner=joiner, how=how, left_store=left_store,
            right_store=right_store, unmatched_store=unmatched, key_serde=keys, value_serde=left_values,
            other_value_serde=right_values, late_records_topic=late_records_topic), keyless=False)

    def _table_join(self, table: "Table", joiner: Callable[[Any, Any], Any], node: str,
                    key_serde: Optional[Serde], value_serde: Optional[Serde], *, left: bool) -> "Stream":
        from ..serdes import Json

        if table._draft is not self._draft:
            raise TopologyError(f"{node}: the table belongs to another topology")
        if table.windowed:
            raise TopologyError(f"{node}: a windowed table cannot be joined with a stream")
        if self._keyless:
            raise TopologyError(f"{node}: this stream has no key (Void key serde): select_key(...) before the join")
        check_callable(joiner, "joiner", ("value", "table_value"), node)
        check_serde(key_serde, "key_serde")
        check_serde(value_serde, "value_serde")
        table_node, store, view = table._materialized_view(node)
        return self._then(ir.StreamTableJoinNode(
            node, (self._node,), table=table_node, store=store, table_view=view, joiner=joiner, left=left,
            # a repartitioned stream must place keys as the table's topic does: with its key serde
            key_serde=key_serde or table._key_serde, value_serde=value_serde or Json()))

    def group_by(self, selector: Callable[[Any, Any], Any], *, key_serde: Optional[Serde] = None,
                 value_serde: Optional[Serde] = None, name: Optional[str] = None) -> "GroupedStream":
        """Group records by ``selector(key, value)``. Key-changing: the aggregation that
        follows reads them through a repartition topic."""
        keyed = self.select_key(selector, name=name or self._draft.name_for(None, self._node, "group_by"))
        return keyed.group_by_key(key_serde=key_serde, value_serde=value_serde)

    def __repr__(self) -> str:
        return f"<Stream {self._node!r}>"


class BranchedStream:
    """Collects the branches of ``Stream.split()``; finish with ``default_branch`` or
    ``no_default_branch`` to get ``{branch name: Stream}``."""

    def __init__(self, parent: Stream, name: str) -> None:
        self._parent = parent
        self._name = name
        self._branches: List[Tuple[str, Optional[Callable[[Any, Any], bool]]]] = []
        self._done = False

    def branch(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> "BranchedStream":
        """Add a branch for records matching ``predicate(key, value)`` (and no earlier branch).
        ``name`` is the key in the returned dict (default: "1", "2", … by position)."""
        self._check_open()
        branch = name or str(len(self._branches) + 1)
        check_callable(predicate, f"branch '{branch}' predicate", ("key", "value"), self._name)
        self._add(branch, predicate)
        return self

    def default_branch(self, *, name: str = "default") -> Dict[str, Stream]:
        """Add a branch for records no predicate matched, and return every branch."""
        self._check_open()
        self._add(name, None)
        return self._finish()

    def no_default_branch(self) -> Dict[str, Stream]:
        """Return every branch; records no predicate matched are dropped."""
        self._check_open()
        return self._finish()

    def _add(self, branch: str, predicate: Optional[Callable[[Any, Any], bool]]) -> None:
        if any(existing == branch for existing, _ in self._branches):
            raise TopologyError(f"{self._name}: branch name '{branch}' is used twice")
        self._branches.append((branch, predicate))

    def _check_open(self) -> None:
        if self._done:
            raise TopologyError(f"{self._name}: this split is finished; call split() again for more branches")

    def _finish(self) -> Dict[str, Stream]:
        if not self._branches:
            raise TopologyError(f"{self._name}: split() needs at least one branch")
        self._done = True
        parent = self._parent
        draft = parent._draft
        draft.append(ir.SplitNode(self._name, (parent.name,), branches=tuple(self._branches)))
        out: Dict[str, Stream] = {}
        for index, (branch, _) in enumerate(self._branches):
            node = draft.append(ir.BranchNode(f"{self._name}-{branch}", (self._name,), index=index))
            out[branch] = Stream(draft, node.name, keyless=parent._keyless)
        return out
