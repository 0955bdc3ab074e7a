"""Compaction: keep the latest record per key (cleanup.policy contains compact).

The cleanable range is the sealed segments (never the last one) that lie wholly
below the partition's last stable offset (every transaction there is resolved) and
whose newest record is older than min.compaction.lag.ms. One pass:

1. learns the outcome of every transaction from the markers of the whole log;
2. maps each key to its latest offset in the range (aborted data and markers do
   not count; records without a key are dropped, with a warning);
3. rewrites each segment of the range that changes into a temp file, then renames it
   over the old one under the partition's append lock (held for the rename only).

The rewrite keeps each key's latest record at its original offset (FLAG_COMPACTED
batches carry offset deltas and cover the dropped offsets), drops aborted data,
turns committed transactional records into plain ones, and drops a marker once no
transactional data of its transaction is left in the log (the pass after its data
was rewritten: a reader that still has the old data file open finds no marker,
sees that its file was replaced and re-reads the offset from the new file). A
tombstone (None value) is kept until its delete horizon, set when a cleaner first
keeps it: then + delete.retention.ms (as Kafka since KIP-534), so a reader that
starts from the beginning has that long to see it.

Readers that have an old file open keep reading it: it is never modified, only
unlinked. A crash leaves at worst a temp file (removed by the next pass) and some
segments rewritten and others not, which is a consistent log either way.
"""
from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Callable, Optional

from streamkit.core.records import RawRecord
from streamkit.broker.batch_format import (
    FLAG_CONTROL, FLAG_TRANSACTIONAL, decode_records, delete_horizon, encode_batch)
from streamkit.broker.batch_walker import BatchWalker
from streamkit.broker.group_store import write_json_atomic
from streamkit.broker.partition_log import PartitionLog
from streamkit.broker.segment_files import (
    CLEANER_CHECKPOINT_FILE, TEMP_PREFIX, fsync_dir, list_segments, read_cleaner_checkpoint,
    segment_file_name)
from streamkit.broker.sealed_segment import SegmentStats, iter_batches
from streamkit.broker.topic_config import TopicConfig

logger = logging.getLogger(__name__)

MAX_BATCH_RECORDS = 4096  # per batch the cleaner writes
MAX_BATCH_BYTES = 1 << 20
CLEAN_SUFFIX = ".clean"

StatsOf = Callable[[PartitionLog, int], SegmentStats]


class _Unresolved(Exception):
    """A transactional batch in the range has no marker (should not happen below the LSO)."""


def compact(log: PartitionLog, config: TopicConfig, now_ms: int,
            stats_of: StatsOf) -> tuple[int, int]:
    """One compaction pass over a partition; (segments rewritten, records removed)."""
    segments = list_segments(log.directory)
    if len(segments) < 2:
        return 0, 0
    lso = log.last_stable_offset()
    cleanable: list[tuple[int, int]] = []
    for base, end in zip(segments, segments[1:]):
        if end > lso:
            break
        if config.min_compaction_lag_ms > 0:
            newest = stats_of(log, base).max_timestamp
            if newest is not None and newest > now_ms - config.min_compaction_lag_ms:
                break
        cleanable.append((base, end))
    if not cleanable:
        return 0, 0
    checkpoint_path = log.file_path(CLEANER_CHECKPOINT_FILE)
    checkpoint = read_cleaner_checkpoint(checkpoint_path)
    clean_end = cleanable[-1][1]
    due = checkpoint.get("due_ms")
    if (checkpoint.get("offset") == clean_end and not checkpoint.get("markers")
            and (due is None or now_ms < due)):
        return 0, 0  # nothing new since the last pass

    files: list[tuple[int, int, int, int]] = []  # base, end, fd, inode
    try:
        for base, end in cleanable:
            try:
                fd = os.open(log.segment_path(base), os.O_RDONLY)
            except FileNotFoundError:
                return 0, 0  # the topic is being deleted
            files.append((base, end, fd, os.fstat(fd).st_ino))
        outcomes: dict[int, bool] = {}
        try:
            latest, txn_data = _key_map(log, files, outcomes)
        except _Unresolved as exc:
            logger.warning("%s: not compacting: %s", log.describe(), exc)
            return 0, 0
        cleaner = _Cleaner(log, config, now_ms, outcomes, latest, txn_data)
        for base, end, fd, ino in files:
            cleaner.clean_segment(base, end, fd, ino)
    finally:
        for _, _, fd, _ in files:
            os.close(fd)
    if cleaner.rewritten:
        fsync_dir(log.directory)
    write_json_atomic(Path(checkpoint_path), {"offset": clean_end, "due_ms": cleaner.due_ms,
                                        "markers": cleaner.markers_kept}, durable=False)
    if cleaner.null_keys:
        logger.warning("%s: compaction dropped %d record(s) without a key (a compacted topic "
                       "needs keys)", log.describe(), cleaner.null_keys)
    if cleaner.rewritten:
        logger.info("%s: compaction rewrote %d segment(s) below offset %d, removing %d records",
                    log.describe(), cleaner.rewritten, clean_end, cleaner.removed)
    return cleaner.rewritten, cleaner.removed


