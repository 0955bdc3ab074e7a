"""Cogrouped streams: several grouped streams folded into one aggregate per key (Kafka Streams'
CogroupedKStream), unwindowed, per time window or per session.

Each input's records are tagged with the input's position on their way into one aggregation
node, whose aggregator hands each record to its own input's aggregator; the inputs share the
aggregation's store, its stream time and its windows, as in Kafka Streams.
"""
from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

from ..errors import TopologyError
from ..serdes import Serde
from ..topology import nodes as ir
from ..windowing import SessionWindows, SlidingWindows
from .draft import TopologyDraft, check_callable, check_serde
from .table import Table

if TYPE_CHECKING:
    from .grouped import GroupedStream

Aggregator = Callable[[Any, Any, Any], Any]


class CogroupedValue(NamedTuple):
    """A record value on its way into a cogrouped aggregation: ``input`` is the position of
    the grouped stream it came from, ``value`` the record's value (possibly None)."""

    input: int
    value: Any


class CogroupedValueSerde(Serde[CogroupedValue]):
    """Serializes a :class:`CogroupedValue` (for the repartition topic before the aggregation)
    as one byte for the input and the value in that input's own serde; a None value is the
    input byte alone."""

    def __init__(self, serdes: Sequence[Serde]) -> None:
        if len(serdes) > 255:
            raise TopologyError(f"cogroup() takes at most 255 grouped streams, got {len(serdes)}")
        self._serdes = tuple(serdes)

    def serialize(self, obj: Optional[CogroupedValue]) -> Optional[bytes]:
        if obj is None:
            return None
        data = self._serdes[obj.input].serialize(obj.value)
        return bytes((obj.input,)) + (b"" if data is None else b"\x01" + data)

    def deserialize(self, data: Optional[bytes]) -> Optional[CogroupedValue]:
        if data is None:
            return None
        index = data[0]
        value = self._serdes[index].deserialize(data[2:]) if len(data) > 1 else None
        return CogroupedValue(index, value)

    def for_topic(self, topic: str, is_key: bool, *, broker: Optional[str] = None) -> "CogroupedValueSerde":
        return CogroupedValueSerde([serde.for_topic(topic, is_key, broker=broker) for serde in self._serdes])

    def __repr__(self) -> str:
        return f"CogroupedValueSerde({list(self._serdes)!r})"


class _Tag:
    """The map_values function tagging one input's values (a None value stays None when the
    aggregation skips None values, as an unwindowed one does)."""

    def __init__(self, index: int, keep_none: bool) -> None:
        self.index = index
        self.keep_none = keep_none

    def __call__(self, value: Any) -> Optional[CogroupedValue]:
        if value is None and not self.keep_none:
            return None
        return CogroupedValue(self.index, value)


class _Dispatch:
    """The aggregation's aggregator: each record goes to its own input's aggregator."""

    def __init__(self, aggregators: Sequence[Aggregator]) -> None:
        self.aggregators = tuple(aggregators)

    def __call__(self, key: Any, tagged: CogroupedValue, aggregate: Any) -> Any:
        return self.aggregators[tagged.input](key, tagged.value, aggregate)


