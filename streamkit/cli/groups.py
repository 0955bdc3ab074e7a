"""``streamkit groups list|describe|reset-offsets|delete``, like kafka-consumer-groups."""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Tuple

import click

from ..core.records import TopicPartition
from .common import broker_option, connected, require_topic
from .console_admin import delete_group, offset_for_time
from .offset_reset import Target, clamped, parse_datetime_ms, parse_duration, parse_topic_spec, read_offsets_file


@click.group()
def groups() -> None:
    """Consumer groups: committed offsets and lag."""


@groups.command("list")
@broker_option
def list_(broker: Optional[str]) -> None:
    """List consumer groups: those with committed offsets or live members."""
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


_RESET_TARGETS = ("--to-earliest", "--to-latest", "--to-offset", "--shift-by", "--to-datetime", "--by-duration",
                  "--from-file")


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", "topic_specs", multiple=True, metavar="TOPIC[:P1,P2]",
              help="Reset this topic: every partition, or only those listed after ':' (repeatable).")
@click.option("--all-topics", is_flag=True, help="Reset every partition the group has committed offsets for.")
@click.option("--to-earliest", is_flag=True, help="Move to each partition's log start (its oldest record).")
@click.option("--to-latest", is_flag=True, help="Move to each partition's log end (skip every record there now).")
@click.option("--to-offset", type=int, default=None, metavar="N",
              help="Move to offset N (clamped to each partition's log start and end).")
@click.option("--shift-by", type=int, default=None, metavar="N",
              help="Move each committed offset by N (may be negative; clamped to the log start and end).")
@click.option("--to-datetime", default=None, metavar="YYYY-MM-DDTHH:mm:SS.sss",
              help="Move to the first record with a timestamp at or after this time (Z or +hh:mm for a "
                   "zone, else local time); to the log end where there is none.")
@click.option("--by-duration", default=None, metavar="PnDTnHnMnS",
              help="Move to the first record at most this long ago (ISO-8601 duration, e.g. PT30M); to the "
                   "log end where there is none.")
@click.option("--from-file", type=click.Path(exists=True, dir_okay=False), default=None, metavar="CSV",
              help="Move to the offsets of a CSV file of topic,partition,offset lines (as --export writes "
                   "them, like kafka-consumer-groups).")
@click.option("--dry-run", is_flag=True, help="Only print the new offsets (the default).")
@click.option("--execute", is_flag=True, help="Apply the new offsets; the group must have no live members.")
@click.option("--export", is_flag=True, help="Print the new offsets as topic,partition,offset CSV lines "
                                             "(for --from-file) instead of a table.")
