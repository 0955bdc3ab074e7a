"""Conversions between aiokafka's record objects and the runtime's plain tuples."""
from __future__ import annotations

from typing import List, Sequence

from ..base import RawRecord


def to_raw_records(records: Sequence) -> List[RawRecord]:
    """aiokafka ConsumerRecords → ``(offset, timestamp, key, value, headers)`` tuples."""
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers) if r.headers else None) for r in records]
