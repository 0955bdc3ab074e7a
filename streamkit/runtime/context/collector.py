"""Buffers output records per topic and partition until the worker flushes them."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ...core.records import Headers, OutgoingRecord


class RecordCollector:
    """Output buffer shared by a worker's tasks. Sinks append to per-partition lists
    directly (see :meth:`buffers_for`), so sending costs one list append."""

    def __init__(self) -> None:
        self._buffers: Dict[str, List[List[OutgoingRecord]]] = {}

    def buffers_for(self, topic: str, partitions: int) -> List[List[OutgoingRecord]]:
        """The per-partition lists of ``topic``; stable for the collector's life."""
        bufs = self._buffers.get(topic)
        if bufs is None:
            bufs = self._buffers[topic] = [[] for _ in range(partitions)]
        elif len(bufs) < partitions:
            bufs.extend([] for _ in range(partitions - len(bufs)))
        return bufs

    def send(self, topic: str, partition: int, key: Optional[bytes], value: Optional[bytes],
             timestamp: int, headers: Headers) -> None:
        self.buffers_for(topic, partition + 1)[partition].append((key, value, timestamp, headers))

    def send_batch(self, topic: str, partition: int, records: List[OutgoingRecord]) -> None:
        self.buffers_for(topic, partition + 1)[partition].extend(records)

    def pending(self) -> List[Tuple[str, int]]:
        """The (topic, partition) pairs holding records not drained yet."""
        return [(topic, partition) for topic, bufs in self._buffers.items()
                for partition, records in enumerate(bufs) if records]

    def drain(self) -> List[Tuple[str, int, List[OutgoingRecord]]]:
        """Take every buffered record, grouped by (topic, partition), leaving the buffers empty."""
        out = []
        for topic, bufs in self._buffers.items():
            for partition, records in enumerate(bufs):
                if records:
                    out.append((topic, partition, records))
                    bufs[partition] = []
        return out

    def discard(self) -> int:
        """Drop everything buffered (a failed task's uncommitted output); return how many."""
        return sum(len(records) for _, _, records in self.drain())
