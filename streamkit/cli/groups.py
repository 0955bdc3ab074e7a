"""``streamkit groups list|describe|reset-offsets``, like kafka-consumer-groups."""
from __future__ import annotations

from typing import Optional

import click

from ..core.records import TopicPartition
from .common import broker_option, connected, require_topic


@click.group()
def groups() -> None:
    """Consumer groups: committed offsets and lag."""


@groups.command("list")
@broker_option
def list_(broker: Optional[str]) -> None:
    """List consumer groups that have committed offsets."""
    with connected(broker) as transport:
        for group in transport.admin.list_groups():
            click.echo(group)


def _require_group(transport, group: str) -> dict:
    committed = transport.admin.committed_offsets(group)
    if not committed and group not in transport.admin.list_groups():
        raise click.ClickException(f"unknown group '{group}' on {transport.url} (see `streamkit groups list`)")
    return committed


@groups.command("describe")
@click.argument("group")
@broker_option
def describe(group: str, broker: Optional[str]) -> None:
    """Committed offset, log end offset and lag per partition of GROUP."""
    with connected(broker) as transport:
        committed = _require_group(transport, group)
        rows = []
        for tp in sorted(committed):
            if transport.admin.topic(tp.topic) is None:
                continue
            end = transport.admin.partition_offsets(tp.topic, tp.partition).end
            rows.append((tp.topic, str(tp.partition), str(committed[tp]), str(end), str(max(end - committed[tp], 0))))
        header = ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")
        widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
        for row in [header, *rows]:
            click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if not rows:
            click.echo(f"group '{group}' has no committed offsets (yet)", err=True)


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", required=True, help="Reset every partition of this topic.")
@click.option("--to-earliest", is_flag=True)
@click.option("--to-latest", is_flag=True)
@click.option("--shift-by", type=int, default=None, metavar="N", help="Move each offset by N (may be negative).")
@click.option("--dry-run", is_flag=True, help="Only print the new offsets (the default).")
@click.option("--execute", is_flag=True, help="Apply the new offsets; the group must have no live members.")
@broker_option
def reset_offsets(group: str, topic: str, to_earliest: bool, to_latest: bool, shift_by: Optional[int],
                  dry_run: bool, execute: bool, broker: Optional[str]) -> None:
    """Move GROUP's committed offsets on TOPIC. Prints the plan unless --execute is
    given; --execute is refused while the group has live members (stop its workers
    first: a running worker would commit its own offsets over the new ones)."""
    if sum([to_earliest, to_latest, shift_by is not None]) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --shift-by N")
    if dry_run and execute:
        raise click.UsageError("give at most one of --dry-run, --execute")
    with connected(broker) as transport:
        meta = require_topic(transport, topic)
        if execute:
            _require_inactive(transport, group)
        committed = transport.admin.committed_offsets(group)
        new = {}
        for partition in range(meta.partitions):
            tp = TopicPartition(topic, partition)
            offsets = transport.admin.partition_offsets(topic, partition)
            if to_earliest:
                target = offsets.start
            elif to_latest:
                target = offsets.end
            else:
                target = committed.get(tp, offsets.start) + shift_by  # type: ignore[operator]
            new[tp] = min(max(target, offsets.start), offsets.end)
        if execute:
            transport.admin.reset_offsets(group, new)
        click.echo("TOPIC  PARTITION  NEW-OFFSET")
        for tp, offset in sorted(new.items()):
            click.echo(f"{tp.topic}  {tp.partition}  {offset}")
        if not execute:
            click.echo(f"(dry run: group '{group}' is unchanged; add --execute to apply)", err=True)


def _require_inactive(transport, group: str) -> None:
    """Refuse to move the offsets of a group with live members, as kafka-consumer-groups
    does: a running member commits its own positions over the new offsets."""
    members = transport.admin.group_members(group)
    if members is None:
        raise click.ClickException(
            f"cannot tell whether group '{group}' has live members on {transport.url}; "
            f"offsets are reset only when the group is inactive")
    if members:
        raise click.ClickException(
            f"group '{group}' has {len(members)} live member(s) ({', '.join(members)}): offsets can only be "
            f"reset while the group is inactive; stop its workers first")
