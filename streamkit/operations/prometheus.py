"""The worker's Prometheus metrics, read from the worker at scrape time.

Nothing is counted twice: the worker already keeps per-task counters
(:class:`~streamkit.runtime.context.task_metrics.TaskMetrics`), its vital signs
(:class:`~streamkit.runtime.worker.observations.WorkerObservations`) and per-store cache
counters; a custom collector turns them into metric families when Prometheus
scrapes, so the processing path pays nothing for the endpoint.

Names follow Prometheus conventions: ``streamkit_`` prefix, ``_total`` for counters,
base units (seconds, bytes). Labels: ``app``, and ``task``, ``topic``, ``partition``,
``store`` where they apply. Counters of a task restart from 0 on the worker that
takes it over (Prometheus' ``rate()`` handles the reset).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Iterator, Mapping, Optional, TYPE_CHECKING, Tuple

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.core import SummaryMetricFamily
from prometheus_client.registry import Collector

from ..core.records import TopicPartition
from ..runtime.worker.observations import COMMIT_SECONDS_BUCKETS

if TYPE_CHECKING:  # the runtime loads only when a worker runs
    from ..runtime.worker.view import WorkerView

TASK_COUNTERS: Tuple[Tuple[str, str, str], ...] = (
    ("records_processed", "streamkit_records_processed_total", "Records run through the task's topology."),
    ("records_skipped", "streamkit_records_skipped_total", "Records dropped by the log_and_skip error handler."),
    ("records_dead_lettered", "streamkit_records_dead_lettered_total", "Records written to the dead-letter topic."),
    ("late_records_dropped", "streamkit_records_late_dropped_total",
     "Records dropped because every window they belong to had closed."),
    ("null_key_records_dropped", "streamkit_records_null_key_dropped_total",
     "Records with a None key dropped before a key-based operation."),
    ("records_lost_to_retention", "streamkit_records_lost_to_retention_total",
     "Input records deleted (retention, compaction, an offset reset) before the task read them."),
    ("punctuations", "streamkit_punctuations_total", "Punctuator calls (stream time and wall clock)."),
    ("idle_stream_time_advances", "streamkit_idle_stream_time_advances_total",
     "Times an idle task advanced its stream time by the wall clock."),
)
"""(TaskMetrics field, metric name, help) of the per-task counters."""


class WorkerCollector(Collector):
    """Metric families of one worker (see the module docstring). ``lag`` is a mapping
    of input partition to records behind, refreshed by the caller (reading end offsets
    is I/O, kept out of the scrape); ``loop_blocked_for`` gives the seconds since the
    worker's event loop last stamped its heartbeat (None: not measured)."""

    def __init__(self, worker: WorkerView, lag: Mapping[TopicPartition, int],
                 loop_blocked_for: Optional[Callable[[], Optional[float]]] = None) -> None:
        self._worker = worker
        self._lag = lag
        self._app = worker.app_id
        self._loop_blocked_for = loop_blocked_for

    def collect(self) -> Iterator[Metric]:
        worker, app = self._worker, self._app
        tasks: Dict[str, Any] = dict(worker.tasks)
        yield from self._task_counters(tasks)

        processing = SummaryMetricFamily("streamkit_record_processing_seconds",
                                         "Wall time spent processing records, per record.", labels=["app", "task"])
        for tid, task in sorted(tasks.items()):
            processing.add_metric([app, tid], task.metrics.records_processed, task.metrics.processing_seconds)
        yield processing

        states = GaugeMetricFamily("streamkit_tasks", "Tasks held by this worker, by state.",
                                   labels=["app", "state"])
        counts = {"running": 0, "restoring": 0, "standby": 0}
        for state in worker.task_states().values():
            counts[state] = counts.get(state, 0) + 1
        for state, count in sorted(counts.items()):
            states.add_metric([app, state], count)
        yield states

        lag = GaugeMetricFamily("streamkit_consumer_lag_records",
                                "Records between the task's position and the partition's end.",
                                labels=["app", "task", "topic", "partition"])
        owners = {tp: tid for tid, task in tasks.items() for tp in task.input_partitions}
        for tp, behind in sorted(self._lag.items()):
            if tp in owners:
                lag.add_metric([app, owners[tp], tp.topic, str(tp.partition)], behind)
        yield lag

        observations = worker.observations
        commits = CounterMetricFamily("streamkit_commits", "Commits of every task's offsets, outputs and state.",
                                      labels=["app"])
        commits.add_metric([app], observations.commits)
        yield commits
        buckets, cumulative = [], 0
        for bound, count in zip(COMMIT_SECONDS_BUCKETS, observations.commit_bucket_counts):
            cumulative += count
            buckets.append((_bound(bound), cumulative))
        buckets.append(("+Inf", observations.commits))
        latency = HistogramMetricFamily("streamkit_commit_duration_seconds", "How long each commit took.",
                                        labels=["app"])
        latency.add_metric([app], buckets, observations.commit_seconds_sum)
        yield latency

        restored = GaugeMetricFamily("streamkit_restore_records_restored",
                                     "Changelog records replayed by the task's restore in progress.",
                                     labels=["app", "task"])
        remaining = GaugeMetricFamily("streamkit_restore_records_remaining",
                                      "Changelog records the task's restore in progress still has to replay.",
                                      labels=["app", "task"])
        for tid, (done, left) in sorted(observations.restoring.items()):
            restored.add_metric([app, tid], done)
            remaining.add_metric([app, tid], left)
        yield restored
        yield remaining
        total_restored = CounterMetricFamily("streamkit_restored_records",
                                             "Changelog records replayed by completed restores.",
                                             labels=["app", "task"])
        for tid, count in sorted(observations.restored_records.items()):
            total_restored.add_metric([app, tid], count)
        yield total_restored
        yield from self._cache(tasks)

        since = observations.seconds_since_tick()
        tick = GaugeMetricFamily("streamkit_loop_seconds_since_tick",
                                 "Seconds since the processing loop's latest turn (-1 before the first).",
                                 labels=["app"])
        tick.add_metric([app], -1 if since is None else since)
        yield tick
        blocked = self._loop_blocked_for() if self._loop_blocked_for is not None else None
        if blocked is not None:
            heartbeat = GaugeMetricFamily("streamkit_event_loop_seconds_since_heartbeat",
                                          "Seconds since the worker's event loop last stamped its heartbeat "
                                          "(grows while code blocks the loop).", labels=["app"])
            heartbeat.add_metric([app], blocked)
            yield heartbeat

    def _task_counters(self, tasks: Mapping[str, Any]) -> Iterable[Metric]:
        for field, name, help_text in TASK_COUNTERS:
            family = CounterMetricFamily(name[:-len("_total")], help_text, labels=["app", "task"])
            for tid, task in sorted(tasks.items()):
                family.add_metric([self._app, tid], getattr(task.metrics, field))
            yield family

    def _cache(self, tasks: Mapping[str, Any]) -> Iterable[Metric]:
        hits = CounterMetricFamily("streamkit_store_cache_hits", "Point reads answered from memory "
                                   "(uncommitted writes or the read cache).", labels=["app", "task", "store"])
        misses = CounterMetricFamily("streamkit_store_cache_misses", "Point reads that went to the store "
                                     "(RocksDB or memory).", labels=["app", "task", "store"])
        size = GaugeMetricFamily("streamkit_store_cache_bytes", "Bytes of uncommitted writes and read cache.",
                                 labels=["app", "task", "store"])
        for tid, task in sorted(tasks.items()):
            for open_store in task.stores.open_stores:
                buffer, labels = open_store.buffer, [self._app, tid, open_store.spec.name]
                hits.add_metric(labels, buffer.reads - buffer.misses)
                misses.add_metric(labels, buffer.misses)
                size.add_metric(labels, buffer.cached_bytes)
        yield hits
        yield misses
        yield size


def _bound(value: float) -> str:
    return repr(float(value))


def worker_registry(worker: WorkerView, lag: Mapping[TopicPartition, int],
                    loop_blocked_for: Optional[Callable[[], Optional[float]]] = None) -> CollectorRegistry:
    """A registry of this worker's metrics plus the process's (CPU, memory, open files)
    and the Python platform's."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(worker, lag, loop_blocked_for))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry
