"""``streamkit consume``: print records as JSON lines, like kafka-console-consumer."""
from __future__ import annotations

import asyncio
import base64
import decimal
import io
import os
import select
import stat
import sys
import time
from typing import Dict, List, Optional, Tuple, Union

import click
import orjson

from ..runtime.ordering.repartition_stamps import is_marker, is_stamped, without_stamp
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


FIELDS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
DEFAULT_FIELDS = ("topic", "partition", "offset", "timestamp", "key", "value")
"""Printed by default, with ``headers`` added for records that have any."""
_PROPERTY_FIELDS = {f"print.{name}": name for name in FIELDS}


@click.command()
@click.argument("topic")
@click.option("--group", metavar="GROUP", help="Consume as this group: start from and commit its offsets.")
@click.option("--from-beginning", is_flag=True,
              help="Start at the earliest offset when there is no committed offset (default: the end).")
@click.option("--partition", type=click.IntRange(min=0), default=None, metavar="N",
              help="Read only partition N (default: every partition).")
@click.option("--offset", "start_at", default=None, metavar="earliest|latest|N",
              help="Start here instead of the committed offset or the end: the log start, the log end, or "
                   "offset N of --partition (clamped to the partition's records, with a warning).")
@click.option("--max-messages", "--max", "max_records", type=click.IntRange(min=1), default=None, metavar="N",
              help="Exit after N records (--max is the same).")
@click.option("--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Exit after no record arrived for this long (default: wait forever).")
@click.option("--isolation-level", type=click.Choice(["read_committed", "read_uncommitted"]), default=None,
              help="read_committed (the default): only records of committed transactions; read_uncommitted: "
                   "also those of open and aborted ones.")
@click.option("--read-uncommitted", is_flag=True, help="The same as --isolation-level read_uncommitted.")
@click.option("--print", "print_fields", default=None, metavar="FIELD,...",
              help=f"The fields of each JSON line, in this order, among {', '.join(FIELDS)} (default: "
                   f"{', '.join(DEFAULT_FIELDS)}, and headers when a record has any).")
@click.option("--property", "properties", multiple=True, metavar="print.FIELD=true|false",
              help="kafka-console-consumer's print.key, print.timestamp, print.partition, print.offset, "
                   "print.headers, print.value (and print.topic): as there, the value alone unless others "
                   "are turned on (repeatable; instead of --print).")
@format_options(value_default="JSON where the bytes are JSON, else text, else base64")
@broker_option
def consume(topic: str, group: Optional[str], from_beginning: bool, partition: Optional[int],
            start_at: Optional[str], max_records: Optional[int], timeout: Optional[float],
            isolation_level: Optional[str], read_uncommitted: bool, print_fields: Optional[str],
            properties: Tuple[str, ...], broker: Optional[str],
            value_format: Optional[str] = None, key_format: Optional[str] = None,
            value_schema: Optional[str] = None, key_schema: Optional[str] = None,
            value_message: Optional[str] = None, key_message: Optional[str] = None,
            registry: str = "embedded") -> None:
    """Print TOPIC's records as JSON lines: key, value, partition, offset, timestamp.

    With --value-format/--key-format avro, json-schema or protobuf, records in
    Confluent's wire format are decoded with the schema their id names (fetched once
    per id from --registry), like kafka-avro-console-consumer; a record that does not
    decode is printed raw with an "error" field saying why.

    When the reader of the output goes away (``| head -1``), it stops quietly with
    exit code 0; with --group, the records it could not write are not committed.
    """
    if read_uncommitted and isolation_level == "read_committed":
        raise click.UsageError("--read-uncommitted contradicts --isolation-level read_committed")
    read_committed = not read_uncommitted and isolation_level != "read_uncommitted"
    start = _start_option(start_at, partition, from_beginning)
    fields = _fields(print_fields, properties)
    url = broker_url(broker)
    serdes = (registry_serde(key_format or "", key_schema, key_message, registry, topic=topic, is_key=True,
                             broker=url, required=False),
              registry_serde(value_format or "", value_schema, value_message, registry, topic=topic,
                             is_key=False, broker=url, required=False))
    counts = None
    with connected(broker) as transport:
        meta = require_topic(transport, topic)
        if partition is not None and partition >= meta.partitions:
            raise click.ClickException(f"topic '{topic}' has {meta.partitions} partition(s) (0 to "
                                       f"{meta.partitions - 1}): partition {partition} does not exist")
        chosen = list(range(meta.partitions)) if partition is None else [partition]
        try:
            counts = asyncio.run(_consume(transport, topic, chosen, group, from_beginning, max_records, timeout,
                                          read_committed, serdes, start=start, fields=fields))
        except KeyboardInterrupt:
            pass
    if counts is not None:
        consumed, lost = counts
        lost_note = f", {lost} record(s) deleted before they were read" if lost else ""
        click.echo(f"consumed {consumed} record(s){lost_note}", err=True)


