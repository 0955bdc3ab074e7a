"""Confluent Schema Registry's REST API over a :class:`~.service.SchemaRegistry` (aiohttp).

==================================================================  ==========================================
``GET /``                                                           ``{}``
``GET /schemas/types``                                              the schema types served
``GET /schemas/ids/{id}[/schema|/subjects|/versions]``              a schema by id, its text, who uses it
``GET /subjects[?deleted=true&deletedOnly=true&subjectPrefix=]``    subjects
``GET /subjects/{s}/versions[?deleted=true]``                       a subject's version numbers
``POST /subjects/{s}/versions[?normalize=true]``                    register: ``{"id", "subject", "version"}``
``GET /subjects/{s}/versions/{v|latest}[/schema|/referencedby]``    a version
``POST /subjects/{s}[?normalize=&deleted=]``                        lookup: the version that is this schema
``DELETE /subjects/{s}[?permanent=true]``                           soft / hard delete of a subject
``DELETE /subjects/{s}/versions/{v|latest}[?permanent=true]``       soft / hard delete of a version
``POST /compatibility/subjects/{s}/versions[/{v|latest}]``          ``{"is_compatible"[, "messages"]}``
``GET|PUT|DELETE /config[/{s}]``                                    compatibility levels
``GET|PUT /mode[/{s}]``, ``DELETE /mode/{s}``                       ``READWRITE`` or ``READONLY`` (refuses writes)
``GET /contexts``                                                   ``["."]`` (the default context only)
==================================================================  ==========================================

Requests and answers are JSON (``application/vnd.schemaregistry.v1+json``,
``application/vnd.schemaregistry+json`` and ``application/json`` are accepted);
errors are ``{"error_code": 40401, "message": "..."}`` with Confluent's codes and HTTP
statuses. The registry's calls block (they may read the broker), so each runs in a
thread, never on the event loop.

``:PORT`` binds 127.0.0.1. TLS, mutual TLS, basic auth, bearer tokens and the Host
check without them: see :mod:`streamkit.core.http_security` (refusals are 401/403 with
``{"error_code": 40101|40301, "message"}``, as Confluent's).
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from aiohttp import web

from ...core.http_security import HttpSecurity, log_binding, parse_bind_address, security_middleware
from ..model import InvalidSchema, RegisteredSchema, RegistryError, Schema, SchemaReference, SchemaType
from .service import SchemaRegistry

__all__ = ["registry_app", "RegistryServer", "parse_address", "DEFAULT_ADDRESS", "CONTENT_TYPE"]

log = logging.getLogger(__name__)

DEFAULT_ADDRESS = "127.0.0.1:8081"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
Handler = Callable[[web.Request], Awaitable[web.Response]]


def parse_address(address: str) -> Tuple[str, int]:
    """``HOST:PORT`` (port 0: any free port) as (host, port); ``:PORT`` binds 127.0.0.1
    (``0.0.0.0:PORT`` listens everywhere)."""
    return parse_bind_address(address)


ACCEPTED_TYPES = (CONTENT_TYPE, "application/vnd.schemaregistry+json", "application/json")


def _answer(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(data).encode(), status=status, headers={"Content-Type": CONTENT_TYPE})


def _raw_schema(text: str) -> web.Response:
    """A schema's text as the body (Confluent's ``/schema`` endpoints)."""
    return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})


def _answer_type(accept: str) -> str:
    """The first of :data:`ACCEPTED_TYPES` the ``Accept`` header names (in its order), else
    the registry's own type (also for ``*/*`` and no header)."""
    named = [part.split(";")[0].strip().lower() for part in accept.split(",")]
    return next((t for t in named if t in ACCEPTED_TYPES), CONTENT_TYPE)


def _failure(status: int, error_code: int, message: str) -> web.Response:
    return _answer({"error_code": error_code, "message": message}, status)


def _flag(request: web.Request, *names: str) -> bool:
    """A boolean query parameter (``true``/``false`` in any case) under any of ``names``."""
    return any(request.query.get(name, "").lower() == "true" for name in names)


def _schema_json(schema: Schema) -> Dict[str, Any]:
    """``schema``, ``schemaType`` (left out for AVRO, as Confluent does) and ``references``."""
    out: Dict[str, Any] = {}
    if schema.schema_type is not SchemaType.AVRO:
        out["schemaType"] = schema.schema_type.value
    if schema.references:
        out["references"] = [{"name": r.name, "subject": r.subject, "version": r.version}
                             for r in schema.references]
    out["schema"] = schema.schema_str
    return out


