"""Writing an example app's sample data: records placed by key as the app's producers
would place them (Kafka's partitioner on the serialized key), sent in one producer
session. Shared by ``apps.orders`` and ``apps.avro_orders``."""
from __future__ import annotations

import asyncio
from typing import Dict, Iterable, List, Optional, Tuple

from streamkit.transport.base import Transport
from streamkit.core.partitioner import partition_for_key

Batch = Tuple[str, int, list]


def by_partition(topic: str, partitions: int,
                 encoded: Iterable[Tuple[Optional[bytes], Optional[bytes], int]]) -> List[Batch]:
    """``(topic, partition, records)`` batches of ``(key, value, timestamp)`` records already
    serialized, each in the partition its key's bytes hash to, in input order."""
    per_partition: Dict[int, list] = {}
    for key_bytes, value_bytes, ts in encoded:
        per_partition.setdefault(partition_for_key(key_bytes, partitions), []).append(
            (key_bytes, value_bytes, ts, None))
    return [(topic, partition, records) for partition, records in sorted(per_partition.items())]


def send_batches(transport: Transport, batches: List[Batch]) -> None:
    """Send ``batches`` and wait until the broker has them."""
    async def send() -> None:
        producer = transport.producer()  # inside the event loop (Kafka clients need one)
        await producer.send(batches)
        await producer.flush()
        await producer.aclose()
    asyncio.run(send())
