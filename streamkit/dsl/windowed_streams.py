"""Windowed grouped streams: the inputs of windowed count, count_distinct, reduce and aggregate."""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Optional, Union

from ..errors import TopologyError
from ..serdes import Json, Serde
from ..stores import StoreSpec
from ..topology import nodes as ir
from ..topology.aggregations import Aggregate, Aggregation, Count, CountDistinct, Reduce
from ..windowing import HoppingWindows, SessionWindows, SlidingWindows, TumblingWindows
from .draft import TopologyDraft, check_callable, check_serde, check_value_of
from .table import Table, aggregation_table

TimeWindows = Union[TumblingWindows, HoppingWindows, SlidingWindows]


def _millis(where: str, what: str, value: Optional[timedelta]) -> Optional[int]:
    if value is None:
        return None
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise TopologyError(f"{where}: {what} must be a positive datetime.timedelta, got {value!r}")
    return value // timedelta(milliseconds=1)


class _WindowedGrouped:
    """What both windowed builders share: the grouped parent and the window options."""

    def __init__(self, draft: TopologyDraft, parent: str, key_serde: Serde, value_serde: Serde,
                 windows: Any) -> None:
        self._draft = draft
        self._parent = parent
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._windows = windows

    def _options(self, node: str, value_serde: Optional[Serde], retention: Optional[timedelta],
                 late_records_topic: Optional[str], close_idle_windows_after: Optional[timedelta]):
        check_serde(value_serde, "value_serde")
        retention_ms = _millis(node, "retention", retention)
        minimum = self._windows.retention_ms
        if retention_ms is not None and retention_ms < minimum:
            raise TopologyError(
                f"{node}: retention {retention} is shorter than {self._windows!r} needs ({minimum} ms: "
                "what a record on time may still read or update); windows would be dropped while still in "
                "use. Raise retention or omit it")
        late_topic = None
        if late_records_topic is not None:
            late_topic = self._draft.resolve_topic(late_records_topic).name
        idle_ms = _millis(node, "close_idle_windows_after", close_idle_windows_after)
        return retention_ms or minimum, late_topic, idle_ms


