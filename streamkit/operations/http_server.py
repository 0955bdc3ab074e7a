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
``GET /history``                       the last minutes, sampled every second: records/s,
                                       lag, late drops and dead letters per task, per
                                       sub-topology and for the worker; restores in
                                       progress with ETA; the latest commits (JSON,
                                       ``?since=`` epoch ms for the newer samples only)
``GET /``                              the live page (topology with live rates, charts,
                                       tasks, restores, commits)
=====================================  ===================================================

**Threads.** The server runs in a thread of its own, with its own event loop, so that
code blocking the worker's event loop (a ``time.sleep`` in a processor) cannot silence
it. What each endpoint reads, and where:

- ``/health``, ``/metrics``, ``/history``, ``/topology.mmd``, ``/``: answered in the HTTP thread from
  plain numbers the worker keeps (its vital signs, per-task and per-store counters, the
  heartbeat the worker's loop stamps every ``HEARTBEAT_S``, :mod:`.worker_health`) and the
  immutable topology; never the stores' contents. End offsets for the lag metrics are
  read in a thread pool, from the transport's admin client (which has its own loop;
  :mod:`.input_lag`). The history (:mod:`.history`) is sampled from those counters once
  a second in this thread (:mod:`.status_bodies`); lag for it is re-read at most every
  ``LAG_HISTORY_REFRESH_S`` when nothing else reads it.
- ``/ready``, ``/status``, ``/lag``, ``/stores/...``: run as coroutines on the worker's
  event loop, between its processing steps, so they read stores and task states
  consistently and never while a store is being closed (stores are opened and closed
  on that loop). When the loop does not take the request within ``LOOP_BUSY_AFTER_S``
  the answer is 503 "loop busy" with ``Retry-After`` (:mod:`.worker_access`). The
  interactive queries and their forwarding between workers: :mod:`.query_routes`.

``/health`` answers 503 once the worker's event loop has not stamped its heartbeat for
``loop_blocked_after`` seconds (default: ``stall_after``, the app's
``health_stall_after``, 30 s), saying for how long it has been blocked.

