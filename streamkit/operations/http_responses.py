"""The JSON answers of the worker's HTTP endpoints, and reading their query parameters."""
from __future__ import annotations

from typing import Any, Dict, Optional

import orjson
from aiohttp import web

from .queries import QueryError, Unavailable


def json_response(body: Any, status: int = 200, headers: Optional[Dict[str, str]] = None) -> web.Response:
    """``body`` as ``application/json`` with ``status`` and ``headers``."""
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json", headers=headers)


def error_response(exc: QueryError) -> web.Response:
    """``{"error", "owner"?}`` with the error's status; ``Retry-After`` when it is :class:`Unavailable`."""
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, Unavailable) else None
    body = {"error": str(exc)}
    if exc.owner is not None:
        body["owner"] = exc.owner
    return json_response(body, exc.status, headers)


def refusal_response(status: int, message: str) -> web.Response:
    """``{"error": message}`` with ``status``: how the security middleware refuses a request."""
    return json_response({"error": message}, status)


def status_response(problem: Optional[str]) -> web.Response:
    """The answer of /health and /ready: 200 ``{"status": "ok"}`` without ``problem``, else
    503 ``{"status": "unavailable", "reason": problem}`` with ``Retry-After: 1``."""
    if problem is None:
        return json_response({"status": "ok"})
    return json_response({"status": "unavailable", "reason": problem}, 503, {"Retry-After": "1"})


def int_param(request: web.Request, name: str) -> Optional[int]:
    """The integer (epoch ms) of ``?name=``, None when absent or empty; QueryError 400 when not an integer."""
    text = request.query.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise QueryError(400, f"?{name}= must be an integer (epoch ms), got {text!r}") from None