def _outcomes(log: PartitionLog) -> dict[int, bool]:
    """Transaction id -> committed, for every marker in the log."""
    walker = BatchWalker.at_start(log)
    if walker is None:
        return {}
    found: dict[int, tuple[bool, int]] = {}
    try:
        walker.advance(outcomes=found)
    finally:
        walker.close()
    return {pid: outcome[0] for pid, outcome in found.items()}


def _where(log: PartitionLog, base: int) -> str:
    return log.describe(segment_file_name(base))


def _key_map(log: PartitionLog, files: list[tuple[int, int, int, int]],
             outcomes: dict[int, bool]) -> tuple[dict[bytes, int], set[int]]:
    """The latest offset of each key in the range, and the transactions with data in it.

    Fills `outcomes` from the log's markers at the first transactional batch only: a
    log without transactions is never walked for them.
    """
    latest: dict[bytes, int] = {}
    txn_data: set[int] = set()
    for base, _end, fd, _ino in files:
        for batch in iter_batches(fd, base, _where(log, base)):
            if batch.flags & FLAG_CONTROL:
                continue
            if batch.flags & FLAG_TRANSACTIONAL:
                txn_data.add(batch.producer_id)
                if not outcomes:
                    outcomes.update(_outcomes(log))
                committed = outcomes.get(batch.producer_id)
                if committed is None:
                    raise _Unresolved(f"transaction {batch.producer_id} at offset {batch.base} "
                                      f"has no marker")
                if not committed:
                    continue
            if batch.count:
                for record in decode_records(batch.buf, batch.pos, batch.base, batch.count,
                                             batch.flags):
                    if record[2] is not None:
                        latest[record[2]] = record[0]
    return latest, txn_data


