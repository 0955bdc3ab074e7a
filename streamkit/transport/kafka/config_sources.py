"""Where Kafka client settings come from, read and checked: the ``kafka://`` broker URL
(:func:`parse_kafka_url`) and the TOML config file (:func:`read_config_file`); the
environment's ``STREAMKIT_KAFKA_<KEY>`` names. :mod:`.config` merges them.
"""
from __future__ import annotations

import difflib
import os
import re
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ...errors import ConfigError

ENV_PREFIX = "STREAMKIT_KAFKA_"
CONFIG_FILE_ENV = "STREAMKIT_CONFIG"
DEFAULT_PORT = 9092

_TOP_LEVEL_KEYS = ("broker", "kafka")
_HOSTNAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$")
_URL_FORMAT = "kafka://host[:port][,host[:port]...] (port defaults to 9092)"


def did_you_mean(name: str, candidates: Any) -> str:
    """`` (did you mean 'x'?)`` for the candidate closest to ``name``, or nothing."""
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


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
        server = parse_server(entry.strip(), f"broker URL {url!r}")
        if server not in servers:
            servers.append(server)
    return tuple(servers)


def parse_server(entry: str, where: str) -> str:
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
                              f"{did_you_mean(key, _TOP_LEVEL_KEYS)}; valid keys: broker, [kafka]")
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
