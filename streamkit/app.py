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

import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence

from .dsl import StreamsBuilder
from .dsl.draft import TopologyDraft
from .errors import ConfigError, TopologyError
from .processor import ProcessorContext, ProcessorDefinition, define_processor
from .core.app_config import AppConfig
from .serdes import Json, Serde, String
from .stores import StoreSpec
from .topics import TopicSpec
from .topology import Topology
from .topology.passes import build_topology

if TYPE_CHECKING:  # the runtime loads only when a worker runs
    from .core.http_security import HttpSecurity
    from .state.restore import StateRepairs
    from .runtime.context.task_metrics import TaskMetrics
    from .runtime.worker import Worker
    from .transport.base import Transport

__all__ = ["App"]



def _with_env_token(security: Optional["HttpSecurity"]) -> Optional["HttpSecurity"]:
    """``security`` accepting also the bearer token in ``$STREAMKIT_HTTP_TOKEN`` (if set)."""
    token = os.environ.get("STREAMKIT_HTTP_TOKEN", "").strip()
    if not token:
        return security
    from dataclasses import replace

    from .core.http_security import HttpSecurity

    base = security or HttpSecurity()
    return replace(base, tokens=base.tokens + (token,))


def _whole_ms(duration: Optional[timedelta]) -> Optional[int]:
    if duration is None:
        return None
    if not isinstance(duration, timedelta) or duration <= timedelta(0):
        raise ConfigError(f"close_idle_windows_after must be a positive timedelta, got {duration!r}")
    return duration // timedelta(milliseconds=1)


