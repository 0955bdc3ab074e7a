"""What every sink shares: per-task writers, resume positions, bounded retries.

A sink (``stream.sink(s)``) is terminal. Each task opens its own :class:`SinkWriter`;
records are buffered as the task processes them and delivered when the task
commits, before its input offsets are committed. A writer that keeps its own
positions (files, databases) reports, per input partition, the first offset it has
not delivered yet; records that originate below it are skipped, so reprocessing
after a crash delivers nothing twice.
"""
from __future__ import annotations

import abc
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ..errors import SinkError, TaskMigratedError, TransientSinkError
from ..core.records import Headers, TopicPartition

log = logging.getLogger(__name__)

Positions = Mapping[TopicPartition, int]


class SinkRecord(NamedTuple):
    """A record handed to a sink, with the input record it came from.

    ``topic``/``partition``/``offset`` name the task input being processed when the
    record was written; ``offset`` is None for records not caused by one input
    record (a wall-clock punctuation before any input).
    """

    key: Any
    value: Any
    timestamp: int
    topic: Optional[str]
    partition: int
    offset: Optional[int]
    headers: Headers = None


@dataclass(frozen=True)
class SinkTask:
    """What a sink knows about the task that opens a writer."""

    app_id: str
    task_id: str
    sink_name: str
    inputs: Tuple[TopicPartition, ...]


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff for transient delivery errors."""

    attempts: int = 6
    first_backoff: float = 0.1
    max_backoff: float = 5.0

    def run(self, action: Callable[[], Any], *, transient: Callable[[BaseException], bool],
            describe: Callable[[], str], on_retry: Optional[Callable[[], None]] = None) -> Any:
        """``action()``; on a transient error wait and try again, at most ``attempts`` times.
        Anything else, or the last failure, becomes a :class:`SinkError` saying ``describe()``."""
        backoff = self.first_backoff
        for attempt in range(1, self.attempts + 1):
            try:
                return action()
            except TaskMigratedError:
                raise
            except Exception as exc:  # noqa: BLE001 - classified below
                retry = attempt < self.attempts and (isinstance(exc, TransientSinkError) or transient(exc))
                if not retry:
                    kind = "after %d attempts" % attempt if attempt > 1 else "permanent error"
                    raise SinkError(f"{describe()} failed ({kind}): {type(exc).__name__}: {exc}") from exc
                log.warning("%s failed (attempt %d of %d, retrying in %.1f s): %s: %s", describe(), attempt,
                            self.attempts, backoff, type(exc).__name__, exc)
                time.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
                if on_retry is not None:
                    on_retry()
        raise AssertionError("unreachable")


class Sink(abc.ABC):
    """A destination outside the broker. Subclasses implement :meth:`open`."""

    retry: RetryPolicy = RetryPolicy()
    external: bool = True
    """Whether the sink writes outside this process (a database, files). The test driver
    collects such a sink's records instead of delivering them unless asked
    (``TopologyTestDriver(app, deliver_external_sinks=True)``); the Spark replay always does."""

    @abc.abstractmethod
    def open(self, task: SinkTask) -> "SinkWriter":
        """A writer for one task (called when the task starts)."""

    def exclusive_target(self) -> Optional[str]:
        """What no other sink of the app may write too (a directory), or None."""
        return None

    @abc.abstractmethod
    def describe(self) -> str:
        """One line for ``describe()`` and error messages, e.g. ``ParquetArchive(/data/archive)``."""


class SinkWriter(abc.ABC):
    """One task's buffered connection to a sink."""

    def __init__(self, sink: Sink, task: SinkTask) -> None:
        self.sink = sink
        self.task = task
        self.pending: List[SinkRecord] = []
        self.delivered_until: Dict[Tuple[Optional[str], int], int] = {}
        """Per input partition: records that originate below this offset were delivered before."""
        self.skipped = 0
        """Records dropped because an earlier run delivered them already."""

    # -- called by the task -----------------------------------------------------------
    def start(self) -> None:
        """Learn where delivery stopped last time (retrying transient errors)."""
        resumed = self.sink.retry.run(self.resume, transient=self.is_transient,
                                      describe=lambda: f"{self.where()}: opening", on_retry=self.reconnect)
        self.delivered_until = {(tp.topic, tp.partition): offset for tp, offset in resumed.items()}
        if resumed:
            log.info("%s resumes after %s", self.where(), ", ".join(
                f"{tp.topic}[{tp.partition}]@{offset}" for tp, offset in sorted(resumed.items())))

    def write(self, record: SinkRecord) -> None:
        """Buffer ``record`` unless an earlier run delivered it (see ``delivered_until``).
        Raises for a record the sink cannot take (the record's error handler decides)."""
        if record.offset is not None and record.offset < self.delivered_until.get(
                (record.topic, record.partition), 0):
            self.skipped += 1
            return
        self.accept(record)
        self.pending.append(record)

    def commit(self, positions: Positions) -> None:
        """Deliver every buffered record, durably, before the task's offsets are committed.
        ``positions`` are the task's next input offsets, stored by sinks that keep them."""
        if not self.pending and not self.keeps_positions_without_records():
            return
        records = self.pending
        self.sink.retry.run(lambda: self.deliver(records, positions), transient=self.is_transient,
                            describe=lambda: f"{self.where()}: delivering {origin_summary(records)}",
                            on_retry=self.reconnect)
        self.pending = []

    def discard(self) -> int:
        """Drop undelivered records (the task's uncommitted work is abandoned)."""
        dropped, self.pending = len(self.pending), []
        return dropped

    def where(self) -> str:
        return f"sink '{self.task.sink_name}' ({self.sink.describe()}) of task {self.task.task_id}"

    # -- implemented by sinks ----------------------------------------------------------
    def resume(self) -> Dict[TopicPartition, int]:
        """Per input partition, the first origin offset not delivered yet (none: deliver all)."""
        return {}

    def accept(self, record: SinkRecord) -> None:
        """Check (and may prepare) one record as it is written; raise if it cannot be taken."""

    @abc.abstractmethod
    def deliver(self, records: Sequence[SinkRecord], positions: Positions) -> None:
        """Make ``records`` durable at the destination (all or, on error, retried from the start)."""

    def keeps_positions_without_records(self) -> bool:
        """Whether :meth:`deliver` runs at every commit, even with no records."""
        return False

    def is_transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` is worth retrying."""
        return False

    def reconnect(self) -> None:
        """Called before a retry: reopen connections a failure may have broken."""

    def close(self) -> None:
        """Release resources (after the last commit, or after :meth:`discard`)."""


def origin_summary(records: Iterable[SinkRecord]) -> str:
    """``"3 record(s) from pageviews[0] offsets 10..12"``: where a batch came from."""
    ranges: Dict[Tuple[Optional[str], int], List[int]] = {}
    count = 0
    for record in records:
        count += 1
        if record.offset is None:
            continue
        span = ranges.setdefault((record.topic, record.partition), [record.offset, record.offset])
        span[0] = min(span[0], record.offset)
        span[1] = max(span[1], record.offset)
    parts = [f"{topic}[{partition}] offsets {low}..{high}" for (topic, partition), (low, high) in sorted(
        ranges.items(), key=lambda item: (str(item[0][0]), item[0][1]))]
    return f"{count} record(s)" + (f" from {', '.join(parts)}" if parts else "")
