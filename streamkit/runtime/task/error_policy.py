"""What happens to a record that fails to deserialize or to process.

- ``fail`` (default): raise :class:`RecordError`; the worker stops and commits
  nothing past the record.
- ``log_and_skip``: log a warning, count it, go on.
- ``dead_letter``: write the raw record to ``<app-id>-dlq`` with headers naming
  its origin and the error, count it, go on.

A record reaching a key-based operation (aggregation, table, join dropping it) with a
``None`` key is dropped as Kafka Streams does, whatever the handler, but never silently:
it is counted (``null_key_records_dropped``), logged with its origin, and written to the
dead-letter topic when the processing handler is ``dead_letter``.
"""
from __future__ import annotations

import logging
import traceback
from typing import Callable, Optional

from ...errors import ConfigError, RecordError, SuppressionBufferFullError, TopologyError, UserFunctionError
from ...core.settings import check_handler
from ...core.records import RawRecord
from ..context.collector import RecordCollector
from ..context.task_metrics import TaskMetrics

log = logging.getLogger("streamkit.errors")

DLQ_HEADERS = ("streamkit.error.stage", "streamkit.error.topic", "streamkit.error.partition",
               "streamkit.error.offset", "streamkit.error.node", "streamkit.error.class",
               "streamkit.error.message")


class ErrorPolicy:
    """Applies the configured handlers for one task."""

    def __init__(self, *, deserialization: str, processing: str, dlq_topic: str, dlq_partitions: int,
                 collector: RecordCollector, metrics: TaskMetrics,
                 muted: Callable[[], bool] = lambda: False) -> None:
        self.deserialization = check_handler(deserialization, "deserialization_error_handler")
        self.processing = check_handler(processing, "processing_error_handler")
        self.dlq_topic = dlq_topic
        self.dlq_partitions = dlq_partitions
        self._collector = collector
        self._metrics = metrics
        self._muted = muted
        """Whether the task is re-reading input it processed before (a rebuild): the records
        were skipped or dead-lettered then, and are not again."""
        self._last_null_key_origin: Optional[tuple] = None
        """The input record last dead-lettered for a None key: one record can reach several
        key-based operations (or one twice, as a table update's old and new row)."""

    def deserialization_failed(self, topic: str, partition: int, record: RawRecord, exc: BaseException) -> None:
        self._handle(self.deserialization, "deserialization", topic, partition, record, exc, None)

    def processing_failed(self, topic: str, partition: int, record: Optional[RawRecord],
                          exc: BaseException) -> None:
        if isinstance(exc, (TopologyError, ConfigError, SuppressionBufferFullError)):
            raise exc  # a mistake in the app or its limits, not in the record: no handler may skip it
        node = exc.node if isinstance(exc, UserFunctionError) else None
        cause = exc.cause if isinstance(exc, UserFunctionError) else exc
        if record is None:  # inside a punctuation: there is no record to skip
            raise exc
        self._handle(self.processing, "processing", topic, partition, record, cause, node)

    def null_key_dropped(self, topic: Optional[str], partition: int, record: Optional[RawRecord],
                         node: str) -> None:
        """A record reached key-based operation ``node`` with a ``None`` key: count it, log
        it, dead-letter it if the processing handler says so; the caller drops it."""
        self._metrics.null_key_records_dropped += 1
        if record is None or topic is None:  # sent by a punctuation: no input record to name
            log.warning("dropped a record with a None key in node '%s' (sent by a punctuation)", node)
            return
        cause = ValueError(f"a None key cannot be used by the key-based operation '{node}'; "
                           "the record is dropped")
        origin = (topic, partition, record[0])
        if self.processing == "dead_letter" and origin != self._last_null_key_origin:
            self._last_null_key_origin = origin
            self._handle("dead_letter", "processing", topic, partition, record, cause, node)
            return
        if self._muted():
            log.debug("rebuilding: %s (handled when first processed)",
                      RecordError("processing", topic, partition, record[0], cause, node))
            return
        log.warning("dropped record with a None key at topic '%s', partition %d, offset %d in node '%s'",
                    topic, partition, record[0], node)

    def _handle(self, handler: str, stage: str, topic: str, partition: int, record: RawRecord,
                cause: BaseException, node: Optional[str]) -> None:
        error = RecordError(stage, topic, partition, record[0], cause, node)
        if handler == "fail":
            raise error from cause
        if self._muted():
            log.debug("rebuilding: %s (handled when first processed)", error)
            return
        if handler == "log_and_skip":
            self._metrics.records_skipped += 1
            log.warning("skipped record: %s", error)
            return
        headers = tuple(record[4] or ()) + tuple(zip(DLQ_HEADERS, (
            stage.encode(), topic.encode(), str(partition).encode(), str(record[0]).encode(),
            (node or "").encode(), type(cause).__name__.encode(), str(cause).encode(errors="replace"))))
        trace = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__, limit=5))
        headers += (("streamkit.error.trace", trace.encode(errors="replace")),)
        self._collector.send(self.dlq_topic, partition % self.dlq_partitions, record[2], record[3],
                             record[1], headers)
        self._metrics.records_dead_lettered += 1
        log.warning("dead-lettered record to %s: %s", self.dlq_topic, error)
