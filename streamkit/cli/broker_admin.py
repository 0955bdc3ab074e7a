"""``streamkit broker clean``: the embedded log's housekeeping without a worker.

A worker runs retention, compaction and the purge of its repartition topics as it goes;
an embedded log written by producers alone (or left by workers that stopped) needs this.
"""
from __future__ import annotations

from typing import Dict, Optional

import click

from ..broker import EmbeddedBroker
from ..broker.errors import EmbeddedBrokerError
from ..core.names import is_repartition_topic
from ..core.records import TopicPartition
from .common import broker_option, broker_url, connected


@click.group()
def broker() -> None:
    """The embedded broker's own upkeep (Apache Kafka does its own)."""


@broker.command()
@broker_option
def clean(broker: Optional[str]) -> None:
    """One housekeeping pass over every topic of an embedded log, then purge repartition topics.

    Retention (retention.ms, retention.bytes) deletes whole sealed segments; compaction
    rewrites compacted topics; an active segment whose records span segment.ms of record
    time, or are all past retention.ms, is sealed first, so idle and backfilled topics are
    cleaned by time. Each repartition topic is then purged below the lowest offset any
    group committed on each partition, as the app's workers do. Prints what was done per
    topic. Partitions a running worker is cleaning are skipped (its own pass covers them).
    """
    if not broker_url(broker).startswith("embedded:"):
        raise click.UsageError(f"broker clean works on an embedded log, not {broker_url(broker)}: Apache Kafka "
                               "runs its own retention and log cleaner")
    with connected(broker) as transport:
        embedded = transport.broker  # type: ignore[attr-defined]  # an embedded transport
        done = embedded.run_housekeeping()
        purged = purge_repartition_topics(embedded)
    width = max([len(t) for t in done] + [5])
    click.echo(f"{'TOPIC':<{width}}  ROLLED  DELETED  COMPACTED  RECORDS-REMOVED  PURGED-BELOW")
    for topic in sorted(done):
        counts = done[topic]
        below = ", ".join(f"{tp.partition}:{offset}" for tp, offset in sorted(purged.get(topic, {}).items())) or "-"
        click.echo(f"{topic:<{width}}  {counts['segments_rolled']:>6}  {counts['segments_deleted']:>7}  "
                   f"{counts['segments_compacted']:>9}  {counts['records_removed']:>15}  {below}")


def purge_repartition_topics(embedded: EmbeddedBroker) -> Dict[str, Dict[TopicPartition, int]]:
    """Delete each repartition topic's records below the lowest offset any group committed
    on that partition (partitions no group committed on are left alone); {topic: {tp: offset}}
    of what moved."""
    lowest: Dict[TopicPartition, int] = {}
    for group in embedded.list_groups():
        for tp, offset in embedded.committed_offsets(group).items():
            if is_repartition_topic(tp.topic):
                lowest[tp] = min(offset, lowest.get(tp, offset))
    moved: Dict[str, Dict[TopicPartition, int]] = {}
    for tp, offset in lowest.items():
        try:
            offsets = embedded.partition_offsets(tp.topic, tp.partition)
        except EmbeddedBrokerError:  # the topic was deleted since the group committed on it
            continue
        offset = min(offset, offsets.end)
        if offset > offsets.start:
            embedded.delete_records({tp: offset})
            moved.setdefault(tp.topic, {})[tp] = offset
    return moved
