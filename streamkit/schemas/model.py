"""The Schema Registry's data model, as Confluent's REST API names it.

A *subject* (``orders-value`` under the default topic naming strategy) holds numbered
*versions*; each version is a *schema* (text plus type plus references) with a
registry-wide *id*. The same schema text registered under two subjects has one id.
Records carry the id (Confluent's wire format), never the subject or the version.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional, Tuple

from ..errors import StreamkitError

__all__ = ["SchemaType", "SchemaReference", "Schema", "RegisteredSchema", "CompatibilityLevel",
           "RegistryError", "SubjectNotFound", "VersionNotFound", "SchemaNotFound", "IncompatibleSchema",
           "InvalidSchema"]


class SchemaType(str, enum.Enum):
    """The formats a registry holds; the REST API omits ``schemaType`` for AVRO."""

    AVRO = "AVRO"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"


@dataclass(frozen=True)
class SchemaReference:
    """A schema this one imports: ``name`` as the importing schema spells it (an Avro
    full name, a JSON ``$ref`` URL, a ``.proto`` import path), found at ``subject``
    ``version``."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class Schema:
    """A schema as registered: its text, its type and what it references."""

    schema_str: str
    schema_type: SchemaType = SchemaType.AVRO
    references: Tuple[SchemaReference, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "schema_type", SchemaType(self.schema_type))
        object.__setattr__(self, "references", tuple(self.references))


@dataclass(frozen=True)
class RegisteredSchema:
    """One version of a subject."""

    subject: str
    version: int
    schema_id: int
    schema: Schema


class CompatibilityLevel(str, enum.Enum):
    """Which earlier versions a new version of a subject is checked against, and how.

    BACKWARD: the new schema reads data written with the latest one; FORWARD: the latest
    reads data written with the new one; FULL: both. The ``_TRANSITIVE`` forms check
    against every earlier version instead of the latest; NONE checks nothing.
    """

    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"
    NONE = "NONE"

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def checks_backward(self) -> bool:
        """The new schema must read what earlier schemas wrote."""
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def checks_forward(self) -> bool:
        """Earlier schemas must read what the new schema writes."""
        return self.value.startswith(("FORWARD", "FULL"))


class RegistryError(StreamkitError):
    """A registry refused a request; ``error_code`` is Confluent's (40401, 409, 42201 ...)
    and ``status`` the HTTP status it travels with."""

    status = 500
    error_code = 50001

    def __init__(self, message: str, *, status: Optional[int] = None, error_code: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if error_code is not None:
            self.error_code = error_code


class SubjectNotFound(RegistryError):
    status, error_code = 404, 40401


class VersionNotFound(RegistryError):
    status, error_code = 404, 40402


class SchemaNotFound(RegistryError):
    status, error_code = 404, 40403


class IncompatibleSchema(RegistryError):
    """The schema breaks the subject's compatibility level; the message lists why."""

    status, error_code = 409, 409


class InvalidSchema(RegistryError):
    status, error_code = 422, 42201
