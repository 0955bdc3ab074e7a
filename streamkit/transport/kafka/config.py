"""Kafka client configuration: one validated, typed settings object for the Kafka clients
(aiokafka, the default, or librdkafka through confluent-kafka: ``kafka_client``).

Settings are merged from three sources, lowest precedence first:

1. the app's ``kafka_config={...}`` mapping (Python-typed values),
2. a TOML config file (``--config FILE`` or ``$STREAMKIT_CONFIG``) with an
   optional top-level ``broker = "kafka://..."`` and a ``[kafka]`` table,
3. environment variables ``STREAMKIT_KAFKA_<KEY>`` (strings, coerced).

Passwords are held in :class:`Secret` and only revealed by the ``*_kwargs()``
methods that feed the aiokafka constructors.
"""
from __future__ import annotations

import contextvars
import difflib
import functools
import inspect
import math
import os
import re
import ssl
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ...errors import ConfigError

__all__ = ["KafkaClientConfig", "Secret", "parse_kafka_url", "read_config_file",
           "ENV_PREFIX", "CONFIG_FILE_ENV", "DEFAULT_PORT"]

ENV_PREFIX = "STREAMKIT_KAFKA_"
CONFIG_FILE_ENV = "STREAMKIT_CONFIG"
DEFAULT_PORT = 9092

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
KAFKA_CLIENTS = ("aiokafka", "librdkafka")
LIBRDKAFKA_EXTRA = "librdkafka"
"""The setup.cfg extra that installs confluent-kafka (librdkafka)."""

_SASL_KEYS = ("sasl_mechanism", "sasl_username", "sasl_password")
# ssl_check_hostname is left out: it has a default, so it is always "set".
_SSL_KEYS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password")
_FILE_KEYS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
_TOP_LEVEL_KEYS = ("broker", "kafka")
_ENV_TRUE = ("true", "1", "yes")
_ENV_FALSE = ("false", "0", "no")
_HOSTNAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$")
_URL_FORMAT = "kafka://host[:port][,host[:port]...] (port defaults to 9092)"


class Secret:
    """A password that never shows itself: ``repr``/``str`` are ``***``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret value; pass it straight to the client that needs it."""
        return self._value

    def __repr__(self) -> str:
        return "***"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash((Secret, self._value))


class _Spec(NamedTuple):
    kind: str                       # enum | str | path | secret | bool | int | float
    nullable: bool = False
    choices: tuple[str, ...] = ()
    minimum: float | None = None    # inclusive for ints, exclusive for floats


_SPECS: dict[str, _Spec] = {
    "security_protocol": _Spec("enum", choices=PROTOCOLS),
    "ssl_cafile": _Spec("path", nullable=True),
    "ssl_certfile": _Spec("path", nullable=True),
    "ssl_keyfile": _Spec("path", nullable=True),
    "ssl_password": _Spec("secret", nullable=True),
    "ssl_check_hostname": _Spec("bool"),
    "sasl_mechanism": _Spec("enum", nullable=True, choices=SASL_MECHANISMS),
    "sasl_username": _Spec("str", nullable=True),
    "sasl_password": _Spec("secret", nullable=True),
    "client_id": _Spec("str"),
    "compression_type": _Spec("enum", choices=COMPRESSION_TYPES),
    "linger_ms": _Spec("int", minimum=0),
    "max_batch_size": _Spec("int", minimum=1),
    "request_timeout_ms": _Spec("int", minimum=1),
    "session_timeout_ms": _Spec("int", minimum=1),
    "heartbeat_interval_ms": _Spec("int", minimum=1),
    "max_poll_interval_ms": _Spec("int", minimum=1),
    "fetch_max_wait_ms": _Spec("int", minimum=0),
    "group_instance_id": _Spec("str", nullable=True),
    "replication_factor": _Spec("int", nullable=True, minimum=1),
    "connect_timeout_s": _Spec("float", minimum=0),
    "transaction_timeout_ms": _Spec("int", minimum=1),
    "kafka_client": _Spec("enum", choices=KAFKA_CLIENTS),
}
_LOWERCASE_ENUMS = ("compression_type", "kafka_client")
_ENV_NAMES = {"kafka_client": "STREAMKIT_KAFKA_CLIENT"}
"""Environment variables whose name is not ``STREAMKIT_KAFKA_<KEY>`` (no doubled KAFKA_)."""
KEYS: tuple[str, ...] = tuple(_SPECS)

# Where each setting came from, for error messages; set by from_sources while
# it constructs the dataclass so __post_init__ can name the right source.
_ORIGINS: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "streamkit_kafka_config_origins", default=None)


# ---------------------------------------------------------------- broker URL

