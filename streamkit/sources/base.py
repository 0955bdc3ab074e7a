"""Sources beyond topics: historical files read as a stream with deterministic offsets.

``b.stream(source)`` reads a :class:`Source` like a topic. Its records get offsets
that depend only on the files (file order, then row order), so the worker commits
and resumes them like topic offsets: in the consumer group of the app, against an
empty anchor topic ``<app-id>-source-<name>`` that carries the source's partition
count. Keys and values reach the topology as JSON (``sk.serdes.Json``).
"""
from __future__ import annotations

import abc
from typing import List

from ..transport.base import RawRecord


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
