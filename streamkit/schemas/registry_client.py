"""What a serde needs from a Schema Registry, whoever answers.

Implementations: an HTTP client for a Confluent-compatible registry (Confluent's own,
``streamkit registry serve``, Redpanda's, Apicurio's compatibility API), and the
in-process registry on the app's broker (``registry="embedded"``). All methods are
synchronous: serdes call them on first use of a schema id or subject and cache the
answer, so a lookup costs a round trip once per schema, never per record.
"""
from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

from .model import RegisteredSchema, Schema

__all__ = ["RegistryClient"]


@runtime_checkable
class RegistryClient(Protocol):
    """The registry operations the serdes use. Errors are :class:`~.model.RegistryError`
    subclasses (``SubjectNotFound``, ``SchemaNotFound``, ``IncompatibleSchema`` ...)."""

    def register(self, subject: str, schema: Schema, *, normalize: bool = False) -> int:
        """Register ``schema`` under ``subject`` (a no-op if it is already there) and
        return its id. Raises ``IncompatibleSchema`` if the subject's level refuses it."""

    def lookup(self, subject: str, schema: Schema, *, normalize: bool = False) -> RegisteredSchema:
        """The version of ``subject`` that is ``schema``; ``SchemaNotFound`` or
        ``SubjectNotFound`` if none is."""

    def schema_by_id(self, schema_id: int, *, subject: Optional[str] = None) -> Schema:
        """The schema with this id (``SchemaNotFound`` if the id is unknown)."""

    def latest_version(self, subject: str) -> RegisteredSchema:
        """The newest live version of ``subject``."""

    def version(self, subject: str, version: int) -> RegisteredSchema:
        """Version ``version`` of ``subject`` (``VersionNotFound`` if absent or deleted)."""
