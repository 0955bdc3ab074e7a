"""AppConfig: the settings a worker runs an app with, as one validated value.

``App`` (the API) builds it; the runtime takes it with the topology
(``Worker(topology, config, transport)``) and never sees the ``App``.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Mapping, Optional

from ..errors import ConfigError
from .settings import GUARANTEES, check_handler, check_store_backend

APP_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
"""What an app id may be: it names the consumer group and prefixes internal topics."""

DEFAULT_COMMIT_INTERVAL = timedelta(seconds=1)
EXACTLY_ONCE_COMMIT_INTERVAL = timedelta(milliseconds=100)


@dataclass(frozen=True)
class AppConfig:
    """An app's runtime settings (see ``streamkit.App`` for what each one does).

    Validated on construction: a bad value raises ConfigError naming the setting.
    ``commit_interval`` None means the guarantee's default (see
    :attr:`effective_commit_interval`).
    """

    app_id: str
    processing_guarantee: str = "at_least_once"
    commit_interval: Optional[timedelta] = None
    deserialization_error_handler: str = "fail"
    processing_error_handler: str = "fail"
    state_dir: Optional[str] = None
    store_backend: str = "rocksdb"
    caching: bool = True
    cache_max_bytes: int = 10 * 1024 * 1024
    num_standby_replicas: int = 0
    max_task_idle: timedelta = timedelta(0)
    close_idle_windows_after_ms: Optional[int] = None
    kafka_config: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.app_id, str) or not APP_ID.match(self.app_id):
            raise ConfigError(f"app id {self.app_id!r} is invalid: use 1-200 of the characters [A-Za-z0-9._-]")
        if self.processing_guarantee not in GUARANTEES:
            raise ConfigError(f"processing_guarantee={self.processing_guarantee!r}: "
                              f"use one of {', '.join(GUARANTEES)}")
        if self.commit_interval is not None and (not isinstance(self.commit_interval, timedelta)
                                                 or self.commit_interval <= timedelta(0)):
            raise ConfigError(f"commit_interval must be a positive timedelta, got {self.commit_interval!r}")
        check_handler(self.deserialization_error_handler, "deserialization_error_handler")
        check_handler(self.processing_error_handler, "processing_error_handler")
        check_store_backend(self.store_backend)
        if not isinstance(self.cache_max_bytes, int) or self.cache_max_bytes < 0:
            raise ConfigError(f"cache_max_bytes must be a non-negative int, got {self.cache_max_bytes!r}")
        if not isinstance(self.num_standby_replicas, int) or self.num_standby_replicas < 0:
            raise ConfigError(f"num_standby_replicas must be a non-negative int, got {self.num_standby_replicas!r}")
        if not isinstance(self.max_task_idle, timedelta) or self.max_task_idle < timedelta(0):
            raise ConfigError(f"max_task_idle must be a non-negative timedelta, got {self.max_task_idle!r}")
        if self.close_idle_windows_after_ms is not None and (
                not isinstance(self.close_idle_windows_after_ms, int) or self.close_idle_windows_after_ms <= 0):
            raise ConfigError("close_idle_windows_after must be a positive duration, "
                              f"got {self.close_idle_windows_after_ms!r} ms")

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee == "exactly_once"

    @property
    def effective_commit_interval(self) -> timedelta:
        """As set, else 1 s (at_least_once) or 100 ms (exactly_once, where it bounds
        how late downstream readers see committed results)."""
        if self.commit_interval is not None:
            return self.commit_interval
        return EXACTLY_ONCE_COMMIT_INTERVAL if self.exactly_once else DEFAULT_COMMIT_INTERVAL

    @property
    def uses_dead_letters(self) -> bool:
        """Either error handler sends records to the ``<app-id>-dlq`` topic."""
        return "dead_letter" in (self.deserialization_error_handler, self.processing_error_handler)

    def with_overrides(self, *, guarantee: Optional[str] = None, state_dir: Optional[str] = None,
                       standby_replicas: Optional[int] = None) -> "AppConfig":
        """A copy with the worker's command-line overrides applied (None keeps the setting)."""
        changes: dict = {}
        if guarantee is not None:
            changes["processing_guarantee"] = guarantee
        if state_dir is not None:
            changes["state_dir"] = state_dir
        if standby_replicas is not None:
            changes["num_standby_replicas"] = standby_replicas
        return dataclasses.replace(self, **changes) if changes else self
