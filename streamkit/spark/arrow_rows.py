"""The columns a replay moves between the JVM and its Python tasks, as Arrow batches.

Three row shapes (the first and last with an Arrow schema and the matching Spark schema):

- :data:`INPUT_FIELDS`: a replayed topic's records, one topic partition after the
  other in offset order: ``partition, pmax, offset, timestamp, key, value, headers``
  (``pmax``: the partition's running maximum timestamp, see :mod:`.ordering`).
- :data:`TASK_INPUT_COLUMNS`: what a stage's function reads from its sorted input:
  ``task, source, offset, timestamp, key, value, headers`` (``source``: the record's
  topic as its place in the stage's list of input topics; ``offset`` -1 for a record
  another stage sent: the task numbers those itself).
- :data:`EMITTED_FIELDS`: everything a stage produced, one ``kind`` per row:

  ``topic``: a record sent to topic ``name`` partition ``partition``, with its place in
  the live output order (``pmax``, ``sender``, ``sequence``: see :class:`EmittedRows`).
  A record of a repartition topic whose reader merges its writers carries its writer
  stamp (:mod:`streamkit.runtime.ordering.repartition_stamps`) in ``writer``/``writer_time`` instead of
  as its last header.
  ``sink``: a record external sink ``name`` received (``key_text``/``value_text``: JSON).
  ``store``: a final entry of store ``name`` in task ``partition`` (JSON text).
  ``input``: ``sequence`` records read from replayed topic ``name`` (partition
  ``partition``), so that the count is exact whatever Spark re-executes.
  ``tally``: ``sequence`` rows of kind and name ``name`` (``"<kind>:<name>"``) came out
  of this Spark partition, so that counting a stage's output reads a few rows.
  ``slice``: what one slice of a task sent (:mod:`.slicing`): ``sequence`` records to
  ``name`` (``"topic:<topic>"`` partition ``partition``, or ``"sink:<node>"``), the
  largest of their timestamps in ``pmax``; ``"stream_time"``: the slice's stream
  time at its end in ``pmax``.

  ``slice``, the last column, numbers the slice of a task that emitted the row, when
  a stateless stage ran its tasks in slices (:mod:`.slicing`); null otherwise.

Headers are one binary column (:data:`HEADERS`), null for a record without headers
(a count of 0 for an empty tuple): they round-trip exactly.
"""
from __future__ import annotations

import struct
from operator import itemgetter
from typing import AbstractSet, Any, Dict, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc

from ..core.records import Headers
from ..runtime.ordering.repartition_stamps import RECORD_STAMP, WRITER_HEADER

HEADERS = pa.binary()
"""Record headers, encoded: a 4-byte count, then per header a 4-byte name length, the name
(UTF-8), a 4-byte value length (-1: no value) and the value; all lengths signed big-endian.
(A list of structs would be the plainer Arrow type, but Spark writes that type to
Arrow more than ten times slower than all the other columns together, even when null.)"""
HEADERS_DDL = "binary"
_LENGTH = struct.Struct(">i")
_NULL_VALUE = _LENGTH.pack(-1)

Field = Tuple[str, Any, str]
"""(name, Arrow type, Spark SQL type)."""

INPUT_FIELDS: Sequence[Field] = (
    ("partition", pa.int32(), "int"), ("pmax", pa.int64(), "bigint"), ("offset", pa.int64(), "bigint"),
    ("timestamp", pa.int64(), "bigint"), ("key", pa.binary(), "binary"), ("value", pa.binary(), "binary"),
    ("headers", HEADERS, HEADERS_DDL))

TASK_INPUT_COLUMNS = ("task", "source", "offset", "timestamp", "key", "value", "headers")

