"""A private asyncio loop in a daemon thread, so synchronous code can call aiokafka.

The Admin interface is synchronous (the CLI and start-up code call it outside,
or before, the worker's event loop); its aiokafka clients live on this loop.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Awaitable, Optional, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    """Runs coroutines on a loop owned by a daemon thread."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[T], timeout: Optional[float] = None) -> T:
        """Run ``coro`` on the background loop and wait for its result."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:  # not the builtin TimeoutError before 3.11
            future.cancel()
            raise TimeoutError(f"no answer within {timeout} s") from None

    def close(self, cleanup: Optional[Awaitable[Any]] = None) -> None:
        """Run ``cleanup`` (if given), then stop the loop and join the thread."""
        if self._loop.is_closed():
            return
        if cleanup is not None:
            try:
                self.run(cleanup, timeout=10)
            except Exception:  # noqa: BLE001 - closing best-effort
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
