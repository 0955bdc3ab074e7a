"""Options and helpers shared by the CLI commands."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

import click

from ..transport.base import Transport
from ..transport.factory import configured_broker, open_transport

broker_option = click.option(
    "--broker", metavar="URL", default=None,
    help="embedded:///path or kafka://host:port[,host:port] (default: $STREAMKIT_BROKER, else the "
         "config file's broker, else the app's, else embedded://.streamkit).")


def broker_url(option: Optional[str]) -> str:
    return option or configured_broker() or "embedded://.streamkit"


@contextmanager
def connected(option: Optional[str]) -> Iterator[Transport]:
    """The broker named by ``--broker`` (or its defaults), closed on exit."""
    transport = open_transport(broker_url(option))
    try:
        yield transport
    finally:
        transport.close()


def require_topic(transport: Transport, name: str):
    meta = transport.admin.topic(name)
    if meta is None:
        raise click.ClickException(
            f"unknown topic '{name}' on {transport.url}: create it with "
            f"`streamkit topics create {name} --partitions N`")
    return meta
