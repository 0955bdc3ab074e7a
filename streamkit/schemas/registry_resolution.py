"""From a serde's ``registry=`` option to the client it talks to, shared per process.

``registry=`` is one of:

- ``"http(s)://..."``: an :class:`~.http_client.HttpRegistryClient` for that URL;
- ``"embedded"``: the in-process registry on the app's broker (opened by the function
  :func:`use_broker_registry` installed), known only once the serde is bound to a
  topic of a running app (a worker binds with its broker URL; a
  ``TopologyTestDriver`` with ``memory://<driver>``, an in-memory registry of its own);
- ``"memory://NAME"``: an in-memory registry, one per NAME and process;
- any :class:`~.registry_client.RegistryClient`, used as is.

Every client comes back wrapped in a :class:`CachedRegistry`, one per registry, so
the serdes of every topic of an app share one cache: a schema id, a subject's
registration and a lookup cost one round trip per process, never one per record or
per serde.

A registry kept on a broker needs a transport, which the serdes must not depend on
(they sit below it): ``streamkit/__init__.py`` installs the opener
(:func:`streamkit.schemas.registry.broker_log.registry_on_broker`) with
:func:`use_broker_registry`, and this module only calls it.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, Optional, Tuple, Union

from ..errors import ConfigError
from .model import RegisteredSchema, Schema
from .registry_client import RegistryClient

__all__ = ["RegistryOption", "resolve_registry", "describe_registry", "CachedRegistry", "EMBEDDED",
           "BrokerRegistryOpener", "use_broker_registry"]

log = logging.getLogger(__name__)

EMBEDDED = "embedded"
RegistryOption = Union[str, RegistryClient]

BrokerRegistryOpener = Callable[[str], RegistryClient]
"""Opens the registry kept on the broker at a URL (``embedded://DIR``, ``kafka://...``)."""

_lock = threading.Lock()
_by_key: Dict[object, "CachedRegistry"] = {}
_broker_registry: Optional[BrokerRegistryOpener] = None


def use_broker_registry(opener: BrokerRegistryOpener) -> None:
    """Open the registries kept on brokers (``registry="embedded"`` bound to a broker URL)
    with ``opener`` from now on; registries already opened stay in use."""
    global _broker_registry
    _broker_registry = opener


def check_registry_option(registry: object, owner: str) -> RegistryOption:
    """``registry`` if it is a usable ``registry=`` option, else ConfigError saying what is."""
    if isinstance(registry, str):
        if registry == EMBEDDED or registry.startswith(("http://", "https://", "memory://")):
            return registry
    elif isinstance(registry, RegistryClient):
        return registry
    raise ConfigError(f"{owner}: registry={registry!r} is not a registry: pass an http(s):// URL, "
                      "'embedded' (the registry on the app's broker) or a RegistryClient")


def describe_registry(registry: RegistryOption) -> str:
    """The option as text for messages (URL credentials masked)."""
    if isinstance(registry, str):
        if "@" in registry and "://" in registry:
            scheme, rest = registry.split("://", 1)
            return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
        return registry
    return repr(registry)


def resolve_registry(registry: RegistryOption, *, broker: Optional[str], owner: str) -> "CachedRegistry":
    """The shared, caching client for ``registry``; ``broker`` is the app's broker URL
    (needed by ``"embedded"``, else unused). ``owner`` names the serde in errors."""
    key: object
    if isinstance(registry, str) and registry == EMBEDDED:
        if not broker:
            raise ConfigError(
                f"{owner} uses registry='embedded' but is not bound to an app's broker: declare the topic "
                "with app.topic(name, key_serde=/value_serde=...) so a worker or TopologyTestDriver binds it, "
                "or bind it yourself with serde.for_topic(topic, is_key, broker='embedded:///path'), "
                "or pass registry='http://host:8081' or a RegistryClient")
        key = ("broker", broker)
    elif isinstance(registry, str):
        key = ("url", registry)
    else:
        key = ("client", id(registry))
    with _lock:
        cached = _by_key.get(key)
        if cached is None:
            cached = _by_key[key] = CachedRegistry(_open(registry, broker))
            log.info("schema registry for %s: %r", owner, cached.inner)
        return cached


def _open(registry: RegistryOption, broker: Optional[str]) -> RegistryClient:
    if not isinstance(registry, str):
        return registry
    if registry.startswith(("http://", "https://")):
        from .http_client import HttpRegistryClient

        return HttpRegistryClient(registry)
    from .registry.service import SchemaRegistry  # the registry loads only when a serde needs it

    if registry.startswith("memory://"):
        return SchemaRegistry.in_memory()
    assert broker is not None
    if broker.startswith("memory://"):
        return SchemaRegistry.in_memory()
    if _broker_registry is None:
        raise ConfigError(f"no opener for a registry on the broker {broker!r} is installed: "
                          "import streamkit (its __init__ installs it) or call use_broker_registry()")
    return _broker_registry(broker)


class CachedRegistry:
    """A :class:`RegistryClient` that remembers every answer that cannot change: schemas
    by id, ids registered or looked up per (subject, schema), versions by number. The
    latest version of a subject is asked each time (the serdes remember it themselves).
    Errors are not cached: an unknown id is asked again the next time it is seen."""

    def __init__(self, inner: RegistryClient) -> None:
        self.inner = inner
        self._by_id: Dict[Tuple[int, Optional[str]], Schema] = {}
        self._registered: Dict[Tuple[str, Schema, bool], int] = {}
        self._looked_up: Dict[Tuple[str, Schema, bool], RegisteredSchema] = {}
        self._versions: Dict[Tuple[str, int], RegisteredSchema] = {}
        self._lock = threading.Lock()
        self.round_trips = 0
        """Requests passed to the registry (for tests and logs)."""

    def register(self, subject: str, schema: Schema, *, normalize: bool = False) -> int:
        key = (subject, schema, normalize)
        found = self._registered.get(key)
        if found is None:
            self._count()
            found = self._registered[key] = self.inner.register(subject, schema, normalize=normalize)
        return found

    def lookup(self, subject: str, schema: Schema, *, normalize: bool = False) -> RegisteredSchema:
        key = (subject, schema, normalize)
        found = self._looked_up.get(key)
        if found is None:
            self._count()
            found = self._looked_up[key] = self.inner.lookup(subject, schema, normalize=normalize)
        return found

    def schema_by_id(self, schema_id: int, *, subject: Optional[str] = None) -> Schema:
        found = self._by_id.get((schema_id, None))
        if found is None:
            self._count()
            found = self._by_id[(schema_id, None)] = self.inner.schema_by_id(schema_id, subject=subject)
        return found

    def latest_version(self, subject: str) -> RegisteredSchema:
        self._count()
        return self.inner.latest_version(subject)

    def version(self, subject: str, version: int) -> RegisteredSchema:
        key = (subject, version)
        found = self._versions.get(key)
        if found is None:
            self._count()
            found = self._versions[key] = self.inner.version(subject, version)
        return found

    def _count(self) -> None:
        with self._lock:
            self.round_trips += 1

    def __repr__(self) -> str:
        return f"CachedRegistry({self.inner!r})"
