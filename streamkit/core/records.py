"""Records and partitions as every layer sees them, before any serde.

A raw record is a plain tuple, for speed on the hot path::

    (offset, timestamp_ms, key_bytes_or_None, value_bytes_or_None, headers_or_None)

where headers is ``None`` or a tuple of ``(name: str, value: bytes)`` pairs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Mapping, NamedTuple, Optional, Tuple

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


def partition_counts(topic: Callable[[str], Optional[TopicMetadata]], topics: Iterable[str]
                     ) -> Dict[str, Optional[int]]:
    """Each topic's partition count through ``topic(name)``, None for a topic that does not exist."""
    out: Dict[str, Optional[int]] = {}
    for name in topics:
        meta = topic(name)
        out[name] = None if meta is None else meta.partitions
    return out
