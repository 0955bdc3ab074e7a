"""``streamkit consume``: print records as JSON lines, like kafka-console-consumer."""
from __future__ import annotations

import asyncio
import base64
import decimal
import sys
import time
from typing import List, Optional, Tuple

import click
import orjson

from ..runtime.progress import is_marker, is_stamped, without_stamp
from ..core.records import TopicPartition
from ..errors import SerializationError
from ..serdes import Serde
from .common import broker_option, broker_url, connected, format_options, registry_serde, require_topic


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
@format_options
@broker_option
def consume(topic: str, group: Optional[str], from_beginning: bool, max_records: Optional[int],
            timeout: Optional[float], read_uncommitted: bool, broker: Optional[str],
            value_format: Optional[str] = None, key_format: Optional[str] = None,
            value_schema: Optional[str] = None, key_schema: Optional[str] = None,
            value_message: Optional[str] = None, key_message: Optional[str] = None,
            registry: str = "embedded") -> None:
    """Print TOPIC's records as JSON lines: key, value, partition, offset, timestamp.

    With --value-format/--key-format avro, json-schema or protobuf, records in
    Confluent's wire format are decoded with the schema their id names (fetched once
    per id from --registry), like kafka-avro-console-consumer; a record that does not
    decode is printed raw with an "error" field saying why.
    """
    url = broker_url(broker)
    serdes = (registry_serde(key_format or "", key_schema, key_message, registry, topic=topic, is_key=True,
                             broker=url, required=False),
              registry_serde(value_format or "", value_schema, value_message, registry, topic=topic,
                             is_key=False, broker=url, required=False))
    counts = None
    with connected(broker) as transport:
        meta = require_topic(transport, topic)
        try:
            counts = asyncio.run(_consume(transport, topic, meta.partitions, group, from_beginning,
                                          max_records, timeout, not read_uncommitted, serdes))
        except KeyboardInterrupt:
            pass
    if counts is not None:
        consumed, lost = counts
        lost_note = f", {lost} record(s) deleted before they were read" if lost else ""
        click.echo(f"consumed {consumed} record(s){lost_note}", err=True)


def _decoded(serde: Optional[Serde], data: Optional[bytes], errors: List[str]) -> object:
    """``data`` decoded by ``serde`` as a JSON-ready value (raw via :func:`render` when
    there is no serde, or when it fails: the error is added to ``errors``)."""
    if serde is None or data is None:
        return render(data)
    try:
        return to_json_ready(serde.deserialize(data))
    except SerializationError as exc:
        errors.append(str(exc))
        return render(data)


def to_json_ready(value: object) -> object:
    """Protobuf messages as dicts (field names as in the .proto); other values as they are."""
    if hasattr(value, "DESCRIPTOR") and hasattr(value, "SerializeToString"):
        from google.protobuf.json_format import MessageToDict

        return MessageToDict(value, preserving_proto_field_name=True)
    return value


def _json_default(value: object) -> object:
    if isinstance(value, (bytes, bytearray)):
        return "base64:" + base64.b64encode(bytes(value)).decode()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


async def _consume(transport, topic: str, partitions: int, group: Optional[str], from_beginning: bool,
                   max_records: Optional[int], timeout: Optional[float], read_committed: bool,
                   serdes: Tuple[Optional[Serde], Optional[Serde]] = (None, None)) -> Tuple[int, int]:
    """Print the records; return how many, and how many were deleted (retention,
    delete_records) between the group's committed offsets and what could be read."""
    key_serde, value_serde = serdes
    # Without --group no group is involved at all: on a secured cluster reading needs no group ACL.
    reader = getattr(transport, "reader", None)
    consumer = transport.consumer(group or "streamkit-console", read_committed=read_committed) \
        if group or reader is None else reader(read_committed=read_committed)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    positions = await consumer.committed(tps) if group else {}
    for tp in tps:
        if tp not in positions:
            offsets = transport.admin.partition_offsets(topic, tp.partition)
            positions[tp] = offsets.start if from_beginning else offsets.end
    consumer.assign(tps, positions)
    out = sys.stdout
    count = lost = 0
    last = time.monotonic()
    try:
        while max_records is None or count < max_records:
            batches = await consumer.fetch(0.1)
            lost += _report_lost(consumer)
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
                    errors: List[str] = []
                    line = {"topic": topic, "partition": batch.partition, "offset": offset, "timestamp": ts,
                            "key": _decoded(key_serde, key, errors), "value": _decoded(value_serde, value, errors)}
                    if headers:
                        line["headers"] = {name: render(v) for name, v in headers}
                    if errors:
                        line["error"] = "; ".join(errors)
                    out.write(orjson.dumps(line, default=_json_default).decode() + "\n")
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
    return count, lost


def _report_lost(consumer) -> int:
    """Say on stderr which offsets were deleted before they could be read (the consumer
    went on from the log start); return how many."""
    total = 0
    for tp, first, end in consumer.take_lost():
        total += end - first
        click.echo(f"warning: {tp.topic}[{tp.partition}]: {end - first} record(s) at offsets {first} to {end - 1} "
                   f"were deleted (retention, delete-records or an offset reset) before they were read: "
                   f"skipped", err=True)
    return total
