"""Sources beyond topics: historical files read as a stream with deterministic offsets.

``b.stream(source)`` reads a :class:`Source` like a topic. Its records get offsets
that depend only on the files (file order, then row order), so the worker commits
and resumes them like topic offsets: in the consumer group of the app, against an
empty anchor topic ``<app-id>-source-<name>`` that carries the source's partition
count. Keys and values reach the topology as JSON (``sk.serdes.Json``).
"""
from __future__ import annotations

import abc
from typing import Any, Iterator, List, Optional

from ..core.records import RawRecord


class PartitionReader(abc.ABC):
    """Reads one partition of a source in offset order."""

    @abc.abstractmethod
    def seek(self, offset: int) -> None:
        """Continue at the first record whose offset is ``offset`` or more."""

    @abc.abstractmethod
    def read(self, max_records: int) -> List[RawRecord]:
        """Up to about ``max_records`` next records (all records of one offset stay
        together); empty at the end of the data."""

    @property
    @abc.abstractmethod
    def position(self) -> int:
        """The offset the next read starts at."""

    @abc.abstractmethod
    def has_more(self) -> bool:
        """Whether a read would return records now."""

    def close(self) -> None:
        """Release open files."""


class FileSequenceReader(PartitionReader):
    """A reader over the items of a list of files, in order, with one item of look-ahead
    (``has_more`` peeks; ``put_back`` returns an item taken too far)."""

    def __init__(self, file_count: int) -> None:
        self._file_count = file_count
        self._file_index = 0
        self._items: Optional[Iterator[Any]] = None
        self._pending: Optional[Any] = None

    @abc.abstractmethod
    def _open_file(self, index: int) -> Iterator[Any]:
        """The items of file ``index``."""

    def _restart_at(self, file_index: int) -> None:
        """Continue with the first item of file ``file_index``."""
        self._file_index, self._items, self._pending = file_index, None, None

    def _next(self) -> Optional[Any]:
        if self._pending is not None:
            item, self._pending = self._pending, None
            return item
        while self._file_index < self._file_count:
            if self._items is None:
                self._items = self._open_file(self._file_index)
            item = next(self._items, None)
            if item is not None:
                return item
            self._items = None
            self._file_index += 1
        return None

    def _put_back(self, item: Any) -> None:
        self._pending = item

    def has_more(self) -> bool:
        if self._pending is None:
            self._pending = self._next()
        return self._pending is not None


class Source(abc.ABC):
    """Historical data readable as a stream."""

    @abc.abstractmethod
    def default_name(self) -> str:
        """The name used for the anchor topic unless ``b.stream(..., name=)`` gives one."""

    @abc.abstractmethod
    def partitions(self) -> int:
        """How many partitions (tasks) the source has."""

    @abc.abstractmethod
    def open_partition(self, partition: int) -> PartitionReader: ...

    @abc.abstractmethod
    def describe(self) -> str: ...
