"""The DSL's kinds: Stream, BranchedStream, Table, GroupedStream, GroupedTable,
TimeWindowedStream, SessionWindowedStream, CogroupedStream and WindowedCogroupedStream.

They share this one module because they return each other both ways (``Stream.to_table``
and ``Table.to_stream``, ``group_by`` … ``aggregate`` … ``group_by``): typed, they can
only live in separate files with a file import circle. So each is thin (Kafka Streams'
``KStream`` interfaces to its ``KStreamImpl``): a method states the semantics in its
docstring, calls the building function of ``dsl/building/`` that validates, names and
appends the IR, and wraps the state it returns in the right kind. Every method appends
to the topology and returns a new object; nothing runs until a worker or the test
driver runs it.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Union

from ..processor import ProcessorDefinition
from ..serdes import Serde
from ..sinks.base import Sink
from ..topics import TopicSpec
from ..windowing.join_windows import JoinWindows
from ..windowing.suppressed import Suppressed
from .building import aggregations, cogroup, joins, stream_ops, table_ops, windowed
from .building.states import Aggregator, CogroupState, GroupedState, StreamState, TableState, WindowedState
from .global_table import GlobalTable

KV = Tuple[Any, Any]
ValueOf = Union[str, Callable[[Any], Any]]


def _state_of(given: object) -> object:
    """The state of a stream or table passed as the other side of an operation; anything
    else as given (the building function names what it expected)."""
    return given._state if isinstance(given, (Stream, Table)) else given


class Stream:
    """A record stream (Kafka Streams' KStream). Every method appends to the topology
    and returns a new object; nothing runs until a worker or the test driver runs it.

    Operations here are stateless. Those marked *key-changing* make a later
    stateful operation (``group_by_key().count()`` …) repartition the stream
    through an internal topic first.
    """

    def __init__(self, state: StreamState) -> None:
        self._state = state

    @property
    def name(self) -> str:
        """The name of the node producing this stream."""
        return self._state.node

    def filter(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> Stream:
        """Keep records for which ``predicate(key, value)`` is true. Stateless."""
        return Stream(stream_ops.filter_records(self._state, predicate, name))

    def filter_not(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> Stream:
        """Drop records for which ``predicate(key, value)`` is true. Stateless."""
        return Stream(stream_ops.filter_records(self._state, predicate, name, negate=True))

    def map(self, mapper: Callable[[Any, Any], KV], *, name: Optional[str] = None) -> Stream:
        """Replace each record by ``mapper(key, value) -> (new_key, new_value)``.
        Stateless, key-changing."""
        return Stream(stream_ops.map_records(self._state, mapper, name))

    def map_values(self, mapper: Callable[[Any], Any], *, name: Optional[str] = None) -> Stream:
        """Replace each value by ``mapper(value)``; the key stays. Stateless."""
        return Stream(stream_ops.map_values(self._state, mapper, name))

    def flat_map(self, mapper: Callable[[Any, Any], Iterable[KV]], *, name: Optional[str] = None) -> Stream:
        """Replace each record by the ``(key, value)`` pairs ``mapper(key, value)`` returns
        (none, one or many). Stateless, key-changing."""
        return Stream(stream_ops.flat_map(self._state, mapper, name))

    def flat_map_values(self, mapper: Callable[[Any], Iterable[Any]], *, name: Optional[str] = None) -> Stream:
        """Replace each record by one record per value in ``mapper(value)``, same key. Stateless."""
        return Stream(stream_ops.flat_map_values(self._state, mapper, name))

    def select_key(self, selector: Callable[[Any, Any], Any], *, name: Optional[str] = None) -> Stream:
        """Set each record's key to ``selector(key, value)``. Stateless, key-changing."""
        return Stream(stream_ops.select_key(self._state, selector, name))

    def peek(self, action: Callable[[Any, Any], None], *, name: Optional[str] = None) -> Stream:
        """Call ``action(key, value)`` for each record and pass it on unchanged. Stateless."""
        return Stream(stream_ops.peek(self._state, action, name))

    def foreach(self, action: Callable[[Any, Any], None], *, name: Optional[str] = None) -> None:
        """Call ``action(key, value)`` for each record; terminal. Side effects are
        at-least-once: after a crash, records since the last commit are seen again."""
        stream_ops.peek(self._state, action, name, terminal=True)

    def split(self, *, name: Optional[str] = None) -> BranchedStream:
        """Route each record to the first branch whose predicate holds. Stateless.

        >>> # branches = stream.split().branch(is_big, name="big").default_branch(name="rest")
        >>> # branches["big"].to("big-orders")
        """
        return BranchedStream(stream_ops.Split(self._state, stream_ops.named(self._state, name, "split")))

    def merge(self, other: Stream, *, name: Optional[str] = None) -> Stream:
        """Interleave this stream with ``other`` (no ordering guarantee across them). Stateless."""
        return Stream(stream_ops.merge(self._state, _state_of(other), name))

    def repartition(self, *, partitions: Optional[int] = None, name: Optional[str] = None,
                    key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None) -> Stream:
        """Send records through an internal topic ``<app-id>-<name>``, partitioned by key
        (``partitions`` defaults to the upstream task count)."""
        return Stream(stream_ops.repartition(self._state, partitions, name, key_serde, value_serde))

    def process(self, processor: ProcessorDefinition, *, name: Optional[str] = None) -> Stream:
        """Run a Processor-API function (see ``@app.processor``); the returned stream
        holds what it forwards. Stateful if the processor declared stores."""
        return Stream(stream_ops.process(self._state, processor, name))

    def to(self, topic: Union[str, TopicSpec], *, key_serde: Optional[Serde] = None,
           value_serde: Optional[Serde] = None, name: Optional[str] = None) -> None:
        """Write every record to ``topic``; terminal. Serdes: those given here, else the
        topic's declared ones, else the app's defaults. Keys are placed with Kafka's
        default partitioner; records without a key stay on the task's partition. A
        windowed key (``Windowed``, from a windowed aggregation) is placed by its record
        key alone, so all of a key's windows share a partition (Kafka Streams' rule)."""
        stream_ops.to_topic(self._state, topic, key_serde, value_serde, name)

    def sink(self, sink: Sink, *, name: Optional[str] = None) -> None:
        """Deliver every record to ``sink`` (``sk.sinks.ParquetArchive``, ``JsonLines``,
        ``Database``, ``Callback`` …); terminal. Delivery happens at each commit, before
        the input offsets are committed."""
        stream_ops.to_sink(self._state, sink, name)

    def group_by_key(self, *, key_serde: Optional[Serde] = None,
                     value_serde: Optional[Serde] = None) -> GroupedStream:
        """Group records by their current key, for count/reduce/aggregate. Repartitions
        first only if an upstream operation changed the key."""
        return GroupedStream(stream_ops.group_by_key(self._state, key_serde, value_serde))

    def join(self, other: Union[Stream, Table, GlobalTable], joiner: Optional[Callable[[Any, Any], Any]] = None,
             windows: Optional[JoinWindows] = None, *, key_selector: Optional[Callable[[Any, Any], Any]] = None,
             name: Optional[str] = None, key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None,
             other_value_serde: Optional[Serde] = None, late_records_topic: Optional[str] = None) -> Stream:
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
        return Stream(joins.join_stream(self._state, _state_of(other), joiner, windows, key_selector, name, key_serde,
                                        value_serde, other_value_serde, late_records_topic, how="inner"))

    def left_join(self, other: Union[Stream, Table, GlobalTable],
                  joiner: Optional[Callable[[Any, Any], Any]] = None, windows: Optional[JoinWindows] = None, *,
                  key_selector: Optional[Callable[[Any, Any], Any]] = None, name: Optional[str] = None,
                  key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None,
                  other_value_serde: Optional[Serde] = None, late_records_topic: Optional[str] = None) -> Stream:
        """As :meth:`join`, but every record of this stream gives a result: one without a
        partner is joined with ``None``. For a stream-stream join, that result is emitted
        when the record's window closes (stream time past its end plus grace), and only
        if no partner arrived by then. A record with a ``None`` key can have no partner: it is
        joined with ``None`` at once (as Kafka Streams 3.7+ does); :meth:`join` drops it."""
        return Stream(joins.join_stream(self._state, _state_of(other), joiner, windows, key_selector, name, key_serde,
                                        value_serde, other_value_serde, late_records_topic, how="left"))

    def outer_join(self, other: Stream, joiner: Callable[[Any, Any], Any], windows: JoinWindows, *,
                   name: Optional[str] = None, key_serde: Optional[Serde] = None,
                   value_serde: Optional[Serde] = None, other_value_serde: Optional[Serde] = None,
                   late_records_topic: Optional[str] = None) -> Stream:
        """Stream-stream join where a record of either side without a partner gives
        ``joiner(value, None)`` or ``joiner(None, other_value)`` when its window closes (at once
        for a record with a ``None`` key, which can have no partner)."""
        return Stream(joins.join_stream(self._state, _state_of(other), joiner, windows, None, name, key_serde,
                                        value_serde, other_value_serde, late_records_topic, how="outer"))

    def group_by(self, selector: Callable[[Any, Any], Any], *, key_serde: Optional[Serde] = None,
                 value_serde: Optional[Serde] = None, name: Optional[str] = None) -> GroupedStream:
        """Group records by ``selector(key, value)``. Key-changing: the aggregation that
        follows reads them through a repartition topic."""
        return GroupedStream(stream_ops.group_by(self._state, selector, key_serde, value_serde, name))

    def __repr__(self) -> str:
        return repr(self._state)


class BranchedStream:
    """Collects the branches of ``Stream.split()``; finish with ``default_branch`` or
    ``no_default_branch`` to get ``{branch name: Stream}``."""

    def __init__(self, split: stream_ops.Split) -> None:
        self._split = split

    def branch(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> BranchedStream:
        """Add a branch for records matching ``predicate(key, value)`` (and no earlier branch).
        ``name`` is the key in the returned dict (default: "1", "2", … by position)."""
        self._split.add_branch(predicate, name)
        return self

    def default_branch(self, *, name: str = "default") -> Dict[str, Stream]:
        """Add a branch for records no predicate matched, and return every branch."""
        return {branch: Stream(state) for branch, state in self._split.finish(name).items()}

    def no_default_branch(self) -> Dict[str, Stream]:
        """Return every branch; records no predicate matched are dropped."""
        return {branch: Stream(state) for branch, state in self._split.finish(None).items()}


class Table:
    """A changelog view of a keyed dataset: every update of a key is forwarded
    downstream (new value; ``None`` when the key is deleted)."""

    def __init__(self, state: TableState) -> None:
        self._state = state

    @property
    def windowed(self) -> bool:
        """Whether the keys are ``sk.Windowed`` (the table is a windowed aggregation)."""
        return self._state.windowed

    @property
    def name(self) -> str:
        return self._state.node

    def suppress(self, suppressed: Suppressed, *, name: Optional[str] = None,
                 value_serde: Optional[Serde] = None) -> Table:
        """Hold updates back: ``sk.Suppressed.until_window_closes()`` forwards each window's
        final result once, when it closes; ``sk.Suppressed.until_time_limit(t)`` forwards
        a key's latest value at most once per ``t`` of stream time. The buffer is a
        changelogged store named like the node, so a restart neither repeats nor loses
        a result under exactly_once. ``value_serde``: how the buffer stores values (default:
        the table's)."""
        return Table(table_ops.suppress(self._state, suppressed, name, value_serde))

    def filter(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> Table:
        """Keep rows for which ``predicate(key, value)`` holds; a row that stops matching
        is deleted downstream (a ``None`` update). Stateless."""
        return Table(table_ops.filter_rows(self._state, predicate, name))

    def filter_not(self, predicate: Callable[[Any, Any], bool], *, name: Optional[str] = None) -> Table:
        """Drop rows for which ``predicate(key, value)`` holds. Stateless."""
        return Table(table_ops.filter_rows(self._state, predicate, name, negate=True))

    def map_values(self, mapper: Callable[[Any], Any], *, name: Optional[str] = None) -> Table:
        """Replace each row's value by ``mapper(value)``. Stateless."""
        return Table(table_ops.map_values(self._state, mapper, name))

    def join(self, other: Table, joiner: Callable[[Any, Any], Any], *,
             foreign_key_extractor: Optional[Callable[[Any], Any]] = None, name: Optional[str] = None,
             value_serde: Optional[Serde] = None) -> Table:
        """Join with ``other``: ``joiner(value, other_value)`` for keys with a row on both
        sides. An update or delete on either side emits the new result or its deletion.

        With ``foreign_key_extractor(value)``, each row joins the row of ``other`` whose key
        the extractor returns (many-to-one); the tables need not be co-partitioned. A row
        whose foreign key changes has its old result replaced (or deleted). The results
        are kept in a store named like the join (``value_serde`` stores them)."""
        return Table(joins.join_table(self._state, _state_of(other), joiner, foreign_key_extractor, name, value_serde,
                                      how="inner"))

    def left_join(self, other: Table, joiner: Callable[[Any, Any], Any], *,
                  foreign_key_extractor: Optional[Callable[[Any], Any]] = None, name: Optional[str] = None,
                  value_serde: Optional[Serde] = None) -> Table:
        """As :meth:`join`, but every row of this table has a result: ``joiner(value, None)``
        while ``other`` has no matching row."""
        return Table(joins.join_table(self._state, _state_of(other), joiner, foreign_key_extractor, name, value_serde,
                                      how="left"))

    def outer_join(self, other: Table, joiner: Callable[[Any, Any], Any], *, name: Optional[str] = None) -> Table:
        """Key join where a key with a row on either side has a result (``None`` for the
        missing side)."""
        return Table(joins.join_table(self._state, _state_of(other), joiner, None, name, None, how="outer"))

    def to_stream(self, *, name: Optional[str] = None) -> Stream:
        """The table's updates as a stream of (key, new value); deletes are ``None`` values."""
        return Stream(table_ops.to_stream(self._state, name))

    def group_by(self, selector: Callable[[Any, Any], Tuple[Any, Any]], *,
                 key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None,
                 name: Optional[str] = None) -> GroupedTable:
        """Re-key rows with ``selector(key, value) -> (group_key, group_value)``, for
        count/reduce/aggregate with a subtractor. Key-changing: repartitions."""
        return GroupedTable(table_ops.group_by(self._state, selector, key_serde, value_serde, name))

    def __repr__(self) -> str:
        return repr(self._state)


class GroupedStream:
    """A stream grouped by key. Aggregations are stateful: one key-value store each,
    named after the operation, and every update is emitted downstream as the
    table's new value for the key. Records with a ``None`` key are dropped (counted)."""

    def __init__(self, state: GroupedState) -> None:
        self._state = state

    def windowed_by(self, windows: Any) -> Union[TimeWindowedStream, SessionWindowedStream]:
        """Aggregate per time window (``sk.TumblingWindows``, ``sk.HoppingWindows``,
        ``sk.SlidingWindows``) or per session (``sk.SessionWindows``): the result is a
        table keyed by ``sk.Windowed(key, start, end)``."""
        state = windowed.windowed_by(self._state, windows)
        return SessionWindowedStream(state) if state.sessions else TimeWindowedStream(state)

    def cogroup(self, aggregator: Callable[[Any, Any, Any], Any]) -> CogroupedStream:
        """Start a cogrouped aggregation (Kafka Streams' ``cogroup``): this stream's records are
        folded with ``aggregator(key, value, aggregate)``; add more grouped streams with
        ``.cogroup(other, other_aggregator)``, then ``.aggregate(initializer)`` (or
        ``.windowed_by(windows).aggregate(...)``). All inputs update one aggregate per key."""
        return CogroupedStream(cogroup.start(self._state, aggregator))

    def count(self, *, name: Optional[str] = None, changelog: bool = True) -> Table:
        """Count records per key. ``name`` names the node and its store; ``changelog=False``
        keeps the store local (rebuilt from the input when lost)."""
        return Table(aggregations.count(self._state, name, changelog))

    def count_distinct(self, value_of: ValueOf, *, name: Optional[str] = None, changelog: bool = True) -> Table:
        """Count the distinct values of ``value_of`` per key: a field name (``value[field]``) or
        a function of the value. Exact: the store keeps each key's distinct values (memory
        grows with their number; see :class:`~streamkit.topology.aggregations.CountDistinct`).
        A None value or field is not counted. Emits every changed count."""
        return Table(aggregations.count_distinct(self._state, value_of, name, changelog))

    def reduce(self, reducer: Callable[[Any, Any], Any], *, name: Optional[str] = None,
               value_serde: Optional[Serde] = None, changelog: bool = True) -> Table:
        """Combine values per key: the first value as is, then ``reducer(aggregate, value)``."""
        return Table(aggregations.reduce_stream(self._state, reducer, name, value_serde, changelog))

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], *,
                  name: Optional[str] = None, value_serde: Optional[Serde] = None,
                  changelog: bool = True) -> Table:
        """Fold values per key: start from ``initializer()``, then ``aggregator(key, value, aggregate)``."""
        return Table(aggregations.aggregate_stream(self._state, initializer, aggregator, name, value_serde, changelog))

    def __repr__(self) -> str:
        return repr(self._state)


class GroupedTable:
    """A re-keyed table. Aggregations take an adder and a subtractor: when a row
    changes, its old value is subtracted from its old group and the new one added."""

    def __init__(self, state: GroupedState) -> None:
        self._state = state

    def count(self, *, name: Optional[str] = None, changelog: bool = True) -> Table:
        """Count rows per group; a row moving to another group moves its count."""
        return Table(aggregations.count(self._state, name, changelog))

    def reduce(self, adder: Callable[[Any, Any], Any], subtractor: Callable[[Any, Any], Any], *,
               name: Optional[str] = None, value_serde: Optional[Serde] = None, changelog: bool = True) -> Table:
        """``adder(aggregate, value)`` for new rows, ``subtractor(aggregate, old_value)`` for retractions."""
        return Table(aggregations.reduce_table(self._state, adder, subtractor, name, value_serde, changelog))

    def aggregate(self, initializer: Callable[[], Any], adder: Callable[[Any, Any, Any], Any],
                  subtractor: Callable[[Any, Any, Any], Any], *, name: Optional[str] = None,
                  value_serde: Optional[Serde] = None, changelog: bool = True) -> Table:
        """Start from ``initializer()``; ``adder(key, value, agg)`` / ``subtractor(key, old_value, agg)``."""
        return Table(aggregations.aggregate_table(self._state, initializer, adder, subtractor, name, value_serde,
                                                  changelog))

    def __repr__(self) -> str:
        return repr(self._state)


class TimeWindowedStream:
    """A grouped stream cut into tumbling, hopping or sliding windows (Kafka Streams'
    TimeWindowedKStream). Each aggregation keeps a window store and emits every update
    of a window, keyed by ``Windowed(key, start, end)``. A record with a ``None`` key is
    skipped (task metric ``null_key_records_dropped``); a ``None`` value is counted and
    handed to ``reduce``/``aggregate`` in tumbling and hopping windows, and skipped in
    sliding windows, as in Kafka Streams."""

    def __init__(self, state: WindowedState) -> None:
        self._state = state

    def count(self, *, name: Optional[str] = None, changelog: bool = True, retention: Optional[timedelta] = None,
              late_records_topic: Optional[str] = None,
              close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Count records per key and window.

        ``retention``: how long (in stream time) windows stay queryable, at least size +
        grace (the default). ``late_records_topic``: where records arriving after their
        windows closed are written (they are always counted in the task metric
        ``late_records_dropped``). ``close_idle_windows_after``: see ``App``.
        """
        options = windowed.WindowOptions(changelog, retention, late_records_topic, close_idle_windows_after)
        return Table(windowed.count(self._state, name, options))

    def count_distinct(self, value_of: ValueOf, *, name: Optional[str] = None,
                       changelog: bool = True, retention: Optional[timedelta] = None,
                       late_records_topic: Optional[str] = None,
                       close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Count the distinct values of ``value_of`` per key and window: a field name
        (``value[field]``) or a function of the value. Emits every changed count, keyed by
        ``Windowed``; a late record is dropped as by :meth:`count` (options alike).

        Exact: each window's store entry holds its distinct values until the window's
        retention ends, so memory grows with their number per key and window (see
        :class:`~streamkit.topology.aggregations.CountDistinct`). A None value or field is
        not counted (it still opens its window, with a count of 0).
        """
        options = windowed.WindowOptions(changelog, retention, late_records_topic, close_idle_windows_after)
        return Table(windowed.count_distinct(self._state, value_of, name, options))

    def reduce(self, reducer: Callable[[Any, Any], Any], *, name: Optional[str] = None,
               value_serde: Optional[Serde] = None, changelog: bool = True, retention: Optional[timedelta] = None,
               late_records_topic: Optional[str] = None,
               close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Combine values per key and window: the first value as is, then ``reducer(aggregate, value)``."""
        options = windowed.WindowOptions(changelog, retention, late_records_topic, close_idle_windows_after)
        return Table(windowed.reduce(self._state, reducer, name, value_serde, options))

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], *,
                  name: Optional[str] = None, value_serde: Optional[Serde] = None, changelog: bool = True,
                  retention: Optional[timedelta] = None, late_records_topic: Optional[str] = None,
                  close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Fold values per key and window from ``initializer()`` with ``aggregator(key, value, aggregate)``."""
        options = windowed.WindowOptions(changelog, retention, late_records_topic, close_idle_windows_after)
        return Table(windowed.aggregate(self._state, initializer, aggregator, None, name, value_serde, options))


class SessionWindowedStream:
    """A grouped stream cut into sessions (Kafka Streams' SessionWindowedKStream). A record
    that bridges sessions merges them; the merged-away sessions are retracted downstream
    (a ``None`` value for their ``Windowed`` key). A record with a ``None`` key is skipped;
    a ``None`` value is counted and handed to ``reduce``/``aggregate``, as in Kafka Streams."""

    def __init__(self, state: WindowedState) -> None:
        self._state = state

    def count(self, *, name: Optional[str] = None, changelog: bool = True, retention: Optional[timedelta] = None,
              late_records_topic: Optional[str] = None,
              close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Count records per key and session (merged sessions add their counts)."""
        options = windowed.WindowOptions(changelog, retention, late_records_topic, close_idle_windows_after)
        return Table(windowed.count(self._state, name, options))

    def count_distinct(self, value_of: ValueOf, *, name: Optional[str] = None,
                       changelog: bool = True, retention: Optional[timedelta] = None,
                       late_records_topic: Optional[str] = None,
                       close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Count the distinct values of ``value_of`` (a field name or a function of the
        value) per key and session; merged sessions count the union of their values.
        Exact, with the memory cost of :meth:`TimeWindowedStream.count_distinct`."""
        options = windowed.WindowOptions(changelog, retention, late_records_topic, close_idle_windows_after)
        return Table(windowed.count_distinct(self._state, value_of, name, options))

    def reduce(self, reducer: Callable[[Any, Any], Any], *, name: Optional[str] = None,
               value_serde: Optional[Serde] = None, changelog: bool = True, retention: Optional[timedelta] = None,
               late_records_topic: Optional[str] = None,
               close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Combine values per session with ``reducer(aggregate, value)``; merging sessions
        combines their results with the same reducer."""
        options = windowed.WindowOptions(changelog, retention, late_records_topic, close_idle_windows_after)
        return Table(windowed.reduce(self._state, reducer, name, value_serde, options))

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                  merger: Callable[[Any, Any, Any], Any], *, name: Optional[str] = None,
                  value_serde: Optional[Serde] = None, changelog: bool = True,
                  retention: Optional[timedelta] = None, late_records_topic: Optional[str] = None,
                  close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Fold values per session from ``initializer()`` with ``aggregator(key, value, aggregate)``;
        when a record bridges sessions, ``merger(key, aggregate_1, aggregate_2)`` combines them."""
        options = windowed.WindowOptions(changelog, retention, late_records_topic, close_idle_windows_after)
        return Table(windowed.aggregate(self._state, initializer, aggregator, merger, name, value_serde, options))


class CogroupedStream:
    """Grouped streams aggregated together: each record updates its key's one aggregate with
    the aggregator of the stream it came from (``grouped.cogroup(aggregator)``, then
    ``.cogroup(other_grouped, other_aggregator)`` for each further stream). Finish with
    :meth:`aggregate`, or :meth:`windowed_by` and then ``aggregate``. Any input whose key was
    changed upstream makes the aggregation read its inputs through a repartition topic.
    """

    def __init__(self, state: CogroupState) -> None:
        self._state = state

    def cogroup(self, grouped: GroupedStream, aggregator: Aggregator) -> CogroupedStream:
        """Add ``grouped``, folded into the same aggregates with ``aggregator(key, value, aggregate)``."""
        given = grouped._state if isinstance(grouped, GroupedStream) else grouped
        return CogroupedStream(cogroup.add_input(self._state, given, aggregator))

    def windowed_by(self, windows: Any) -> WindowedCogroupedStream:
        """Aggregate per time window (``sk.TumblingWindows``, ``sk.HoppingWindows``,
        ``sk.SlidingWindows``) or per session (``sk.SessionWindows``); keys become ``Windowed``."""
        return WindowedCogroupedStream(self._state, windows)

    def aggregate(self, initializer: Callable[[], Any], *, name: Optional[str] = None,
                  value_serde: Optional[Serde] = None, changelog: bool = True) -> Table:
        """One aggregate per key, from ``initializer()``; every update is emitted. Records with a
        None key or a None value are skipped, as by ``GroupedStream.aggregate``."""
        return Table(cogroup.aggregate(self._state, initializer, name, value_serde, changelog))

    def __repr__(self) -> str:
        return repr(self._state)


class WindowedCogroupedStream:
    """A cogrouped stream cut into time windows or sessions (Kafka Streams'
    TimeWindowedCogroupedKStream and SessionWindowedCogroupedKStream). As in a windowed
    aggregation, a record with a None key is skipped; a None value reaches its aggregator, except
    in sliding windows, which skip it."""

    def __init__(self, state: CogroupState, windows: Any) -> None:
        self._state = state
        self._windows = windows

    def aggregate(self, initializer: Callable[[], Any], merger: Optional[Callable[[Any, Any, Any], Any]] = None, *,
                  name: Optional[str] = None, value_serde: Optional[Serde] = None, changelog: bool = True,
                  retention: Optional[timedelta] = None, late_records_topic: Optional[str] = None,
                  close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """One aggregate per key and window from ``initializer()``; sessions need
        ``merger(key, aggregate_1, aggregate_2)`` to combine sessions a record bridges."""
        options = windowed.WindowOptions(changelog, retention, late_records_topic, close_idle_windows_after)
        return Table(cogroup.aggregate_windowed(self._state, self._windows, initializer, merger, name, value_serde,
                                                options))
