"""``streamkit registry serve``: a Confluent-compatible Schema Registry on the broker."""
from __future__ import annotations

import asyncio
import logging
import signal
from typing import Optional

import click

from .common import broker_option, broker_url

log = logging.getLogger("streamkit.registry")


@click.group()
def registry() -> None:
    """A Schema Registry (Confluent's REST API) whose state is a topic of the broker."""


@registry.command()
@click.option("--http", "address", default="127.0.0.1:8081", show_default=True, metavar="HOST:PORT",
              help="Where to serve the REST API (0.0.0.0:8081 for every interface; port 0 picks a free one).")
@broker_option
@click.option("--topic", default="_schemas", show_default=True,
              help="The compacted topic holding the registry's state (created if missing).")
def serve(address: str, broker: Optional[str], topic: str) -> None:
    """Serve Confluent Schema Registry's REST API until SIGTERM or SIGINT (exit code 0).

    Subjects, versions, ids, compatibility settings and deletes are records of TOPIC
    on the broker, so the registry survives restarts, and several `registry serve`
    processes on one broker agree on ids (each reads the topic; the earliest claim
    of an id in the topic wins). Clients: any Schema Registry client, e.g.
    confluent-kafka's SchemaRegistryClient({"url": "http://127.0.0.1:8081"}).
    """
    from ..schemas.registry.server import RegistryServer, parse_address
    from ..schemas.registry.service import SchemaRegistry

    parse_address(address)  # a usage error before connecting to the broker
    url = broker_url(broker)
    service = SchemaRegistry.on_broker(url, topic=topic)
    try:
        asyncio.run(_serve(RegistryServer(service, address), url, topic))
    finally:
        service.close()


async def _serve(server, broker: str, topic: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    url = await server.start()
    log.info("schema registry serves %s (state: topic %s on %s)", url, topic, broker)
    try:
        await stop.wait()
    finally:
        log.info("schema registry at %s stopping", url)
        await server.stop()
