"""Records and partitions as every layer sees them, before any serde.

A raw record is a plain tuple, for speed on the hot path::

    (offset, timestamp_ms, key_bytes_or_None, value_bytes_or_None, headers_or_None)

where headers is ``None`` or a tuple of ``(name: str, value: bytes)`` pairs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Optional, Tuple

Headers = Optional[Tuple[Tuple[str, bytes], ...]]
RawRecord = Tuple[int, int, Optional[bytes], Optional[bytes], Headers]
"""(offset, timestamp_ms, key, value, headers)."""

OutgoingRecord = Tuple[Optional[bytes], Optional[bytes], int, Headers]
"""(key, value, timestamp_ms, headers): a record to append, before it has an offset."""


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True)
class TopicMetadata:
    """A topic as the broker knows it."""

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionOffsets:
    """The first offset still stored and the offset the next append will get."""

    start: int
    end: int
