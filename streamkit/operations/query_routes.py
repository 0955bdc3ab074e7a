"""The interactive-query routes (``/stores/{store}/{key}``, ``/stores/{store}``) and how
workers forward them to each other: a key whose task runs elsewhere is asked of the
worker running it; a store's listing merges every worker's page. A forwarded request
carries FORWARDED and is never forwarded again."""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Dict, List, Optional, TYPE_CHECKING, Tuple, TypeVar
from urllib.parse import quote

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

from ..core.http_security import Credentials, HttpSecurity
from .http_responses import error_response, int_param, json_response
from .queries import (Entry, Located, QueryError, StoreQueries, Unavailable, key_text, merge_pages, parse_key,
                      to_json, url_key)
from .worker_access import FORWARD_TIMEOUT_S

if TYPE_CHECKING:  # the runtime loads only when a worker runs
    from ..runtime.worker.view import WorkerView

FORWARDED = "X-Streamkit-Forwarded"
"""Header on a query one worker forwarded to another: the receiver never forwards it again."""
T = TypeVar("T")
OnWorkerLoop = Callable[[Callable[[], Awaitable[T]]], Awaitable[T]]
"""Runs ``await work()`` on the worker's event loop from the HTTP thread (Unavailable when busy)."""


class QueryRoutes:
    """Answers interactive queries of ``worker``'s stores. The route handlers run in the
    HTTP thread and hand the work to the worker's loop with ``on_worker_loop``; the
    client asking other workers lives on the worker's loop (:meth:`close` there)."""

    def __init__(self, worker: WorkerView, queries: StoreQueries, security: HttpSecurity, credentials: Credentials,
                 *, own_url: Callable[[], Optional[str]], on_worker_loop: OnWorkerLoop,
                 readiness_problem: Callable[[], Optional[str]]) -> None:
        self.worker = worker
        self.queries = queries
        self.security = security
        self.credentials = credentials
        self._own_url = own_url
        self._on_worker_loop = on_worker_loop
        self._readiness_problem = readiness_problem
        self._client: Optional[ClientSession] = None

    async def close(self) -> None:
        """Close the client for asking other workers (on the worker's loop)."""
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def query(self, request: web.Request) -> web.Response:
        """``GET /stores/{store}/{key}``: the key's value (404 when absent), from here or its owner."""
        store, text = request.match_info["store"], request.match_info["key"]
        try:
            key = parse_key(text, self.queries.spec(store).key_serde)
            time_from, time_to = int_param(request, "from"), int_param(request, "to")
            allow_standby = request.query.get("allow_standby", "").lower() in ("1", "true", "yes")
            forwarded = bool(request.headers.get(FORWARDED))
            authorization = request.headers.get("Authorization")
            status, body = await self._on_worker_loop(lambda: self.answer(
                store, key, time_from, time_to, allow_standby=allow_standby, forwarded=forwarded,
                authorization=authorization))
        except QueryError as exc:
            return error_response(exc)
        return json_response(body, status)

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
        body = {"key": to_json(key), "value": value, "task": located.task, "owner": self._own_url(),
                "standby": from_standby}
        return (200 if found else 404), body

    async def _forward(self, located: Located, key: Any, time_from: Optional[int], time_to: Optional[int],
                       allow_standby: bool, forwarded: bool, authorization: Optional[str]
                       ) -> Tuple[int, Dict[str, Any]]:
        own_url = self._own_url()
        owner = self.worker.endpoint_of(located.task)
        if forwarded:
            raise Unavailable(f"task {located.task} is not on this worker (any more): ask again"
                              + (f" (the group says {owner} runs it)" if owner and owner != own_url else ""),
                              owner=owner if owner != own_url else None)
        if owner is None or owner == own_url:
            standbys = self.worker.standby_endpoints_of(located.task) if allow_standby else ()
            owner = next((s for s in standbys if s != own_url), None)
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
        """``GET /stores/{store}``: a page of the store's entries across all workers
        (``?prefix=&limit=&after=``), with the cursor of the next page."""
        store = request.match_info["store"]
        prefix, after = request.query.get("prefix"), request.query.get("after")
        try:
            limit = max(1, min(int_param(request, "limit") or 100, 10_000))
            spec = self.queries.spec(store)
            forwarded = bool(request.headers.get(FORWARDED))
            authorization = request.headers.get("Authorization")
            entries, more = await self._on_worker_loop(lambda: self._page(
                store, prefix, after, limit, forwarded, authorization))
        except QueryError as exc:
            return error_response(exc)
        rows = [dict(entry.to_json(), **({"order": entry.order.hex()} if forwarded else {})) for entry in entries]
        next_after = url_key(to_json(entries[-1].key), spec.key_serde) if more and entries else None
        return json_response({"store": store, "entries": rows, "next": next_after})

    async def _page(self, store: str, prefix: Optional[str], after: Optional[str], limit: int, forwarded: bool,
                    authorization: Optional[str]) -> Tuple[List[Entry], bool]:
        """This worker's page of ``store`` merged with the other workers' (on the worker's
        loop): the first ``limit`` entries past ``after`` in store order, and whether more follow."""
        if self._readiness_problem() is not None:
            raise Unavailable(self._readiness_problem() or "")
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
        owners = sorted({self.worker.endpoint_of(t) for t in tasks} - {self._own_url(), None})
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
        headers = {FORWARDED: self._own_url() or "?"}
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
