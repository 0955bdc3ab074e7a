"""App: the entry point of a streamkit application.

>>> import streamkit as sk
>>> app = sk.App("doc-app")
>>> @app.topology
... def build(b):
...     b.stream("lines").filter(lambda k, v: v).to("non-empty")
>>> print(app.describe(), end="")
Topology: doc-app
  Sub-topology: 0
    Source: lines (topic: lines)
      --> lines.filter
    Processor: lines.filter (filter)
      --> lines.filter.to-non-empty
      <-- lines
    Sink: lines.filter.to-non-empty (topic: non-empty)
      <-- lines.filter
"""
from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from .dsl import StreamsBuilder
from .dsl.draft import TopologyDraft
from .errors import ConfigError, TopologyError
from .processor import ProcessorContext, ProcessorDefinition, define_processor
from .core.settings import GUARANTEES, check_handler, check_store_backend
from .serdes import Json, Serde, String
from .stores import StoreSpec
from .topics import TopicSpec
from .topology import Topology
from .topology.passes import build_topology

__all__ = ["App"]

_APP_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


class App:
    """A stream processing application: its topics, topology and settings.

    ``broker`` is ``"embedded:///path"`` (the default: ``./.streamkit``) or
    ``"kafka://host:port,..."``; ``--broker`` and ``STREAMKIT_BROKER`` override it
    when running a worker. The app id names the consumer group and prefixes
    internal topics (``<app-id>-<node>-repartition``, ``<app-id>-<store>-changelog``,
    ``<app-id>-dlq``).

    State: ``store_backend`` is ``"rocksdb"`` (default for workers; one instance per
    store and task under ``state_dir``, default ``<embedded dir>/state/<app-id>``)
    or ``"memory"``. Writes are buffered per commit (at most ``cache_max_bytes``
    before an early commit); with ``caching`` on, aggregations forward the latest
    value per key per commit instead of every update.

    Kafka: ``kafka_config`` holds client settings (TLS, SASL, compression, timeouts,
    ``group_instance_id`` for static membership; see
    :class:`streamkit.transport.kafka.config.KafkaClientConfig`), overridden by a
    ``--config`` TOML file and ``STREAMKIT_KAFKA_*`` variables. With
    ``num_standby_replicas=N``, N other workers keep warm copies of each task's
    stores, so a failover restores only the changelog's tail.

    Windows: stream time moves only with records, so when input stops, the last
    windows never close. ``close_idle_windows_after=timedelta(...)`` (also settable per
    windowed operation) lets a task that received no record for that long (wall
    clock) advance its stream time by the idle wall-clock time, closing windows and
    releasing suppressed results; each advance is written to the changelog, so a
    restart does not undo it. Off by default, as in Kafka Streams.

    A task with several inputs (a join, a table beside a stream) processes their
    records in timestamp order. When one input has nothing fetched, it waits for it
    while the broker reports unread records there (up to half a second), and also up
    to ``max_task_idle`` for records not yet produced (default 0: no such wait), so
    that a replay interleaves the inputs as the live run did.
    """

    def __init__(self, app_id: str, *, broker: Optional[str] = None,
                 processing_guarantee: str = "at_least_once",
                 commit_interval: Optional[timedelta] = None,
                 default_key_serde: Serde = String(), default_value_serde: Serde = Json(),
                 deserialization_error_handler: str = "fail", processing_error_handler: str = "fail",
                 state_dir: Optional[str] = None, store_backend: str = "rocksdb", caching: bool = True,
                 cache_max_bytes: int = 10 * 1024 * 1024, num_standby_replicas: int = 0,
                 kafka_config: Optional[Mapping[str, Any]] = None,
                 close_idle_windows_after: Optional[timedelta] = None,
                 max_task_idle: timedelta = timedelta(0)) -> None:
        if not isinstance(app_id, str) or not _APP_ID.match(app_id):
            raise ConfigError(f"app id {app_id!r} is invalid: use 1-200 of the characters [A-Za-z0-9._-]")
        if processing_guarantee not in GUARANTEES:
            raise ConfigError(f"processing_guarantee={processing_guarantee!r}: use one of {', '.join(GUARANTEES)}")
        if commit_interval is not None and (not isinstance(commit_interval, timedelta)
                                            or commit_interval <= timedelta(0)):
            raise ConfigError(f"commit_interval must be a positive timedelta, got {commit_interval!r}")
        check_store_backend(store_backend)
        if not isinstance(cache_max_bytes, int) or cache_max_bytes < 0:
            raise ConfigError(f"cache_max_bytes must be a non-negative int, got {cache_max_bytes!r}")
        if close_idle_windows_after is not None and (not isinstance(close_idle_windows_after, timedelta)
                                                     or close_idle_windows_after <= timedelta(0)):
            raise ConfigError(
                f"close_idle_windows_after must be a positive timedelta, got {close_idle_windows_after!r}")
        if not isinstance(max_task_idle, timedelta) or max_task_idle < timedelta(0):
            raise ConfigError(f"max_task_idle must be a non-negative timedelta, got {max_task_idle!r}")
        if not isinstance(num_standby_replicas, int) or num_standby_replicas < 0:
            raise ConfigError(f"num_standby_replicas must be a non-negative int, got {num_standby_replicas!r}")
        self.id = app_id
        self.broker = broker
        self.num_standby_replicas = num_standby_replicas
        self.kafka_config: Mapping[str, Any] = dict(kafka_config or {})
        """Kafka client settings (see streamkit.transport.kafka.config); secrets are masked in logs."""
        self.processing_guarantee = processing_guarantee
        self.commit_interval = commit_interval
        self.default_key_serde = default_key_serde
        self.default_value_serde = default_value_serde
        self.deserialization_error_handler = check_handler(deserialization_error_handler,
                                                           "deserialization_error_handler")
        self.processing_error_handler = check_handler(processing_error_handler, "processing_error_handler")
        self.state_dir = state_dir
        self.store_backend = store_backend
        self.caching = caching
        self.cache_max_bytes = cache_max_bytes
        self.close_idle_windows_after_ms: Optional[int] = (
            None if close_idle_windows_after is None else close_idle_windows_after // timedelta(milliseconds=1))
        """Default of the windowed operations' ``close_idle_windows_after`` (off when None)."""
        self.max_task_idle = max_task_idle
        """How long a task with several inputs waits for an input that has no records
        fetched before processing the others (see ARCHITECTURE.md, time)."""
        self._topics: Dict[str, TopicSpec] = {}
        self._topology_fns: List[Callable[[StreamsBuilder], None]] = []
        self._topology: Optional[Topology] = None

    # -- declarations -------------------------------------------------------------

    def topic(self, name: str, *, key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None,
              partitions: Optional[int] = None, config: Optional[Mapping[str, str]] = None) -> TopicSpec:
        """Declare a topic the app reads or writes, with its serdes (default: the app's)
        and the partition count used if streamkit creates it."""
        if name in self._topics:
            raise TopologyError(f"topic '{name}' is declared twice in app '{self.id}'")
        spec = TopicSpec(name, key_serde or self.default_key_serde, value_serde or self.default_value_serde,
                         partitions, dict(config or {}))
        self._topics[name] = spec
        self._topology = None
        return spec

    @property
    def topics(self) -> Mapping[str, TopicSpec]:
        return dict(self._topics)

    def topology(self, fn: Callable[[StreamsBuilder], None]) -> Callable[[StreamsBuilder], None]:
        """Decorator: ``fn(builder)`` defines (part of) the topology. Several are allowed."""
        if not callable(fn):
            raise TopologyError(f"@app.topology decorates a function, got {fn!r}")
        self._topology_fns.append(fn)
        self._topology = None
        return fn

    def processor(self, *, stores: Sequence[StoreSpec] = (), name: Optional[str] = None,
                  init: Optional[Callable[[ProcessorContext], None]] = None
                  ) -> Callable[[Callable[[ProcessorContext, Any, Any], None]], ProcessorDefinition]:
        """Decorator for a Processor-API function ``fn(ctx, key, value)``.

        ``stores`` declares the stores it may open with ``ctx.store(name)``;
        ``init(ctx)`` runs once per task before the first record (schedule timers there).
        """
        def decorate(fn: Callable[[ProcessorContext, Any, Any], None]) -> ProcessorDefinition:
            return define_processor(fn, stores, name, init)
        return decorate

    # -- the built topology -------------------------------------------------------

    def build(self) -> Topology:
        """Run the topology functions and the IR passes (cached)."""
        if self._topology is None:
            if not self._topology_fns:
                raise TopologyError(f"app '{self.id}' has no topology: decorate a function with @app.topology")
            draft = TopologyDraft(self.id, self._topics, self.default_key_serde, self.default_value_serde)
            builder = StreamsBuilder(draft)
            for fn in self._topology_fns:
                fn(builder)
            self._topology = build_topology(self.id, draft.nodes, draft.stores, draft.topics, draft.global_tables)
        return self._topology

    def describe(self, format: str = "text") -> str:
        """The topology as text (sub-topologies, sources, processors, stores, sinks) or mermaid."""
        return self.build().describe(format)

    def effective_commit_interval(self, guarantee: Optional[str] = None) -> timedelta:
        """The commit interval: as set, else 1 s (at_least_once) or 100 ms (exactly_once,
        where it bounds how late downstream readers see committed results)."""
        if self.commit_interval is not None:
            return self.commit_interval
        exactly_once = (guarantee or self.processing_guarantee) == "exactly_once"
        return timedelta(milliseconds=100) if exactly_once else timedelta(seconds=1)

    def resolve_broker(self, override: Optional[str] = None) -> str:
        """``override`` (``--broker``), else ``$STREAMKIT_BROKER``, else ``broker`` in the config
        file (``$STREAMKIT_CONFIG``), else the app's, else embedded."""
        from .transport.factory import configured_broker

        return override or configured_broker() or self.broker or "embedded://.streamkit"

    def run(self, *, broker: Optional[str] = None, until_idle: Optional[float] = None) -> None:
        """Run a worker in this process until stopped (or idle for ``until_idle`` seconds)."""
        from .runtime.worker import run_worker

        run_worker(self, broker=self.resolve_broker(broker), until_idle=until_idle)

    def __repr__(self) -> str:
        return f"<App {self.id!r}>"
