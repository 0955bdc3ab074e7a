"""The log a registry keeps its state in: the interface, and a list in memory.

A compacted topic of a broker (:mod:`.broker_log`) offers the same synchronous
operations (:class:`RegistryLog`), so the registry runs one code path on either.
Records are (key, value) bytes; a value of None is a tombstone (compaction later removes the key's earlier records, then the tombstone).
"""
from __future__ import annotations

import abc
import threading
from typing import List, Optional, Sequence, Tuple

__all__ = ["LogRecord", "RegistryLog", "MemoryLog"]

LogRecord = Tuple[int, bytes, Optional[bytes]]
"""(offset, key, value or None for a tombstone)."""


class RegistryLog(abc.ABC):
    """An append-only log of (key, value) records read from the start by one reader."""

    @abc.abstractmethod
    def append(self, records: Sequence[Tuple[bytes, Optional[bytes]]]) -> None:
        """Append ``records`` in order, durably, together."""

    @abc.abstractmethod
    def end_offset(self) -> int:
        """The offset the next appended record will get."""

    @property
    @abc.abstractmethod
    def position(self) -> int:
        """The offset the next :meth:`read` starts at."""

    @abc.abstractmethod
    def read(self, max_wait: float) -> List[LogRecord]:
        """The records from :attr:`position` on, waiting up to ``max_wait`` s for some."""

    def close(self) -> None:
        """Release the log's resources."""


class MemoryLog(RegistryLog):
    """A log in a list: the registry of one process, gone when it exits."""

    def __init__(self) -> None:
        self._records: List[Tuple[bytes, Optional[bytes]]] = []
        self._changed = threading.Condition()
        self._position = 0

    def __repr__(self) -> str:
        return "MemoryLog()"

    def append(self, records: Sequence[Tuple[bytes, Optional[bytes]]]) -> None:
        with self._changed:
            self._records.extend(records)
            self._changed.notify_all()

    def end_offset(self) -> int:
        with self._changed:
            return len(self._records)

    @property
    def position(self) -> int:
        return self._position

    def read(self, max_wait: float) -> List[LogRecord]:
        with self._changed:
            if self._position >= len(self._records):
                self._changed.wait(max_wait)
            start = self._position
            out = [(offset, key, value) for offset, (key, value) in
                   enumerate(self._records[start:], start=start)]
            self._position = len(self._records)
            return out