def _start_option(start_at: Optional[str], partition: Optional[int], from_beginning: bool) -> Union[str, int, None]:
    """``--offset`` as "earliest", "latest", an offset (which needs ``--partition``), or None."""
    if start_at is None:
        return None
    if from_beginning:
        raise click.UsageError("give --from-beginning or --offset, not both")
    text = start_at.strip().lower()
    if text in ("earliest", "latest"):
        return text
    try:
        offset = int(text)
    except ValueError:
        offset = -1
    if offset < 0:
        raise click.BadParameter(f"expected earliest, latest or an offset >= 0, got {start_at!r}",
                                 param_hint="--offset")
    if partition is None:
        raise click.UsageError("--offset N needs --partition: an offset belongs to one partition")
    return offset


def _fields(print_fields: Optional[str], properties: Tuple[str, ...]) -> Optional[Tuple[str, ...]]:
    """The fields to print, in order, from ``--print`` or ``--property print.X=...``;
    None for the default."""
    if print_fields is not None and properties:
        raise click.UsageError("give --print or --property print.FIELD=..., not both")
    if print_fields is not None:
        chosen = tuple(name.strip().lower() for name in print_fields.split(",") if name.strip())
        unknown = [name for name in chosen if name not in FIELDS]
        if unknown or not chosen:
            raise click.BadParameter(f"{print_fields!r}: choose among {','.join(FIELDS)}", param_hint="--print")
        return tuple(dict.fromkeys(chosen))
    if not properties:
        return None
    on = {"value": True}  # kafka-console-consumer prints the value alone unless told otherwise
    for prop in properties:
        name, sep, value = prop.partition("=")
        flag = value.strip().lower()
        if not sep or name.strip() not in _PROPERTY_FIELDS or flag not in ("true", "false"):
            raise click.BadParameter(f"{prop!r}: expected print.FIELD=true|false with FIELD among "
                                     f"{','.join(FIELDS)}", param_hint="--property")
        on[_PROPERTY_FIELDS[name.strip()]] = flag == "true"
    chosen = tuple(name for name in FIELDS if on.get(name))
    if not chosen:
        raise click.BadParameter("every field is turned off", param_hint="--property")
    return chosen


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


async def _consume(transport, topic: str, partitions: List[int], group: Optional[str], from_beginning: bool,
                   max_records: Optional[int], timeout: Optional[float], read_committed: bool,
                   serdes: Tuple[Optional[Serde], Optional[Serde]] = (None, None), *,
                   start: Union[str, int, None] = None, fields: Optional[Tuple[str, ...]] = None
                   ) -> Tuple[int, int]:
    """Print the records of ``partitions``; return how many, and how many were deleted
    (retention, delete_records) between the group's committed offsets and what could be read.

    ``start``: "earliest", "latest" or an offset, over the committed offsets; ``fields``:
    those printed (None: :data:`DEFAULT_FIELDS` and headers when present)."""
    key_serde, value_serde = serdes
    # Without --group no group is involved at all: on a secured cluster reading needs no group ACL.
    reader = getattr(transport, "reader", None)
    consumer = transport.consumer(group or "streamkit-console", read_committed=read_committed) \
        if group or reader is None else reader(read_committed=read_committed)
    tps = [TopicPartition(topic, p) for p in partitions]
    positions = await consumer.committed(tps) if group and start is None else {}
    for tp in tps:
        if tp not in positions:
            positions[tp] = _start_position(transport, tp, start, from_beginning)
    consumer.assign(tps, positions)
    out = _Output(sys.stdout)
    count = lost = 0
    last = time.monotonic()
    try:
        while max_records is None or count < max_records:
            batches = await consumer.fetch(0.1)
            lost += _report_lost(consumer)
            if not batches:
                if timeout is not None and time.monotonic() - last >= timeout:
                    break
                if out.reader_gone():  # `| head` is satisfied while we wait for records: done
                    _silence_stdout()
                    break
                continue
            last = time.monotonic()
            done: Dict[TopicPartition, int] = {}
            lines: List[bytes] = []
            for batch in batches:
                for record in batch.records:
                    done[TopicPartition(topic, batch.partition)] = record[0] + 1
                    if record[4] and is_stamped(record):  # a repartition topic's record or marker
                        if is_marker(record):
                            continue  # the app's progress bookkeeping, not a record
                        record = without_stamp(record)
                    lines.append(_line(topic, batch.partition, record, key_serde, value_serde, fields))
                    if max_records is not None and count + len(lines) >= max_records:
                        break
                if max_records is not None and count + len(lines) >= max_records:
                    break
            try:
                out.write(b"".join(lines))
            except BrokenPipeError:
                _silence_stdout()  # the reader (`| head`) has gone: stop without committing these
                break
            count += len(lines)
            if group:
                await consumer.commit(done)
    finally:
        await consumer.aclose()
    return count, lost


