"""What the runtime reads from an app: a structural type, so the runtime (a lower
layer) never imports ``streamkit.app`` (the API that imports the runtime to run)."""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Mapping, Optional, Protocol

from ..topology import Topology


class AppDefinition(Protocol):
    """An app as a worker runs it (``streamkit.App`` is one)."""

    id: str
    processing_guarantee: str
    deserialization_error_handler: str
    processing_error_handler: str
    state_dir: Optional[str]
    store_backend: str
    caching: bool
    cache_max_bytes: int
    num_standby_replicas: int
    max_task_idle: timedelta
    close_idle_windows_after_ms: Optional[int]
    kafka_config: Optional[Mapping[str, Any]]

    def build(self) -> Topology:
        """The app's topology (built once)."""

    def effective_commit_interval(self, guarantee: str) -> timedelta:
        """The commit interval under ``guarantee``."""
