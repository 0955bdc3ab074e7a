"""Retention: delete whole old segments of a partition (cleanup.policy contains delete).

A segment other than the last (active) one goes when its newest record is older
than retention.ms, or while the partition is over retention.bytes without it; only
a prefix of the log goes (the first segment that must stay stops the pass). The new
log start offset is recorded (durably) before any file is unlinked, so a crash in
between leaves files below the start that the next pass deletes, never a start
below existing data. Readers with a deleted file open read it to its end and then
continue from the new start.
"""
from __future__ import annotations

import logging
import os
from typing import Callable

from streamkit.broker.partition_log import PartitionLog
from streamkit.broker.segment_files import START_OFFSET_FILE, fsync_dir, list_segments, read_int_file
from streamkit.broker.sealed_segment import SegmentStats
from streamkit.broker.topic_config import TopicConfig

logger = logging.getLogger(__name__)

StatsOf = Callable[[PartitionLog, int], SegmentStats]


def apply_retention(log: PartitionLog, config: TopicConfig, now_ms: int,
                    stats_of: StatsOf) -> tuple[int, int]:
    """Delete what retention allows, and segments wholly below the recorded log start
    (delete_records; also with infinite retention); (segments deleted, records removed)."""
    if config.retention_ms < 0 and config.retention_bytes < 0:
        return drop_segments_below_start(log), 0
    segments = list_segments(log.directory)
    if len(segments) < 2:
        return 0, 0
    start = read_int_file(log.file_path(START_OFFSET_FILE)) or 0
    sizes = {}
    for base in segments:
        try:
            sizes[base] = os.stat(log.segment_path(base)).st_size
        except FileNotFoundError:
            return 0, 0  # someone else is at work here
    total = sum(sizes.values())
    doomed: list[int] = []
    records = 0
    for base, following in zip(segments, segments[1:]):  # never the last segment
        if following <= start:  # below the recorded start: left by an interrupted pass
            doomed.append(base)
            total -= sizes[base]
            continue
        stats = stats_of(log, base)
        too_old = (config.retention_ms >= 0 and (
            stats.max_timestamp is None or stats.max_timestamp < now_ms - config.retention_ms))
        too_big = config.retention_bytes >= 0 and total - sizes[base] >= config.retention_bytes
        if not (too_old or too_big):
            break
        doomed.append(base)
        total -= sizes[base]
        records += stats.records
    if not doomed:
        return 0, 0
    new_start = segments[len(doomed)]
    if new_start > start:
        log.advance_start(new_start)
    _unlink(log, doomed)
    logger.info("%s: retention deleted %d segment(s) (%d records); log start is now %d",
                log.describe(), len(doomed), records, new_start)
    return len(doomed), records


def drop_segments_below_start(log: PartitionLog) -> int:
    """Delete the segment files wholly below the recorded log start (never the last one);
    how many. Under the cleaner lock: the records in them were deleted already."""
    start = read_int_file(log.file_path(START_OFFSET_FILE))
    if start is None:
        return 0
    segments = list_segments(log.directory)
    doomed = [base for base, following in zip(segments, segments[1:]) if following <= start]
    if doomed:
        _unlink(log, doomed)
        logger.info("%s: deleted %d segment(s) below the log start %d",
                    log.describe(), len(doomed), start)
    return len(doomed)


def _unlink(log: PartitionLog, bases: list[int]) -> None:
    for base in bases:
        try:
            os.unlink(log.segment_path(base))
        except FileNotFoundError:
            pass
    fsync_dir(log.directory)