def _start_position(transport, tp: TopicPartition, start: Union[str, int, None], from_beginning: bool) -> int:
    """Where ``tp`` is read from without a committed offset (or with ``--offset``)."""
    offsets = transport.admin.partition_offsets(tp.topic, tp.partition)
    if start == "earliest" or (start is None and from_beginning):
        return offsets.start
    if start == "latest" or start is None:
        return offsets.end
    assert isinstance(start, int)
    if not offsets.start <= start <= offsets.end:
        position = min(max(start, offsets.start), offsets.end)
        click.echo(f"warning: {tp.topic}[{tp.partition}]: offset {start} is outside its records ({offsets.start} "
                   f"to {offsets.end}): starting at {position}", err=True)
        return position
    return start


def _line(topic: str, partition: int, record, key_serde: Optional[Serde], value_serde: Optional[Serde],
          fields: Optional[Tuple[str, ...]]) -> bytes:
    """One record as a JSON line of ``fields`` (an "error" field added when it does not decode)."""
    offset, ts, key, value, headers = record
    errors: List[str] = []
    everything = {"topic": topic, "partition": partition, "offset": offset, "timestamp": ts,
                  "key": _decoded(key_serde, key, errors) if fields is None or "key" in fields else None,
                  "value": _decoded(value_serde, value, errors) if fields is None or "value" in fields else None,
                  "headers": {name: render(v) for name, v in headers or ()}}
    if fields is None:
        line = {name: everything[name] for name in DEFAULT_FIELDS}
        if headers:
            line["headers"] = everything["headers"]
    else:
        line = {name: everything[name] for name in fields}
    if errors:
        line["error"] = "; ".join(errors)
    return orjson.dumps(line, default=_json_default, option=orjson.OPT_APPEND_NEWLINE)


class _Output:
    """Standard output for JSON lines, which tells when its reader has gone.

    A pipe's end is written with ``os.write`` until every byte is taken, so a reader
    that leaves mid-batch (``| head -1``) is always a BrokenPipeError (buffered text
    writes can lose that error after a partial write); while no record comes, a
    closed pipe is seen by polling it (POLLERR)."""

    def __init__(self, stream) -> None:
        self._stream = stream
        try:
            self._fd: Optional[int] = stream.fileno()
        except (AttributeError, OSError, io.UnsupportedOperation):
            self._fd = None  # not a file (a test's captured output)
        self._poll = None
        if self._fd is not None and stat.S_ISFIFO(os.fstat(self._fd).st_mode):
            self._poll = select.poll()
            self._poll.register(self._fd, 0)  # POLLERR and POLLHUP are always reported

    def write(self, data: bytes) -> None:
        """Write ``data`` (UTF-8 JSON lines) entirely; BrokenPipeError when the reader has gone."""
        if self._fd is None:
            self._stream.write(data.decode())
            self._stream.flush()
            return
        self._stream.flush()
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def reader_gone(self) -> bool:
        """Whether stdout is a pipe whose reading end has been closed."""
        return self._poll is not None and any(events & (select.POLLERR | select.POLLHUP)
                                              for _, events in self._poll.poll(0))


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's flush at exit does not fail
    again on the closed pipe (Python's documented way for SIGPIPE-free tools)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


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