class TimeWindowedStream(_WindowedGrouped):
    """A grouped stream cut into tumbling, hopping or sliding windows (Kafka Streams'
    TimeWindowedKStream). Each aggregation keeps a window store and emits every update
    of a window, keyed by ``Windowed(key, start, end)``. A record with a ``None`` key is
    skipped (task metric ``null_key_records_dropped``); a ``None`` value is counted and
    handed to ``reduce``/``aggregate`` in tumbling and hopping windows, and skipped in
    sliding windows, as in Kafka Streams."""

    def _aggregate(self, name: Optional[str], aggregation: Aggregation, value_serde: Optional[Serde],
                   changelog: bool, retention: Optional[timedelta], late_records_topic: Optional[str],
                   close_idle_windows_after: Optional[timedelta]) -> Table:
        node = self._draft.name_for(name, self._parent, f"windowed_{aggregation.name}")
        retention_ms, late_topic, idle_ms = self._options(node, value_serde, retention, late_records_topic,
                                                          close_idle_windows_after)
        self._draft.add_store(StoreSpec(
            node, "window", self._key_serde, value_serde or Json(), changelog=changelog, retention_ms=retention_ms,
            window_size_ms=self._windows.size_ms,
            with_first_timestamp=isinstance(self._windows, SlidingWindows)), node)
        self._draft.append(ir.WindowedAggregateNode(
            node, (self._parent,), store=node, aggregation=aggregation, windows=self._windows,
            key_serde=self._key_serde, value_serde=self._value_serde, late_records_topic=late_topic,
            close_idle_after_ms=idle_ms))
        return aggregation_table(self._draft, node, aggregation, self._key_serde, value_serde, self._windows)

    def count(self, *, name: Optional[str] = None, changelog: bool = True, retention: Optional[timedelta] = None,
              late_records_topic: Optional[str] = None,
              close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Count records per key and window.

        ``retention``: how long (in stream time) windows stay queryable, at least size +
        grace (the default). ``late_records_topic``: where records arriving after their
        windows closed are written (they are always counted in the task metric
        ``late_records_dropped``). ``close_idle_windows_after``: see ``App``.
        """
        return self._aggregate(name, Count(), None, changelog, retention, late_records_topic,
                               close_idle_windows_after)

    def count_distinct(self, value_of: Union[str, Callable[[Any], Any]], *, name: Optional[str] = None,
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
        check_value_of(value_of, name or f"{self._parent}.windowed_count_distinct")
        return self._aggregate(name, CountDistinct(value_of), None, changelog, retention, late_records_topic,
                               close_idle_windows_after)

    def reduce(self, reducer: Callable[[Any, Any], Any], *, name: Optional[str] = None,
               value_serde: Optional[Serde] = None, changelog: bool = True, retention: Optional[timedelta] = None,
               late_records_topic: Optional[str] = None,
               close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Combine values per key and window: the first value as is, then ``reducer(aggregate, value)``."""
        check_callable(reducer, "reducer", ("aggregate", "value"), name or f"{self._parent}.windowed_reduce")
        return self._aggregate(name, Reduce(reducer), value_serde, changelog, retention,
                               late_records_topic, close_idle_windows_after)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any], *,
                  name: Optional[str] = None, value_serde: Optional[Serde] = None, changelog: bool = True,
                  retention: Optional[timedelta] = None, late_records_topic: Optional[str] = None,
                  close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Fold values per key and window from ``initializer()`` with ``aggregator(key, value, aggregate)``."""
        where = name or f"{self._parent}.windowed_aggregate"
        check_callable(initializer, "initializer", (), where)
        check_callable(aggregator, "aggregator", ("key", "value", "aggregate"), where)
        return self._aggregate(name, Aggregate(initializer, aggregator), value_serde, changelog, retention,
                               late_records_topic, close_idle_windows_after)


class SessionWindowedStream(_WindowedGrouped):
    """A grouped stream cut into sessions (Kafka Streams' SessionWindowedKStream). A record
    that bridges sessions merges them; the merged-away sessions are retracted downstream
    (a ``None`` value for their ``Windowed`` key). A record with a ``None`` key is skipped;
    a ``None`` value is counted and handed to ``reduce``/``aggregate``, as in Kafka Streams."""

    def _aggregate(self, name: Optional[str], aggregation: Aggregation, value_serde: Optional[Serde],
                   changelog: bool, retention: Optional[timedelta], late_records_topic: Optional[str],
                   close_idle_windows_after: Optional[timedelta]) -> Table:
        node = self._draft.name_for(name, self._parent, f"session_{aggregation.name}")
        retention_ms, late_topic, idle_ms = self._options(node, value_serde, retention, late_records_topic,
                                                          close_idle_windows_after)
        self._draft.add_store(StoreSpec(node, "session", self._key_serde, value_serde or Json(),
                                        changelog=changelog, retention_ms=retention_ms), node)
        self._draft.append(ir.SessionAggregateNode(
            node, (self._parent,), store=node, aggregation=aggregation, windows=self._windows,
            key_serde=self._key_serde, value_serde=self._value_serde, late_records_topic=late_topic,
            close_idle_after_ms=idle_ms))
        return aggregation_table(self._draft, node, aggregation, self._key_serde, value_serde, self._windows)

    def count(self, *, name: Optional[str] = None, changelog: bool = True, retention: Optional[timedelta] = None,
              late_records_topic: Optional[str] = None,
              close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Count records per key and session (merged sessions add their counts)."""
        return self._aggregate(name, Count(), None, changelog, retention, late_records_topic,
                               close_idle_windows_after)

    def count_distinct(self, value_of: Union[str, Callable[[Any], Any]], *, name: Optional[str] = None,
                       changelog: bool = True, retention: Optional[timedelta] = None,
                       late_records_topic: Optional[str] = None,
                       close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Count the distinct values of ``value_of`` (a field name or a function of the
        value) per key and session; merged sessions count the union of their values.
        Exact, with the memory cost of :meth:`TimeWindowedStream.count_distinct`."""
        check_value_of(value_of, name or f"{self._parent}.session_count_distinct")
        return self._aggregate(name, CountDistinct(value_of), None, changelog, retention, late_records_topic,
                               close_idle_windows_after)

    def reduce(self, reducer: Callable[[Any, Any], Any], *, name: Optional[str] = None,
               value_serde: Optional[Serde] = None, changelog: bool = True, retention: Optional[timedelta] = None,
               late_records_topic: Optional[str] = None,
               close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Combine values per session with ``reducer(aggregate, value)``; merging sessions
        combines their results with the same reducer."""
        check_callable(reducer, "reducer", ("aggregate", "value"), name or f"{self._parent}.session_reduce")
        return self._aggregate(name, Reduce(reducer), value_serde, changelog, retention,
                               late_records_topic, close_idle_windows_after)

    def aggregate(self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
                  merger: Callable[[Any, Any, Any], Any], *, name: Optional[str] = None,
                  value_serde: Optional[Serde] = None, changelog: bool = True,
                  retention: Optional[timedelta] = None, late_records_topic: Optional[str] = None,
                  close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """Fold values per session from ``initializer()`` with ``aggregator(key, value, aggregate)``;
        when a record bridges sessions, ``merger(key, aggregate_1, aggregate_2)`` combines them."""
        where = name or f"{self._parent}.session_aggregate"
        check_callable(initializer, "initializer", (), where)
        check_callable(aggregator, "aggregator", ("key", "value", "aggregate"), where)
        check_callable(merger, "merger", ("key", "aggregate_1", "aggregate_2"), where)
        return self._aggregate(name, Aggregate(initializer, aggregator, merger=merger), value_serde, changelog,
                               retention, late_records_topic, close_idle_windows_after)


def windowed_by(draft: TopologyDraft, parent: str, key_serde: Serde, value_serde: Serde,
                windows: Any) -> Union[TimeWindowedStream, SessionWindowedStream]:
    if isinstance(windows, SessionWindows):
        return SessionWindowedStream(draft, parent, key_serde, value_serde, windows)
    if isinstance(windows, (TumblingWindows, HoppingWindows, SlidingWindows)):
        return TimeWindowedStream(draft, parent, key_serde, value_serde, windows)
    raise TopologyError(
        f"windowed_by() after '{parent}' takes sk.TumblingWindows, sk.HoppingWindows, sk.SlidingWindows or "
        f"sk.SessionWindows, got {windows!r}")
