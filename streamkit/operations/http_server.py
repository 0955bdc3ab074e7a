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
  heartbeat the worker's loop stamps every ``HEARTBEAT_S``) and the immutable topology;
  never the stores' contents. End offsets for the lag metrics are read in a thread
  pool, from the transport's admin client (which has its own loop). The history
  (:mod:`.history`) is sampled from those counters once a second in this thread; lag
  for it is re-read at most every ``LAG_HISTORY_REFRESH_S`` when nothing else reads it.
- ``/ready``, ``/status``, ``/lag``, ``/stores/...``: run as coroutines on the worker's
  event loop, between its processing steps, so they read stores and task states
  consistently and never while a store is being closed (stores are opened and closed
  on that loop). When the loop does not take the request within ``LOOP_BUSY_AFTER_S``
  the answer is 503 "loop busy" with ``Retry-After``.

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
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, TYPE_CHECKING, Tuple, TypeVar

from urllib.parse import quote

import orjson
from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..core.http_security import HttpSecurity, log_binding, parse_bind_address, security_middleware
from ..core.records import TopicPartition
from .history import SAMPLE_EVERY_S, WorkerHistory, take_moment, take_sample
from .prometheus import worker_registry
from .queries import Entry, QueryError, StoreQueries, Unavailable, key_text, merge_pages, parse_key, to_json, url_key

if TYPE_CHECKING:  # the runtime loads only when a worker runs
    from ..runtime.worker.view import WorkerView

log = logging.getLogger(__name__)