def parse_kafka_url(url: str) -> tuple[str, ...]:
    """The ``host:port`` bootstrap servers of a ``kafka://`` URL.

    >>> parse_kafka_url("kafka://h1:9092,h2")
    ('h1:9092', 'h2:9092')
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"broker URL is empty: use {_URL_FORMAT}")
    scheme, sep, rest = url.strip().partition("://")
    if not sep or scheme.lower() != "kafka":
        raise ConfigError(f"broker URL {url!r} is not a Kafka URL: use {_URL_FORMAT}")
    if "@" in rest:
        # Don't echo the URL: the part before '@' is probably a password.
        raise ConfigError("broker URL contains credentials (user:password@host): remove them and "
                          "set sasl_username and sasl_password instead")
    rest = rest.rstrip("/")
    if any(c in rest for c in "/?#"):
        raise ConfigError(f"broker URL {url!r} has a path, query or fragment: use {_URL_FORMAT}")
    if not rest:
        raise ConfigError(f"broker URL {url!r} names no host: use {_URL_FORMAT}")
    servers: list[str] = []
    for entry in rest.split(","):
        server = _parse_server(entry.strip(), f"broker URL {url!r}")
        if server not in servers:
            servers.append(server)
    return tuple(servers)


def _parse_server(entry: str, where: str) -> str:
    """``host[:port]`` or ``[ipv6][:port]`` → ``host:port``."""
    if not entry:
        raise ConfigError(f"{where}: empty host entry: use {_URL_FORMAT}")
    if entry.startswith("["):
        addr, close, port_part = entry[1:].partition("]")
        if not close or not _is_ipv6(addr) or (port_part and not port_part.startswith(":")):
            raise ConfigError(f"{where}: {entry!r} is not a valid [IPv6]:port address")
        host, port = f"[{addr}]", port_part[1:] if port_part else None
    else:
        if entry.count(":") > 1:
            raise ConfigError(f"{where}: {entry!r}: put IPv6 addresses in brackets, e.g. [::1]:9092")
        host, colon, port_text = entry.partition(":")
        if not _HOSTNAME.match(host) or ".." in host:
            raise ConfigError(f"{where}: {host!r} is not a valid host name or address")
        port = port_text if colon else None
    if port is None:
        return f"{host}:{DEFAULT_PORT}"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{where}: port {port!r} of {entry!r} must be a number from 1 to 65535")
    return f"{host}:{int(port)}"


def _is_ipv6(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------- config file

def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed TOML file: ``{"broker": ... (if present), "kafka": {...}}``."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {name!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {name!r} is a directory, not a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"config file {name!r} cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {name!r} is not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message carries "(at line N, column M)".
        raise ConfigError(f"config file {name!r} is not valid TOML: {exc}") from None
    for key in data:
        if key not in _TOP_LEVEL_KEYS:
            raise ConfigError(f"config file {name!r}: unknown top-level key {key!r}"
                              f"{_did_you_mean(key, _TOP_LEVEL_KEYS)}; valid keys: broker, [kafka]")
    if "broker" in data and not (isinstance(data["broker"], str) and data["broker"].strip()):
        raise ConfigError(f"config file {name!r}: broker must be a URL string such as "
                          f"\"kafka://host:9092\", got {data['broker']!r}")
    kafka = data.get("kafka", {})
    if not isinstance(kafka, dict):
        raise ConfigError(f"config file {name!r}: kafka must be a table ([kafka] with key = value "
                          f"lines), got a {type(kafka).__name__}")
    result: dict[str, Any] = {"kafka": kafka}
    if "broker" in data:
        result["broker"] = data["broker"]
    return result


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
                           _check_servers(self.bootstrap_servers, origin("bootstrap_servers")))
        for key, spec in _SPECS.items():
            object.__setattr__(self, key, _check_value(key, spec, getattr(self, key), origin(key)))
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
                _check_known_key(key, "app setting kafka_config")
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
                _check_known_key(key, f"{file_label}, [kafka] table")
                values[key] = value
                origins[key] = f"{file_label}, [kafka] {key}"

        for name in sorted(env):
            if not name.startswith(ENV_PREFIX):
                continue
            key = _ENV_KEYS.get(name, name[len(ENV_PREFIX):].lower())
            if key not in _SPECS or name != _env_name(key):
                names = [_env_name(k) for k in KEYS]
                hint = (f" (did you mean {name.upper()!r}?)" if name.upper() in names
                        else _did_you_mean(name, names))
                raise ConfigError(
                    f"environment variable {name} is not a Kafka setting{hint}; valid: "
                    f"{ENV_PREFIX}<KEY> with KEY one of {', '.join(k.upper() for k in KEYS if k not in _ENV_NAMES)}"
                    f", or {', '.join(_ENV_NAMES.values())}")
            origins[key] = f"environment variable {name}"
            values[key] = _coerce_env(key, _SPECS[key], env[name], origins[key])

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


# ---------------------------------------------------------------- validation helpers

def _env_name(key: str) -> str:
    return _ENV_NAMES.get(key) or ENV_PREFIX + key.upper()


_ENV_KEYS = {name: key for key, name in _ENV_NAMES.items()}


def _did_you_mean(name: str, candidates: Any) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_known_key(key: Any, where: str) -> None:
    if not isinstance(key, str):
        raise ConfigError(f"{where}: setting names must be strings, got {key!r}")
    if key in _SPECS:
        return
    hint = _did_you_mean(key, KEYS)
    if not hint and key in ("bootstrap_servers", "broker", "brokers", "url"):
        hint = " (the brokers come from the kafka:// broker URL)"
    raise ConfigError(f"{where}: unknown key {key!r}{hint}; valid keys: {', '.join(KEYS)}")


def _expected(key: str, spec: _Spec) -> str:
    if spec.kind == "enum":
        text = f"one of {', '.join(spec.choices)}"
    elif spec.kind == "bool":
        text = "true or false"
    elif spec.kind == "int":
        text = f"an integer >= {spec.minimum:g}"
    elif spec.kind == "float":
        text = f"a number > {spec.minimum:g}"
    elif spec.kind == "path":
        text = "a file path"
    else:
        text = "a non-empty string"
    return text + (" (or unset)" if spec.nullable else "")


def _shown(spec: _Spec, value: Any) -> str:
    """A value for an error message; secrets are described, never shown."""
    if spec.kind == "secret":
        return f"a {type(value).__name__}"
    return repr(value)


def _coerce_env(key: str, spec: _Spec, text: str, where: str) -> Any:
    """An environment variable's string → the key's Python type."""
    stripped = text.strip()
    if spec.kind == "secret":
        return text if text else None
    if spec.nullable and not stripped:
        return None
    if spec.kind == "bool":
        if stripped.lower() in _ENV_TRUE:
            return True
        if stripped.lower() in _ENV_FALSE:
            return False
        raise ConfigError(f"{where}: {key} must be one of true/false/1/0/yes/no, got {text!r}")
    if spec.kind == "int":
        try:
            return int(stripped)
        except ValueError:
            raise ConfigError(f"{where}: {key} must be {_expected(key, spec)}, got {text!r}") from None
    if spec.kind == "float":
        try:
            return float(stripped)
        except ValueError:
            raise ConfigError(f"{where}: {key} must be {_expected(key, spec)}, got {text!r}") from None
    return stripped


def _check_value(key: str, spec: _Spec, value: Any, where: str) -> Any:
    """Type- and range-check one setting; returns it normalised."""
    def bad() -> ConfigError:
        return ConfigError(f"{where}: {key} must be {_expected(key, spec)}, got {_shown(spec, value)}")

    if value is None:
        if spec.nullable:
            return None
        raise bad()
    kind = spec.kind
    if kind == "secret":
        if isinstance(value, Secret):
            value = value.reveal()
        if not isinstance(value, str) or not value:
            raise bad()
        return Secret(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad()
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < spec.minimum:
            raise bad()
        return value
    if kind == "float":
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value <= spec.minimum):
            raise bad()
        return float(value)
    if kind == "path":
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str) or not value.strip():
            raise bad()
        return value
    if not isinstance(value, str) or not value.strip():
        raise bad()
    if kind == "enum":
        normalised = value.strip().lower() if key in _LOWERCASE_ENUMS else value.strip().upper()
        if normalised not in spec.choices:
            raise bad()
        return normalised
    return value


def _check_servers(servers: Any, where: str) -> tuple[str, ...]:
    if isinstance(servers, str) or not isinstance(servers, (tuple, list)) or not servers:
        raise ConfigError(f"{where}: bootstrap_servers must be a non-empty sequence of 'host:port' "
                          f"strings, got {servers!r}")
    result = []
    for entry in servers:
        if not isinstance(entry, str):
            raise ConfigError(f"{where}: bootstrap server {entry!r} is not a 'host:port' string")
        result.append(_parse_server(entry.strip(), where))
    return tuple(result)


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

    _check_codec(cfg.compression_type, origin("compression_type"))
    if cfg.kafka_client == "librdkafka":
        _check_librdkafka(origin("kafka_client"))


def _check_librdkafka(where: str) -> None:
    """confluent-kafka must be installed for kafka_client=librdkafka (found, not imported:
    importing it is left to the clients, so validating a config stays light)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("confluent_kafka") is not None
    except (ImportError, ValueError):  # a broken or blocked installation
        found = False
    if not found:
        raise ConfigError(f"{where}: kafka_client 'librdkafka' needs the confluent-kafka package, which is "
                          f"not installed: pip install 'streamkit[{LIBRDKAFKA_EXTRA}]' (or confluent-kafka), "
                          "or use kafka_client 'aiokafka' (the default)")


def _check_codec(name: str, where: str) -> None:
    """Fail like aiokafka's producer would, but early and saying what to install."""
    if name == "none":
        return
    from aiokafka import codec

    if getattr(codec, f"has_{name}")():
        return
    # aiokafka >= 0.10 implements snappy, lz4 and zstd with cramjam.
    raise ConfigError(f"{where}: compression_type {name!r} needs the 'cramjam' package, which is "
                      f"not installed: pip install cramjam (or aiokafka[{name}]), or use one of "
                      f"{', '.join(COMPRESSION_TYPES)} with its library installed (gzip always is)")


@functools.lru_cache(maxsize=None)
def _admin_parameters() -> frozenset[str] | None:
    """The keyword names ``AIOKafkaAdminClient`` accepts (None: it takes ``**kwargs``)."""
    from aiokafka.admin import AIOKafkaAdminClient

    params = inspect.signature(AIOKafkaAdminClient.__init__).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params)
