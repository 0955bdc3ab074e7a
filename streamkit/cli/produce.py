"""``streamkit produce``: one record per stdin line, like kafka-console-producer."""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import select
import sys
import time
from typing import Iterator, List, Mapping, Optional, Tuple

import click
import orjson

from ..errors import SerializationError
from ..serdes import Json, Serde
from ..core.records import OutgoingRecord
from ..transport.partitioner import partition_for_key
from .common import (REGISTRY_FORMATS, broker_option, broker_url, connected, format_options, registry_serde,
                     require_topic)

log = logging.getLogger(__name__)

BATCH_RECORDS = 1000
LINGER_SECONDS = 0.05  # send what we have when stdin pauses this long (interactive use)
JSON = Json()


def _stdin_lines() -> Iterator[Tuple[bytes, bool]]:
    """Yield (line, more_ready): ``more_ready`` is False when stdin has paused."""
    fd = sys.stdin.fileno()
    pending = b""
    while True:
        ready, _, _ = select.select([fd], [], [], LINGER_SECONDS)
        if not ready:
            yield b"", False
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            if pending:
                yield pending, True
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line, True


def _key_of(value: object, field: str, line_no: int, key_format: Optional[str] = None,
            key_serde: Optional[Serde] = None) -> bytes:
    if not isinstance(value, dict) or field not in value:
        raise click.ClickException(f"line {line_no}: no field '{field}' for --key-field in {value!r:.80}")
    key = value[field]
    if key_serde is not None:
        return key_serde.serialize(key)
    if key_format == "json":
        return JSON.serialize(key)
    if key_format == "text" and not isinstance(key, str):
        raise click.ClickException(f"line {line_no}: --key-format text needs a string key, got {key!r:.40}")
    return key.encode() if isinstance(key, str) else JSON.serialize(key)


def _timestamp_of(value: object, field: str, line_no: int) -> int:
    if not isinstance(value, dict) or field not in value:
        raise click.ClickException(f"line {line_no}: no field '{field}' for --timestamp-field in {value!r:.80}; "
                                   "the lines before it were produced")
    ts = value[field]
    if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
        raise click.ClickException(f"line {line_no}: field '{field}' for --timestamp-field is {ts!r:.40}, not an "
                                   "integer of epoch milliseconds >= 0; the lines before it were produced")
    return ts


def retention_ms_of(config: Mapping[str, str]) -> Optional[int]:
    """The topic's ``retention.ms`` when its config states a time limit (None: forever or not said)."""
    try:
        retention = int(str(config.get("retention.ms", "-1")).strip())
    except ValueError:
        return None
    return retention if retention >= 0 else None


@click.command()
@click.argument("topic")
@click.option("--key-field", metavar="FIELD", help="Use this field of each JSON value as the record key.")
@click.option("--timestamp-field", metavar="FIELD",
              help="Use this field of each JSON value (epoch milliseconds) as the record timestamp, "
                   "for backfills (default: now). Warns when records are older than the topic's retention.ms.")
@click.option("--partition", type=click.IntRange(min=0), default=None,
              help="Write every record to this partition (default: by key, round-robin without key).")
@click.option("--format", "fmt", type=click.Choice(["json", "text"]), default="json", show_default=True,
              help="json: each line must be a JSON value; text: each line is a UTF-8 string value.")
@format_options
@broker_option
def produce(topic: str, key_field: Optional[str], timestamp_field: Optional[str], partition: Optional[int],
            fmt: str, broker: Optional[str], value_format: Optional[str] = None, key_format: Optional[str] = None,
            value_schema: Optional[str] = None, key_schema: Optional[str] = None,
            value_message: Optional[str] = None, key_message: Optional[str] = None,
            registry: str = "embedded") -> None:
    """Append one record per line of standard input to TOPIC.

    With --value-format avro, json-schema or protobuf each line is a JSON object,
    encoded with --schema in Confluent's wire format (the schema is registered under
    TOPIC-value on first use, as Confluent's console producers do); --key-field takes
    the key from the object, encoded per --key-format.
    """
    value_format = value_format or fmt
    if key_field and value_format == "text":
        raise click.UsageError("--key-field needs --format json (or a registry --value-format)")
    if timestamp_field and value_format == "text":
        raise click.UsageError("--timestamp-field needs --format json (or a registry --value-format)")
    if key_format in REGISTRY_FORMATS and not key_field:
        raise click.UsageError(f"--key-format {key_format} needs --key-field FIELD (the key's source)")
    url = broker_url(broker)
    value_serde = registry_serde(value_format, value_schema, value_message, registry, topic=topic, is_key=False,
                                 broker=url, required=True)
    key_serde = registry_serde(key_format or "", key_schema, key_message, registry, topic=topic, is_key=True,
                               broker=url, required=True)
    with connected(broker) as transport:
        meta = require_topic(transport, topic)
        if partition is not None and partition >= meta.partitions:
            raise click.ClickException(f"topic '{topic}' has {meta.partitions} partition(s): "
                                       f"--partition {partition} does not exist")
        retention = retention_ms_of(meta.config) if timestamp_field else None
        expired = _Expired(topic, retention)
        try:
            count = asyncio.run(_produce(transport, topic, meta.partitions, key_field, partition,
                                         "text" if value_format == "text" else "json",
                                         timestamp_field, expired, key_format=key_format,
                                         key_serde=key_serde, value_serde=value_serde))
        finally:
            expired.warn()
    click.echo(f"produced {count} record(s) to {topic}", err=True)