EMITTED_FIELDS: Sequence[Field] = (
    ("kind", pa.string(), "string"), ("name", pa.string(), "string"), ("partition", pa.int32(), "int"),
    ("pmax", pa.int64(), "bigint"), ("sender", pa.int64(), "bigint"), ("sequence", pa.int64(), "bigint"),
    ("timestamp", pa.int64(), "bigint"), ("key", pa.binary(), "binary"), ("value", pa.binary(), "binary"),
    ("headers", HEADERS, HEADERS_DDL), ("writer", pa.int64(), "bigint"), ("writer_time", pa.int64(), "bigint"),
    ("key_text", pa.string(), "string"), ("value_text", pa.string(), "string"), ("slice", pa.int32(), "int"))


def arrow_schema(fields: Sequence[Field]) -> pa.Schema:
    """The Arrow schema of ``fields``."""
    return pa.schema([(name, arrow_type) for name, arrow_type, _ddl in fields])


def spark_schema(fields: Sequence[Field]) -> str:
    """The Spark schema of ``fields`` as DDL (what ``mapInArrow`` takes)."""
    return ", ".join(f"`{name}` {ddl}" for name, _arrow_type, ddl in fields)


INPUT_SCHEMA = arrow_schema(INPUT_FIELDS)
EMITTED_SCHEMA = arrow_schema(EMITTED_FIELDS)


def emitted_select(frame: Any, **columns: Any) -> Any:
    """``frame`` as :data:`EMITTED_FIELDS` rows: the given Spark column per field, null for the others."""
    from pyspark.sql import functions as F

    return frame.select(*[columns.get(name, F.lit(None)).cast(ddl).alias(name)
                          for name, _arrow_type, ddl in EMITTED_FIELDS])


def encode_headers(headers: Headers) -> Optional[bytes]:
    """Record headers in :data:`HEADERS`' encoding (None stays None)."""
    if headers is None:
        return None
    parts = [_LENGTH.pack(len(headers))]
    for name, value in headers:
        encoded = name.encode()
        parts.append(_LENGTH.pack(len(encoded)))
        parts.append(encoded)
        if value is None:
            parts.append(_NULL_VALUE)
        else:
            parts.append(_LENGTH.pack(len(value)))
            parts.append(value)
    return b"".join(parts)


def decode_headers(data: Optional[bytes]) -> Headers:
    """The inverse of :func:`encode_headers`."""
    if data is None:
        return None
    (count,) = _LENGTH.unpack_from(data, 0)
    at = 4
    out = []
    for _ in range(count):
        (size,) = _LENGTH.unpack_from(data, at)
        name = data[at + 4:at + 4 + size].decode()
        at += 4 + size
        (size,) = _LENGTH.unpack_from(data, at)
        at += 4
        if size < 0:
            out.append((name, None))
        else:
            out.append((name, data[at:at + size]))
            at += size
    return tuple(out)


def encoded_headers_column(column: Any) -> Any:
    """A Spark column of ``array<struct<key: string, value: binary>>`` (Kafka's headers) in
    :data:`HEADERS`' encoding, computed in Spark; an empty or null array gives null, as a
    record without headers."""
    from pyspark.sql import functions as F

    def length(expr: Any) -> Any:  # 4 bytes, big-endian
        return F.unhex(F.lpad(F.hex(expr), 8, "0"))

    def pair(header: Any) -> Any:
        key = F.encode(header["key"], "UTF-8")
        value = header["value"]
        value_part = F.when(value.isNull(), F.unhex(F.lit("FFFFFFFF"))).otherwise(F.concat(length(F.length(value)),
                                                                                            value))
        return F.concat(length(F.length(key)), key, value_part)

    encoded = F.aggregate(column, length(F.size(column)), lambda acc, header: F.concat(acc, pair(header)))
    return F.when(F.size(column) > 0, encoded)


def headers_to_arrow(values: Sequence[Headers]) -> pa.Array:
    """Record headers (None or a tuple of (name, value) pairs) as a :data:`HEADERS` column."""
    if values.count(None) == len(values):
        return pa.nulls(len(values), HEADERS)
    return pa.array([encode_headers(h) for h in values], HEADERS)