async def _schema_from_body(request: web.Request) -> Schema:
    """The ``{"schema", "schemaType", "references"}`` of a request body (42201 when it is not one)."""
    try:
        body = await request.json(loads=json.loads) if request.can_read_body else None
    except ValueError as exc:
        raise RegistryError(f"Unexpected character in the request body: {exc}", status=400,
                            error_code=400) from None
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise InvalidSchema("Invalid schema: the request body needs a \"schema\" string")
    try:
        schema_type = SchemaType(str(body.get("schemaType") or "AVRO").upper())
    except ValueError:
        raise InvalidSchema(f"Invalid schema type {body.get('schemaType')!r}: use AVRO, JSON or PROTOBUF") from None
    try:
        references = tuple(SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"]))
                           for r in body.get("references") or ())
    except (KeyError, TypeError, ValueError):
        raise InvalidSchema("Invalid schema: each reference needs a name, a subject and a version") from None
    return Schema(body["schema"], schema_type, references)


async def _level_from_body(request: web.Request) -> str:
    try:
        body = await request.json(loads=json.loads)
    except ValueError as exc:
        raise RegistryError(f"Unexpected character in the request body: {exc}", status=400,
                            error_code=400) from None
    level = body.get("compatibility", body.get("compatibilityLevel")) if isinstance(body, dict) else None
    if not isinstance(level, str):
        raise RegistryError("Invalid compatibility level: the body needs {\"compatibility\": LEVEL}", status=422,
                            error_code=42203)
    return level


def _schema_id(request: web.Request) -> int:
    text = request.match_info["id"]
    if not text.isdigit():
        raise RegistryError(f"Schema {text} not found", status=404, error_code=40403)
    return int(text)


