"""Kafka client configuration: one validated, typed settings object for the Kafka clients
(aiokafka, the default, or librdkafka through confluent-kafka: ``kafka_client``).

Settings are merged from three sources, lowest precedence first:

1. the app's ``kafka_config={...}`` mapping (Python-typed values),
2. a TOML config file (``--config FILE`` or ``$STREAMKIT_CONFIG``) with an
   optional top-level ``broker = "kafka://..."`` and a ``[kafka]`` table,
3. environment variables ``STREAMKIT_KAFKA_<KEY>`` (strings, coerced).

Passwords are held in :class:`Secret` and only revealed by the ``*_kwargs()``
methods that feed the aiokafka constructors.

The sources are read by :mod:`.config_sources`, each setting is checked by
:mod:`.config_settings`; this module merges them and checks the settings together.
"""
from __future__ import annotations

import contextvars
import functools
import inspect
import math
import os
import ssl
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ...errors import ConfigError
from .config_settings import (ENV_KEYS, ENV_NAMES, KEYS, SASL_PROTOCOLS, SETTING_SPECS, TLS_PROTOCOLS, Secret,
                              check_codec, check_known_key, check_librdkafka, check_servers, check_value, coerce_env,
                              env_name)
from .config_sources import CONFIG_FILE_ENV, DEFAULT_PORT, ENV_PREFIX, did_you_mean, parse_kafka_url, read_config_file

__all__ = ["KafkaClientConfig", "Secret", "parse_kafka_url", "read_config_file",
           "ENV_PREFIX", "CONFIG_FILE_ENV", "DEFAULT_PORT"]

_SASL_KEYS = ("sasl_mechanism", "sasl_username", "sasl_password")
# ssl_check_hostname is left out: it has a default, so it is always "set".
_SSL_KEYS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password")
_FILE_KEYS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")

# Where each setting came from, for error messages; set by from_sources while
# it constructs the dataclass so __post_init__ can name the right source.
_ORIGINS: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "streamkit_kafka_config_origins", default=None)


# ---------------------------------------------------------------- the config

