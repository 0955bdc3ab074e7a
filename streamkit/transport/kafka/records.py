"""Fetching from aiokafka into the runtime's plain record tuples."""
from __future__ import annotations

from typing import List, Sequence

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from ...errors import StreamkitError
from ..base import FetchedBatch, RawRecord

MAX_RECORDS_PER_FETCH = 10_000


def to_raw_records(records: Sequence) -> List[RawRecord]:
    """aiokafka ConsumerRecords → ``(offset, timestamp, key, value, headers)`` tuples."""
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers) if r.headers else None) for r in records]


async def fetch_batches(kafka: AIOKafkaConsumer, max_wait: float, what: str) -> List[FetchedBatch]:
    """One ``getmany`` as FetchedBatches; a failure names ``what`` was being read."""
    try:
        data = await kafka.getmany(timeout_ms=int(max_wait * 1000), max_records=MAX_RECORDS_PER_FETCH)
    except KafkaError as exc:
        raise StreamkitError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
    return [FetchedBatch(ktp.topic, ktp.partition, to_raw_records(records))
            for ktp, records in data.items() if records]
