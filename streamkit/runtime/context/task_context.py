"""Per-task runtime state and the ProcessorContext handed to Processor-API functions."""
from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ...errors import StreamkitError, TopologyError
from ...processor import Cancellable, ProcessorContext, Punctuation
from ...stores import KeyValueStore
from ...core.records import RawRecord
from .collector import RecordCollector
from .task_metrics import TaskMetrics
from .operator_time import ObservedStreamTime
from .punctuation import PunctuationQueue, Schedule

Downstream = Callable[[Any, Any, int], None]


class TaskContext:
    """Mutable state of one task: the record being processed, stream time, stores.

    The source loop sets ``topic`` and ``record`` per record; nodes read them
    only when they need metadata (headers for sinks, origin for errors).
    """

    def __init__(self, *, app_id: str, task_id: str, partition: int, stores: Mapping[str, KeyValueStore],
                 collector: RecordCollector, partitions: Mapping[str, int],
                 wall_clock: Callable[[], int], metrics: TaskMetrics, caching: bool = False,
                 global_stores: Optional[Mapping[str, Any]] = None) -> None:
        self.app_id = app_id
        self.task_id = task_id
        self.partition = partition
        self.stores = stores
        self.global_stores: Mapping[str, Any] = global_stores or {}
        """The worker's global-table stores by name (shared by its tasks, read-only to them)."""
        self.collector = collector
        self.partitions = partitions
        self.wall_clock = wall_clock
        self.metrics = metrics
        self.caching = caching
        """DSL aggregations forward the latest value per key per commit (else every update)."""
        self.muted = False
        """Sinks drop records: the task is re-reading input it already processed, to rebuild state."""
        self.topic: Optional[str] = None
        self.record: Optional[RawRecord] = None
        self.last_origin: Optional[Tuple[str, int]] = None
        """Topic and offset of the last input record processed (origin of records sent between records)."""
        self.sink_writers: Dict[str, Any] = {}
        """The task's external sink writers by node name."""
        self.stream_time: int = -1
        """The largest timestamp the task has read (stream-time punctuations, progress)."""
        self.operator_times: Dict[str, ObservedStreamTime] = {}
        """Each windowed aggregation's, suppression's and stream-stream join's own stream time."""
        self.punctuations = PunctuationQueue()
        self.drop_null_key: Callable[[str], None] = self._count_null_key
        """Called by key-based operation ``node`` dropping the current record for its ``None``
        key (the task sets it to its error policy's :meth:`~ErrorPolicy.null_key_dropped`)."""

    def _count_null_key(self, node: str) -> None:
        self.metrics.null_key_records_dropped += 1

    def observed_time(self, operator: str, stores: Tuple[str, ...] = ()) -> ObservedStreamTime:
        """The stream time of ``operator`` (created on first use), governing ``stores``."""
        clock = self.operator_times.get(operator)
        if clock is None:
            clock = self.operator_times[operator] = ObservedStreamTime(operator)
        for name in stores:
            store = self.stores[name]
            if hasattr(store, "stream_time"):
                clock.bind(store)
        return clock

    def advance_idle(self, delta_ms: int) -> None:
        """An idle advance: the task's and every operator's stream time move on by ``delta_ms``."""
        self.stream_time += delta_ms
        for clock in self.operator_times.values():
            clock.advance_by(delta_ms)

    @property
    def headers(self):
        record = self.record
        return None if record is None else record[4]


class NodeProcessorContext(ProcessorContext):
    """The :class:`ProcessorContext` of one process node in one task."""

    def __init__(self, task: TaskContext, node: str, declared_stores: Tuple[str, ...],
                 children: Dict[str, Downstream], downstream: Downstream,
                 on_punctuation_error: Callable[[BaseException], None]) -> None:
        self._task = task
        self._node = node
        self._declared = declared_stores
        self._children = children
        self._downstream = downstream
        self._on_punctuation_error = on_punctuation_error
        self._timestamp = -1

    @property
    def timestamp(self) -> int:
        return self._timestamp

    @property
    def topic(self) -> Optional[str]:
        return self._task.topic if self._task.record is not None else None

    @property
    def partition(self) -> int:
        return self._task.partition

    @property
    def offset(self) -> Optional[int]:
        record = self._task.record
        return None if record is None else record[0]

    @property
    def headers(self):
        return self._task.headers

    @property
    def stream_time(self) -> int:
        return self._task.stream_time

    @property
    def task_id(self) -> str:
        return self._task.task_id

    @property
    def app_id(self) -> str:
        return self._task.app_id

    def store(self, name: str) -> KeyValueStore:
        if name not in self._declared:
            raise TopologyError(
                f"processor '{self._node}' asked for store '{name}' which it did not declare: "
                f"add sk.stores.key_value({name!r}) to @app.processor(stores=[...])")
        return self._task.stores[name]

    def forward(self, key: Any, value: Any, *, to: Optional[str] = None, timestamp: Optional[int] = None) -> None:
        ts = self._timestamp if timestamp is None else timestamp
        if to is None:
            self._downstream(key, value, ts)
            return
        child = self._children.get(to)
        if child is None:
            raise StreamkitError(
                f"processor '{self._node}' forwarded to '{to}', which is not one of its children "
                f"({', '.join(self._children) or 'none'})")
        child(key, value, ts)

    def schedule(self, interval: timedelta, punctuation: Punctuation,
                 callback: Callable[[int], None]) -> Cancellable:
        if not isinstance(punctuation, Punctuation):
            raise TypeError(f"schedule(): punctuation must be sk.Punctuation.STREAM_TIME or WALL_CLOCK, "
                            f"got {punctuation!r}")
        interval_ms = int(interval.total_seconds() * 1000) if isinstance(interval, timedelta) else int(interval)
        if interval_ms < 1:
            raise ValueError(f"schedule(): interval must be at least 1 ms, got {interval!r}")
        if punctuation is Punctuation.STREAM_TIME:
            next_at = -math.inf
        else:
            next_at = self._task.wall_clock() + interval_ms
        return self._task.punctuations.add(Schedule(self._node, interval_ms, punctuation, callback, self._run, next_at))

    def _run(self, schedule: Schedule, now: int) -> None:
        task = self._task
        saved = task.record, task.topic, self._timestamp
        task.record, task.topic, self._timestamp = None, None, now
        try:
            schedule.callback(now)
        except Exception as exc:  # noqa: BLE001 - routed to the task's handler
            self._on_punctuation_error(exc)
        finally:
            task.record, task.topic, self._timestamp = saved
        task.metrics.punctuations += 1
