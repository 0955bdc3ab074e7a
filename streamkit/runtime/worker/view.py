"""What the operations tools (HTTP endpoints, interactive queries, metrics) see of a
running worker: a read-only view, implemented by
:class:`~streamkit.runtime.worker.loop.Worker`."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Protocol, Tuple

from ...core.records import TopicPartition
from ...topology import Topology
from ...transport.base import Transport
from ..task.task import Task
from .observations import WorkerObservations


class WorkerView(Protocol):
    """A running worker as the operations tools read it; they never change it."""

    @property
    def app_id(self) -> str: ...

    @property
    def topology(self) -> Topology: ...

    @property
    def transport(self) -> Transport:
        """The worker's broker connection (its admin client answers lag questions)."""

    @property
    def observations(self) -> WorkerObservations:
        """The loop's vital signs, commits and restores."""

    @property
    def tasks(self) -> Mapping[str, Task]:
        """The running tasks by id."""

    @property
    def partitions(self) -> Mapping[str, int]:
        """The partition count of every topic of the app (empty while the worker starts)."""

    @property
    def rebalancing(self) -> bool:
        """Between a revocation's commit and the group's new assignment."""

    @property
    def assigned(self) -> bool:
        """The group has given this worker an assignment at least once."""

    def task_states(self) -> Dict[str, str]:
        """Every task this worker holds: ``restoring``, ``running`` or ``standby``."""

    def task_stores(self, task_id: str, *, standby: bool = False) -> Optional[Dict[str, Any]]:
        """The stores (by name) of active task ``task_id``, or of its standby copy with
        ``standby``; None when this worker holds neither."""

    def endpoint_of(self, task_id: str) -> Optional[str]:
        """The HTTP address of the worker running ``task_id`` as the group knows it."""

    def standby_endpoints_of(self, task_id: str) -> Tuple[str, ...]:
        """The HTTP addresses of the workers keeping a standby copy of ``task_id``."""

    def input_positions(self) -> Dict[TopicPartition, Optional[int]]:
        """Per input partition of the running tasks: the next offset to process."""