def _setting(name: str, doc: str) -> property:
    """A read-only App attribute that shows one of its AppConfig's settings."""
    return property(lambda app: getattr(app.config, name), doc=doc)


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

    processing_guarantee = _setting("processing_guarantee", "at_least_once or exactly_once.")
    commit_interval = _setting("commit_interval", "As set (None: the guarantee's default).")
    deserialization_error_handler = _setting("deserialization_error_handler", "fail, log_and_skip or dead_letter.")
    processing_error_handler = _setting("processing_error_handler", "fail, log_and_skip or dead_letter.")
    state_dir = _setting("state_dir", "Where the stores live (None: the default).")
    store_backend = _setting("store_backend", "rocksdb or memory.")
    caching = _setting("caching", "Aggregations forward the latest value per key per commit.")
    cache_max_bytes = _setting("cache_max_bytes", "Buffered writes before an early commit.")
    num_standby_replicas = _setting("num_standby_replicas", "Warm copies of each task's stores.")
    max_task_idle = _setting("max_task_idle", "How long a task with several inputs waits for an "
                             "input that has no records fetched (see ARCHITECTURE.md, time).")
    close_idle_windows_after_ms = _setting("close_idle_windows_after_ms", "Default of the windowed "
                                           "operations' close_idle_windows_after (off when None).")
    kafka_config = _setting("kafka_config", "Kafka client settings (see streamkit.transport.kafka.config); "
                            "secrets are masked in logs.")

    def __init__(self, app_id: str, *, broker: Optional[str] = None,
                 processing_guarantee: str = "at_least_once",
                 commit_interval: Optional[timedelta] = None,
                 default_key_serde: Serde = String(), default_value_serde: Serde = Json(),
                 deserialization_error_handler: str = "fail", processing_error_handler: str = "fail",
                 state_dir: Optional[str] = None, store_backend: str = "rocksdb", caching: bool = True,
                 cache_max_bytes: int = 10 * 1024 * 1024, num_standby_replicas: int = 0,
                 kafka_config: Optional[Mapping[str, Any]] = None,
                 close_idle_windows_after: Optional[timedelta] = None,
                 max_task_idle: timedelta = timedelta(0), http: Optional[str] = None,
                 health_stall_after: timedelta = timedelta(seconds=30),
                 http_security: Optional["HttpSecurity"] = None) -> None:
        self.config = AppConfig(
            app_id, processing_guarantee=processing_guarantee, commit_interval=commit_interval,
            deserialization_error_handler=deserialization_error_handler,
            processing_error_handler=processing_error_handler, state_dir=state_dir, store_backend=store_backend,
            caching=caching, cache_max_bytes=cache_max_bytes, num_standby_replicas=num_standby_replicas,
            max_task_idle=max_task_idle, close_idle_windows_after_ms=_whole_ms(close_idle_windows_after),
            kafka_config=dict(kafka_config or {}))
        """The validated runtime settings (what a worker runs the app with)."""
        self.id = app_id
        self.broker = broker
        self.default_key_serde = default_key_serde
        self.default_value_serde = default_value_serde
        self._topics: Dict[str, TopicSpec] = {}
        self._topology_fns: List[Callable[[StreamsBuilder], None]] = []
        self._topology: Optional[Topology] = None
        self.http = http
        """``HOST:PORT`` where a worker of this app serves its HTTP endpoints (metrics,
        health, interactive queries, lag, the live page; port 0: any free port), else
        ``$STREAMKIT_HTTP``; None and no variable: no HTTP server. No host binds 127.0.0.1."""
        self.http_security = http_security
        """TLS, users, tokens of the HTTP endpoints (:class:`streamkit.core.http_security.HttpSecurity`);
        ``$STREAMKIT_HTTP_TOKEN`` adds an accepted bearer token. None: plain HTTP, no authentication."""
        if health_stall_after.total_seconds() <= 0:
            raise ConfigError(f"health_stall_after must be positive, got {health_stall_after}")
        self.health_stall_after = health_stall_after
        """How long the processing loop may go without a turn before ``GET /health`` says 503."""
        self._running: Optional[Any] = None
        """(worker, its event loop, its HTTP server or a local query answerer) while
        :meth:`run` runs in this process: what :meth:`query` asks."""

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
        return self.config.with_overrides(guarantee=guarantee).effective_commit_interval

    def resolve_broker(self, override: Optional[str] = None) -> str:
        """``override`` (``--broker``), else ``$STREAMKIT_BROKER``, else ``broker`` in the config
        file (``$STREAMKIT_CONFIG``), else the app's, else embedded."""
        from .transport.factory import configured_broker

        return override or configured_broker() or self.broker or "embedded://.streamkit"

    def worker(self, transport: "Transport", *, until_idle: Optional[float] = None,
               guarantee: Optional[str] = None, state_dir: Optional[str] = None,
               standby_replicas: Optional[int] = None, state_repairs: Optional["StateRepairs"] = None) -> "Worker":
        """A worker for this app on ``transport`` (run it with ``await worker.run()``);
        the keyword arguments override the app's settings as ``streamkit worker``'s options do."""
        from .runtime.worker import Worker
        from .state.restore import StateRepairs

        config = self.config.with_overrides(guarantee=guarantee, state_dir=state_dir,
                                            standby_replicas=standby_replicas)
        return Worker(self.build(), config, transport, until_idle=until_idle,
                      state_repairs=state_repairs or StateRepairs())

    def run(self, *, broker: Optional[str] = None, until_idle: Optional[float] = None,
            guarantee: Optional[str] = None, state_dir: Optional[str] = None,
            standby_replicas: Optional[int] = None, config_file: Optional[str] = None,
            http: Optional[str] = None, http_security: Optional["HttpSecurity"] = None,
            state_repairs: Optional["StateRepairs"] = None) -> "TaskMetrics":
        """Run a worker in this process until SIGINT/SIGTERM, ``until_idle`` seconds
        without input, or an error; returns the worker's record counts. The keyword
        arguments override the app's settings (``broker``: see :meth:`resolve_broker`;
        ``http``: see :attr:`http`; ``http_security``: see :attr:`http_security`;
        ``state_repairs``: see :class:`~streamkit.state.restore.StateRepairs`)."""
        from .runtime.worker import run_worker
        from .state.restore import StateRepairs

        config = self.config.with_overrides(guarantee=guarantee, state_dir=state_dir,
                                            standby_replicas=standby_replicas)
        address = http or self.http or os.environ.get("STREAMKIT_HTTP") or None
        companions = []
        if address:
            from .operations.http_server import HttpEndpoints

            companions.append(HttpEndpoints(address, stall_after=self.health_stall_after.total_seconds(),
                                            security=_with_env_token(http_security or self.http_security)))

        def started(worker: Any, loop: Any) -> None:
            from .operations.http_server import OperationsServer

            server = companions[0].server if companions else OperationsServer(worker, "127.0.0.1:0")
            self._running = (worker, loop, server)

        try:
            return run_worker(self.build(), config, broker=self.resolve_broker(broker), until_idle=until_idle,
                              config_file=config_file, companions=companions, on_start=started,
                              state_repairs=state_repairs or StateRepairs())
        finally:
            self._running = None

    def query(self, store: str, key: Any, *, window_from: Optional[int] = None, window_to: Optional[int] = None,
              allow_standby: bool = False, timeout: float = 10.0) -> Dict[str, Any]:
        """Ask the worker :meth:`run` runs in this process (call from another thread)
        for ``key`` of ``store``: ``{"key", "value", "task", "owner", "standby"}``, the
        value None when absent; a key whose task runs on another worker is asked of it
        over HTTP (this worker needs ``http`` for that). Window stores take
        ``window_from``/``window_to`` (epoch ms). Raises :class:`StreamkitError` when no
        worker runs here, and when the answer is not available now (restoring,
        rebalancing): ask again."""
        import asyncio

        from .errors import StreamkitError
        from .operations.queries import QueryError

        running = self._running
        if running is None:
            raise StreamkitError(f"app {self.id}: no worker runs in this process (start app.run() in a thread)")
        worker, loop, server = running
        future = asyncio.run_coroutine_threadsafe(
            server.answer(store, key, window_from, window_to, allow_standby=allow_standby), loop)
        try:
            status, body = future.result(timeout)
        except QueryError as exc:
            raise StreamkitError(f"query of store '{store}' for key {key!r}: {exc}") from None
        if status == 404:
            body["value"] = None
        return body

    def __repr__(self) -> str:
        return f"<App {self.id!r}>"