class _Api:
    """The handlers, each a thin translation of one registry call."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kwargs))

    async def root(self, request: web.Request) -> web.Response:
        return _answer({})

    async def schema_types(self, request: web.Request) -> web.Response:
        return _answer([t.value for t in SchemaType])

    async def schema_by_id(self, request: web.Request) -> web.Response:
        schema = await self.call(self.registry.schema_by_id, _schema_id(request), subject=request.query.get("subject"))
        return _answer(_schema_json(await self.call(self.registry.formatted, schema, request.query.get("format"))))

    async def schema_text_by_id(self, request: web.Request) -> web.Response:
        schema = await self.call(self.registry.schema_by_id, _schema_id(request))
        return _raw_schema(schema.schema_str)

    async def subjects_of_id(self, request: web.Request) -> web.Response:
        uses = await self.call(self.registry.versions_of_id, _schema_id(request), deleted=_flag(request, "deleted"))
        return _answer(sorted({subject for subject, _ in uses}))

    async def versions_of_id(self, request: web.Request) -> web.Response:
        uses = await self.call(self.registry.versions_of_id, _schema_id(request), deleted=_flag(request, "deleted"))
        return _answer([{"subject": subject, "version": version} for subject, version in uses])

    async def subjects(self, request: web.Request) -> web.Response:
        prefix = request.query.get("subjectPrefix", request.query.get("subject", ""))
        if _flag(request, "deletedOnly", "deleted_only"):
            every = await self.call(self.registry.subjects, deleted=True, prefix=prefix)
            live = set(await self.call(self.registry.subjects, prefix=prefix))
            return _answer([s for s in every if s not in live])
        return _answer(await self.call(self.registry.subjects, deleted=_flag(request, "deleted"), prefix=prefix))

    async def versions(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        if _flag(request, "deletedOnly", "deleted_only"):
            every = await self.call(self.registry.versions, subject, deleted=True)
            try:
                live = await self.call(self.registry.versions, subject)
            except RegistryError:
                live = []
            return _answer([v for v in every if v not in live])
        return _answer(await self.call(self.registry.versions, subject, deleted=_flag(request, "deleted")))

    async def register(self, request: web.Request) -> web.Response:
        schema = await _schema_from_body(request)
        registered = await self.call(self.registry.register_version, request.match_info["subject"], schema,
                                     normalize=_flag(request, "normalize"))
        return _answer({"id": registered.schema_id, "subject": registered.subject, "version": registered.version})

    async def version(self, request: web.Request) -> web.Response:
        registered = await self.call(self.registry.version, request.match_info["subject"],
                                     request.match_info["version"], deleted=_flag(request, "deleted"))
        return _answer(await self._version_json(request, registered))

    async def _version_json(self, request: web.Request, registered: RegisteredSchema) -> Dict[str, Any]:
        schema = await self.call(self.registry.formatted, registered.schema, request.query.get("format"))
        return {"subject": registered.subject, "version": registered.version, "id": registered.schema_id,
                **_schema_json(schema)}

    async def version_text(self, request: web.Request) -> web.Response:
        registered = await self.call(self.registry.version, request.match_info["subject"],
                                     request.match_info["version"], deleted=_flag(request, "deleted"))
        return _raw_schema(registered.schema.schema_str)

    async def referenced_by(self, request: web.Request) -> web.Response:
        return _answer(await self.call(self.registry.referenced_by, request.match_info["subject"],
                                       request.match_info["version"]))

    async def lookup(self, request: web.Request) -> web.Response:
        schema = await _schema_from_body(request)
        registered = await self.call(self.registry.lookup, request.match_info["subject"], schema,
                                     normalize=_flag(request, "normalize"), deleted=_flag(request, "deleted"))
        return _answer(await self._version_json(request, registered))

    async def delete_subject(self, request: web.Request) -> web.Response:
        return _answer(await self.call(self.registry.delete_subject, request.match_info["subject"],
                                       permanent=_flag(request, "permanent")))

    async def delete_version(self, request: web.Request) -> web.Response:
        return _answer(await self.call(self.registry.delete_version, request.match_info["subject"],
                                       request.match_info["version"], permanent=_flag(request, "permanent")))

    async def compatibility(self, request: web.Request) -> web.Response:
        schema = await _schema_from_body(request)
        version: Optional[str] = request.match_info.get("version")
        try:
            problems: List[str] = await self.call(self.registry.test_compatibility, request.match_info["subject"],
                                                  schema, version, normalize=_flag(request, "normalize"))
        except InvalidSchema as exc:
            if not _flag(request, "verbose"):
                raise
            problems = [exc.message]
        answer: Dict[str, Any] = {"is_compatible": not problems}
        if _flag(request, "verbose"):
            answer["messages"] = problems
        return _answer(answer)

    async def get_config(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        if subject is None:
            level = await self.call(self.registry.compatibility)
        else:
            level = await self.call(self.registry.subject_compatibility, subject)
            if level is None:
                if not _flag(request, "defaultToGlobal"):
                    raise RegistryError(f"Subject '{subject}' does not have subject-level compatibility configured",
                                        status=404, error_code=40408)
                level = await self.call(self.registry.compatibility)
        return _answer({"compatibilityLevel": level.value})

    async def put_config(self, request: web.Request) -> web.Response:
        level = await _level_from_body(request)
        set_to = await self.call(self.registry.set_compatibility, level, request.match_info.get("subject"))
        return _answer({"compatibility": set_to.value})

    async def delete_config(self, request: web.Request) -> web.Response:
        before = await self.call(self.registry.delete_compatibility, request.match_info.get("subject"))
        return _answer({"compatibilityLevel": before.value})

    async def contexts(self, request: web.Request) -> web.Response:
        return _answer(["."])  # the default context only

    async def get_mode(self, request: web.Request) -> web.Response:
        subject = request.match_info.get("subject")
        if subject is None:
            return _answer({"mode": await self.call(self.registry.mode)})
        mode = await self.call(self.registry.subject_mode, subject)
        if mode is None:
            if not _flag(request, "defaultToGlobal"):
                raise RegistryError(f"Subject '{subject}' does not have subject-level mode configured",
                                    status=404, error_code=40409)
            mode = await self.call(self.registry.mode)
        return _answer({"mode": mode})

    async def put_mode(self, request: web.Request) -> web.Response:
        try:
            body = await request.json(loads=json.loads)
        except ValueError:
            body = None
        mode = body.get("mode") if isinstance(body, dict) else None
        if not isinstance(mode, str):
            raise RegistryError("Invalid mode: the body needs {\"mode\": MODE}", status=422, error_code=42204)
        return _answer({"mode": await self.call(self.registry.set_mode, mode, request.match_info.get("subject"))})

    async def delete_mode(self, request: web.Request) -> web.Response:
        return _answer({"mode": await self.call(self.registry.delete_mode, request.match_info["subject"])})


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.Response:
    """Registry errors and HTTP errors as Confluent's ``{"error_code", "message"}`` bodies."""
    response = await _handle(request, handler)
    response.headers["Content-Type"] = _answer_type(request.headers.get("Accept", ""))
    return response


