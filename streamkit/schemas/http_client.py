"""A :class:`~.registry_client.RegistryClient` over Confluent's Schema Registry REST API.

Talks to any registry speaking that API: Confluent's, ``streamkit registry serve``,
Redpanda's, Apicurio's compatibility endpoint. ``http://user:password@host:8081``
sends HTTP basic auth (the userinfo never appears in logs or errors).

It uses the standard library's ``urllib``: a serde asks the registry once per schema id
or subject and caches the answer, so connection pooling buys nothing, and no HTTP
library joins streamkit's dependencies (confluent-kafka's client would pull in
librdkafka; httpx/requests are not runtime dependencies).

Errors are the model's: the registry's ``error_code`` picks the class
(40401 :class:`SubjectNotFound`, 40402 :class:`VersionNotFound`, 40403
:class:`SchemaNotFound`, 409 :class:`IncompatibleSchema`, 42201
:class:`InvalidSchema`), anything else is a :class:`RegistryError`; a registry that
cannot be reached raises :class:`RegistryError` with status 503.
"""
from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Optional

from .model import (IncompatibleSchema, InvalidSchema, RegisteredSchema, RegistryError, Schema, SchemaNotFound,
                    SchemaReference, SchemaType, SubjectNotFound, VersionNotFound)

__all__ = ["HttpRegistryClient", "schema_to_json", "schema_from_json"]

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_ERRORS = {40401: SubjectNotFound, 40402: VersionNotFound, 40403: SchemaNotFound, 409: IncompatibleSchema,
           42201: InvalidSchema}


def schema_to_json(schema: Schema) -> Dict[str, Any]:
    """The request body registering or looking up ``schema`` (AVRO leaves out schemaType)."""
    body: Dict[str, Any] = {"schema": schema.schema_str}
    if schema.schema_type is not SchemaType.AVRO:
        body["schemaType"] = schema.schema_type.value
    if schema.references:
        body["references"] = [{"name": r.name, "subject": r.subject, "version": r.version}
                              for r in schema.references]
    return body


def schema_from_json(body: Dict[str, Any]) -> Schema:
    """A :class:`Schema` from a registry answer (``schemaType`` absent means AVRO)."""
    refs = tuple(SchemaReference(r["name"], r["subject"], int(r["version"])) for r in body.get("references") or ())
    return Schema(body["schema"], SchemaType(body.get("schemaType") or "AVRO"), refs)


class HttpRegistryClient:
    """A registry at ``url`` (``http(s)://[user:password@]host:port[/path]``)."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"registry URL {url!r} is not http(s)://host:port")
        self._headers = {"Accept": CONTENT_TYPE, "Content-Type": CONTENT_TYPE}
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        self.url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        """The registry's address without credentials."""
        self.timeout = timeout

    # -- RegistryClient -----------------------------------------------------------

    def register(self, subject: str, schema: Schema, *, normalize: bool = False) -> int:
        body = self._call("POST", f"/subjects/{_quote(subject)}/versions", schema_to_json(schema),
                          normalize=normalize)
        return int(body["id"])

    def lookup(self, subject: str, schema: Schema, *, normalize: bool = False) -> RegisteredSchema:
        body = self._call("POST", f"/subjects/{_quote(subject)}", schema_to_json(schema), normalize=normalize)
        return RegisteredSchema(body.get("subject", subject), int(body["version"]), int(body["id"]),
                                schema_from_json(body) if "schema" in body else schema)

    def schema_by_id(self, schema_id: int, *, subject: Optional[str] = None) -> Schema:
        query = f"?subject={_quote(subject)}" if subject else ""
        return schema_from_json(self._call("GET", f"/schemas/ids/{int(schema_id)}{query}"))

    def latest_version(self, subject: str) -> RegisteredSchema:
        return self._registered(self._call("GET", f"/subjects/{_quote(subject)}/versions/latest"), subject)

    def version(self, subject: str, version: int) -> RegisteredSchema:
        return self._registered(self._call("GET", f"/subjects/{_quote(subject)}/versions/{int(version)}"), subject)

    # -- HTTP ------------------------------------------------------------------------

    @staticmethod
    def _registered(body: Dict[str, Any], subject: str) -> RegisteredSchema:
        return RegisteredSchema(body.get("subject", subject), int(body["version"]), int(body["id"]),
                                schema_from_json(body))

    def _call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None, *,
              normalize: bool = False) -> Dict[str, Any]:
        url = self.url + path + ("?normalize=true" if normalize else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers=self._headers)
        log.debug("registry %s %s", method, url)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise _registry_error(exc, method, url) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RegistryError(f"schema registry at {self.url} unreachable ({method} {path}): {reason}",
                                status=503, error_code=50003) from None

    def __repr__(self) -> str:
        return f"HttpRegistryClient({self.url!r})"


def _registry_error(exc: urllib.error.HTTPError, method: str, url: str) -> RegistryError:
    try:
        payload = json.loads(exc.read() or b"{}")
    except ValueError:
        payload = {}
    code = payload.get("error_code") if isinstance(payload, dict) else None
    message = payload.get("message") if isinstance(payload, dict) else None
    text = f"{message or exc.reason} ({method} {url}: HTTP {exc.code}, error code {code})"
    cls = _ERRORS.get(code, RegistryError) if isinstance(code, int) else RegistryError
    return cls(text, status=exc.code, error_code=code if isinstance(code, int) else exc.code * 100)


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")
