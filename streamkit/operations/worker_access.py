"""How the HTTP thread reaches the worker: reads of its plain state that race its event
loop, and coroutines run on that loop (see :mod:`.http_server`, "Threads")."""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Awaitable, Callable, Optional, TypeVar

from .queries import Unavailable

RACE_RETRIES = 5
"""How often a read of the worker's plain state is tried before its error is raised."""
FORWARD_TIMEOUT_S = 5.0
"""Seconds a request taken by the worker's loop, or forwarded to another worker, may take."""
T = TypeVar("T")


def read_racing(read: Callable[[], T]) -> T:
    """``read()`` of the worker's plain state from the HTTP thread: a dict the worker
    loop resizes meanwhile raises RuntimeError, and reading again gets a consistent copy."""
    for _ in range(RACE_RETRIES - 1):
        try:
            return read()
        except RuntimeError:
            time.sleep(0.001)
    return read()


def busy_reason(busy_after: float, blocked_for: Optional[float]) -> str:
    """Why the worker's loop did not take a request within ``busy_after`` seconds, with
    how long ago it last stamped its heartbeat when known."""
    return ("the worker's event loop did not take the request within "
            f"{busy_after:g} s" + ("" if blocked_for is None else f" (its last heartbeat was "
                                   f"{blocked_for:.1f} s ago)"))


async def run_on_worker_loop(worker_loop: Optional[asyncio.AbstractEventLoop], work: Callable[[], Awaitable[T]],
                             busy_after: float, blocked_for: Callable[[], Optional[float]]) -> T:
    """``await work()`` run on ``worker_loop`` (from the HTTP thread). Unavailable
    ("loop busy") when the loop does not start it within ``busy_after`` seconds or it
    does not finish within that plus FORWARD_TIMEOUT_S; Unavailable too when the loop
    is not running."""
    started = threading.Event()

    async def run() -> T:
        started.set()
        return await work()

    if worker_loop is None or worker_loop.is_closed():
        raise Unavailable("the worker is not running")
    try:
        future = asyncio.run_coroutine_threadsafe(run(), worker_loop)
    except RuntimeError:  # the loop closed meanwhile
        raise Unavailable("the worker is stopping") from None
    waiting = asyncio.wrap_future(future)
    try:
        return await asyncio.wait_for(asyncio.shield(waiting), busy_after)
    except asyncio.TimeoutError:
        if not started.is_set():
            future.cancel()
            raise Unavailable(f"loop busy: {busy_reason(busy_after, blocked_for())}") from None
    try:
        return await asyncio.wait_for(waiting, FORWARD_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise Unavailable("loop busy: the request did not finish "
                          f"({busy_reason(busy_after, blocked_for())})") from None
