"""Housekeeping of the embedded log: retention and compaction passes over all topics.

Retention and compaction work on sealed segments; the active (last) segment is sealed by
size as records arrive, and by housekeeping once its records span ``segment.ms`` of
record time or all of them are past ``retention.ms`` (record time, as retention judges),
so a low-volume, idle or backfilled topic is cleaned by time too. A partition's files
hold at most what retention keeps plus one segment (``segment.bytes``, or ``segment.ms``
of record time), plus what arrived since the last pass.

Each partition is handled under its ``.cleaner.lock``, taken without blocking: two
processes never clean the same partition at once, and a busy partition is simply
left for the next pass. Producers and consumers are never blocked (the append lock
is held only for the rename of a compacted segment).
"""
from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from streamkit.core.records import TopicMetadata
from streamkit.broker.compaction import compact
from streamkit.broker.errors import CorruptLogError, EmbeddedBrokerError, UnknownTopicError
from streamkit.broker.partition_log import LogOpener, PartitionLog
from streamkit.broker.segment_files import CLEANER_LOCK_NAME, TEMP_PREFIX, list_segments
from streamkit.broker.retention import apply_retention, drop_segments_below_start
from streamkit.broker.sealed_segment import SegmentStats, segment_stats
from streamkit.broker.topic_config import TopicConfig

logger = logging.getLogger(__name__)

_MAX_CACHED_STATS = 10_000


class Housekeeper:
    """Runs retention and compaction for one broker (over the topics ``list_topics``
    names, on the logs ``open_log`` opens), on demand or in a daemon thread."""

    def __init__(self, list_topics: Callable[[], list[TopicMetadata]], open_log: LogOpener) -> None:
        self._list_topics = list_topics
        self._open_log = open_log
        self._stats: dict[tuple[str, int, int, int], SegmentStats] = {}
        self._active: dict[str, tuple[int, SegmentStats, int]] = {}
        """Per active segment file: (inode, stats so far, offset after the last batch read)."""
        self._mutex = threading.Lock()  # one pass at a time in this broker
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()

    def run(self, now_ms: Optional[int] = None) -> dict[str, dict[str, int]]:
        """One pass over all topics: {topic: {"segments_deleted", "records_removed",
        "segments_compacted"}}."""
        now = int(time.time() * 1000) if now_ms is None else int(now_ms)
        result: dict[str, dict[str, int]] = {}
        with self._mutex:
            for metadata in self._list_topics():
                config = TopicConfig.parse(metadata.config, metadata.name)
                counts = {"segments_rolled": 0, "segments_deleted": 0, "records_removed": 0,
                          "segments_compacted": 0}
                for partition in range(metadata.partitions):
                    try:
                        log = self._open_log(metadata.name, partition, refresh=True)
                        self._partition(log, config, now, counts)
                    except (UnknownTopicError, FileNotFoundError):
                        logger.debug("topic '%s' went away during housekeeping", metadata.name)
                        break  # deleted meanwhile
                    except (EmbeddedBrokerError, OSError):
                        logger.exception("housekeeping of topic '%s' partition %d failed",
                                         metadata.name, partition)
                result[metadata.name] = counts
        return result

    def _partition(self, log: PartitionLog, config: TopicConfig, now_ms: int,
                   counts: dict[str, int]) -> None:
        with try_cleaner_lock(log) as locked:
            if not locked:
                return
            _remove_temp_files(log)
            if self._roll_active_if_due(log, config, now_ms):
                counts["segments_rolled"] += 1
            if config.delete:
                deleted, removed = apply_retention(log, config, now_ms, self._stats_of)
                counts["segments_deleted"] += deleted
                counts["records_removed"] += removed
            else:  # what delete_records left below the start
                counts["segments_deleted"] += drop_segments_below_start(log)
            if config.compact:
                rewritten, removed = compact(log, config, now_ms, self._stats_of)
                counts["segments_compacted"] += rewritten
                counts["records_removed"] += removed

    def _roll_active_if_due(self, log: PartitionLog, config: TopicConfig, now_ms: int) -> bool:
        """Seal the active segment when its records span ``segment.ms`` of record time (as
        Kafka rolls on append), or when retention would delete every record in it (as Kafka
        rolls a deletable active segment): else an idle topic would never be cleaned. Read without blocking appends; rolled only if nothing was
        appended since (an append caught half-written: next pass)."""
        segments = list_segments(log.directory)
        if not segments:
            return False
        base = segments[-1]
        try:
            stats = self._active_stats(log, base)
        except (FileNotFoundError, CorruptLogError):
            return False  # deleted meanwhile, or an append in flight
        if not stats.size:
            return False
        expired = config.delete and config.retention_ms >= 0 and (
            stats.max_timestamp is None or stats.max_timestamp < now_ms - config.retention_ms)
        aged = (stats.min_timestamp is not None and stats.max_timestamp is not None
                and stats.max_timestamp - stats.min_timestamp >= config.segment_ms)
        if not (expired or aged):
            return False
        rolled = log.roll_if_unchanged(base, stats.size)
        if rolled:
            logger.info("%s: sealed the active segment at offset %d (%s)", log.describe(), base,
                        "every record past retention.ms" if expired else "its records span segment.ms")
        return rolled

    def _stats_of(self, log: PartitionLog, base: int) -> SegmentStats:
        """Stats of a sealed segment, cached by file identity (sealed files never change)."""
        path = log.segment_path(base)
        fd = os.open(path, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            key = (path, st.st_ino, st.st_size, st.st_mtime_ns)
            stats = self._stats.get(key)
            if stats is None:
                stats, _end = segment_stats(fd, base, log.describe(os.path.basename(path)))
                if len(self._stats) >= _MAX_CACHED_STATS:
                    self._stats.clear()
                self._stats[key] = stats
            return stats
        finally:
            os.close(fd)

    def _active_stats(self, log: PartitionLog, base: int) -> SegmentStats:
        """Stats of the active segment, read on from where this housekeeper's last pass over
        the same file stopped (a growing file is never read twice over)."""
        path = log.segment_path(base)
        fd = os.open(path, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            known = self._active.get(path)
            since = None
            if known is not None and known[0] == st.st_ino and known[1].size <= st.st_size:
                since = (known[1], known[2])
            stats, end = segment_stats(fd, base, log.describe(os.path.basename(path)), since)
            if len(self._active) >= _MAX_CACHED_STATS:
                self._active.clear()
            self._active[path] = (st.st_ino, stats, end)
            return stats
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ background

    def start(self, interval: float) -> None:
        """Run a pass every `interval` seconds in a daemon thread, until stop()."""
        if interval <= 0:
            raise ValueError(f"housekeeping interval must be > 0 s, got {interval!r}")
        if self._thread is not None and self._thread.is_alive():
            raise EmbeddedBrokerError("housekeeping is already running for this broker")
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(interval,),
                                        name="streamkit-housekeeping", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._thread = None

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.run()
            except Exception:
                logger.exception("housekeeping pass failed")


@contextmanager
def try_cleaner_lock(log: PartitionLog) -> Iterator[bool]:
    """Hold the partition's cleaner lock if nobody does (True), else yield False at once
    (also when the topic was deleted)."""
    try:
        fd = os.open(log.file_path(CLEANER_LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:
        yield False  # the topic was deleted
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.debug("%s: another process is cleaning it", log.describe())
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def _remove_temp_files(log: PartitionLog) -> None:
    """Under the cleaner lock: temp files of a cleaner that died mid-pass."""
    try:
        names = os.listdir(log.directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(TEMP_PREFIX):
            try:
                os.unlink(log.file_path(name))
            except FileNotFoundError:
                pass
