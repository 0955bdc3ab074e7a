"""Starting aiokafka clients with a bounded retry while the brokers cannot be reached."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from aiokafka.errors import KafkaConnectionError

from ...errors import BrokerUnavailableError

log = logging.getLogger(__name__)


async def start_with_retry(start: Callable[[], Awaitable[Any]], servers: str, timeout_s: float,
                           what: str) -> None:
    """Call ``start()`` until it connects, for at most ``timeout_s``; then a clear error."""
    deadline = time.monotonic() + timeout_s
    delay = 0.2
    while True:
        try:
            await start()
            return
        except KafkaConnectionError as exc:
            if time.monotonic() + delay > deadline:
                raise BrokerUnavailableError(
                    f"cannot reach Kafka at {servers} after {timeout_s:g} s ({what}: {exc}); check the "
                    "broker URL, that the brokers are up, and the security settings") from None
            log.info("Kafka at %s not reachable yet (%s: %s); retrying", servers, what, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def quietly(awaitable: Awaitable[Any]) -> None:
    """Await a best-effort cleanup (closing a client), ignoring its failure."""
    try:
        await awaitable
    except Exception:  # noqa: BLE001 - cleanup must not hide the error being handled
        pass
