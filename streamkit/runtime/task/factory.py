"""Builds tasks from a topology: shared by the worker and the test driver."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Type

from ...state.task_stores import open_task_stores
from ...topology import Topology
from ...topology.model import SubTopology
from ..context.collector import RecordCollector
from ...core.names import task_id
from .task import Task


@dataclass(frozen=True)
class TaskSettings:
    """How a worker (or the test driver) runs its tasks."""

    deserialization_error_handler: str = "fail"
    processing_error_handler: str = "fail"
    store_backend: str = "memory"
    state_dir: Optional[str] = None
    caching: bool = False
    """Forward the latest value per key per commit instead of every update."""
    close_idle_windows_after_ms: Optional[int] = None
    """The app's default for windowed operations (see ``App(close_idle_windows_after=)``)."""


def create_task(topology: Topology, sub: SubTopology, partition: int, *, partitions: Mapping[str, int],
                collector: RecordCollector, wall_clock: Callable[[], int], settings: TaskSettings,
                global_stores: Optional[Mapping[str, Any]] = None, task_class: Type[Task] = Task) -> Task:
    """A ready-to-run task for ``sub`` on ``partition`` with its stores opened (not yet restored);
    ``task_class``: a Task subclass (the Spark replay's)."""
    stores = open_task_stores((topology.stores[name] for name in sub.store_names), app_id=topology.app_id,
                              task_id=task_id(sub.id, partition), partition=partition,
                              backend=settings.store_backend, state_dir=settings.state_dir)
    return task_class(topology, sub, partition, stores=stores, collector=collector, partitions=partitions,
                      wall_clock=wall_clock, caching=settings.caching,
                      deserialization_error_handler=settings.deserialization_error_handler,
                      processing_error_handler=settings.processing_error_handler,
                      close_idle_windows_after_ms=settings.close_idle_windows_after_ms, global_stores=global_stores)
