"""``streamkit consume``: print records as JSON lines, like kafka-console-consumer."""
from __future__ import annotations

import asyncio
import base64
import sys
import time
from typing import Optional

import click
import orjson

from ..runtime.progress import is_marker, is_stamped, without_stamp
from ..core.records import TopicPartition
from .common import broker_option, connected, require_topic


def render(data: Optional[bytes]) -> object:
    """JSON if the bytes are JSON, else UTF-8 text, else ``base64:...``."""
    if data is None:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


@click.command()
@click.argument("topic")
@click.option("--group", metavar="GROUP", help="Consume as this group: start from and commit its offsets.")
@click.option("--from-beginning", is_flag=True,
              help="Start at the earliest offset when there is no committed offset (default: the end).")
@click.option("--max", "max_records", type=click.IntRange(min=1), default=None, help="Exit after N records.")
@click.option("--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Exit after no record arrived for this long (default: wait forever).")
@click.option("--read-uncommitted", is_flag=True,
              help="Also show records of open and aborted transactions (default: committed only).")
@broker_option
def consume(topic: str, group: Optional[str], from_beginning: bool, max_records: Optional[int],
            timeout: Optional[float], read_uncommitted: bool, broker: Optional[str]) -> None:
    """Print TOPIC's records as JSON lines: key, value, partition, offset, timestamp."""
    count = None
    with connected(broker) as transport:
        meta = require_topic(transport, topic)
        try:
            count = asyncio.run(_consume(transport, topic, meta.partitions, group, from_beginning,
                                         max_records, timeout, not read_uncommitted))
        except KeyboardInterrupt:
            pass
    if count is not None:
        click.echo(f"consumed {count} record(s)", err=True)


async def _consume(transport, topic: str, partitions: int, group: Optional[str], from_beginning: bool,
                   max_records: Optional[int], timeout: Optional[float], read_committed: bool) -> int:
    consumer = transport.consumer(group or "streamkit-console", read_committed=read_committed)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    positions = await consumer.committed(tps) if group else {}
    for tp in tps:
        if tp not in positions:
            offsets = transport.admin.partition_offsets(topic, tp.partition)
            positions[tp] = offsets.start if from_beginning else offsets.end
    consumer.assign(tps, positions)
    out = sys.stdout
    count = 0
    last = time.monotonic()
    try:
        while max_records is None or count < max_records:
            batches = await consumer.fetch(0.1)
            if not batches:
                if timeout is not None and time.monotonic() - last >= timeout:
                    break
                continue
            last = time.monotonic()
            done = {}
            for batch in batches:
                for record in batch.records:
                    done[TopicPartition(topic, batch.partition)] = record[0] + 1
                    if record[4] and is_stamped(record):  # a repartition topic's record or marker
                        if is_marker(record):
                            continue  # the app's progress bookkeeping, not a record
                        record = without_stamp(record)
                    offset, ts, key, value, headers = record
                    line = {"topic": topic, "partition": batch.partition, "offset": offset, "timestamp": ts,
                            "key": render(key), "value": render(value)}
                    if headers:
                        line["headers"] = {name: render(v) for name, v in headers}
                    out.write(orjson.dumps(line).decode() + "\n")
                    count += 1
                    if max_records is not None and count >= max_records:
                        break
                if max_records is not None and count >= max_records:
                    break
            out.flush()
            if group:
                await consumer.commit(done)
    finally:
        await consumer.aclose()
    return count
