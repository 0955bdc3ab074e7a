"""Builds tasks from a topology: shared by the worker and the test driver."""
from __future__ import annotations

from typing import Callable, Mapping

from ..state.factory import open_task_stores
from ..topology import Topology
from ..topology.model import SubTopology
from .collector import RecordCollector
from .task import Task


def create_task(topology: Topology, sub: SubTopology, partition: int, *, partitions: Mapping[str, int],
                collector: RecordCollector, wall_clock: Callable[[], int],
                deserialization_error_handler: str, processing_error_handler: str) -> Task:
    """A ready-to-run task with fresh stores for ``sub`` on ``partition``."""
    stores = open_task_stores(topology.stores[name] for name in sub.store_names)
    return Task(topology, sub, partition, stores=stores, collector=collector, partitions=partitions,
                wall_clock=wall_clock, deserialization_error_handler=deserialization_error_handler,
                processing_error_handler=processing_error_handler)
