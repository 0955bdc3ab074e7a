"""What a transaction's outcome writes outside its id's own files: commit or abort
markers in the partitions it touched, its consumer offsets into their groups, and the
roll forward (or abort) of what a dead owner left (docs/embedded-transactions.md).

The broker hands it how to open a partition's log and its group store, so the
transactions never import the broker that owns them.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping, Optional

from streamkit.core.records import TopicPartition
from streamkit.broker.errors import UnknownPartitionError, UnknownTopicError
from streamkit.broker.file_sync import sync_all
from streamkit.broker.group_store import GroupStore
from streamkit.broker.partition_log import LogGoneError, LogOpener, PartitionLog
from streamkit.broker.transaction_state import IdDirectory, offsets_from_json

logger = logging.getLogger(__name__)

MAX_SEQUENCE = 0xFFFFFFFF
"""The largest transaction sequence of a producer id (32 bits)."""


def transaction_id(producer_id: int, sequence: int) -> int:
    """The id of transaction `sequence` of a producer: its producer_id in batches."""
    return (producer_id << 32) | (sequence & MAX_SEQUENCE)


def is_pending(record: dict) -> bool:
    """Whether the id's record holds a transaction open or committing."""
    return bool(record.get("active")) or record.get("state") == "committing"


class TransactionOutcomes:
    """Markers and offsets of transactions, written to the logs ``open_log`` opens and the
    consumer groups of ``groups``."""

    def __init__(self, open_log: LogOpener, groups: GroupStore) -> None:
        self._open_log = open_log
        self._groups = groups

    def recover(self, ids: IdDirectory, record: dict) -> dict:
        """Under the id's .lock: roll a committing transaction forward, abort the one that
        may be open, make that durable; return the record to write next (sequence + 1)."""
        sequence = int(record["sequence"])
        producer_id = int(record["producer_id"])
        touched: list[PartitionLog] = []
        files: list[Path] = []
        if record.get("state") == "committing":
            txn = transaction_id(producer_id, sequence)
            logger.info("transactional id '%s': rolling transaction %d forward",
                        ids.transactional_id, sequence)
            for topic, partition in record.get("partitions", []):
                log = self.marker(topic, partition, txn, True)
                if log is not None:
                    touched.append(log)
            offsets, metadata = offsets_from_json(record.get("offsets", {}))
            files.extend(self.apply_offsets(ids.transactional_id, txn, offsets, metadata))
        if record.get("active"):
            open_txn = transaction_id(producer_id, sequence + 1)
            for topic, partition in record.get("registered", []):
                log = self.marker(topic, partition, open_txn, False)
                if log is not None:
                    touched.append(log)
            sequence += 1
        sync_all(set(touched), files)
        return {**record, "sequence": sequence, "state": "complete", "partitions": [],
                "offsets": {}, "registered": []}

    def apply_offsets(self, transactional_id: str, txn: int,
                      offsets: Mapping[str, Mapping[TopicPartition, int]],
                      metadata: Optional[Mapping[str, Mapping[TopicPartition, str]]] = None) -> list[Path]:
        """Merge the offsets (and their metadata) of transaction `txn` (its id: ids of a
        transactional id only grow) into their groups, once; the files to fsync."""
        groups = self._groups
        for group, group_offsets in offsets.items():
            groups.commit(group, group_offsets, txn=(transactional_id, txn), durable=False,
                          metadata=(metadata or {}).get(group))
        return [groups.offsets_path(group) for group in offsets]

    def log(self, topic: str, partition: int) -> PartitionLog:
        return self._open_log(topic, partition)

    def marker(self, topic: str, partition: int, txn: int,
                commit: bool) -> Optional[PartitionLog]:
        try:
            log = self._open_log(topic, partition, refresh=True)
            log.append_marker(txn, commit)
            return log
        except (UnknownTopicError, UnknownPartitionError, LogGoneError):
            logger.warning("transaction %d: %s[%d] is gone; no marker written there",
                           txn, topic, partition)
            return None
