"""The Kafka client settings one by one: their kinds, allowed values and limits
(:data:`SETTING_SPECS`), and the checks and coercions that turn what the app, the
config file or the environment gave into typed values with messages that name where
each came from. Checks across settings are :mod:`.config`'s.
"""
from __future__ import annotations

import math
import os
from typing import Any, NamedTuple

from ...errors import ConfigError
from .config_sources import ENV_PREFIX, did_you_mean, parse_server

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
KAFKA_CLIENTS = ("aiokafka", "librdkafka")
LIBRDKAFKA_EXTRA = "librdkafka"
"""The setup.cfg extra that installs confluent-kafka (librdkafka)."""

_ENV_TRUE = ("true", "1", "yes")
_ENV_FALSE = ("false", "0", "no")


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


class SettingSpec(NamedTuple):
    kind: str                       # enum | str | path | secret | bool | int | float
    nullable: bool = False
    choices: tuple[str, ...] = ()
    minimum: float | None = None    # inclusive for ints, exclusive for floats


SETTING_SPECS: dict[str, SettingSpec] = {
    "security_protocol": SettingSpec("enum", choices=PROTOCOLS),
    "ssl_cafile": SettingSpec("path", nullable=True),
    "ssl_certfile": SettingSpec("path", nullable=True),
    "ssl_keyfile": SettingSpec("path", nullable=True),
    "ssl_password": SettingSpec("secret", nullable=True),
    "ssl_check_hostname": SettingSpec("bool"),
    "sasl_mechanism": SettingSpec("enum", nullable=True, choices=SASL_MECHANISMS),
    "sasl_username": SettingSpec("str", nullable=True),
    "sasl_password": SettingSpec("secret", nullable=True),
    "client_id": SettingSpec("str"),
    "compression_type": SettingSpec("enum", choices=COMPRESSION_TYPES),
    "linger_ms": SettingSpec("int", minimum=0),
    "max_batch_size": SettingSpec("int", minimum=1),
    "request_timeout_ms": SettingSpec("int", minimum=1),
    "session_timeout_ms": SettingSpec("int", minimum=1),
    "heartbeat_interval_ms": SettingSpec("int", minimum=1),
    "max_poll_interval_ms": SettingSpec("int", minimum=1),
    "fetch_max_wait_ms": SettingSpec("int", minimum=0),
    "group_instance_id": SettingSpec("str", nullable=True),
    "replication_factor": SettingSpec("int", nullable=True, minimum=1),
    "connect_timeout_s": SettingSpec("float", minimum=0),
    "transaction_timeout_ms": SettingSpec("int", minimum=1),
    "kafka_client": SettingSpec("enum", choices=KAFKA_CLIENTS),
}
LOWERCASE_ENUMS = ("compression_type", "kafka_client")
ENV_NAMES = {"kafka_client": "STREAMKIT_KAFKA_CLIENT"}
"""Environment variables whose name is not ``STREAMKIT_KAFKA_<KEY>`` (no doubled KAFKA_)."""
KEYS: tuple[str, ...] = tuple(SETTING_SPECS)


def env_name(key: str) -> str:
    return ENV_NAMES.get(key) or ENV_PREFIX + key.upper()


ENV_KEYS = {name: key for key, name in ENV_NAMES.items()}


def check_known_key(key: Any, where: str) -> None:
    if not isinstance(key, str):
        raise ConfigError(f"{where}: setting names must be strings, got {key!r}")
    if key in SETTING_SPECS:
        return
    hint = did_you_mean(key, KEYS)
    if not hint and key in ("bootstrap_servers", "broker", "brokers", "url"):
        hint = " (the brokers come from the kafka:// broker URL)"
    raise ConfigError(f"{where}: unknown key {key!r}{hint}; valid keys: {', '.join(KEYS)}")


def _expected(key: str, spec: SettingSpec) -> str:
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


def _shown(spec: SettingSpec, value: Any) -> str:
    """A value for an error message; secrets are described, never shown."""
    if spec.kind == "secret":
        return f"a {type(value).__name__}"
    return repr(value)


def coerce_env(key: str, spec: SettingSpec, text: str, where: str) -> Any:
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


def check_value(key: str, spec: SettingSpec, value: Any, where: str) -> Any:
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
        normalised = value.strip().lower() if key in LOWERCASE_ENUMS else value.strip().upper()
        if normalised not in spec.choices:
            raise bad()
        return normalised
    return value


def check_servers(servers: Any, where: str) -> tuple[str, ...]:
    if isinstance(servers, str) or not isinstance(servers, (tuple, list)) or not servers:
        raise ConfigError(f"{where}: bootstrap_servers must be a non-empty sequence of 'host:port' "
                          f"strings, got {servers!r}")
    result = []
    for entry in servers:
        if not isinstance(entry, str):
            raise ConfigError(f"{where}: bootstrap server {entry!r} is not a 'host:port' string")
        result.append(parse_server(entry.strip(), where))
    return tuple(result)


def check_librdkafka(where: str) -> None:
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


def check_codec(name: str, where: str) -> None:
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
