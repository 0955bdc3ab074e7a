"""``streamkit registry serve``: a Confluent-compatible Schema Registry on the broker."""
from __future__ import annotations

import asyncio
import logging
import signal
from typing import Optional, Tuple

import click

from .common import broker_option, broker_url
from .http_options import http_security, http_security_options

log = logging.getLogger("streamkit.registry")


@click.group()
def registry() -> None:
    """A Schema Registry (Confluent's REST API) whose state is a topic of the broker."""


@registry.command()
@click.option("--http", "address", default="127.0.0.1:8081", show_default=True, metavar="HOST:PORT",
              help="Where to serve the REST API (no host: 127.0.0.1; 0.0.0.0:8081 for every interface; "
                   "port 0 picks a free one).")
@broker_option
@click.option("--topic", default="_schemas", show_default=True,
              help="The compacted topic holding the registry's state (created if missing).")
@http_security_options
def serve(address: str, broker: Optional[str], topic: str, http_tls_cert: Optional[str],
          http_tls_key: Optional[str], http_tls_client_ca: Optional[str], http_users: Optional[str],
          http_tokens: Optional[str], http_open_health: bool, http_allowed_hosts: Tuple[str, ...]) -> None:
    """Serve Confluent Schema Registry's REST API until SIGTERM or SIGINT (exit code 0).

    Subjects, versions, ids, compatibility settings and deletes are records of TOPIC
    on the broker, so the registry survives restarts, and several `registry serve`
    processes on one broker agree on ids (each reads the topic; the earliest claim
    of an id in the topic wins). Clients: any Schema Registry client, e.g.
    confluent-kafka's SchemaRegistryClient({"url": "http://127.0.0.1:8081"}).
    The --http-* options add TLS, mutual TLS, basic auth and bearer tokens
    ($STREAMKIT_REGISTRY_TOKEN is accepted as a token too).
    """
    from ..schemas.registry.server import RegistryServer, parse_address
    from ..schemas.registry.broker_log import registry_on_broker

    try:
        parse_address(address)  # a usage error before connecting to the broker
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    security = http_security(http_tls_cert, http_tls_key, http_tls_client_ca, http_users, http_tokens,
                             http_open_health, http_allowed_hosts, token_env="STREAMKIT_REGISTRY_TOKEN")
    url = broker_url(broker)
    service = registry_on_broker(url, topic=topic)
    try:
        asyncio.run(_serve(RegistryServer(service, address, security=security), url, topic))
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
