"""Cogrouped aggregations: several grouped streams folded into one aggregate per key (Kafka
Streams' CogroupedKStream), unwindowed, per time window or per session.

Each input's records are tagged with the input's position on their way into one aggregation
node, whose aggregator hands each record to its own input's aggregator; the inputs share the
aggregation's store, its stream time and its windows, as in Kafka Streams.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Sequence

from ...errors import TopologyError
from ...serdes import Serde
from ...topology import nodes as ir
from ...windowing import SessionWindows, SlidingWindows
from ..draft import check_callable, check_serde
from . import aggregations, windowed
from .states import Aggregator, CogroupState, GroupedState, TableState


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


def start(grouped: GroupedState, aggregator: Aggregator) -> CogroupState:
    """A cogroup whose first input is ``grouped``, folded with ``aggregator``."""
    check_callable(aggregator, "cogroup aggregator", ("key", "value", "aggregate"), grouped.parent)
    return CogroupState(grouped.draft, ((grouped, aggregator),))


def add_input(cogroup: CogroupState, grouped: object, aggregator: Aggregator) -> CogroupState:
    """``cogroup`` with one more input: ``grouped``, a grouped stream's state (anything else
    the user passed is an error), folded with ``aggregator``."""
    if not isinstance(grouped, GroupedState) or grouped.of_table or grouped.draft is not cogroup.draft:
        raise TopologyError(f"cogroup() takes a grouped stream of the same topology, got {grouped!r}")
    if any(grouped is existing for existing, _ in cogroup.inputs):
        raise TopologyError(f"cogroup(): the grouped stream after '{grouped.parent}' is cogrouped twice")
    first = cogroup.inputs[0][0]
    if repr(grouped.key_serde) != repr(first.key_serde):
        raise TopologyError(
            f"cogroup(): the grouped stream after '{grouped.parent}' has key serde {grouped.key_serde!r}, "
            f"the first one (after '{first.parent}') {first.key_serde!r}: cogrouped streams share one "
            "store and must group by keys of one serde")
    check_callable(aggregator, "cogroup aggregator", ("key", "value", "aggregate"), grouped.parent)
    return CogroupState(cogroup.draft, cogroup.inputs + ((grouped, aggregator),))


def _dispatch(cogroup: CogroupState) -> _Dispatch:
    return _Dispatch([aggregator for _, aggregator in cogroup.inputs])


def _merged(cogroup: CogroupState, *, keep_none: bool) -> GroupedState:
    """All inputs tagged and merged, grouped with the first input's key serde."""
    draft = cogroup.draft
    merged = ""
    for index, (grouped, _) in enumerate(cogroup.inputs):
        tag = draft.name_for(None, grouped.parent, "cogroup")
        draft.append(ir.MapValuesNode(tag, (grouped.parent,), mapper=_Tag(index, keep_none)))
        merged = draft.append(ir.MergeNode(draft.name_for(None, merged, "cogroup_merge"), (merged, tag))).name \
            if index else tag
    values = CogroupedValueSerde([grouped.value_serde for grouped, _ in cogroup.inputs])
    return GroupedState.of(draft, merged, cogroup.inputs[0][0].key_serde, values)


def aggregate(cogroup: CogroupState, initializer: Callable[[], Any], name: Optional[str],
              value_serde: Optional[Serde], changelog: bool) -> TableState:
    """One aggregate per key; records with a None key or a None value are skipped."""
    where = name or f"{cogroup.inputs[0][0].parent}.cogroup"
    check_callable(initializer, "initializer", (), where)
    return aggregations.aggregate_stream(_merged(cogroup, keep_none=False), initializer, _dispatch(cogroup), name,
                                         value_serde, changelog)


def aggregate_windowed(cogroup: CogroupState, windows: Any, initializer: Callable[[], Any],
                       merger: Optional[Aggregator], name: Optional[str], value_serde: Optional[Serde],
                       options: windowed.WindowOptions) -> TableState:
    """One aggregate per key and window (or session: ``merger`` combines bridged sessions)."""
    sessions = isinstance(windows, SessionWindows)
    if sessions and merger is None:
        raise TopologyError("a session-windowed cogroup aggregate() needs merger(key, aggregate_1, aggregate_2)")
    if not sessions and merger is not None:
        raise TopologyError("merger is for session windows only")
    check_serde(value_serde, "value_serde")
    keep_none = not isinstance(windows, SlidingWindows)
    cut = windowed.windowed_by(_merged(cogroup, keep_none=keep_none), windows)
    return windowed.aggregate(cut, initializer, _dispatch(cogroup), merger, name, value_serde, options)
