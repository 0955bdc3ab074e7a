"""Public state-store declarations and the key-value store interface.

Declare a store for a Processor-API function with :func:`key_value`; aggregations
declare their own. At run time a task opens one store per (store, task).
"""
from __future__ import annotations

import abc
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterator, Optional, Tuple

from .serdes import Serde

__all__ = ["StoreSpec", "key_value", "window", "session", "KeyValueStore"]

KINDS = ("key_value", "window", "session", "suppression")
WINDOWED_KINDS = ("window", "session")

_STORE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True)
class StoreSpec:
    """What a store is: its name, kind, serdes and whether it is changelogged.

    ``key_serde``/``value_serde`` default to JSON (stores and their changelogs are
    internal to the app). ``timestamped`` stores keep each value's timestamp
    (DSL aggregations and tables use them). Window and session stores keep windows
    for ``retention_ms`` of stream time (their changelogs are compacted and deleted
    after that); a window store's windows are ``window_size_ms`` long.
    """

    name: str
    kind: str = "key_value"
    key_serde: Optional[Serde] = None
    value_serde: Optional[Serde] = None
    changelog: bool = True
    timestamped: bool = False
    retention_ms: Optional[int] = None
    window_size_ms: Optional[int] = None
    with_first_timestamp: bool = False
    """Window stores of sliding windows also keep the earliest record time of each window."""

    def __post_init__(self) -> None:
        if not _STORE_NAME.match(self.name):
            raise ValueError(
                f"store name {self.name!r} is invalid: use 1-200 of the characters [A-Za-z0-9._-] "
                "(it becomes part of the changelog topic name)")
        if self.kind not in KINDS:
            raise ValueError(f"store '{self.name}': kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind in WINDOWED_KINDS and (not isinstance(self.retention_ms, int) or self.retention_ms < 1):
            raise ValueError(f"{self.kind} store '{self.name}' needs a positive retention, got {self.retention_ms!r}")
        if self.kind == "window" and (not isinstance(self.window_size_ms, int) or self.window_size_ms < 1):
            raise ValueError(f"window store '{self.name}' needs a positive window size, got {self.window_size_ms!r}")


def key_value(name: str, *, key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None,
              changelog: bool = True) -> StoreSpec:
    """Declare a key-value store named ``name``.

    >>> key_value("totals").name
    'totals'
    """
    return StoreSpec(name, "key_value", key_serde, value_serde, changelog)


def _millis(store: str, what: str, value: timedelta) -> int:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ValueError(f"store '{store}': {what} must be a positive datetime.timedelta, got {value!r}")
    return value // timedelta(milliseconds=1)


def window(name: str, *, size: timedelta, retention: timedelta, key_serde: Optional[Serde] = None,
           value_serde: Optional[Serde] = None, changelog: bool = True) -> StoreSpec:
    """Declare a window store: values per (key, window start) for windows of ``size``,
    kept for ``retention`` of stream time (older windows are dropped by segment).

    >>> window("per-minute", size=timedelta(minutes=1), retention=timedelta(minutes=5)).retention_ms
    300000
    """
    return StoreSpec(name, "window", key_serde, value_serde, changelog,
                     retention_ms=_millis(name, "retention", retention), window_size_ms=_millis(name, "size", size))


def session(name: str, *, retention: timedelta, key_serde: Optional[Serde] = None,
            value_serde: Optional[Serde] = None, changelog: bool = True) -> StoreSpec:
    """Declare a session store: values per (key, session [start, end]), kept until a
    session's end is ``retention`` of stream time in the past."""
    return StoreSpec(name, "session", key_serde, value_serde, changelog,
                     retention_ms=_millis(name, "retention", retention))


class KeyValueStore(abc.ABC):
    """A task's key-value store, on deserialized keys and values.

    Scans (``range``, ``prefix_scan``, ``all``) iterate in the order of the
    serialized keys, as Kafka Streams' stores do.
    """

    name: str

    @abc.abstractmethod
    def get(self, key: Any) -> Any:
        """The value of ``key``, or ``None``."""

    @abc.abstractmethod
    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value``; ``None`` deletes."""

    @abc.abstractmethod
    def delete(self, key: Any) -> Any:
        """Remove ``key``; return its old value or ``None``."""

    def put_if_absent(self, key: Any, value: Any) -> Any:
        """Set ``key`` only when absent; return the existing value (``None`` if it was set)."""
        old = self.get(key)
        if old is None:
            self.put(key, value)
        return old

    @abc.abstractmethod
    def range(self, start: Any = None, end: Any = None) -> Iterator[Tuple[Any, Any]]:
        """Entries with start <= key <= end in serialized-key order (None = open end)."""

    @abc.abstractmethod
    def prefix_scan(self, prefix: bytes) -> Iterator[Tuple[Any, Any]]:
        """Entries whose serialized key starts with ``prefix``."""

    def all(self) -> Iterator[Tuple[Any, Any]]:
        """Every entry, in serialized-key order."""
        return self.range()

    @abc.abstractmethod
    def approximate_num_entries(self) -> int:
        """The number of entries (exact for the in-memory store)."""