@broker_option
def reset_offsets(group: str, topic_specs: Tuple[str, ...], all_topics: bool, to_earliest: bool,
                  to_latest: bool, to_offset: Optional[int], shift_by: Optional[int], to_datetime: Optional[str],
                  by_duration: Optional[str], from_file: Optional[str], dry_run: bool, execute: bool,
                  export: bool, broker: Optional[str]) -> None:
    """Move GROUP's committed offsets, like kafka-consumer-groups --reset-offsets.

    Choose the partitions with --topic (repeatable) or --all-topics (--from-file names
    its own) and one target. New offsets outside a partition's records are clamped to
    its log start or end, with a warning. Prints the plan unless --execute is given;
    --execute is refused while the group has live members (stop its workers first: a
    running worker would commit its own offsets over the new ones)."""
    given = [to_earliest, to_latest, to_offset is not None, shift_by is not None, to_datetime is not None,
             by_duration is not None, from_file is not None]
    if sum(given) != 1:
        raise click.UsageError(f"give exactly one of {', '.join(_RESET_TARGETS)}")
    if dry_run and execute:
        raise click.UsageError("give at most one of --dry-run, --execute")
    if from_file is None and bool(topic_specs) == all_topics:
        raise click.UsageError("give --topic TOPIC (repeatable) or --all-topics")
    if from_file is not None and (topic_specs or all_topics):
        raise click.UsageError("--from-file names its own partitions: give no --topic or --all-topics")
    timestamp_ms = None
    if to_datetime is not None:
        timestamp_ms = parse_datetime_ms(to_datetime)
    elif by_duration is not None:
        timestamp_ms = int((time.time() - parse_duration(by_duration).total_seconds()) * 1000)
    from_csv = read_offsets_file(from_file, group) if from_file is not None else None
    with connected(broker) as transport:
        if execute:
            _require_inactive(transport, group)
        committed = transport.admin.committed_offsets(group)
        if from_csv is not None:
            partitions = sorted(from_csv)
        else:
            partitions = _partitions(transport, group, topic_specs, committed)
        new: Dict[TopicPartition, int] = {}
        check_partitions(transport, partitions)
        for tp in partitions:
            offsets = transport.admin.partition_offsets(tp.topic, tp.partition)
            if to_earliest:
                target = Target(offsets.start)
            elif to_latest:
                target = Target(offsets.end)
            elif timestamp_ms is not None:
                found = offset_for_time(transport, tp.topic, tp.partition, timestamp_ms)
                target = Target(offsets.end) if found is None else clamped(tp, found, offsets.start, offsets.end)
            elif shift_by is not None:
                if tp not in committed:
                    raise click.ClickException(
                        f"group '{group}' has no committed offset on {tp.topic}[{tp.partition}] to shift by "
                        f"{shift_by}: use --to-offset, --to-earliest or --to-latest for it")
                target = clamped(tp, committed[tp] + shift_by, offsets.start, offsets.end)
            else:
                wanted = to_offset if from_csv is None else from_csv[tp]
                target = clamped(tp, wanted, offsets.start, offsets.end)  # type: ignore[arg-type]
            if target.note:
                click.echo(f"warning: {target.note}", err=True)
            new[tp] = target.offset
        if execute:
            transport.admin.reset_offsets(group, new)
        if export:
            for tp, offset in sorted(new.items()):
                click.echo(f"{tp.topic},{tp.partition},{offset}")
        else:
            click.echo("TOPIC  PARTITION  NEW-OFFSET")
            for tp, offset in sorted(new.items()):
                click.echo(f"{tp.topic}  {tp.partition}  {offset}")
        if not execute:
            click.echo(f"(dry run: group '{group}' is unchanged; add --execute to apply)", err=True)


def _partitions(transport, group: str, topic_specs: Tuple[str, ...],
                committed: Dict[TopicPartition, int]) -> List[TopicPartition]:
    """The partitions named by ``--topic`` specs, or (none given: ``--all-topics``) those
    the group has committed offsets for."""
    if not topic_specs:
        if not committed:
            raise click.ClickException(f"group '{group}' has no committed offsets on {transport.url}: "
                                       f"name the topics with --topic")
        return sorted(committed)
    chosen: List[TopicPartition] = []
    for spec in topic_specs:
        topic, partitions = parse_topic_spec(spec)
        meta = require_topic(transport, topic)
        for partition in partitions if partitions is not None else range(meta.partitions):
            chosen.append(TopicPartition(topic, partition))
    return sorted(set(chosen))


def check_partitions(transport, partitions: List[TopicPartition]) -> None:
    """A clear error for a topic or partition among ``partitions`` that does not exist."""
    counts: Dict[str, int] = {}
    for tp in partitions:
        if tp.topic not in counts:
            counts[tp.topic] = require_topic(transport, tp.topic).partitions
        if not 0 <= tp.partition < counts[tp.topic]:
            raise click.ClickException(f"topic '{tp.topic}' has {counts[tp.topic]} partition(s) (0 to "
                                       f"{counts[tp.topic] - 1}) on {transport.url}: partition {tp.partition} "
                                       f"does not exist")


@groups.command("delete")
@click.argument("group")
@broker_option
def delete(group: str, broker: Optional[str]) -> None:
    """Delete GROUP and its committed offsets, like kafka-consumer-groups --delete;
    refused while the group has live members (they would commit again)."""
    with connected(broker) as transport:
        _require_group(transport, group)
        members = transport.admin.group_members(group)
        if members:
            raise click.ClickException(
                f"group '{group}' has {len(members)} live member(s) ({', '.join(members)}): a group can only "
                f"be deleted while it is inactive; stop its workers first")
        delete_group(transport, group)
        click.echo(f"deleted group {group}")


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
