"""``streamkit topics create|list|describe|alter|delete``, like kafka-topics and kafka-configs."""
from __future__ import annotations

from typing import Optional, Tuple

import click

from .common import broker_option, connected, require_topic
from .console_admin import add_partitions, alter_topic_config, live_consumer_groups


@click.group()
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


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
@click.option("--partitions", type=click.IntRange(min=1), default=1, show_default=True,
              help="How many partitions (records of one key always go to the same one).")
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


@topics.command("alter")
@click.argument("name")
@click.option("--config", "configs", multiple=True, metavar="NAME=VALUE",
              help="Set this topic config, e.g. retention.ms=86400000 (repeatable); other configs are kept.")
@click.option("--delete-config", "deleted", multiple=True, metavar="NAME",
              help="Remove this topic config, back to the broker's default (repeatable).")
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="Grow the topic to this many partitions (never fewer: like kafka-topics --alter "
                   "--partitions). Keys then map to other partitions than before.")
@broker_option
def alter(name: str, configs: Tuple[str, ...], deleted: Tuple[str, ...], partitions: Optional[int],
          broker: Optional[str]) -> None:
    """Change configs or the partition count of topic NAME, like kafka-configs --alter
    --add-config/--delete-config and kafka-topics --alter --partitions.

    Only the configs named change. On the embedded broker, retention and compaction
    follow at their next pass; segment.bytes applies to processes started afterwards.
    Partitions are only ever added; a key's new records may then land in another
    partition than its old ones, so a stateful app reading the topic sees that key in
    two tasks (Kafka Streams refuses to run on source topics whose counts no longer
    match: grow co-partitioned topics together, and reset the app if keys moved)."""
    if not configs and not deleted and partitions is None:
        raise click.UsageError("give --config NAME=VALUE, --delete-config NAME and/or --partitions N")
    set_configs = _parse_configs(configs)
    both = sorted(set(set_configs) & set(deleted))
    if both:
        raise click.UsageError(f"{', '.join(both)}: both set and deleted")
    with connected(broker) as transport:
        meta = require_topic(transport, name)
        if partitions is not None:
            if partitions < meta.partitions:
                raise click.ClickException(f"topic '{name}' has {meta.partitions} partitions: partitions "
                                           f"can only be added, not removed (asked for {partitions})")
            if partitions > meta.partitions:
                after_count = add_partitions(transport, name, partitions)
                click.echo(f"altered topic {name}: partitions {meta.partitions} -> {after_count}")
            else:
                click.echo(f"topic {name} already has {partitions} partition(s)")
        if configs or deleted:
            after = alter_topic_config(transport, name, set_configs, list(deleted))
            shown = ",".join(f"{k}={v}" for k, v in sorted(after.items())) or "-"
            click.echo(f"altered topic {name}: configs now {shown}")


@topics.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True,
              help="Delete even while consumer groups with live members read the topic (they then fail).")
@broker_option
def delete(name: str, force: bool, broker: Optional[str]) -> None:
    """Delete topic NAME and its data.

    Refused without --force while a group with live members has committed offsets on
    it: its workers would fail on the missing topic (kafka-topics deletes without
    looking; its consumer-groups tool refuses changes to live groups, which is the
    rule followed here)."""
    with connected(broker) as transport:
        require_topic(transport, name)
        live = live_consumer_groups(transport, name)
        if live:
            readers = "; ".join(f"group '{group}' ({len(members)} live member(s): {', '.join(members)})"
                                for group, members in sorted(live.items()))
            if not force:
                raise click.ClickException(f"topic '{name}' is consumed by {readers}: stop them first, or "
                                           f"add --force to delete it anyway")
            click.echo(f"warning: deleting topic '{name}' consumed by {readers}", err=True)
        transport.admin.delete_topic(name)
        click.echo(f"deleted topic {name}")