Keys in URLs: the key's URL form (:func:`.queries.parse_key`), percent-encoded as one
path segment; any character may appear (``/``, ``{``, ``%``, spaces, non-ASCII).

``HOST:PORT`` without a host binds 127.0.0.1. TLS, mutual TLS, basic auth, bearer tokens
and the Host check without them: see :mod:`streamkit.core.http_security`.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from typing import Any, Awaitable, Callable, Dict, Optional, TYPE_CHECKING, Tuple, TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..core.http_security import HttpSecurity, log_binding, parse_bind_address, security_middleware
from ..core.records import TopicPartition
from .history import WorkerHistory
from .http_responses import error_response, int_param, json_response, refusal_response, status_response
from .input_lag import InputLag
from .prometheus import worker_registry
from .queries import QueryError, StoreQueries, Unavailable
from .query_routes import QueryRoutes
from .status_bodies import TaskRates, history_body, sample_history_forever, status_body
from .worker_access import read_racing, run_on_worker_loop
from .worker_health import STALL_AFTER_S, LoopHeartbeat, health_problem_of, readiness_problem_of

if TYPE_CHECKING:  # the runtime loads only when a worker runs
    from ..runtime.worker.view import WorkerView

log = logging.getLogger(__name__)

LOOP_BUSY_AFTER_S = 5.0
"""How long a request waits for the worker's event loop to take it before 503 "loop busy"."""
PAGE_DIR = os.path.join(os.path.dirname(__file__), "page")
T = TypeVar("T")


def parse_address(address: str) -> Tuple[str, int]:
    """``HOST:PORT`` (port 0: any free port) as (host, port); no host: 127.0.0.1."""
    return parse_bind_address(address)


class OperationsServer:
    """Serves one worker's endpoints (see the module docstring) on ``address``, from a
    thread of its own; :meth:`start` and :meth:`stop` are called on the worker's loop."""

    def __init__(self, worker: WorkerView, address: str, *, stall_after: float = STALL_AFTER_S,
                 loop_blocked_after: Optional[float] = None, lag_evaluator: Optional[Any] = None,
                 security: Optional[HttpSecurity] = None) -> None:
        self.worker = worker
        self.host, self.port = parse_address(address)
        self.security = security or HttpSecurity()
        self.credentials = self.security.credentials()
        self._server_ssl = self.security.server_ssl_context()
        self.stall_after = stall_after
        self.loop_blocked_after = stall_after if loop_blocked_after is None else loop_blocked_after
        """Seconds without a heartbeat of the worker's event loop before /health says 503."""
        self.loop_busy_after = LOOP_BUSY_AFTER_S
        self._heartbeat = LoopHeartbeat()
        self.queries = StoreQueries(worker)
        self._input_lag = InputLag(worker)
        self.lag: Dict[TopicPartition, int] = self._input_lag.by_partition
        """Per input partition of the running tasks: records behind the end (refreshed on reads,
        in the HTTP thread only)."""
        self._lag_evaluator = lag_evaluator
        self._registry = worker_registry(worker, self.lag, self.loop_blocked_for)
        self._query_routes = QueryRoutes(worker, self.queries, self.security, self.credentials,
                                         own_url=lambda: self.url, on_worker_loop=self._on_worker_loop,
                                         readiness_problem=self.readiness_problem)
        self._runner: Optional[web.AppRunner] = None
        self._rates = TaskRates()
        self._worker_loop: Optional[asyncio.AbstractEventLoop] = None
        self._http_loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self.history = WorkerHistory()
        """The last minutes of this worker's counters (sampled in the HTTP thread)."""
        self._sampling: Optional[asyncio.Task] = None
        self.url: Optional[str] = None
        """``http(s)://host:port`` once started (the real port when 0 was asked for)."""

    @property
    def heartbeat_at(self) -> Optional[float]:
        """Monotonic time the worker's event loop last stamped (None before start)."""
        return self._heartbeat.stamped_at

    # -- life cycle (on the worker's loop) ----------------------------------------------
    async def start(self) -> str:
        """Start the heartbeat and the HTTP thread; return the address other workers and
        users reach this worker at."""
        self._worker_loop = asyncio.get_running_loop()
        self._heartbeat.start()
        listening: "concurrent.futures.Future[str]" = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._serve, args=(listening,), daemon=True,
                                        name=f"streamkit-http-{self.worker.app_id}")
        self._thread.start()
        try:
            self.url = await asyncio.wrap_future(listening)
        except BaseException:
            await self._heartbeat.stop()
            raise
        log.info("worker of app %s serves HTTP at %s (metrics, health, ready, stores, lag, page)",
                 self.worker.app_id, self.url)
        return self.url

    async def stop(self) -> None:
        """Stop the heartbeat, the client asking other workers and the HTTP thread."""
        await self._heartbeat.stop()
        await self._query_routes.close()
        http_loop, thread = self._http_loop, self._thread
        if http_loop is not None and thread is not None:
            try:
                http_loop.call_soon_threadsafe(http_loop.stop)
            except RuntimeError:  # its loop already closed
                pass
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 30)
        self._thread = self._http_loop = None

    # -- the HTTP thread ----------------------------------------------------------------
    def _serve(self, listening: "concurrent.futures.Future[str]") -> None:
        loop = self._http_loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            try:
                url = loop.run_until_complete(self._listen())
            except BaseException as exc:  # noqa: BLE001 - handed to start(), which raises it
                listening.set_exception(exc)
                return
            listening.set_result(url)
            self._sampling = loop.create_task(sample_history_forever(self.worker, self.history, self._input_lag))
            loop.run_forever()
            background = [t for t in (self._sampling, self._input_lag.reading) if t is not None]
            for task in background:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*background, return_exceptions=True))
            if self._runner is not None:
                loop.run_until_complete(self._runner.cleanup())
                self._runner = None
        finally:
            loop.close()

    async def _listen(self) -> str:
        app = web.Application(middlewares=[security_middleware(
            self.security, self.credentials, self.host, refusal_response, realm=f"streamkit {self.worker.app_id}")])
        stores = self._query_routes
        app.add_routes([
            web.get("/metrics", self.metrics), web.get("/health", self.health), web.get("/ready", self.ready),
            web.get("/stores/{store}", stores.list_store), web.get("/stores/{store}/{key:.+}", stores.query),
            web.get("/lag", self.lag_status), web.get("/status", self.status),
            web.get("/history", self.history_json),
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
        url = f"{self.security.scheme}://{advertised}:{port}"
        log_binding(f"the HTTP endpoints of app {self.worker.app_id}", self.host, port, url, self.security,
                    self.credentials)
        return url

    async def _on_worker_loop(self, work: Callable[[], Awaitable[T]]) -> T:
        """``await work()`` on the worker's event loop (from the HTTP thread); Unavailable
        ("loop busy") when it does not start within :attr:`loop_busy_after`."""
        return await run_on_worker_loop(self._worker_loop, work, self.loop_busy_after, self.loop_blocked_for)

    # -- metrics, health, readiness --------------------------------------------------
    async def metrics(self, request: web.Request) -> web.Response:
        await self.refresh_lag()
        body = read_racing(lambda: generate_latest(self._registry))
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def loop_blocked_for(self) -> Optional[float]:
        """Seconds since the worker's event loop last stamped its heartbeat (None before start)."""
        return self._heartbeat.blocked_for()

    def health_problem(self) -> Optional[str]:
        """Why the worker is unhealthy, None when it is healthy (safe from any thread)."""
        return health_problem_of(self.worker, self._heartbeat, self.stall_after, self.loop_blocked_after)

    def readiness_problem(self) -> Optional[str]:
        """Why the worker is not ready to serve its tasks' state, None when it is (call on
        the worker's loop)."""
        return readiness_problem_of(self.worker, self.health_problem)

    async def health(self, request: web.Request) -> web.Response:
        return status_response(self.health_problem())

    async def ready(self, request: web.Request) -> web.Response:
        problem = self.health_problem()
        if problem is None:
            async def readiness() -> Optional[str]:
                return self.readiness_problem()
            try:
                problem = await self._on_worker_loop(readiness)
            except Unavailable as exc:
                problem = str(exc)
        return status_response(problem)

    # -- interactive queries -----------------------------------------------------------
    async def answer(self, store: str, key: Any, time_from: Optional[int] = None, time_to: Optional[int] = None,
                     *, allow_standby: bool = False, forwarded: bool = False,
                     authorization: Optional[str] = None) -> Tuple[int, Dict[str, Any]]:
        """(HTTP status, body) of a query for ``key`` of ``store``, here or forwarded to
        the key's owner (:meth:`.query_routes.QueryRoutes.answer`). Runs on the worker's loop."""
        return await self._query_routes.answer(store, key, time_from, time_to, allow_standby=allow_standby,
                                               forwarded=forwarded, authorization=authorization)

    # -- lag, status and history -------------------------------------------------------
    async def refresh_lag(self) -> Dict[TopicPartition, int]:
        """:attr:`lag`, re-read as :meth:`.input_lag.InputLag.refresh` says. Call from the HTTP thread."""
        return await self._input_lag.refresh()

    @property
    def lag_evaluator(self) -> Optional[Any]:
        return self._lag_evaluator

    def set_lag_evaluator(self, evaluator: Any) -> None:
        """``await evaluator()`` (on the worker's loop) gives the Burrow-style lag status served at /lag."""
        self._lag_evaluator = evaluator

    async def lag_status(self, request: web.Request) -> web.Response:
        evaluator = self._lag_evaluator
        if evaluator is None:
            return json_response({"error": "lag evaluation is not available on this worker"}, 404)
        try:
            return json_response(await self._on_worker_loop(evaluator))
        except QueryError as exc:
            return error_response(exc)

    async def status(self, request: web.Request) -> web.Response:
        """What the live page shows (:func:`.status_bodies.status_body`)."""
        await self.refresh_lag()
        lag = dict(self.lag)

        async def body() -> Dict[str, Any]:
            return status_body(self.worker, self.url, lag, self._rates, self.health_problem, self.readiness_problem)
        try:
            return json_response(await self._on_worker_loop(body))
        except QueryError as exc:
            return error_response(exc)

    async def history_json(self, request: web.Request) -> web.Response:
        try:
            since = int_param(request, "since")
        except QueryError as exc:
            return error_response(exc)
        return json_response(history_body(self.worker, self.history, since))

    async def topology(self, request: web.Request) -> web.Response:
        return web.Response(text=self.worker.topology.describe("mermaid"), content_type="text/plain")

    async def page(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(os.path.join(PAGE_DIR, "index.html"))


def _own_host() -> str:
    import socket

    return socket.gethostname()


class HttpEndpoints:
    """Runs an :class:`OperationsServer` beside a worker (a ``WorkerCompanion`` of
    :func:`streamkit.runtime.worker.run_worker`): listening before the worker joins its
    group, so the group learns the worker's address, and closed after it stopped."""

    def __init__(self, address: str, *, stall_after: float = STALL_AFTER_S,
                 loop_blocked_after: Optional[float] = None, security: Optional[HttpSecurity] = None) -> None:
        parse_address(address)  # fail before the worker starts
        self.security = security or HttpSecurity()
        self.security.credentials()  # unreadable or malformed files fail here too
        self.security.server_ssl_context()
        self.address = address
        self.stall_after = stall_after
        self.loop_blocked_after = loop_blocked_after
        self.server: Optional[OperationsServer] = None

    async def start(self, worker: WorkerView) -> Optional[str]:
        """Serve the endpoints of ``worker``; return their address, which the worker
        advertises to its group."""
        from .lag_endpoint import worker_lag_evaluator

        self.server = OperationsServer(worker, self.address, stall_after=self.stall_after,
                                       loop_blocked_after=self.loop_blocked_after, security=self.security)
        endpoint = await self.server.start()
        self.server.set_lag_evaluator(worker_lag_evaluator(worker))
        return endpoint

    async def stop(self) -> None:
        if self.server is not None:
            lag = self.server.lag_evaluator
            if lag is not None and hasattr(lag, "stop"):
                await lag.stop()
            await self.server.stop()
