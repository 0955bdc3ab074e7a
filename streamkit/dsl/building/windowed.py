"""Windowed aggregations of grouped streams, per time window (tumbling, hopping, sliding)
or per session: the window options, the window or session store and the node."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Optional, Tuple

from ...errors import TopologyError
from ...serdes import Json, Serde
from ...stores import StoreSpec
from ...topology import nodes as ir
from ...topology.aggregations import Aggregate, Aggregation, Count, CountDistinct, Reduce
from ...windowing import HoppingWindows, SessionWindows, SlidingWindows, TumblingWindows
from ..draft import check_callable, check_serde, check_value_of
from .aggregations import ValueOf
from .states import GroupedState, TableState, WindowedState
from .table_ops import aggregation_result


@dataclass(frozen=True)
class WindowOptions:
    """The options every windowed aggregation takes, as the user gave them."""

    changelog: bool = True
    retention: Optional[timedelta] = None
    late_records_topic: Optional[str] = None
    close_idle_windows_after: Optional[timedelta] = None


def windowed_by(grouped: GroupedState, windows: Any) -> WindowedState:
    """``grouped`` cut into ``windows``: time windows or sessions, else an error."""
    if isinstance(windows, (SessionWindows, TumblingWindows, HoppingWindows, SlidingWindows)):
        return WindowedState(grouped, windows)
    raise TopologyError(
        f"windowed_by() after '{grouped.parent}' takes sk.TumblingWindows, sk.HoppingWindows, sk.SlidingWindows or "
        f"sk.SessionWindows, got {windows!r}")


def _prefix(windowed: WindowedState) -> str:
    """What names a windowed aggregation's node: ``session_<op>`` or ``windowed_<op>``."""
    return "session" if windowed.sessions else "windowed"


def _millis(where: str, what: str, value: Optional[timedelta]) -> Optional[int]:
    if value is None:
        return None
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise TopologyError(f"{where}: {what} must be a positive datetime.timedelta, got {value!r}")
    return value // timedelta(milliseconds=1)


def _resolved(windowed: WindowedState, node: str, value_serde: Optional[Serde],
              options: WindowOptions) -> Tuple[int, Optional[str], Optional[int]]:
    """The retention (ms), the late records topic and the idle closing delay (ms) of ``node``."""
    check_serde(value_serde, "value_serde")
    retention_ms = _millis(node, "retention", options.retention)
    minimum = windowed.windows.retention_ms
    if retention_ms is not None and retention_ms < minimum:
        raise TopologyError(
            f"{node}: retention {options.retention} is shorter than {windowed.windows!r} needs ({minimum} ms: "
            "what a record on time may still read or update); windows would be dropped while still in "
            "use. Raise retention or omit it")
    late_topic = None
    if options.late_records_topic is not None:
        late_topic = windowed.grouped.draft.resolve_topic(options.late_records_topic).name
    idle_ms = _millis(node, "close_idle_windows_after", options.close_idle_windows_after)
    return retention_ms or minimum, late_topic, idle_ms


def aggregate_with(windowed: WindowedState, aggregation: Aggregation, name: Optional[str],
                   value_serde: Optional[Serde], options: WindowOptions) -> TableState:
    """Append ``aggregation`` per window (or session) with its store, and return the table of
    its results, keyed by ``Windowed``."""
    grouped, windows = windowed.grouped, windowed.windows
    draft = grouped.draft
    node = draft.name_for(name, grouped.parent, f"{_prefix(windowed)}_{aggregation.name}")
    retention_ms, late_topic, idle_ms = _resolved(windowed, node, value_serde, options)
    if windowed.sessions:
        draft.add_store(StoreSpec(node, "session", grouped.key_serde, value_serde or Json(),
                                  changelog=options.changelog, retention_ms=retention_ms), node)
        kind = ir.SessionAggregateNode
    else:
        draft.add_store(StoreSpec(
            node, "window", grouped.key_serde, value_serde or Json(), changelog=options.changelog,
            retention_ms=retention_ms, window_size_ms=windows.size_ms,
            with_first_timestamp=isinstance(windows, SlidingWindows)), node)
        kind = ir.WindowedAggregateNode
    draft.append(kind(node, (grouped.parent,), store=node, aggregation=aggregation, windows=windows,
                      key_serde=grouped.key_serde, value_serde=grouped.value_serde, late_records_topic=late_topic,
                      close_idle_after_ms=idle_ms))
    return aggregation_result(draft, node, aggregation, grouped.key_serde, value_serde, windows)


def count(windowed: WindowedState, name: Optional[str], options: WindowOptions) -> TableState:
    return aggregate_with(windowed, Count(), name, None, options)


def count_distinct(windowed: WindowedState, value_of: ValueOf, name: Optional[str],
                   options: WindowOptions) -> TableState:
    check_value_of(value_of, name or f"{windowed.grouped.parent}.{_prefix(windowed)}_count_distinct")
    return aggregate_with(windowed, CountDistinct(value_of), name, None, options)


def reduce(windowed: WindowedState, reducer: Callable[[Any, Any], Any], name: Optional[str],
           value_serde: Optional[Serde], options: WindowOptions) -> TableState:
    check_callable(reducer, "reducer", ("aggregate", "value"),
                   name or f"{windowed.grouped.parent}.{_prefix(windowed)}_reduce")
    return aggregate_with(windowed, Reduce(reducer), name, value_serde, options)


def aggregate(windowed: WindowedState, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any],
              merger: Optional[Callable[[Any, Any, Any], Any]], name: Optional[str], value_serde: Optional[Serde],
              options: WindowOptions) -> TableState:
    """Fold per window; sessions take ``merger`` too (time windows take none)."""
    where = name or f"{windowed.grouped.parent}.{_prefix(windowed)}_aggregate"
    check_callable(initializer, "initializer", (), where)
    check_callable(aggregator, "aggregator", ("key", "value", "aggregate"), where)
    if not windowed.sessions:
        return aggregate_with(windowed, Aggregate(initializer, aggregator), name, value_serde, options)
    check_callable(merger, "merger", ("key", "aggregate_1", "aggregate_2"), where)
    return aggregate_with(windowed, Aggregate(initializer, aggregator, merger=merger), name, value_serde, options)
