"""``streamkit topics create|list|describe|delete``."""
from __future__ import annotations

from typing import Optional, Tuple

import click

from .common import broker_option, connected, require_topic


@click.group()
def topics() -> None:
    """Create, list, describe and delete topics."""


def _parse_configs(pairs: Tuple[str, ...]) -> dict:
    configs = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"expected NAME=VALUE, got {pair!r}", param_hint="--config")
        configs[name] = value
    return configs


@topics.command("create")
@click.argument("name")
@click.option("--partitions", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--config", "configs", multiple=True, metavar="NAME=VALUE",
              help="Topic config, e.g. cleanup.policy=compact (repeatable).")
@click.option("--if-not-exists", is_flag=True, help="Succeed if the topic already exists.")
@broker_option
def create(name: str, partitions: int, configs: Tuple[str, ...], if_not_exists: bool,
           broker: Optional[str]) -> None:
    """Create topic NAME."""
    with connected(broker) as transport:
        if not if_not_exists and transport.admin.topic(name) is not None:
            raise click.ClickException(f"topic '{name}' already exists")
        meta = transport.admin.create_topic(name, partitions, _parse_configs(configs), exist_ok=if_not_exists)
        click.echo(f"created topic {meta.name} ({meta.partitions} partition(s))")


@topics.command("list")
@broker_option
def list_(broker: Optional[str]) -> None:
    """List topics, one per line."""
    with connected(broker) as transport:
        for meta in transport.admin.list_topics():
            click.echo(meta.name)


@topics.command("describe")
@click.argument("name")
@broker_option
def describe(name: str, broker: Optional[str]) -> None:
    """Show NAME's partitions with their start and end offsets."""
    with connected(broker) as transport:
        meta = require_topic(transport, name)
        configs = ",".join(f"{k}={v}" for k, v in sorted(meta.config.items())) or "-"
        click.echo(f"Topic: {meta.name}\tPartitions: {meta.partitions}\tConfigs: {configs}")
        click.echo(f"{'PARTITION':>9}  {'START-OFFSET':>12}  {'END-OFFSET':>12}  {'RECORDS':>10}")
        for partition in range(meta.partitions):
            offsets = transport.admin.partition_offsets(name, partition)
            click.echo(f"{partition:>9}  {offsets.start:>12}  {offsets.end:>12}  {offsets.end - offsets.start:>10}")


@topics.command("delete")
@click.argument("name")
@broker_option
def delete(name: str, broker: Optional[str]) -> None:
    """Delete topic NAME and its data."""
    with connected(broker) as transport:
        require_topic(transport, name)
        transport.admin.delete_topic(name)
        click.echo(f"deleted topic {name}")