STALL_AFTER_S = 30.0
"""Default seconds without a loop turn before /health reports the worker stalled."""
LAG_REFRESH_S = 1.0
"""End offsets are read at most this often (they cost a broker round trip)."""
FORWARD_TIMEOUT_S = 5.0
HEARTBEAT_S = 0.25
"""How often the worker's event loop stamps the heartbeat /health reads."""
LOOP_BUSY_AFTER_S = 5.0
"""How long a request waits for the worker's event loop to take it before 503 "loop busy"."""
LAG_READ_TIMEOUT_S = 3.0
"""How long /metrics waits for end offsets before serving the last known lag."""
RACE_RETRIES = 5
LAG_HISTORY_REFRESH_S = 5.0
"""When no /status or /metrics reader refreshes the lag, the history re-reads it this often."""
T = TypeVar("T")
PAGE_DIR = os.path.join(os.path.dirname(__file__), "page")
FORWARDED = "X-Streamkit-Forwarded"
"""Header on a query one worker forwarded to another: the receiver never forwards it again."""


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
        self.heartbeat_at: Optional[float] = None
        """Monotonic time the worker's event loop last stamped (None before start)."""
        self.queries = StoreQueries(worker)
        self.lag: Dict[TopicPartition, int] = {}
        """Per input partition of the running tasks: records behind the end (refreshed on reads,
        in the HTTP thread only)."""
        self._lag_read_at = 0.0
        self._lag_evaluator = lag_evaluator
        self._registry = worker_registry(worker, self.lag, self.loop_blocked_for)
        self._runner: Optional[web.AppRunner] = None
        self._client: Optional[ClientSession] = None
        self._rates: Dict[str, Tuple[float, int]] = {}
        self._worker_loop: Optional[asyncio.AbstractEventLoop] = None
        self._http_loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._heartbeat: Optional[asyncio.Task] = None
        self.history = WorkerHistory()
        """The last minutes of this worker's counters (sampled in the HTTP thread)."""
        self._sampling: Optional[asyncio.Task] = None
        self._lag_refreshing: Optional[asyncio.Future] = None
        self.url: Optional[str] = None
        """``http(s)://host:port`` once started (the real port when 0 was asked for)."""

    # -- life cycle (on the worker's loop) ----------------------------------------------
    async def start(self) -> str:
        """Start the heartbeat and the HTTP thread; return the address other workers and
        users reach this worker at."""
        self._worker_loop = asyncio.get_running_loop()
        self.heartbeat_at = time.monotonic()
        self._heartbeat = asyncio.ensure_future(self._stamp_heartbeat())
        listening: "concurrent.futures.Future[str]" = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._serve, args=(listening,), daemon=True,
                                        name=f"streamkit-http-{self.worker.app_id}")
        self._thread.start()
        try:
            self.url = await asyncio.wrap_future(listening)
        except BaseException:
            await self._stop_heartbeat()
            raise
        log.info("worker of app %s serves HTTP at %s (metrics, health, ready, stores, lag, page)",
                 self.worker.app_id, self.url)
        return self.url

    async def stop(self) -> None:
        await self._stop_heartbeat()
        if self._client is not None:
            await self._client.close()
            self._client = None
        http_loop, thread = self._http_loop, self._thread
        if http_loop is not None and thread is not None:
            try:
                http_loop.call_soon_threadsafe(http_loop.stop)
            except RuntimeError:  # its loop already closed
                pass
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 30)
        self._thread = self._http_loop = None

    async def _stamp_heartbeat(self) -> None:
        while True:
            self.heartbeat_at = time.monotonic()
            await asyncio.sleep(HEARTBEAT_S)

    async def _stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            try:
                await self._heartbeat
            except asyncio.CancelledError:
                pass
            self._heartbeat = None

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
            self._sampling = loop.create_task(self._sample_forever())
            loop.run_forever()
            background = [t for t in (self._sampling, self._lag_refreshing) if t is not None]
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
            self.security, self.credentials, self.host, _refusal, realm=f"streamkit {self.worker.app_id}")])
        app.add_routes([
            web.get("/metrics", self.metrics), web.get("/health", self.health), web.get("/ready", self.ready),
            web.get("/stores/{store}", self.list_store), web.get("/stores/{store}/{key:.+}", self.query),
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

    async def _sample_forever(self) -> None:
        """Sample the worker's counters into :attr:`history` every SAMPLE_EVERY_S (HTTP thread)."""
        next_at = time.monotonic()
        while True:
            try:
                self._sample()
            except Exception:  # noqa: BLE001 - a failed sample leaves a gap, never stops sampling
                log.exception("sampling the worker's counters for /history failed")
            next_at = max(next_at + SAMPLE_EVERY_S, time.monotonic())
            await asyncio.sleep(next_at - time.monotonic())

    def _sample(self) -> None:
        if time.monotonic() - self._lag_read_at >= LAG_HISTORY_REFRESH_S and (
                self._lag_refreshing is None or self._lag_refreshing.done()):
            self._lag_read_at = time.monotonic()
            self._lag_refreshing = asyncio.ensure_future(self._read_lag())
        lag = dict(self.lag)
        self.history.add(_read_racing(lambda: take_sample(self.worker, lag)))

    async def history_json(self, request: web.Request) -> web.Response:
        try:
            since = _int_param(request, "since")
        except QueryError as exc:
            return _error(exc)
        moment = _read_racing(lambda: take_moment(self.worker.observations))
        return _json(self.history.snapshot(moment, since))

    async def _on_worker_loop(self, work: Callable[[], Awaitable[T]]) -> T:
        """``await work()`` run on the worker's event loop (from the HTTP thread).
        Unavailable ("loop busy") when the loop does not start it within
        ``loop_busy_after`` or it does not finish within that plus FORWARD_TIMEOUT_S."""
        started = threading.Event()

        async def run() -> T:
            started.set()
            return await work()

        worker_loop = self._worker_loop
        if worker_loop is None or worker_loop.is_closed():
            raise Unavailable("the worker is not running")
        try:
            future = asyncio.run_coroutine_threadsafe(run(), worker_loop)
        except RuntimeError:  # the loop closed meanwhile
            raise Unavailable("the worker is stopping") from None
        waiting = asyncio.wrap_future(future)
        try:
            return await asyncio.wait_for(asyncio.shield(waiting), self.loop_busy_after)
        except asyncio.TimeoutError:
            if not started.is_set():
                future.cancel()
                raise Unavailable(f"loop busy: {self._busy_reason()}") from None
        try:
            return await asyncio.wait_for(waiting, FORWARD_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise Unavailable(f"loop busy: the request did not finish ({self._busy_reason()})") from None

    def _busy_reason(self) -> str:
        blocked = self.loop_blocked_for()
        return ("the worker's event loop did not take the request within "
                f"{self.loop_busy_after:g} s" + ("" if blocked is None else f" (its last heartbeat was "
                                                 f"{blocked:.1f} s ago)"))

    # -- metrics, health, readiness --------------------------------------------------
    async def metrics(self, request: web.Request) -> web.Response:
        await self.refresh_lag()
        body = _read_racing(lambda: generate_latest(self._registry))
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def loop_blocked_for(self) -> Optional[float]:
        """Seconds since the worker's event loop last stamped its heartbeat (None before start)."""
        return None if self.heartbeat_at is None else time.monotonic() - self.heartbeat_at

    def health_problem(self) -> Optional[str]:
        """Why the worker is unhealthy, None when it is healthy (safe from any thread)."""
        observations = self.worker.observations
        if observations.failure is not None:
            return f"the worker failed: {observations.failure}"
        if observations.stopped:
            return "the worker has stopped"
        blocked = self.loop_blocked_for()
        if blocked is not None and self._heartbeat is not None and blocked > self.loop_blocked_after:
            return (f"the worker's event loop has been blocked for {blocked:.1f} s (limit "
                    f"{self.loop_blocked_after:g} s): code running on it does not return or await")
        since = observations.seconds_since_tick()
        if since is None:
            started = time.time() - observations.started_at
            return None if started < self.stall_after else f"the processing loop has not started after {started:.0f} s"
        if since > self.stall_after:
            return f"the processing loop has not turned for {since:.1f} s (limit {self.stall_after:g} s)"
        return None

    def readiness_problem(self) -> Optional[str]:
        """Why the worker is not ready to serve its tasks' state, None when it is (call on
        the worker's loop)."""
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
        problem = self.health_problem()
        if problem is None:
            async def readiness() -> Optional[str]:
                return self.readiness_problem()
            try:
                problem = await self._on_worker_loop(readiness)
            except Unavailable as exc:
                problem = str(exc)
        return _status_response(problem)

    # -- interactive queries -----------------------------------------------------------
    async def query(self, request: web.Request) -> web.Response:
        store, text = request.match_info["store"], request.match_info["key"]
        try:
            key = parse_key(text, self.queries.spec(store).key_serde)
            time_from, time_to = _int_param(request, "from"), _int_param(request, "to")
            allow_standby = request.query.get("allow_standby", "").lower() in ("1", "true", "yes")
            forwarded = bool(request.headers.get(FORWARDED))
            authorization = request.headers.get("Authorization")
            status, body = await self._on_worker_loop(lambda: self.answer(
                store, key, time_from, time_to, allow_standby=allow_standby, forwarded=forwarded,
                authorization=authorization))
        except QueryError as exc:
            return _error(exc)
        return _json(body, status)

    async def answer(self, store: str, key: Any, time_from: Optional[int] = None, time_to: Optional[int] = None,
                     *, allow_standby: bool = False, forwarded: bool = False,
                     authorization: Optional[str] = None) -> Tuple[int, Dict[str, Any]]:
        """(HTTP status, body) of a query for ``key`` (a Python value) of ``store``:
        answered here, or by the worker running the key's task (asked with the caller's
        ``authorization``, else this worker's own credentials). Raises QueryError. Runs
        on the worker's loop."""
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
        owner = self.worker.endpoint_of(located.task)
        if forwarded:
            raise Unavailable(f"task {located.task} is not on this worker (any more): ask again"
                              + (f" (the group says {owner} runs it)" if owner and owner != self.url else ""),
                              owner=owner if owner != self.url else None)
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
                                      int(answer.headers.get("Retry-After", "1")), owner=owner)
                if answer.status not in (200, 404):
                    raise QueryError(answer.status, body.get("error", f"{owner} answered {answer.status}"),
                                     owner=owner)
                return answer.status, body
        except (ClientError, asyncio.TimeoutError, ValueError) as exc:
            raise Unavailable(f"the owner of task {located.task} ({owner}) did not answer: {exc}",
                              owner=owner) from None

    async def list_store(self, request: web.Request) -> web.Response:
        store = request.match_info["store"]
        prefix, after = request.query.get("prefix"), request.query.get("after")
        try:
            limit = max(1, min(_int_param(request, "limit") or 100, 10_000))
            spec = self.queries.spec(store)
            forwarded = bool(request.headers.get(FORWARDED))
            authorization = request.headers.get("Authorization")
            entries, more = await self._on_worker_loop(lambda: self._page(
                store, prefix, after, limit, forwarded, authorization))
        except QueryError as exc:
            return _error(exc)
        rows = [dict(entry.to_json(), **({"order": entry.order.hex()} if forwarded else {})) for entry in entries]
        next_after = url_key(to_json(entries[-1].key), spec.key_serde) if more and entries else None
        return _json({"store": store, "entries": rows, "next": next_after})

    async def _page(self, store: str, prefix: Optional[str], after: Optional[str], limit: int, forwarded: bool,
                    authorization: Optional[str]) -> Tuple[List[Entry], bool]:
        """This worker's page of ``store`` merged with the other workers' (on the worker's
        loop): the first ``limit`` entries past ``after`` in store order, and whether more follow."""
        if self.readiness_problem() is not None:
            raise Unavailable(self.readiness_problem() or "")
        local = self.queries.local_page(store, prefix, after, limit)
        pages, more_elsewhere = [local], False
        if not forwarded:
            for page, more in await self._remote_pages(store, prefix, after, limit, authorization):
                pages.append(page)
                more_elsewhere = more_elsewhere or more
        return merge_pages(pages, limit, more_elsewhere)

    async def _remote_pages(self, store: str, prefix: Optional[str], after: Optional[str], limit: int,
                            authorization: Optional[str]) -> List[Tuple[List[Entry], bool]]:
        """Each other worker's page (asked once, for its own tasks): its entries and whether it has more."""
        tasks = self.queries.tasks_of(store)
        missing = [t for t in tasks if self.worker.endpoint_of(t) is None]
        if missing:
            raise Unavailable(f"no worker is known to run task(s) {', '.join(missing)} now")
        owners = sorted({self.worker.endpoint_of(t) for t in tasks} - {self.url, None})
        params = {"limit": str(limit), **{k: v for k, v in (("prefix", prefix), ("after", after)) if v is not None}}
        pages = []
        for owner in owners:
            try:
                async with self._session().get(f"{owner}/stores/{quote(store, safe='')}", params=params,
                                               headers=self._forward_headers(authorization)) as answer:
                    if answer.status != 200:
                        raise Unavailable(f"worker {owner} answered {answer.status}", owner=owner)
                    body = await answer.json()
            except (ClientError, asyncio.TimeoutError, ValueError) as exc:
                raise Unavailable(f"worker {owner} did not answer: {exc}", owner=owner) from None
            pages.append(([Entry(bytes.fromhex(row["order"]), row["key"], row["value"], row["task"])
                           for row in body["entries"]], body["next"] is not None))
        return pages

    def _forward_headers(self, authorization: Optional[str]) -> Dict[str, str]:
        headers = {FORWARDED: self.url or "?"}
        credential = authorization or self.credentials.forwarding_header()
        if credential is not None:
            headers["Authorization"] = credential
        return headers

    def _session(self) -> ClientSession:
        """The client for asking other workers (lives on the worker's loop)."""
        if self._client is None:
            ssl_context = self.security.client_ssl_context()
            connector = TCPConnector(ssl=ssl_context) if ssl_context is not None else None
            self._client = ClientSession(timeout=ClientTimeout(total=FORWARD_TIMEOUT_S), connector=connector)
        return self._client

    # -- lag and status ----------------------------------------------------------------
    async def refresh_lag(self) -> Dict[TopicPartition, int]:
        """Records behind the end per input partition of the running tasks (re-read from
        the broker at most every LAG_REFRESH_S, unless the tasks' partitions changed since
        the last read; the last known lag when the broker does not answer within
        LAG_READ_TIMEOUT_S). A read in flight is awaited, not repeated. Call from the
        HTTP thread."""
        reading = self._lag_refreshing
        if reading is None or reading.done():
            if time.monotonic() - self._lag_read_at < LAG_REFRESH_S and \
                    set(_read_racing(self.worker.input_positions)) == set(self.lag):
                return self.lag
            self._lag_read_at = time.monotonic()
            reading = self._lag_refreshing = asyncio.ensure_future(self._read_lag())
        await asyncio.shield(reading)
        return self.lag

    async def _read_lag(self) -> None:
        positions = _read_racing(self.worker.input_positions)
        admin = self.worker.transport.admin
        loop = asyncio.get_running_loop()

        def behind() -> Dict[TopicPartition, int]:
            out = {}
            for tp, position in positions.items():
                offsets = admin.partition_offsets(tp.topic, tp.partition)
                out[tp] = max(offsets.end - (offsets.start if position is None else max(position, offsets.start)), 0)
            return out

        try:
            lag = await asyncio.wait_for(loop.run_in_executor(None, behind), LAG_READ_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - reported as missing lag, logged
            log.warning("could not read end offsets for the lag metrics: %s", exc or type(exc).__name__)
            return
        self.lag.clear()
        self.lag.update(lag)

    @property
    def lag_evaluator(self) -> Optional[Any]:
        return self._lag_evaluator

    def set_lag_evaluator(self, evaluator: Any) -> None:
        """``await evaluator()`` (on the worker's loop) gives the Burrow-style lag status served at /lag."""
        self._lag_evaluator = evaluator

    async def lag_status(self, request: web.Request) -> web.Response:
        evaluator = self._lag_evaluator
        if evaluator is None:
            return _json({"error": "lag evaluation is not available on this worker"}, 404)
        try:
            return _json(await self._on_worker_loop(evaluator))
        except QueryError as exc:
            return _error(exc)

    async def status(self, request: web.Request) -> web.Response:
        """What the live page shows: per task its state, records processed and per second,
        late drops and lag; the worker's health and readiness."""
        await self.refresh_lag()
        lag = dict(self.lag)

        async def body() -> Dict[str, Any]:
            return self._status_body(lag)
        try:
            return _json(await self._on_worker_loop(body))
        except QueryError as exc:
            return _error(exc)

    def _status_body(self, lag: Dict[TopicPartition, int]) -> Dict[str, Any]:
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
            behind = sum(lag.get(tp, 0) for tp in task.input_partitions) if task is not None else None
            rows.append({"task": task_id, "state": state, "records_processed": processed,
                         "records_per_second": round(rate, 1), "lag": behind,
                         "late_records_dropped": task.metrics.late_records_dropped if task is not None else 0,
                         "records_dead_lettered": task.metrics.records_dead_lettered if task is not None else 0,
                         "cache_bytes": (sum(s.buffer.cached_bytes for s in task.stores.open_stores)
                                         if task is not None else 0),
                         "restore": _restore_of(worker, task_id)})
        return {"app": worker.app_id, "worker": self.url, "health": self.health_problem() or "ok",
                "ready": self.readiness_problem() or "ready", "tasks": rows}

    async def topology(self, request: web.Request) -> web.Response:
        return web.Response(text=self.worker.topology.describe("mermaid"), content_type="text/plain")

    async def page(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(os.path.join(PAGE_DIR, "index.html"))


def _read_racing(read: Callable[[], T]) -> T:
    """``read()`` of the worker's plain state from the HTTP thread: a dict the worker
    loop resizes meanwhile raises RuntimeError, and reading again gets a consistent copy."""
    for _ in range(RACE_RETRIES - 1):
        try:
            return read()
        except RuntimeError:
            time.sleep(0.001)
    return read()


def _restore_of(worker: WorkerView, task_id: str) -> Optional[Dict[str, int]]:
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
    body = {"error": str(exc)}
    if exc.owner is not None:
        body["owner"] = exc.owner
    return _json(body, exc.status, headers)


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