class CogroupedStream:
    """Grouped streams aggregated together: each record updates its key's one aggregate with
    the aggregator of the stream it came from (``grouped.cogroup(aggregator)``, then
    ``.cogroup(other_grouped, other_aggregator)`` for each further stream). Finish with
    :meth:`aggregate`, or :meth:`windowed_by` and then ``aggregate``. Any input whose key was
    changed upstream makes the aggregation read its inputs through a repartition topic.
    """

    def __init__(self, draft: TopologyDraft, inputs: Sequence[Tuple["GroupedStream", Aggregator]]) -> None:
        self._draft = draft
        self._inputs = list(inputs)

    def cogroup(self, grouped: "GroupedStream", aggregator: Aggregator) -> "CogroupedStream":
        """Add ``grouped``, folded into the same aggregates with ``aggregator(key, value, aggregate)``."""
        from .grouped import GroupedStream

        if not isinstance(grouped, GroupedStream) or grouped._draft is not self._draft:
            raise TopologyError(f"cogroup() takes a grouped stream of the same topology, got {grouped!r}")
        if any(grouped is existing for existing, _ in self._inputs):
            raise TopologyError(f"cogroup(): the grouped stream after '{grouped._parent}' is cogrouped twice")
        first = self._inputs[0][0]
        if repr(grouped._key_serde) != repr(first._key_serde):
            raise TopologyError(
                f"cogroup(): the grouped stream after '{grouped._parent}' has key serde {grouped._key_serde!r}, "
                f"the first one (after '{first._parent}') {first._key_serde!r}: cogrouped streams share one "
                "store and must group by keys of one serde")
        check_callable(aggregator, "cogroup aggregator", ("key", "value", "aggregate"), grouped._parent)
        return CogroupedStream(self._draft, self._inputs + [(grouped, aggregator)])

    def windowed_by(self, windows: Any) -> "WindowedCogroupedStream":
        """Aggregate per time window (``sk.TumblingWindows``, ``sk.HoppingWindows``,
        ``sk.SlidingWindows``) or per session (``sk.SessionWindows``); keys become ``Windowed``."""
        return WindowedCogroupedStream(self, windows)

    def aggregate(self, initializer: Callable[[], Any], *, name: Optional[str] = None,
                  value_serde: Optional[Serde] = None, changelog: bool = True) -> Table:
        """One aggregate per key, from ``initializer()``; every update is emitted. Records with a
        None key or a None value are skipped, as by ``GroupedStream.aggregate``."""
        where = name or f"{self._inputs[0][0]._parent}.cogroup"
        check_callable(initializer, "initializer", (), where)
        return self._grouped(keep_none=False).aggregate(initializer, self._dispatch(), name=name,
                                                        value_serde=value_serde, changelog=changelog)

    def _dispatch(self) -> _Dispatch:
        return _Dispatch([aggregator for _, aggregator in self._inputs])

    def _grouped(self, *, keep_none: bool) -> "GroupedStream":
        """All inputs tagged and merged, grouped with the first input's key serde."""
        from .grouped import GroupedStream

        first = self._inputs[0][0]
        merged: Optional[str] = None
        for index, (grouped, _) in enumerate(self._inputs):
            tag = self._draft.name_for(None, grouped._parent, "cogroup")
            self._draft.append(ir.MapValuesNode(tag, (grouped._parent,), mapper=_Tag(index, keep_none)))
            if merged is None:
                merged = tag
            else:
                merged = self._draft.append(ir.MergeNode(self._draft.name_for(None, merged, "cogroup_merge"),
                                                         (merged, tag))).name
        values = CogroupedValueSerde([grouped._value_serde for grouped, _ in self._inputs])
        return GroupedStream(self._draft, merged, first._key_serde, values)

    def __repr__(self) -> str:
        return f"<CogroupedStream of {[grouped._parent for grouped, _ in self._inputs]}>"


class WindowedCogroupedStream:
    """A cogrouped stream cut into time windows or sessions (Kafka Streams'
    TimeWindowedCogroupedKStream and SessionWindowedCogroupedKStream). As in a windowed
    aggregation, a record with a None key is skipped; a None value reaches its aggregator, except
    in sliding windows, which skip it."""

    def __init__(self, cogrouped: CogroupedStream, windows: Any) -> None:
        self._cogrouped = cogrouped
        self._windows = windows

    def aggregate(self, initializer: Callable[[], Any], merger: Optional[Callable[[Any, Any, Any], Any]] = None, *,
                  name: Optional[str] = None, value_serde: Optional[Serde] = None, changelog: bool = True,
                  retention: Optional[timedelta] = None, late_records_topic: Optional[str] = None,
                  close_idle_windows_after: Optional[timedelta] = None) -> Table:
        """One aggregate per key and window from ``initializer()``; sessions need
        ``merger(key, aggregate_1, aggregate_2)`` to combine sessions a record bridges."""
        sessions = isinstance(self._windows, SessionWindows)
        if sessions and merger is None:
            raise TopologyError("a session-windowed cogroup aggregate() needs merger(key, aggregate_1, aggregate_2)")
        if not sessions and merger is not None:
            raise TopologyError("merger is for session windows only")
        check_serde(value_serde, "value_serde")
        keep_none = not isinstance(self._windows, SlidingWindows)
        windowed = self._cogrouped._grouped(keep_none=keep_none).windowed_by(self._windows)
        options = dict(name=name, value_serde=value_serde, changelog=changelog, retention=retention,
                       late_records_topic=late_records_topic, close_idle_windows_after=close_idle_windows_after)
        dispatch = self._cogrouped._dispatch()
        if sessions:
            return windowed.aggregate(initializer, dispatch, merger, **options)
        return windowed.aggregate(initializer, dispatch, **options)


__all__: List[str] = ["CogroupedStream", "WindowedCogroupedStream", "CogroupedValue", "CogroupedValueSerde"]
