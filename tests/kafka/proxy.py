"""A loopback TCP proxy that can simulate a broker outage (and terminate TLS).

:class:`FaultProxy` forwards every connection to a target ``(host, port)`` from
an asyncio loop in a background thread.  ``cut()`` aborts every open connection
and makes new ones close right after accept; ``restore()`` forwards again.
With an ``ssl_context`` it speaks TLS to clients and plaintext to the target.

A broker started with :func:`start_tansu_behind_proxy` advertises the proxy's
port, so clients only ever reach it through the proxy, whatever they learn
from metadata.
"""
from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Optional, Set, Tuple

from .broker import HOST, KafkaTestBroker, free_port, start_tansu

_CHUNK = 1 << 16


class FaultProxy:
    """TCP forwarder on ``127.0.0.1:port`` with an outage switch."""

    def __init__(self, target: Tuple[str, int], *, host: str = HOST, port: Optional[int] = None,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self.target = target
        self.host = host
        self.accepted = 0  # connections forwarded to the target
        self.refused = 0   # connections closed at once because of cut()
        self._cut = False
        self._closed = False
        self._ssl = ssl_context
        self._writers: Set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._server: Optional[asyncio.base_events.Server] = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True,
                                        name=f"FaultProxy->{target[0]}:{target[1]}")
        self._thread.start()
        started.wait()
        future = asyncio.run_coroutine_threadsafe(self._listen(port), self._loop)
        self.port: int = future.result(timeout=10)

    # ---------------------------------------------------------------- public

    @property
    def address(self) -> str:
        """``host:port`` clients connect to."""
        return f"{self.host}:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self._cut

    @property
    def open_connections(self) -> int:
        """Client-side and target-side sockets currently open."""
        return len(self._writers)

    def cut(self) -> None:
        """Abort every open connection and refuse new ones until ``restore()``."""
        self._call(self._do_cut)

    def restore(self) -> None:
        """Forward new connections again."""
        self._call(self._do_restore)

    def close(self) -> None:
        """Stop listening, drop all connections and end the thread; idempotent."""
        if self._closed:
            return
        self._closed = True
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "cut" if self._cut else "forwarding"
        return f"FaultProxy({self.address} -> {self.target[0]}:{self.target[1]}, {state})"

    # --------------------------------------------------------------- private

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(started.set)
        self._loop.run_forever()

    def _call(self, fn) -> None:
        if self._closed:
            raise RuntimeError("FaultProxy is closed")

        async def call() -> None:
            fn()
        asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=10)

    async def _listen(self, port: Optional[int]) -> int:
        self._server = await asyncio.start_server(self._handle, self.host, port or 0, ssl=self._ssl)
        return self._server.sockets[0].getsockname()[1]

    def _do_cut(self) -> None:
        self._cut = True
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def _do_restore(self) -> None:
        self._cut = False

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        self._do_cut()
        if self._server is not None:
            await self._server.wait_closed()
        tasks = [t for t in asyncio.all_tasks(self._loop) if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            self.refused += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        if self._cut:  # cut while we were connecting
            self.refused += 1
            writer.transport.abort()
            up_writer.transport.abort()
            return
        self.accepted += 1
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(_CHUNK):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError, ssl.SSLError):
            pass
        finally:
            writer.transport.abort()


def start_tansu_behind_proxy(**kwargs) -> Tuple[KafkaTestBroker, FaultProxy]:
    """Start Tansu reachable only through a :class:`FaultProxy`.

    Tansu listens on a private port and advertises the proxy's port; the
    returned broker's ``bootstrap`` is the proxy.  ``broker.stop()`` also closes
    the proxy.  ``kwargs`` go to :func:`~tests.kafka.broker.start_tansu`.
    """
    tansu_port = free_port()
    proxy = FaultProxy((HOST, tansu_port))
    try:
        broker = start_tansu(port=tansu_port, advertised_port=proxy.port, **kwargs)
    except BaseException:
        proxy.close()
        raise
    broker._cleanups.append(proxy.close)
    return broker, proxy
