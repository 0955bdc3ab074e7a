"""What happens to a record that arrives after its windows closed: it is dropped,
counted (``late_records_dropped``), logged at debug level, and written to the
operation's late-records topic when one is set. Never lost without a trace."""
from __future__ import annotations

import logging
from typing import Any, Optional

from ..context.task_context import TaskContext
from ..context.operator_time import ObservedStreamTime

log = logging.getLogger("streamkit.late")

LATE_HEADERS = ("streamkit.late.node", "streamkit.late.topic", "streamkit.late.partition",
                "streamkit.late.offset", "streamkit.late.timestamp", "streamkit.late.stream_time")


class LateRecords:
    """Drops late records for one windowed node of one task; ``clock`` is the node's
    stream time (logged, and in the ``streamkit.late.stream_time`` header)."""

    def __init__(self, task: TaskContext, node: str, topic: Optional[str], clock: ObservedStreamTime) -> None:
        self._task = task
        self._clock = clock
        self._node = node
        self._topic = topic
        self._partitions = task.partitions[topic] if topic is not None else 1

    def drop(self, key: Any, timestamp: int, window: str) -> None:
        """Drop the record being processed (``key`` at ``timestamp``; ``window`` says which
        window was closed, for the log)."""
        task = self._task
        task.metrics.late_records_dropped += 1
        record = task.record
        if log.isEnabledFor(logging.DEBUG):
            where = "" if record is None else f" ({task.topic}[{task.partition}]@{record[0]})"
            log.debug("%s: dropped a late record%s: key %r at %d, stream time %d, window %s closed",
                      self._node, where, key, timestamp, self._clock.time, window)
        if self._topic is None or record is None or task.muted:
            return
        headers = tuple(record[4] or ()) + tuple(zip(LATE_HEADERS, (
            self._node.encode(), (task.topic or "").encode(), str(task.partition).encode(),
            str(record[0]).encode(), str(timestamp).encode(), str(self._clock.time).encode())))
        task.collector.send(self._topic, task.partition % self._partitions, record[2], record[3], record[1],
                            headers)
