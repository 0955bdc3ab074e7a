"""The worker's HTTP endpoints (aiohttp, in the worker's own event loop).

=====================================  ===================================================
``GET /metrics``                       Prometheus text format (:mod:`.metrics`)
``GET /health``                        200 while the processing loop turns; 503 with the
                                       reason when it has not for ``stall_after`` seconds,
                                       or the worker failed or stopped
``GET /ready``                         200 once every assigned task is restored and
                                       running; 503 while starting, restoring or rebalancing
``GET /stores/{store}/{key}``          an interactive query (:mod:`.queries`); window
                                       stores take ``?from=&to=`` (epoch ms)
``GET /stores/{store}``                the store's entries, paged: ``?prefix=&limit=&after=``
``GET /lag``                           the group's lag, Burrow-style (:mod:`.lag`)
``GET /status``                        tasks, their states, rates, lag and late drops (JSON)
``GET /``                              the live page (topology diagram and task table)
=====================================  ===================================================

Handlers run between the worker's processing steps (one event loop), so they read a
consistent state without locks; anything that does I/O to the broker runs in a thread.

``HOST:PORT`` without a host binds 127.0.0.1. TLS, mutual TLS, basic auth, bearer tokens
and the Host check without them: see :mod:`streamkit.core.http_security`.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from urllib.parse import quote

import orjson
from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..core.http_security import HttpSecurity, log_binding, parse_bind_address, security_middleware
from ..core.records import TopicPartition
from .metrics import worker_registry
from .queries import QueryError, StoreQueries, Unavailable, key_text, parse_key, to_json

log = logging.getLogger(__name__)

STALL_AFTER_S = 30.0
"""Default seconds without a loop turn before /health reports the worker stalled."""
LAG_REFRESH_S = 1.0
"""End offsets are read at most this often (they cost a broker round trip)."""
FORWARD_TIMEOUT_S = 5.0
PAGE_DIR = os.path.join(os.path.dirname(__file__), "page")
FORWARDED = "X-Streamkit-Forwarded"
"""Header on a query one worker forwarded to another: the receiver never forwards it again."""


def parse_address(address: str) -> Tuple[str, int]:
    """``HOST:PORT`` (port 0: any free port) as (host, port); no host: 127.0.0.1."""
    return parse_bind_address(address)


class OperationsServer:
    """Serves one worker's endpoints (see the module docstring) on ``address``."""

    def __init__(self, worker: Any, address: str, *, stall_after: float = STALL_AFTER_S,
                 lag_evaluator: Optional[Any] = None, security: Optional[HttpSecurity] = None) -> None:
        self.worker = worker
        self.host, self.port = parse_address(address)
        self.security = security or HttpSecurity()
        self.credentials = self.security.credentials()
        self._server_ssl = self.security.server_ssl_context()
        self.stall_after = stall_after
        self.queries = StoreQueries(worker)
        self.lag: Dict[TopicPartition, int] = {}
        """Per input partition of the running tasks: records behind the end (refreshed on reads)."""
        self._lag_read_at = 0.0
        self._lag_evaluator = lag_evaluator
        self._registry = worker_registry(worker, self.lag)
        self._runner: Optional[web.AppRunner] = None
        self._client: Optional[ClientSession] = None
        self._rates: Dict[str, Tuple[float, int]] = {}
        self.url: Optional[str] = None
        """``http(s)://host:port`` once started (the real port when 0 was asked for)."""

    # -- life cycle ------------------------------------------------------------------
    async def start(self) -> str:
        """Listen; return the address other workers and users reach this worker at."""
        app = web.Application(middlewares=[security_middleware(
            self.security, self.credentials, self.host, _refusal, realm=f"streamkit {self.worker.app_id}")])
        app.add_routes([
            web.get("/metrics", self.metrics), web.get("/health", self.health), web.get("/ready", self.ready),
            web.get("/stores/{store}", self.list_store), web.get("/stores/{store}/{key}", self.query),
            web.get("/lag", self.lag_status), web.get("/status", self.status),
            web.get("/topology.mmd", self.topology), web.get("/", self.page),
            web.static("/page", PAGE_DIR, show_index=False)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self._server_ssl)
        await site.start()
        sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
        port = sockets[0].getsockname()[1] if sockets else self.port
        advertised = self.host if self.host not in ("0.0.0.0", "::", "") else _own_host()
        if ":" in advertised:
            advertised = f"[{advertised}]"
        self.url = f"{self.security.scheme}://{advertised}:{port}"
        log_binding(f"the HTTP endpoints of app {self.worker.app_id}", self.host, port, self.url, self.security,
                    self.credentials)
        log.info("worker of app %s serves HTTP at %s (metrics, health, ready, stores, lag, page)",
                 self.worker.app_id, self.url)
        return self.url

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- metrics, health, readiness --------------------------------------------------
    async def metrics(self, request: web.Request) -> web.Response:
        await self.refresh_lag()
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def health_problem(self) -> Optional[str]:
        """Why the worker is unhealthy, None when it is healthy."""
        observations = self.worker.observations
        if observations.failure is not None:
            return f"the worker failed: {observations.failure}"
        if observations.stopped:
            return "the worker has stopped"
        since = observations.seconds_since_tick()
        if since is None:
            started = time.time() - observations.started_at
            return None if started < self.stall_after else f"the processing loop has not started after {started:.0f} s"
        if since > self.stall_after:
            return f"the processing loop has not turned for {since:.1f} s (limit {self.stall_after:g} s)"
        return None

    def readiness_problem(self) -> Optional[str]:
        """Why the worker is not ready to serve its tasks' state, None when it is."""
        problem = self.health_problem()
        if problem is not None:
            return problem
        worker = self.worker
        restoring = sorted(t for t, s in worker.task_states().items() if s == "restoring")
        if restoring:
            return f"restoring task(s) {', '.join(restoring)}"
        if not worker.assigned:
            return "waiting for the group to assign tasks"
        if worker.rebalancing:
            return "the group is rebalancing"
        return None

    async def health(self, request: web.Request) -> web.Response:
        return _status_response(self.health_problem())

    async def ready(self, request: web.Request) -> web.Response:
        return _status_response(self.readiness_problem())

    # -- interactive queries -----------------------------------------------------------
    async def query(self, request: web.Request) -> web.Response:
        store, text = request.match_info["store"], request.match_info["key"]
        try:
            key = parse_key(text, self.queries.spec(store).key_serde)
            status, body = await self.answer(
                store, key, _int_param(request, "from"), _int_param(request, "to"),
                allow_standby=request.query.get("allow_standby", "").lower() in ("1", "true", "yes"),
                forwarded=bool(request.headers.get(FORWARDED)), authorization=request.headers.get("Authorization"))
        except QueryError as exc:
            return _error(exc)
        return _json(body, status)

    async def answer(self, store: str, key: Any, time_from: Optional[int] = None, time_to: Optional[int] = None,
                     *, allow_standby: bool = False, forwarded: bool = False,
                     authorization: Optional[str] = None) -> Tuple[int, Dict[str, Any]]:
        """(HTTP status, body) of a query for ``key`` (a Python value) of ``store``:
        answered here, or by the worker running the key's task (asked with the caller's
        ``authorization``, else this worker's own credentials). Raises QueryError."""
        located = self.queries.locate(store, key)
        local, from_standby = self.queries.local_store(located, allow_standby)
        if local is None:
            return await self._forward(located, key, time_from, time_to, allow_standby, forwarded, authorization)
        value, found = self.queries.read(local, located, key, time_from, time_to)
        body = {"key": to_json(key), "value": value, "task": located.task, "owner": self.url,
                "standby": from_standby}
        return (200 if found else 404), body

    async def _forward(self, located: Any, key: Any, time_from: Optional[int], time_to: Optional[int],
                       allow_standby: bool, forwarded: bool, authorization: Optional[str]
                       ) -> Tuple[int, Dict[str, Any]]:
        if forwarded:
            raise Unavailable(f"task {located.task} is not on this worker (any more): ask again")
        owner = self.worker.endpoint_of(located.task)
        if owner is None or owner == self.url:
            standbys = self.worker.standby_endpoints_of(located.task) if allow_standby else ()
            owner = next((s for s in standbys if s != self.url), None)
            if owner is None:
                raise Unavailable(f"no worker is known to run task {located.task} now (starting or rebalancing)")
        params = {k: str(v) for k, v in (("from", time_from), ("to", time_to)) if v is not None}
        if allow_standby:
            params["allow_standby"] = "true"
        path = f"{owner}/stores/{quote(located.store, safe='')}/{quote(key_text(key), safe='')}"
        try:
            async with self._session().get(path, params=params, headers=self._forward_headers(authorization)
                                           ) as answer:
                body = await answer.json(content_type=None)
                if answer.status == 503:
                    raise Unavailable(body.get("error", f"{owner} is not ready"),
                                      int(answer.headers.get("Retry-After", "1")))
                if answer.status not in (200, 404):
                    raise QueryError(answer.status, body.get("error", f"{owner} answered {answer.status}"))
                return answer.status, body
        except (ClientError, asyncio.TimeoutError, ValueError) as exc:
            raise Unavailable(f"the owner of task {located.task} ({owner}) did not answer: {exc}") from None

    async def list_store(self, request: web.Request) -> web.Response:
        store = request.match_info["store"]
        prefix, after = request.query.get("prefix"), request.query.get("after")
        try:
            limit = max(1, min(_int_param(request, "limit") or 100, 10_000))
            self.queries.spec(store)
            if self.readiness_problem() is not None:
                raise Unavailable(self.readiness_problem() or "")
            rows = list(self.queries.local_entries(store, prefix, after))
            if not request.headers.get(FORWARDED):
                rows += await self._gather_remote(request, store)
        except QueryError as exc:
            return _error(exc)
        rows.sort(key=lambda row: row["_sort"])
        next_after = rows[limit - 1]["_sort"] if len(rows) > limit else None
        page = rows[:limit]
        for row in page:
            del row["_sort"]
        return _json({"store": store, "entries": page, "next": next_after})

    async def _gather_remote(self, request: web.Request, store: str) -> List[Dict[str, Any]]:
        """The entries the other workers hold (each asked once, for its own tasks)."""
        owners = {self.worker.endpoint_of(task) for task in self.queries.tasks_of(store)}
        missing = [t for t in self.queries.tasks_of(store) if self.worker.endpoint_of(t) is None]
        if missing:
            raise Unavailable(f"no worker is known to run task(s) {', '.join(missing)} now")
        rows: List[Dict[str, Any]] = []
        for owner in sorted(o for o in owners if o and o != self.url):
            try:
                async with self._session().get(
                        owner + request.rel_url.path_qs,
                        headers=self._forward_headers(request.headers.get("Authorization"))) as answer:
                    if answer.status != 200:
                        raise Unavailable(f"worker {owner} answered {answer.status}")
                    for row in (await answer.json())["entries"]:
                        key = row["key"]
                        row["_sort"] = key if isinstance(key, str) else orjson.dumps(key).decode()
                        rows.append(row)
            except (ClientError, asyncio.TimeoutError) as exc:
                raise Unavailable(f"worker {owner} did not answer: {exc}") from None
        return rows

    def _forward_headers(self, authorization: Optional[str]) -> Dict[str, str]:
        headers = {FORWARDED: self.url or "?"}
        credential = authorization or self.credentials.forwarding_header()
        if credential is not None:
            headers["Authorization"] = credential
        return headers

    def _session(self) -> ClientSession:
        if self._client is None:
            ssl_context = self.security.client_ssl_context()
            connector = TCPConnector(ssl=ssl_context) if ssl_context is not None else None
            self._client = ClientSession(timeout=ClientTimeout(total=FORWARD_TIMEOUT_S), connector=connector)
        return self._client

    # -- lag and status ----------------------------------------------------------------
    async def refresh_lag(self) -> Dict[TopicPartition, int]:
        """Records behind the end per input partition of the running tasks (re-read from
        the broker at most every LAG_REFRESH_S)."""
        now = time.monotonic()
        if now - self._lag_read_at < LAG_REFRESH_S:
            return self.lag
        self._lag_read_at = now
        positions = self.worker.input_positions()
        admin = self.worker.transport.admin
        loop = asyncio.get_running_loop()

        def behind() -> Dict[TopicPartition, int]:
            out = {}
            for tp, position in positions.items():
                offsets = admin.partition_offsets(tp.topic, tp.partition)
                out[tp] = max(offsets.end - (offsets.start if position is None else max(position, offsets.start)), 0)
            return out

        try:
            lag = await loop.run_in_executor(None, behind)
        except Exception as exc:  # noqa: BLE001 - reported as missing lag, logged
            log.warning("could not read end offsets for the lag metrics: %s", exc)
            return self.lag
        self.lag.clear()
        self.lag.update(lag)
        return self.lag

    @property
    def lag_evaluator(self) -> Optional[Any]:
        return self._lag_evaluator

    def set_lag_evaluator(self, evaluator: Any) -> None:
        """``await evaluator()`` gives the Burrow-style lag status served at /lag."""
        self._lag_evaluator = evaluator

    async def lag_status(self, request: web.Request) -> web.Response:
        if self._lag_evaluator is None:
            return _json({"error": "lag evaluation is not available on this worker"}, 404)
        return _json(await self._lag_evaluator())

    async def status(self, request: web.Request) -> web.Response:
        """What the live page shows: per task its state, records processed and per second,
        late drops and lag; the worker's health and readiness."""
        await self.refresh_lag()
        worker, now = self.worker, time.monotonic()
        rows = []
        for task_id, state in sorted(worker.task_states().items()):
            task = worker.tasks.get(task_id)
            processed = task.metrics.records_processed if task is not None else 0
            before = self._rates.get(task_id)
            rate = 0.0
            if before is not None and now > before[0]:
                rate = max(processed - before[1], 0) / (now - before[0])
            self._rates[task_id] = (now, processed)
            lag = sum(self.lag.get(tp, 0) for tp in task.input_partitions) if task is not None else None
            rows.append({"task": task_id, "state": state, "records_processed": processed,
                         "records_per_second": round(rate, 1), "lag": lag,
                         "late_records_dropped": task.metrics.late_records_dropped if task is not None else 0,
                         "restore": _restore_of(worker, task_id)})
        return _json({"app": worker.app_id, "worker": self.url, "health": self.health_problem() or "ok",
                      "ready": self.readiness_problem() or "ready", "tasks": rows})

    async def topology(self, request: web.Request) -> web.Response:
        return web.Response(text=self.worker.topology.describe("mermaid"), content_type="text/plain")

    async def page(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(os.path.join(PAGE_DIR, "index.html"))


def _restore_of(worker: Any, task_id: str) -> Optional[Dict[str, int]]:
    progress = worker.observations.restoring.get(task_id)
    return None if progress is None else {"restored": progress[0], "remaining": progress[1]}


def _int_param(request: web.Request, name: str) -> Optional[int]:
    text = request.query.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise QueryError(400, f"?{name}= must be an integer (epoch ms), got {text!r}") from None


def _json(body: Any, status: int = 200, headers: Optional[Dict[str, str]] = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json", headers=headers)


def _error(exc: QueryError) -> web.Response:
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, Unavailable) else None
    return _json({"error": str(exc)}, exc.status, headers)


def _refusal(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


def _status_response(problem: Optional[str]) -> web.Response:
    if problem is None:
        return _json({"status": "ok"})
    return _json({"status": "unavailable", "reason": problem}, 503, {"Retry-After": "1"})


def _own_host() -> str:
    import socket

    return socket.gethostname()


class HttpEndpoints:
    """Runs an :class:`OperationsServer` beside a worker (a ``WorkerCompanion`` of
    :func:`streamkit.runtime.worker.run_worker`): listening before the worker joins its
    group, so the group learns the worker's address, and closed after it stopped."""

    def __init__(self, address: str, *, stall_after: float = STALL_AFTER_S,
                 security: Optional[HttpSecurity] = None) -> None:
        parse_address(address)  # fail before the worker starts
        self.security = security or HttpSecurity()
        self.security.credentials()  # unreadable or malformed files fail here too
        self.security.server_ssl_context()
        self.address = address
        self.stall_after = stall_after
        self.server: Optional[OperationsServer] = None

    async def start(self, worker: Any) -> None:
        from .lag_endpoint import worker_lag_evaluator

        self.server = OperationsServer(worker, self.address, stall_after=self.stall_after, security=self.security)
        worker.endpoint = await self.server.start()
        self.server.set_lag_evaluator(worker_lag_evaluator(worker))

    async def stop(self) -> None:
        if self.server is not None:
            lag = self.server.lag_evaluator
            if lag is not None and hasattr(lag, "stop"):
                await lag.stop()
            await self.server.stop()