class _Expired:
    """Counts records older than the topic's retention.ms, for one warning at the end."""

    def __init__(self, topic: str, retention_ms: Optional[int]) -> None:
        self.topic = topic
        self.retention_ms = retention_ms
        self.count = 0
        self.oldest: Optional[int] = None
        self._now = int(time.time() * 1000)

    def check(self, timestamp: int) -> None:
        if self.retention_ms is not None and timestamp < self._now - self.retention_ms:
            self.count += 1
            self.oldest = timestamp if self.oldest is None else min(self.oldest, timestamp)

    def warn(self) -> None:
        if self.count:
            log.warning("%d record(s) produced to %s are older than its retention.ms=%d (the oldest has "
                        "timestamp %d): the broker may delete them at its next retention pass, before they "
                        "are read; raise retention.ms for the backfill", self.count, self.topic,
                        self.retention_ms, self.oldest)


async def _produce(transport, topic: str, partitions: int, key_field: Optional[str],
                   fixed_partition: Optional[int], fmt: str, timestamp_field: Optional[str] = None,
                   expired: Optional[_Expired] = None, *, key_format: Optional[str] = None,
                   key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None) -> int:
    producer = transport.producer()
    buffers: List[List[OutgoingRecord]] = [[] for _ in range(partitions)]
    round_robin = itertools.cycle(range(partitions))
    produced = buffered = 0

    async def flush() -> None:
        nonlocal produced, buffered
        batches = [(topic, p, records) for p, records in enumerate(buffers) if records]
        if batches:
            await producer.send(batches)
            for p in range(partitions):
                buffers[p] = []
            produced += buffered
            buffered = 0

    line_no = 0
    try:
        for line, more in _stdin_lines():
            if not more:
                await flush()
                continue
            line_no += 1
            line = line.rstrip(b"\r")
            if not line.strip():
                continue
            key: Optional[bytes] = None
            timestamp: Optional[int] = None
            if fmt == "json":
                try:
                    value = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise _bad_line(line_no, f"not valid JSON ({exc})", line) from None
                try:
                    if key_field:
                        key = _key_of(value, key_field, line_no, key_format, key_serde)
                    if value_serde is not None:
                        payload = value_serde.serialize(value)
                    else:
                        payload = b"null" if value is None else JSON.serialize(value)  # a value, not a tombstone
                except SerializationError as exc:
                    raise _bad_line(line_no, str(exc), line) from None
                if timestamp_field:
                    timestamp = _timestamp_of(value, timestamp_field, line_no)
                    if expired is not None:
                        expired.check(timestamp)
            else:
                try:
                    line.decode()
                except UnicodeDecodeError:
                    raise _bad_line(line_no, "not UTF-8 text", line) from None
                payload = line
            if fixed_partition is not None:
                p = fixed_partition
            elif key is not None:
                p = partition_for_key(key, partitions)
            else:
                p = next(round_robin)
            buffers[p].append((key, payload, int(time.time() * 1000) if timestamp is None else timestamp, None))
            buffered += 1
            if buffered >= BATCH_RECORDS:
                await flush()
    finally:
        await flush()  # lines before a bad one are kept, as kafka-console-producer does
        await producer.flush()
        await producer.aclose()
    return produced


def _bad_line(line_no: int, why: str, line: bytes) -> click.ClickException:
    return click.ClickException(f"line {line_no}: {why}: {line[:80]!r}; the lines before it were produced")