def headers_from_arrow(column: Any) -> List[Headers]:
    """The inverse of :func:`headers_to_arrow`."""
    if column.null_count == len(column):
        return [None] * len(column)
    return [decode_headers(data) for data in column.to_pylist()]


def column_values(batch: Any, name: str) -> List[Any]:
    """Column ``name`` of ``batch`` as Python values (None for nulls)."""
    column = batch.column(name)
    if column.null_count == len(column):
        return [None] * len(column)
    return column.to_pylist()


class EmittedRows:
    """Rows of :data:`EMITTED_FIELDS`, taken as record batches.

    A sent record's place in the live output order: ``sequence`` counts what its task
    sent to that topic partition, ``pmax`` is the running maximum of those records'
    timestamps, and ``sender`` is the sending stage's rank times
    :data:`~.ordering.SENDER_RANK` plus the sending task. Sent records arrive in runs
    (one topic partition's records of one drain) and become Arrow columns a run at a
    time; the other rows are gathered column by column. Records of ``stamped_topics``
    (repartition topics whose readers merge their writers) carry a writer stamp as
    their last header: it goes to ``writer``/``writer_time``."""

    BATCH_ROWS = 32_768
    """Rows per record batch handed back to Spark (about)."""

    def __init__(self, stamped_topics: AbstractSet[str] = frozenset()) -> None:
        self.stamped_topics = stamped_topics
        self.slice: Optional[int] = None
        """The slice the rows added now come from (:mod:`.slicing`), or None."""
        self._columns: List[List[Any]] = [[] for _ in EMITTED_FIELDS]
        self._runs: List[pa.RecordBatch] = []
        self._run_rows = 0
        self._tallies: Dict[Tuple[str, str], int] = {}

    def __len__(self) -> int:
        return self._run_rows + len(self._columns[0])

    @property
    def full(self) -> bool:
        return len(self) >= self.BATCH_ROWS

    def add_topic_records(self, topic: str, partition: int, sender: int, sequence: int, pmax: int,
                          records: Sequence[Any]) -> Tuple[int, int]:
        """Append ``records`` ((key, value, timestamp, headers), as a task sent them to
        ``topic`` ``partition``) numbered from ``sequence``, the running maximum timestamp
        continuing from ``pmax``; return the next (sequence, pmax)."""
        n = len(records)
        self._tally("topic", topic, n)
        keys, values, timestamps, headers = zip(*records)
        stamps = pa.array(timestamps, pa.int64())
        pmaxes = pc.max_element_wise(pc.cumulative_max(stamps), pa.scalar(pmax, pa.int64()))
        if topic in self.stamped_topics:
            writers, writer_times, rest = _split_stamps(headers)
        else:
            writers = writer_times = pa.nulls(n, pa.int64())
            rest = headers_to_arrow(headers)
        columns = {"kind": pa.repeat(pa.scalar("topic", pa.string()), n),
                   "name": pa.repeat(pa.scalar(topic, pa.string()), n),
                   "partition": pa.repeat(pa.scalar(partition, pa.int32()), n), "pmax": pmaxes,
                   "sender": pa.repeat(pa.scalar(sender, pa.int64()), n),
                   "sequence": _numbers(sequence, n), "timestamp": stamps, "key": pa.array(keys, pa.binary()),
                   "value": pa.array(values, pa.binary()), "headers": rest, "writer": writers,
                   "writer_time": writer_times}
        if self.slice is not None:
            columns["slice"] = pa.repeat(pa.scalar(self.slice, pa.int32()), n)
        arrays = [columns[name] if name in columns else pa.nulls(n, arrow_type)
                  for name, arrow_type, _ddl in EMITTED_FIELDS]
        self._runs.append(pa.RecordBatch.from_arrays(arrays, schema=EMITTED_SCHEMA))
        self._run_rows += n
        return sequence + n, pmaxes[-1].as_py()

    def add_text_row(self, kind: str, name: str, partition: int, sender: Optional[int], sequence: Optional[int],
                     timestamp: Optional[int], key_text: Optional[str], value_text: Optional[str]) -> None:
        """A ``sink`` or ``store`` row."""
        self._tally(kind, name, 1)
        self._add(kind, name, partition, None, sender, sequence, timestamp, None, None, None, None, None,
                  key_text, value_text)

    def add_input_count(self, topic: str, partition: int, records: int) -> None:
        self._add("input", topic, partition, None, None, records, None, None, None, None, None, None, None, None)

    def add_slice_stat(self, name: str, partition: int, records: int, largest_time: int) -> None:
        """A ``slice`` row of the current slice (see the module docstring)."""
        self._add("slice", name, partition, largest_time, None, records, None, None, None, None, None, None, None,
                  None)

    def add_tallies(self) -> None:
        """A ``tally`` row per kind and name added since the last call."""
        for (kind, name), rows in sorted(self._tallies.items()):
            self._add("tally", f"{kind}:{name}", 0, None, None, rows, None, None, None, None, None, None, None, None)
        self._tallies.clear()

    def _tally(self, kind: str, name: str, rows: int) -> None:
        self._tallies[(kind, name)] = self._tallies.get((kind, name), 0) + rows

    def _add(self, *row: Any) -> None:
        """One row of every column but ``slice``, which is the current slice."""
        for column, value in zip(self._columns, row + (self.slice,)):
            column.append(value)

    def take_batches(self) -> List[pa.RecordBatch]:
        """Everything gathered so far, in order, as record batches; the rows are cleared."""
        batches = self._runs
        self._runs, self._run_rows = [], 0
        if self._columns[0]:
            arrays = []
            for (name, arrow_type, _ddl), values in zip(EMITTED_FIELDS, self._columns):
                arrays.append(headers_to_arrow(values) if name == "headers" else pa.array(values, arrow_type))
                values.clear()
            batches.append(pa.RecordBatch.from_arrays(arrays, schema=EMITTED_SCHEMA))
        if len(batches) <= 1:
            return batches
        return pa.Table.from_batches(batches, schema=EMITTED_SCHEMA).combine_chunks().to_batches()


