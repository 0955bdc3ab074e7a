"""Aggregations as values: what an aggregation node folds its values with.

An :class:`Aggregation` is carried by the IR's aggregation nodes (grouped streams, grouped
tables, time windows, sessions) and is all the runtime operators, the test driver and the
Spark replay know of the operation: they call ``initial``, ``add`` and, where the
aggregation defines them, ``subtract`` (table aggregations: an old row leaves its group)
and ``merge`` (sessions: a record bridges two sessions). An aggregate of ``None`` means
"no value yet": the first ``add`` starts it.

The operators wrap every call in the node's user-function error, so an exception here (or
in a user's reducer) reaches the error handlers named by node, topic, partition and offset.
"""
from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, List, Optional, Union


class Aggregation:
    """How values fold into one aggregate per key (and window).

    ``name`` names the node and store by default (``count``, ``windowed_count`` …) and is
    what ``describe()`` shows. ``subtracts`` / ``merges`` say whether ``subtract`` and
    ``merge`` are defined. ``result``, when not None, maps a stored aggregate to what
    downstream sees (the DSL appends it as a table view; see :class:`CountDistinct`).
    """

    name: ClassVar[str] = "aggregation"
    subtracts: ClassVar[bool] = False
    merges: ClassVar[bool] = False
    result: Optional[Callable[[Any], Any]] = None

    def initial(self) -> Any:
        """The aggregate before any value, or None when the first value starts it."""
        return None

    def add(self, key: Any, value: Any, aggregate: Any) -> Any:
        """The aggregate once ``value`` is added (``aggregate`` is None before the first)."""
        raise NotImplementedError

    def subtract(self, key: Any, value: Any, aggregate: Any) -> Any:
        """The aggregate once ``value`` (a row that left the group) is taken out."""
        raise TypeError(f"{self.name} cannot take a value out of an aggregate")

    def merge(self, key: Any, aggregate: Any, other: Any) -> Any:
        """The aggregate of two sessions a record bridges (neither is None)."""
        raise TypeError(f"{self.name} cannot merge two aggregates")


@dataclass(frozen=True)
class Count(Aggregation):
    """The number of values (a grouped table's count moves with its rows)."""

    name: ClassVar[str] = "count"
    subtracts: ClassVar[bool] = True
    merges: ClassVar[bool] = True

    def add(self, key: Any, value: Any, aggregate: Any) -> Any:
        return 1 if aggregate is None else aggregate + 1

    def subtract(self, key: Any, value: Any, aggregate: Any) -> Any:
        return (0 if aggregate is None else aggregate) - 1

    def merge(self, key: Any, aggregate: Any, other: Any) -> Any:
        return aggregate + other


@dataclass(frozen=True)
class Reduce(Aggregation):
    """The first value as is, then ``reducer(aggregate, value)``; ``subtractor(aggregate,
    value)`` takes a row out (grouped tables). Sessions merge with the reducer."""

    reducer: Callable[[Any, Any], Any]
    subtractor: Optional[Callable[[Any, Any], Any]] = None
    name: ClassVar[str] = "reduce"
    merges: ClassVar[bool] = True

    @property
    def subtracts(self) -> bool:  # type: ignore[override]
        return self.subtractor is not None

    def add(self, key: Any, value: Any, aggregate: Any) -> Any:
        return value if aggregate is None else self.reducer(aggregate, value)

    def subtract(self, key: Any, value: Any, aggregate: Any) -> Any:
        if self.subtractor is None:
            return super().subtract(key, value, aggregate)
        return None if aggregate is None else self.subtractor(aggregate, value)

    def merge(self, key: Any, aggregate: Any, other: Any) -> Any:
        return self.reducer(aggregate, other)


@dataclass(frozen=True)
class Aggregate(Aggregation):
    """From ``initializer()``, ``aggregator(key, value, aggregate)``; ``subtractor(key, value,
    aggregate)`` takes a row out (grouped tables); ``merger(key, aggregate_1, aggregate_2)``
    combines sessions."""

    initializer: Callable[[], Any]
    aggregator: Callable[[Any, Any, Any], Any]
    subtractor: Optional[Callable[[Any, Any, Any], Any]] = None
    merger: Optional[Callable[[Any, Any, Any], Any]] = None
    name: ClassVar[str] = "aggregate"

    @property
    def subtracts(self) -> bool:  # type: ignore[override]
        return self.subtractor is not None

    @property
    def merges(self) -> bool:  # type: ignore[override]
        return self.merger is not None

    def initial(self) -> Any:
        return self.initializer()

    def add(self, key: Any, value: Any, aggregate: Any) -> Any:
        return self.aggregator(key, value, self.initializer() if aggregate is None else aggregate)

    def subtract(self, key: Any, value: Any, aggregate: Any) -> Any:
        if self.subtractor is None:
            return super().subtract(key, value, aggregate)
        return self.subtractor(key, value, self.initializer() if aggregate is None else aggregate)

    def merge(self, key: Any, aggregate: Any, other: Any) -> Any:
        if self.merger is None:
            return super().merge(key, aggregate, other)
        return self.merger(key, aggregate, other)


def distinct_text(item: Any) -> str:
    """The canonical JSON text of a counted value: two values are the same when it is."""
    return json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class CountDistinct(Aggregation):
    """The number of distinct values of ``value_of``: a field name (``value[field]``) or a
    function ``value_of(value)``. A None record value or a None field is not counted (as
    SQL's ``COUNT(DISTINCT ...)``), but still opens its window. Exact: the aggregate is the
    sorted list of the distinct values' canonical JSON texts (so ``(1, 2)`` and ``[1, 2]``
    are one value, ``1`` and ``1.0`` two); downstream sees its length.

    Memory: the store keeps every distinct value of every key (and window) until the
    window's retention ends, about its JSON size each, and every record reads and
    rewrites its key's list: fine for thousands of distinct values per key and window, not
    for unbounded ones (use an approximate sketch, e.g. HyperLogLog, there). Sessions
    merge their lists; a grouped table has no count distinct (a row leaving its group
    would need a count per value, not a set).
    """

    value_of: Union[str, Callable[[Any], Any]]
    name: ClassVar[str] = "count_distinct"
    merges: ClassVar[bool] = True

    def _item(self, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(self.value_of, str):
            return value[self.value_of]
        return self.value_of(value)

    def add(self, key: Any, value: Any, aggregate: Any) -> List[str]:
        seen: List[str] = [] if aggregate is None else aggregate
        item = self._item(value)
        if item is None:
            return seen
        text = distinct_text(item)
        at = bisect.bisect_left(seen, text)
        if at == len(seen) or seen[at] != text:
            seen = seen[:at] + [text] + seen[at:]  # a new list: the stored one may be cached
        return seen

    def merge(self, key: Any, aggregate: Any, other: Any) -> List[str]:
        return sorted(set(aggregate) | set(other))

    def result(self, aggregate: Any) -> int:  # type: ignore[override]
        """The number of distinct values in ``aggregate``."""
        return len(aggregate)
