"""``ParquetArchive``: each input partition's records as Parquet files, exactly once."""
from __future__ import annotations

import os
from dataclasses import asdict, is_dataclass
from datetime import timedelta
from typing import Any, Dict, Mapping, Optional, Sequence, Union

import orjson

from ..errors import ConfigError, SerializationError
from .base import SinkRecord
from .file_archive import ArchivedRow, ArchiveFormat, FileArchiveSink

META_COLUMNS = ("key", "timestamp", "partition", "offset")
RESERVED_FIELDS = META_COLUMNS + ("value",)
"""Names a schema field may not take (``value`` marks an archive without a schema)."""
SchemaLike = Union["pyarrow.Schema", Mapping[str, Any]]  # noqa: F821


class ParquetFormat(ArchiveFormat):
    """Columns ``key`` (JSON text), ``value`` (JSON text) or the schema's fields,
    ``timestamp`` (epoch ms), ``partition`` and ``offset`` (of the input record)."""

    extension = "parquet"

    def __init__(self, schema: Optional[SchemaLike] = None, compression: str = "zstd") -> None:
        import pyarrow as pa

        self.compression = compression
        self.value_schema = None if schema is None else _value_schema(schema)
        value_fields = [pa.field("value", pa.string())] if self.value_schema is None else list(self.value_schema)
        self.schema = pa.schema([pa.field("key", pa.string()), *value_fields,
                                 pa.field("timestamp", pa.int64(), nullable=False),
                                 pa.field("partition", pa.int32(), nullable=False),
                                 pa.field("offset", pa.int64(), nullable=False)])

    def check_value(self, value: object, record: SinkRecord) -> None:
        if self.value_schema is None or value is None:
            return
        fields = _fields_of(value)
        if fields is None:
            raise SerializationError(f"the archive has a schema, so values must be dicts or dataclasses; "
                                     f"got {type(value).__name__}")
        unknown = [name for name in fields if self.value_schema.get_field_index(name) < 0]
        if unknown:
            raise SerializationError(f"value field(s) {', '.join(map(repr, unknown))} are not in the archive "
                                     f"schema ({', '.join(self.value_schema.names)})")
        import pyarrow as pa

        for name, field_value in fields.items():
            arrow_type = self.value_schema.field(name).type
            try:
                pa.scalar(field_value, type=arrow_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
                raise SerializationError(f"value field '{name}' = {field_value!r} does not fit the archive "
                                         f"schema's type {arrow_type}: {exc}") from None

    def write(self, path: str, rows: Sequence[ArchivedRow], partition: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns: Dict[str, Any] = {"key": [None if key is None else key.decode() for _, _, key, _ in rows]}
        if self.value_schema is None:
            columns["value"] = [None if value is None else value.decode() for _, _, _, value in rows]
        else:
            decoded = [{} if value is None else orjson.loads(value) for _, _, _, value in rows]
            for name in self.value_schema.names:
                columns[name] = [fields.get(name) for fields in decoded]
        columns["timestamp"] = [ts for _, ts, _, _ in rows]
        columns["partition"] = [partition] * len(rows)
        columns["offset"] = [offset for offset, _, _, _ in rows]
        table = pa.table(columns, schema=self.schema)
        with open(path, "wb") as f:
            pq.write_table(table, f, compression=self.compression)
            f.flush()
            os.fsync(f.fileno())


def _fields_of(value: object) -> Optional[Mapping[str, Any]]:
    if isinstance(value, Mapping):
        return value
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return None


def _value_schema(schema: SchemaLike) -> "pyarrow.Schema":  # noqa: F821
    import pyarrow as pa

    if isinstance(schema, pa.Schema):
        result = schema
    elif isinstance(schema, Mapping):
        fields = []
        for name, kind in schema.items():
            try:
                arrow_type = kind if isinstance(kind, pa.DataType) else pa.type_for_alias(str(kind))
            except ValueError:
                raise ConfigError(f"ParquetArchive schema: field '{name}' has unknown type {kind!r} (use a "
                                  "pyarrow type or a name such as 'string', 'int64', 'double', 'bool')") from None
            fields.append(pa.field(name, arrow_type))
        result = pa.schema(fields)
    else:
        raise ConfigError(f"ParquetArchive schema must be a pyarrow.Schema or a dict of field -> type, got {schema!r}")
    clash = [name for name in result.names if name in RESERVED_FIELDS]
    if clash:
        raise ConfigError(f"ParquetArchive schema: field(s) {', '.join(clash)} clash with the archive's own "
                          f"columns ({', '.join(RESERVED_FIELDS)})")
    return result


class ParquetArchive(FileArchiveSink):
    """Archive records to Parquet, one file series per input partition, exactly once.

    Files are named ``<topic>+<partition>+<first-offset>-<last-offset>.parquet`` after
    the input records they hold, and appear only complete. A file is rolled when it
    reaches ``roll_records`` or ``roll_interval`` of wall-clock age (checked at each
    commit), and when the task closes cleanly. Committed records not rolled yet wait
    in ``<path>/_staging``. ``schema`` (field -> pyarrow type) stores dict values as
    columns instead of JSON text; a None value is then a row of nulls, so a replay
    of such an archive cannot tell deletions apart.
    """

    def __init__(self, path: str, *, roll_records: int = 100_000,
                 roll_interval: Union[timedelta, float, None] = timedelta(minutes=10),
                 schema: Optional[SchemaLike] = None, compression: str = "zstd",
                 roll_on_close: bool = True) -> None:
        super().__init__(path, ParquetFormat(schema, compression), roll_records=roll_records,
                         roll_interval=roll_interval, roll_on_close=roll_on_close)
