"""``streamkit produce``: one record per stdin line, like kafka-console-producer."""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import select
import sys
import time
from dataclasses import dataclass
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

import click
import orjson

from ..errors import SerializationError, StreamkitError
from ..serdes import Json, Serde
from ..core.records import OutgoingRecord, TopicPartition
from ..core.partitioner import partition_for_key
from .common import (REGISTRY_FORMATS, broker_option, broker_url, connected, format_options, registry_serde,
                     require_topic)

log = logging.getLogger(__name__)

BATCH_RECORDS = 1000
LINGER_SECONDS = 0.05  # send what we have when stdin pauses this long (interactive use)
READ_BYTES = 1 << 20  # per read of stdin
JSON = Json()


def _stdin_lines() -> Iterator[Tuple[bytes, bool]]:
    """Yield (line, more_ready): ``more_ready`` is False when stdin has paused.

    Linear in the input: each chunk is scanned for newlines once, and the pieces of a
    line longer than a chunk are joined once, when its newline (or the end) arrives.
    """
    fd = sys.stdin.fileno()
    pieces: List[bytes] = []  # the current line so far, not yet ended by a newline
    while True:
        ready, _, _ = select.select([fd], [], [], LINGER_SECONDS)
        if not ready:
            yield b"", False
            continue
        chunk = os.read(fd, READ_BYTES)
        if not chunk:
            if pieces:
                yield b"".join(pieces), True
            return
        start = 0
        end = chunk.find(b"\n")
        while end >= 0:
            if pieces:
                pieces.append(chunk[start:end])
                line = b"".join(pieces)
                pieces = []
            else:
                line = chunk[start:end]
            yield line, True
            start = end + 1
            end = chunk.find(b"\n", start)
        if start < len(chunk):
            pieces.append(chunk[start:])


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


class _Acknowledged:
    """What the broker acknowledged, per partition: record count, first and last offset
    (other producers' records may lie between them), for the report after a failure."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.spans: Dict[int, List[int]] = {}  # partition -> [count, first offset, last offset]
        self.unconfirmed: Dict[int, int] = {}  # partition -> records sent, not acknowledged yet

    @property
    def count(self) -> int:
        return sum(span[0] for span in self.spans.values())

    @property
    def pending(self) -> int:
        return sum(self.unconfirmed.values())

    def sent(self, partition: int, records: int) -> None:
        self.unconfirmed[partition] = self.unconfirmed.get(partition, 0) + records

    def confirm(self, ends: Mapping[TopicPartition, int]) -> None:
        """Take the offsets after the last records a producer reported, for every record
        sent to those partitions since the last confirmation."""
        for tp, end in ends.items():
            records = self.unconfirmed.pop(tp.partition, 0)
            if tp.topic != self.topic or not records:
                continue
            span = self.spans.get(tp.partition)
            if span is None:
                self.spans[tp.partition] = [records, end - records, end - 1]
            else:
                span[0] += records
                span[2] = end - 1

    def failure(self, exc: BaseException, lines_read: int) -> click.ClickException:
        where = "; ".join(f"partition {p}: {count} at offsets {first} to {last}"
                          for p, (count, first, last) in sorted(self.spans.items()))
        landed = f"{self.count} record(s) acknowledged before the failure ({where})" if self.spans else \
            "no record acknowledged before the failure"
        lost = (f"; {self.pending} record(s) sent after them were not acknowledged (see the error for what "
                f"may have landed)") if self.pending else ""
        return click.ClickException(f"producing to {self.topic} failed after {lines_read} line(s) of input: "
                                    f"{exc}. {landed}{lost}")


async def _produce(transport, topic: str, partitions: int, key_field: Optional[str],
                   fixed_partition: Optional[int], fmt: str, timestamp_field: Optional[str] = None,
                   expired: Optional[_Expired] = None, *, key_format: Optional[str] = None,
                   key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None) -> int:
    """Produce stdin's lines; the number of records acknowledged. A failure to send raises
    a ClickException saying what was acknowledged before it, per partition."""
    producer = transport.producer()
    buffers: List[List[OutgoingRecord]] = [[] for _ in range(partitions)]
    encoder = _LineEncoder(fmt, partitions, fixed_partition, key_field, key_format, key_serde, value_serde,
                           timestamp_field, expired)
    acknowledged = _Acknowledged(topic)
    buffered = 0

    async def flush() -> None:
        # one partition per send: a failure then leaves the others' acknowledgements known
        nonlocal buffered
        for p, records in enumerate(buffers):
            if records:
                buffers[p] = []
                buffered -= len(records)
                acknowledged.sent(p, len(records))
                acknowledged.confirm(await producer.send([(topic, p, records)]))

    async def finish() -> None:
        await flush()
        acknowledged.confirm(await producer.delivered())  # producers that pipeline: their acks
        await producer.flush()

    line_no = 0
    try:
        try:
            for line, more in _stdin_lines():
                if not more:
                    await flush()
                    continue
                line_no += 1
                placed = encoder.record(line, line_no)
                if placed is None:
                    continue
                buffers[placed[0]].append(placed[1])
                buffered += 1
                if buffered >= BATCH_RECORDS:
                    await flush()
        except click.ClickException:
            await finish()  # lines before a bad one are kept, as kafka-console-producer does
            raise
        await finish()
    except (OSError, StreamkitError) as exc:
        raise acknowledged.failure(exc, line_no) from exc
    finally:
        await producer.aclose()
    return acknowledged.count


@dataclass
class _LineEncoder:
    """Turns input lines into records and picks their partitions, per the command's options."""

    fmt: str
    partitions: int
    fixed_partition: Optional[int]
    key_field: Optional[str]
    key_format: Optional[str]
    key_serde: Optional[Serde]
    value_serde: Optional[Serde]
    timestamp_field: Optional[str]
    expired: Optional[_Expired]

    def __post_init__(self) -> None:
        self._round_robin = itertools.cycle(range(self.partitions))

    def record(self, line: bytes, line_no: int) -> Optional[Tuple[int, OutgoingRecord]]:
        """(partition, record) for one input line; None for a blank line."""
        line = line.rstrip(b"\r")
        if not line.strip():
            return None
        key: Optional[bytes] = None
        timestamp: Optional[int] = None
        if self.fmt == "json":
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise _bad_line(line_no, f"not valid JSON ({exc})", line) from None
            try:
                if self.key_field:
                    key = _key_of(value, self.key_field, line_no, self.key_format, self.key_serde)
                if self.value_serde is not None:
                    payload = self.value_serde.serialize(value)
                else:
                    payload = b"null" if value is None else JSON.serialize(value)  # a value, not a tombstone
            except SerializationError as exc:
                raise _bad_line(line_no, str(exc), line) from None
            if self.timestamp_field:
                timestamp = _timestamp_of(value, self.timestamp_field, line_no)
                if self.expired is not None:
                    self.expired.check(timestamp)
        else:
            try:
                line.decode()
            except UnicodeDecodeError:
                raise _bad_line(line_no, "not UTF-8 text", line) from None
            payload = line
        if self.fixed_partition is not None:
            p = self.fixed_partition
        elif key is not None:
            p = partition_for_key(key, self.partitions)
        else:
            p = next(self._round_robin)
        return p, (key, payload, int(time.time() * 1000) if timestamp is None else timestamp, None)


def _bad_line(line_no: int, why: str, line: bytes) -> click.ClickException:
    return click.ClickException(f"line {line_no}: {why}: {line[:80]!r}; the lines before it were produced")