async def _handle(request: web.Request, handler: Handler) -> web.Response:
    try:
        return await handler(request)
    except RegistryError as exc:
        return _failure(exc.status, exc.error_code, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _failure(exc.status, exc.status, f"HTTP {exc.status} {exc.reason}")
    except Exception as exc:  # noqa: BLE001 - a 500 with the cause beats a dropped connection
        log.exception("registry request %s %s failed", request.method, request.path)
        return _failure(500, 50001, f"Error in the backend data store: {type(exc).__name__}: {exc}")


def _refusal(status: int, message: str) -> web.Response:
    return _failure(status, status * 100 + 1, message)


def registry_app(registry: SchemaRegistry, security: Optional[HttpSecurity] = None, *,
                 bound_host: str = "127.0.0.1") -> web.Application:
    """The aiohttp application serving ``registry``; ``security``'s credentials or Host
    check (for a server bound to ``bound_host``) guard every route."""
    api = _Api(registry)
    security = security or HttpSecurity()
    guard = security_middleware(security, security.credentials(), bound_host, _refusal, realm="schema-registry")
    app = web.Application(middlewares=[guard, _errors])
    subject = "/subjects/{subject}"
    version = subject + "/versions/{version}"
    app.add_routes([
        web.get("/", api.root),
        web.get("/schemas/types", api.schema_types),
        web.get("/schemas/ids/{id}", api.schema_by_id),
        web.get("/schemas/ids/{id}/schema", api.schema_text_by_id),
        web.get("/schemas/ids/{id}/subjects", api.subjects_of_id),
        web.get("/schemas/ids/{id}/versions", api.versions_of_id),
        web.get("/subjects", api.subjects),
        web.post(subject, api.lookup),
        web.delete(subject, api.delete_subject),
        web.get(subject + "/versions", api.versions),
        web.post(subject + "/versions", api.register),
        web.get(version, api.version),
        web.delete(version, api.delete_version),
        web.get(version + "/schema", api.version_text),
        web.get(version + "/referencedby", api.referenced_by),
        web.post("/compatibility" + subject + "/versions", api.compatibility),
        web.post("/compatibility" + version, api.compatibility),
        web.get("/config", api.get_config),
        web.put("/config", api.put_config),
        web.delete("/config", api.delete_config),
        web.get("/config/{subject}", api.get_config),
        web.put("/config/{subject}", api.put_config),
        web.delete("/config/{subject}", api.delete_config),
        web.get("/contexts", api.contexts),
        web.get("/mode", api.get_mode),
        web.put("/mode", api.put_mode),
        web.get("/mode/{subject}", api.get_mode),
        web.put("/mode/{subject}", api.put_mode),
        web.delete("/mode/{subject}", api.delete_mode),
    ])
    return app


class RegistryServer:
    """Serves ``registry`` on ``address`` (``HOST:PORT``) in the running event loop,
    secured by ``security`` (default: plain HTTP, no authentication, Host check)."""

    def __init__(self, registry: SchemaRegistry, address: str = DEFAULT_ADDRESS, *,
                 security: Optional[HttpSecurity] = None) -> None:
        self.registry = registry
        self.host, self.port = parse_address(address)
        self.security = security or HttpSecurity()
        self.credentials = self.security.credentials()  # malformed files fail before serving
        self._ssl = self.security.server_ssl_context()
        self._runner: Optional[web.AppRunner] = None
        self.url: Optional[str] = None
        """``http(s)://host:port`` once started (the real port when 0 was asked for)."""

    async def start(self) -> str:
        self._runner = web.AppRunner(registry_app(self.registry, self.security, bound_host=self.host),
                                     access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self._ssl)
        await site.start()
        sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
        port = sockets[0].getsockname()[1] if sockets else self.port
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"{self.security.scheme}://{host}:{port}"
        log_binding("the schema registry", self.host, port, self.url, self.security, self.credentials)
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