class _Cleaner:
    """Rewrites the segments of one pass."""

    def __init__(self, log: PartitionLog, config: TopicConfig, now_ms: int,
                 outcomes: dict[int, bool], latest: dict[bytes, int], txn_data: set[int]) -> None:
        self.log = log
        self.now_ms = now_ms
        self.new_horizon = now_ms + config.delete_retention_ms
        self.outcomes = outcomes
        self.latest = latest
        self.txn_data = txn_data
        self.rewritten = 0
        self.removed = 0
        self.null_keys = 0
        self.markers_kept = False
        self.due_ms: Optional[int] = None

    def clean_segment(self, base: int, end: int, fd: int, ino: int) -> None:
        writer = _SegmentWriter(self.log.directory, base, end)
        try:
            changed, removed = self._filter(writer, base, fd)
            if not changed:
                writer.discard()
                return
            writer.finish()
            with self.log.append_lock():  # only for the rename
                path = self.log.segment_path(base)
                try:
                    same = os.stat(path).st_ino == ino
                except FileNotFoundError:
                    same = False
                if not same:
                    writer.discard()
                    return
                os.replace(writer.path, path)
        except BaseException:
            writer.discard()
            raise
        self.rewritten += 1
        self.removed += removed
        if writer.min_horizon is not None:
            self.due_ms = writer.min_horizon if self.due_ms is None else min(
                self.due_ms, writer.min_horizon)

    def _filter(self, writer: "_SegmentWriter", base: int, fd: int) -> tuple[bool, int]:
        """Feed the records and markers to keep to `writer`; (changed, records removed)."""
        changed = False
        removed = 0
        latest = self.latest
        for batch in iter_batches(fd, base, _where(self.log, base)):
            if batch.flags & FLAG_CONTROL:
                if batch.producer_id in self.txn_data:
                    writer.add_raw(batch.raw, batch.base, batch.span)
                    self.markers_kept = True
                else:
                    changed = True
                continue
            if batch.flags & FLAG_TRANSACTIONAL:
                changed = True  # committed data becomes plain, aborted data goes
                if not self.outcomes[batch.producer_id]:
                    removed += batch.count
                    continue
            if not batch.count:
                continue
            horizon_in = delete_horizon(batch.buf, batch.pos, batch.flags)
            for record in decode_records(batch.buf, batch.pos, batch.base, batch.count,
                                         batch.flags):
                key = record[2]
                if key is None:
                    self.null_keys += 1
                elif latest.get(key) != record[0]:
                    pass
                elif record[3] is not None:
                    writer.add(record, -1)
                    continue
                else:  # the latest record of its key is a tombstone
                    if horizon_in < 0:
                        horizon = self.new_horizon
                        changed = True
                    else:
                        horizon = horizon_in
                    if horizon > self.now_ms:
                        writer.add(record, horizon)
                        continue
                removed += 1
                changed = True
        return changed, removed


class _SegmentWriter:
    """Writes a cleaned segment to a temp file: batches that cover [base, end) exactly."""

    def __init__(self, directory: str, base: int, end: int) -> None:
        self.path = os.path.join(
            directory, f"{TEMP_PREFIX}{segment_file_name(base)}.{uuid.uuid4().hex}{CLEAN_SUFFIX}")
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._cursor = base  # first offset the next batch covers
        self._end = end
        self._records: list[tuple] = []
        self._offsets: list[int] = []
        self._bytes = 0
        self._horizon = -1
        self.min_horizon: Optional[int] = None

    def add(self, record: RawRecord, horizon: int) -> None:
        offset, timestamp, key, value, headers = record
        if self._records and (
                len(self._records) >= MAX_BATCH_RECORDS or self._bytes >= MAX_BATCH_BYTES
                or (horizon >= 0 and self._horizon >= 0 and horizon != self._horizon)):
            self._flush(offset)
        self._records.append((key, value, timestamp, headers))
        self._offsets.append(offset)
        self._bytes += len(key or b"") + len(value or b"") + 24
        if horizon >= 0:
            self._horizon = horizon

    def add_raw(self, raw: bytes, base: int, span: int) -> None:
        """A batch kept as it is (a marker), at its own offset."""
        self._flush(base)
        self._write(raw)
        self._cursor = base + span

    def finish(self) -> None:
        self._flush(self._end)
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1

    def discard(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _flush(self, end: int) -> None:
        if self._cursor >= end:
            return
        self._write(encode_batch(self._records, self._cursor, offsets=self._offsets,
                                 span=end - self._cursor, horizon=self._horizon))
        if self._horizon >= 0:
            self.min_horizon = self._horizon if self.min_horizon is None else min(
                self.min_horizon, self._horizon)
        self._cursor = end
        self._records, self._offsets, self._bytes, self._horizon = [], [], 0, -1

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