_COUNTING = pa.array(range(1 << 16), pa.int64())


def _numbers(first: int, n: int) -> pa.Array:
    """``first, first + 1, ..., first + n - 1``."""
    if n <= len(_COUNTING):
        return pc.add(_COUNTING.slice(0, n), pa.scalar(first, pa.int64()))
    return pa.array(range(first, first + n), pa.int64())


def _split_stamps(headers: Sequence[Headers]) -> Tuple[pa.Array, pa.Array, pa.Array]:
    """Each record's writer stamp (rank, stream time: the last header of every record a
    task sends to a repartition topic whose reader merges its writers) and its headers
    without it, as Arrow columns."""
    n = len(headers)
    if None not in headers:
        lasts = list(map(itemgetter(-1), headers))
        if set(map(itemgetter(0), lasts)) == {WRITER_HEADER}:
            flat = struct.unpack(f">{2 * n}q", b"".join(map(itemgetter(1), lasts)))
            writers, times = pa.array(flat[0::2], pa.int64()), pa.array(flat[1::2], pa.int64())
            if max(map(len, headers)) == 1:  # the common case: no header but the stamp
                return writers, times, pa.nulls(n, HEADERS)
            return writers, times, headers_to_arrow([h[:-1] or None for h in headers])  # type: ignore[index]
    writers_out: List[Optional[int]] = []
    times_out: List[Optional[int]] = []
    rest: List[Headers] = []
    for h in headers:
        if h and h[-1][0] == WRITER_HEADER:
            writer, writer_time = RECORD_STAMP.unpack(h[-1][1])
            writers_out.append(writer)
            times_out.append(writer_time)
            rest.append(h[:-1] or None)
        else:
            writers_out.append(None)
            times_out.append(None)
            rest.append(h)
    return pa.array(writers_out, pa.int64()), pa.array(times_out, pa.int64()), headers_to_arrow(rest)