@dataclass(frozen=True, repr=False)
class KafkaClientConfig:
    """Validated settings shared by every aiokafka client of a transport.

    Build it with :meth:`from_sources`; direct construction is validated too.
    """

    bootstrap_servers: tuple[str, ...]
    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: Secret | None = None
    ssl_check_hostname: bool = True
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    client_id: str = "streamkit"
    compression_type: str = "none"
    linger_ms: int = 0
    """How long aiokafka holds a batch before sending it. The worker hands over whole
    batches (a processing round's output per partition), so waiting adds latency and
    gathers nothing more; a batch that finds the previous one still in flight waits
    for it anyway."""
    max_batch_size: int = 1048576
    request_timeout_ms: int = 30000
    session_timeout_ms: int = 10000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300000
    """Longest a group member may go without polling before it leaves the group, and the
    group's rebalance timeout (:attr:`rebalance_timeout_ms`), as in Kafka Streams."""
    fetch_max_wait_ms: int = 500
    """Longest the broker holds a fetch that has less than one byte to return (Kafka's
    ``fetch.max.wait.ms``). Apache Kafka answers as soon as records arrive; brokers that
    hold every fetch this long (Tansu) add it to each record's latency."""
    group_instance_id: str | None = None
    replication_factor: int | None = None
    connect_timeout_s: float = 30.0
    transaction_timeout_ms: int = 60000
    """How long the broker lets a transaction of an ``exactly_once`` producer stay open before
    it aborts it itself (Kafka's ``transaction.timeout.ms``, sent with InitProducerId; aiokafka's
    default is 60000 too). Only transactional producers use it. It must be larger than the
    commit interval (:meth:`check_commit_interval`), and at most the broker's
    ``transaction.max.timeout.ms`` (900000 by default), or the broker refuses the producer."""
    kafka_client: str = "aiokafka"
    """Which client library produces and fetches: ``aiokafka`` (pure Python on asyncio, the
    default) or ``librdkafka`` (confluent-kafka, the ``librdkafka`` extra: fetching and
    producing run in librdkafka's own threads, which cuts end-to-end latency). Group
    membership (streamkit's task assignor) and offset commits of the app's group stay on
    aiokafka either way; exactly_once is not supported with librdkafka yet (ConfigError
    when a transactional producer is asked for). Environment: ``STREAMKIT_KAFKA_CLIENT``."""

    def __post_init__(self) -> None:
        origins = _ORIGINS.get() or {}

        def origin(key: str) -> str:
            return origins.get(key, f"KafkaClientConfig argument {key}")

        object.__setattr__(self, "bootstrap_servers",
                           check_servers(self.bootstrap_servers, origin("bootstrap_servers")))
        for key, spec in SETTING_SPECS.items():
            object.__setattr__(self, key, check_value(key, spec, getattr(self, key), origin(key)))
        _check_consistency(self, origin, bool(origins))

    # ------------------------------------------------------------ building

    @classmethod
    def from_sources(cls, url: str | None, *, app_settings: Mapping[str, Any] | None = None,
                     config_file: str | os.PathLike[str] | None = None,
                     environ: Mapping[str, str] | None = None) -> KafkaClientConfig:
        """Merge app settings < config file < environment over the defaults and validate.

        ``url`` is the ``kafka://`` broker URL; when None, the config file's
        ``broker`` is used. ``config_file`` defaults to ``$STREAMKIT_CONFIG``;
        ``environ`` defaults to ``os.environ``.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        origins: dict[str, str] = {key: "default" for key in KEYS}

        if app_settings is not None:
            if not isinstance(app_settings, Mapping):
                raise ConfigError(f"app setting kafka_config must be a mapping of setting name to "
                                  f"value, got a {type(app_settings).__name__}")
            for key, value in app_settings.items():
                check_known_key(key, "app setting kafka_config")
                values[key] = value
                origins[key] = f"app setting kafka_config[{key!r}]"

        file_broker: str | None = None
        file_label = ""
        if config_file is None and env.get(CONFIG_FILE_ENV):
            config_file = env[CONFIG_FILE_ENV]
            file_label = f" (from {CONFIG_FILE_ENV})"
        if config_file is not None:
            file_name = os.fspath(config_file)
            data = read_config_file(file_name)
            file_label = f"config file {file_name!r}{file_label}"
            file_broker = data.get("broker")
            for key, value in data["kafka"].items():
                check_known_key(key, f"{file_label}, [kafka] table")
                values[key] = value
                origins[key] = f"{file_label}, [kafka] {key}"

        for name in sorted(env):
            if not name.startswith(ENV_PREFIX):
                continue
            key = ENV_KEYS.get(name, name[len(ENV_PREFIX):].lower())
            if key not in SETTING_SPECS or name != env_name(key):
                names = [env_name(k) for k in KEYS]
                hint = (f" (did you mean {name.upper()!r}?)" if name.upper() in names
                        else did_you_mean(name, names))
                raise ConfigError(
                    f"environment variable {name} is not a Kafka setting{hint}; valid: "
                    f"{ENV_PREFIX}<KEY> with KEY one of {', '.join(k.upper() for k in KEYS if k not in ENV_NAMES)}"
                    f", or {', '.join(ENV_NAMES.values())}")
            origins[key] = f"environment variable {name}"
            values[key] = coerce_env(key, SETTING_SPECS[key], env[name], origins[key])

        if url is None:
            if file_broker is None:
                raise ConfigError("no Kafka broker URL: give kafka://host:port with --broker, "
                                  "STREAMKIT_BROKER, the app's broker or `broker` in the config file")
            url, origins["bootstrap_servers"] = file_broker, f"{file_label}, broker"
        else:
            origins["bootstrap_servers"] = "broker URL"
        try:
            servers = parse_kafka_url(url)
        except ConfigError as exc:
            if url is file_broker:
                raise ConfigError(f"{file_label}: {exc}") from None
            raise

        token = _ORIGINS.set(origins)
        try:
            return cls(bootstrap_servers=servers, **values)
        finally:
            _ORIGINS.reset(token)

    # ------------------------------------------------------------ aiokafka kwargs

    def common_kwargs(self) -> dict[str, Any]:
        """Keyword arguments every aiokafka client accepts (reveals the SASL password).

        ``sasl_*`` keys are only included with a SASL protocol; ``ssl_context``
        is None unless the protocol uses TLS.
        """
        kwargs: dict[str, Any] = {
            "bootstrap_servers": ",".join(self.bootstrap_servers),
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
            "ssl_context": self._ssl_context(),
            "request_timeout_ms": self.request_timeout_ms,
        }
        if self.security_protocol in SASL_PROTOCOLS:
            assert self.sasl_password is not None  # guaranteed by validation
            kwargs.update(sasl_mechanism=self.sasl_mechanism,
                          sasl_plain_username=self.sasl_username,
                          sasl_plain_password=self.sasl_password.reveal())
        return kwargs

    def producer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``AIOKafkaProducer``."""
        return {**self.common_kwargs(),
                "compression_type": None if self.compression_type == "none" else self.compression_type,
                "linger_ms": self.linger_ms,
                "max_batch_size": self.max_batch_size}

    def consumer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``AIOKafkaConsumer`` (``group_id`` is the caller's)."""
        kwargs = {**self.common_kwargs(),
                  "session_timeout_ms": self.session_timeout_ms,
                  "heartbeat_interval_ms": self.heartbeat_interval_ms,
                  "max_poll_interval_ms": self.max_poll_interval_ms,
                  "fetch_max_wait_ms": self.fetch_max_wait_ms}
        if self.group_instance_id is not None:
            kwargs["group_instance_id"] = self.group_instance_id
        return kwargs

    @property
    def rebalance_timeout_ms(self) -> int:
        """How long the coordinator waits, once a rebalance began, for each member to join
        again before it removes the member: ``max_poll_interval_ms``, as Kafka Streams and
        librdkafka use it. A member joins once its worker committed the revoked tasks, which
        may take a processing slice and a commit, so the session timeout (aiokafka's default
        here) is too short for a busy worker."""
        return self.max_poll_interval_ms

    def admin_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``AIOKafkaAdminClient``: the common ones it accepts."""
        accepted = _admin_parameters()
        return {k: v for k, v in self.common_kwargs().items() if accepted is None or k in accepted}

    # ------------------------------------------------------------ librdkafka settings

    def librdkafka_common(self) -> dict[str, Any]:
        """librdkafka properties every confluent-kafka client gets (reveals the passwords)."""
        conf: dict[str, Any] = {
            "bootstrap.servers": ",".join(self.bootstrap_servers),
            "client.id": self.client_id,
            "security.protocol": self.security_protocol.lower(),
            "socket.timeout.ms": self.request_timeout_ms,
        }
        if self.security_protocol in TLS_PROTOCOLS:
            conf["ssl.endpoint.identification.algorithm"] = "https" if self.ssl_check_hostname else "none"
            for key, prop in (("ssl_cafile", "ssl.ca.location"), ("ssl_certfile", "ssl.certificate.location"),
                              ("ssl_keyfile", "ssl.key.location")):
                if getattr(self, key) is not None:
                    conf[prop] = getattr(self, key)
            if self.ssl_password is not None:
                conf["ssl.key.password"] = self.ssl_password.reveal()
        if self.security_protocol in SASL_PROTOCOLS:
            assert self.sasl_password is not None  # guaranteed by validation
            conf.update({"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.sasl_username,
                         "sasl.password": self.sasl_password.reveal()})
        return conf

    def librdkafka_producer(self) -> dict[str, Any]:
        """librdkafka properties of a (non-transactional) producer: acks=all, linger and batch
        size as for aiokafka, one request in flight per broker so that a retry never
        reorders a partition's records. Not idempotent, as the aiokafka producer: a retry may
        duplicate records (at_least_once allows it). Idempotence with several requests in
        flight stalled on Tansu 0.6 (delivery p99 463 ms against 5 ms, 5 s at 9k records/s)."""
        return {**self.librdkafka_common(), "acks": "all", "enable.idempotence": False,
                "allow.auto.create.topics": False,  # librdkafka's producer default is true
                "max.in.flight.requests.per.connection": 1,
                "linger.ms": self.linger_ms, "batch.size": self.max_batch_size,
                "compression.type": self.compression_type, "request.timeout.ms": self.request_timeout_ms}

    def librdkafka_consumer(self, group: str, read_committed: bool) -> dict[str, Any]:
        """librdkafka properties of a consumer of manually assigned partitions: it never
        joins ``group`` (no subscribe()), commits only when told, and reports a position
        outside the log as an error instead of resetting it (the caller accounts the loss)."""
        return {**self.librdkafka_common(), "group.id": group, "enable.auto.commit": False,
                "enable.auto.offset.store": False, "auto.offset.reset": "error",
                "isolation.level": "read_committed" if read_committed else "read_uncommitted",
                "fetch.wait.max.ms": self.fetch_max_wait_ms, "enable.partition.eof": False}

    # ------------------------------------------------------------ cross-checks

    def check_commit_interval(self, commit_interval_ms: float,
                              where: str = "the app's commit interval") -> None:
        """A ConfigError unless ``transaction_timeout_ms`` is larger than the commit interval.

        A transaction stays open for one commit interval (plus the processing round that ends
        it): with a timeout at or below the interval the broker would abort transactions the
        worker is about to commit. The config does not know the app's commit interval, so the
        caller (the worker, which does) passes it.
        """
        if isinstance(commit_interval_ms, bool) or not isinstance(commit_interval_ms, (int, float)) \
                or not math.isfinite(commit_interval_ms) or commit_interval_ms <= 0:
            raise ConfigError(f"{where} must be a positive number of milliseconds, got {commit_interval_ms!r}")
        if self.transaction_timeout_ms <= commit_interval_ms:
            raise ConfigError(
                f"transaction_timeout_ms ({self.transaction_timeout_ms}) must be larger than {where} "
                f"({commit_interval_ms:g} ms): the broker would abort each transaction before it is "
                f"committed; raise transaction_timeout_ms (app kafka_config, the config file's [kafka] "
                f"table or STREAMKIT_KAFKA_TRANSACTION_TIMEOUT_MS) or shorten the commit interval")

    # ------------------------------------------------------------ display

    def describe(self) -> dict[str, Any]:
        """Every setting, with secrets shown as ``***``; safe to log."""
        result: dict[str, Any] = {"bootstrap_servers": list(self.bootstrap_servers)}
        for key in KEYS:
            value = getattr(self, key)
            result[key] = "***" if isinstance(value, Secret) else value
        return result

    def __repr__(self) -> str:
        items = ", ".join(f"{k}={v!r}" for k, v in self.describe().items())
        return f"{type(self).__name__}({items})"

    def _ssl_context(self) -> ssl.SSLContext | None:
        if self.security_protocol not in TLS_PROTOCOLS:
            return None
        from aiokafka.helpers import create_ssl_context

        context = create_ssl_context(
            cafile=self.ssl_cafile, certfile=self.ssl_certfile, keyfile=self.ssl_keyfile,
            password=self.ssl_password.reveal() if self.ssl_password is not None else None)
        # create_ssl_context always turns hostname checks on; the chain is still verified.
        context.check_hostname = self.ssl_check_hostname
        return context


# ---------------------------------------------------------------- checks across settings

def _check_consistency(cfg: KafkaClientConfig, origin: Callable[[str], str], from_sources: bool) -> None:
    """Checks across settings: SASL/SSL vs protocol, files, timeouts, codec."""
    where_set = (" in the app's kafka_config, the config file's [kafka] table or "
                 "STREAMKIT_KAFKA_<KEY>" if from_sources else "")
    protocol = cfg.security_protocol
    protocol_at = f"security_protocol is {protocol} ({origin('security_protocol')})"

    if protocol in SASL_PROTOCOLS:
        missing = [k for k in _SASL_KEYS if getattr(cfg, k) is None]
        if missing:
            raise ConfigError(f"{protocol_at}, which needs sasl_mechanism, sasl_username and "
                              f"sasl_password: set {', '.join(missing)}{where_set}")
    else:
        for key in _SASL_KEYS:
            if getattr(cfg, key) is not None:
                raise ConfigError(f"{key} is set ({origin(key)}) but {protocol_at}: use "
                                  f"SASL_PLAINTEXT or SASL_SSL, or remove {key}")

    if protocol not in TLS_PROTOCOLS:
        for key in _SSL_KEYS:
            if getattr(cfg, key) is not None:
                raise ConfigError(f"{key} is set ({origin(key)}) but {protocol_at}: use "
                                  f"SSL or SASL_SSL, or remove {key}")
    else:
        for key, needs in (("ssl_keyfile", "ssl_certfile"), ("ssl_password", "ssl_keyfile")):
            if getattr(cfg, key) is not None and getattr(cfg, needs) is None:
                raise ConfigError(f"{key} is set ({origin(key)}) but {needs} is not: set {needs} "
                                  f"too, or remove {key}")
        for key in _FILE_KEYS:
            path = getattr(cfg, key)
            if path is not None and not os.path.isfile(path):
                problem = "is not a file" if os.path.exists(path) else "does not exist"
                relative = "" if os.path.isabs(path) else f" (relative to {os.getcwd()})"
                raise ConfigError(f"{key} ({origin(key)}): {path!r}{relative} {problem}")
        try:
            cfg._ssl_context()
        except (ssl.SSLError, OSError, ValueError) as exc:
            files = ", ".join(f"{k}={getattr(cfg, k)!r} ({origin(k)})"
                              for k in _FILE_KEYS if getattr(cfg, k))
            raise ConfigError(f"{protocol_at}, but the TLS context cannot be built from "
                              f"{files or 'the system CA store'}: {exc}") from None

    if cfg.heartbeat_interval_ms >= cfg.session_timeout_ms:
        raise ConfigError(
            f"heartbeat_interval_ms ({cfg.heartbeat_interval_ms}, {origin('heartbeat_interval_ms')}) "
            f"must be lower than session_timeout_ms ({cfg.session_timeout_ms}, "
            f"{origin('session_timeout_ms')}); a third of it is usual")

    if cfg.max_poll_interval_ms <= cfg.heartbeat_interval_ms:
        raise ConfigError(
            f"max_poll_interval_ms ({cfg.max_poll_interval_ms}, {origin('max_poll_interval_ms')}) "
            f"must be larger than heartbeat_interval_ms ({cfg.heartbeat_interval_ms}, "
            f"{origin('heartbeat_interval_ms')}): it is also the group's rebalance timeout, and a member "
            "learns of a rebalance only at its next heartbeat")

    check_codec(cfg.compression_type, origin("compression_type"))
    if cfg.kafka_client == "librdkafka":
        check_librdkafka(origin("kafka_client"))


@functools.lru_cache(maxsize=None)
def _admin_parameters() -> frozenset[str] | None:
    """The keyword names ``AIOKafkaAdminClient`` accepts (None: it takes ``**kwargs``)."""
    from aiokafka.admin import AIOKafkaAdminClient

    params = inspect.signature(AIOKafkaAdminClient.__init__).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params)
