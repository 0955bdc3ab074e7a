"""``Database``: upsert rows into SQLite or PostgreSQL, exactly once.

The sink keeps, in a table of the same database, the next input offset per
(app, sink, topic, partition), and writes it in the same transaction as the rows.
On start it reads them back and skips records from earlier offsets: a crash after
the database committed but before the broker did makes the task reprocess those
records, and their rows are not written twice. That holds under at_least_once
processing too. The offsets row also fences: a transaction that finds it moved
since this task started (another worker took the task over) is rolled back.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, is_dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import orjson

from ..errors import ConfigError, SerializationError, TaskMigratedError
from ..core.records import TopicPartition
from ..windowing import Windowed
from .base import Positions, Sink, SinkRecord, SinkTask, SinkWriter
from .sql_dialects import Dialect, columns_sql, create_if_missing, dialect_for, placeholders, quote

log = logging.getLogger(__name__)

RowFunction = Callable[[Any, Any], Optional[Mapping[str, Any]]]
OFFSETS_COLUMNS = ("group_id", "sink", "topic", "partition", "next_offset")


class Database(Sink):
    """Upsert each record as a row of ``table``, keyed by ``key_columns``.

    ``row(key, value)`` builds the row (None deletes the key's row); by default the
    row is the key's fields (a dict key, a ``Windowed`` key as ``key``/``window_start``/
    ``window_end``, or a scalar key in the single key column) plus the value's
    fields (a dict or dataclass; anything else in column ``value``); a None value
    deletes the row. Nested dicts and lists are stored as JSON text. The table is
    created on the first write if missing, with ``columns`` (name -> SQL type) or
    types guessed from the first row. Rows are written once per commit, the latest
    per key.
    """

    def __init__(self, url: str, table: str, *, key_columns: Sequence[str],
                 columns: Optional[Mapping[str, str]] = None, row: Optional[RowFunction] = None,
                 offsets_table: str = "streamkit_offsets") -> None:
        self.url = url
        self.dialect: Dialect = dialect_for(url)
        if isinstance(key_columns, str):
            key_columns = (key_columns,)
        if not key_columns:
            raise ConfigError(f"Database sink for table {table!r}: key_columns must name at least one column")
        self.table = table
        self.key_columns = tuple(key_columns)
        for name in (table, offsets_table, *self.key_columns, *(columns or {})):
            quote(name)  # validates
        self.columns = dict(columns) if columns else None
        if self.columns is not None:
            missing = [c for c in self.key_columns if c not in self.columns]
            if missing:
                raise ConfigError(f"Database sink for table {table!r}: key column(s) {missing} are not in columns=")
        if row is not None and not callable(row):
            raise ConfigError(f"Database sink for table {table!r}: row must be a function (key, value) -> dict")
        self.row = row
        self.offsets_table = offsets_table

    def open(self, task: SinkTask) -> SinkWriter:
        return DatabaseWriter(self, task)

    def describe(self) -> str:
        where = self.url if self.dialect.name == "sqlite" else self.url.split("@")[-1]  # no password
        return f"Database({where}, table {self.table})"

    def row_of(self, key: Any, value: Any) -> Optional[Dict[str, Any]]:
        if self.row is not None:
            built = self.row(key, value)
            return None if built is None else dict(built)
        if value is None:
            return None
        row = self.key_row(key)
        fields = _fields(value)
        row.update(fields if fields is not None else {"value": value})
        return row

    def key_row(self, key: Any) -> Dict[str, Any]:
        if isinstance(key, Windowed):
            row = self.key_row(key.key) if isinstance(key.key, Mapping) or is_dataclass(key.key) else {"key": key.key}
            row["window_start"] = key.start
            row["window_end"] = key.end
            return row
        fields = _fields(key)
        if fields is not None:
            return dict(fields)
        return {self.key_columns[0] if len(self.key_columns) == 1 else "key": key}


def _fields(value: Any) -> Optional[Dict[str, Any]]:
    if isinstance(value, Mapping):
        return dict(value)
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return None


SCALARS = (str, int, float, bool, bytes, type(None))
INT64 = (-(1 << 63), (1 << 63) - 1)


def _checked_row(row: Mapping[str, Any]) -> Dict[str, Any]:
    """The row with nested values as JSON text; raises for a name or value no column can hold."""
    out = {}
    for name, value in row.items():
        if not isinstance(name, str) or not name or not all(c.isalnum() or c == "_" for c in name):
            raise SerializationError(f"field {name!r} cannot be a column name (use letters, digits and underscores)")
        if isinstance(value, (dict, list, tuple)):
            try:
                value = orjson.dumps(value).decode()
            except TypeError as exc:
                raise SerializationError(f"field '{name}' cannot be stored as JSON text: {exc}") from None
        elif not isinstance(value, SCALARS):
            raise SerializationError(f"field '{name}' has a {type(value).__name__} value, which no column type holds "
                                     "(use str, int, float, bool, bytes, or a dict/list for JSON text)")
        elif isinstance(value, int) and not isinstance(value, bool) and not INT64[0] <= value <= INT64[1]:
            raise SerializationError(f"field '{name}' = {value} does not fit a 64-bit integer column")
        out[name] = value
    return out


class DatabaseWriter(SinkWriter):
    """One task's connection; one transaction per commit."""

    sink: Database

    def __init__(self, sink: Database, task: SinkTask) -> None:
        super().__init__(sink, task)
        self._connection: Any = None
        self._stored: Dict[TopicPartition, int] = {}
        self._table_ready = False
        self._rows: Dict[Tuple[Any, ...], Optional[Dict[str, Any]]] = {}
        """The latest row per key since the last commit (None: delete it)."""

    # -- connection --------------------------------------------------------------------
    def _connect(self) -> Any:
        if self._connection is None:
            self._connection = self.sink.dialect.connect()
        return self._connection

    def reconnect(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            except Exception:  # noqa: BLE001 - a broken connection may fail to close
                pass
            self._connection = None

    def is_transient(self, exc: BaseException) -> bool:
        return self.sink.dialect.is_transient(exc)

    def close(self) -> None:
        self.reconnect()

    # -- start -------------------------------------------------------------------------
    def resume(self) -> Dict[TopicPartition, int]:
        sink, dialect = self.sink, self.sink.dialect
        connection = self._connect()
        create_if_missing(connection, dialect, sink.offsets_table,
                          f"{quote('group_id')} TEXT NOT NULL, {quote('sink')} TEXT NOT NULL, "
                          f"{quote('topic')} TEXT NOT NULL, {quote('partition')} INTEGER NOT NULL, "
                          f"{quote('next_offset')} BIGINT NOT NULL, PRIMARY KEY ({columns_sql(OFFSETS_COLUMNS[:4])})")
        cursor = connection.cursor()
        cursor.execute(
            f"SELECT {quote('topic')}, {quote('partition')}, {quote('next_offset')} FROM {quote(sink.offsets_table)} "
            f"WHERE {quote('group_id')} = {dialect.placeholder} AND {quote('sink')} = {dialect.placeholder}",
            (self.task.app_id, self.task.sink_name))
        inputs = set(self.task.inputs)
        stored = {}
        for topic, partition, next_offset in cursor.fetchall():
            tp = TopicPartition(topic, int(partition))
            if tp in inputs:
                stored[tp] = int(next_offset)
        connection.commit()
        self._stored = stored
        return dict(stored)

    # -- writing -----------------------------------------------------------------------
    def accept(self, record: SinkRecord) -> None:
        sink = self.sink
        try:
            row = sink.row_of(record.key, record.value)
        except Exception as exc:
            raise SerializationError(f"{self.where()}: building the row failed: {type(exc).__name__}: {exc}") from exc
        if row is None:  # a deletion: the key columns come from the key alone
            row_key = sink.key_row(record.key)
        else:
            row_key = row
        missing = [column for column in sink.key_columns if column not in row_key]
        if missing:
            raise SerializationError(f"{self.where()}: the row has no key column(s) {', '.join(missing)} "
                                     f"(row fields: {', '.join(row_key) or 'none'})")
        checked = _checked_row(row_key if row is None else row)
        key = tuple(checked[column] for column in sink.key_columns)
        self._rows.pop(key, None)  # keep first-written order of the latest rows
        self._rows[key] = None if row is None else checked

    def discard(self) -> int:
        self._rows.clear()
        return super().discard()

    def deliver(self, records: Sequence[SinkRecord], positions: Positions) -> None:
        sink, dialect = self.sink, self.sink.dialect
        connection = self._connect()
        if not self._table_ready:
            self._table_ready = self._ensure_table(connection)
        try:
            dialect.begin(connection)
            cursor = connection.cursor()
            new_stored = self._advance_offsets(cursor, positions)
            upserts: Dict[Tuple[str, ...], List[Tuple[Any, ...]]] = {}
            deletes: List[Tuple[Any, ...]] = []
            for key, row in self._rows.items():
                if row is None:
                    deletes.append(key)
                else:
                    names = tuple(row)
                    upserts.setdefault(names, []).append(tuple(row[name] for name in names))
            for names, values in upserts.items():
                cursor.executemany(self._upsert_sql(names), values)
            if deletes and self._table_ready:  # no table yet: nothing to delete
                condition = " AND ".join(f"{quote(c)} = {dialect.placeholder}" for c in sink.key_columns)
                cursor.executemany(f"DELETE FROM {quote(sink.table)} WHERE {condition}", deletes)
            connection.commit()
        except BaseException:
            try:
                connection.rollback()
            except Exception:  # noqa: BLE001 - the connection may be gone; reconnect() follows
                pass
            raise
        self._stored = new_stored
        self._rows.clear()

    def _ensure_table(self, connection: Any) -> bool:
        """Create the table if missing (its own transaction); whether it exists now."""
        sink = self.sink
        columns = sink.columns
        if columns is None:
            first = next((row for row in self._rows.values() if row is not None), None)
            if first is None:  # only deletions so far: nothing to create the table from
                exists = sink.dialect.table_exists(connection.cursor(), sink.table)
                connection.commit()
                return exists
            columns = {name: sink.dialect.column_type(value) for name, value in first.items()}
        definitions = ", ".join(f"{quote(name)} {kind}" for name, kind in columns.items())
        create_if_missing(connection, sink.dialect, sink.table,
                          f"{definitions}, PRIMARY KEY ({columns_sql(sink.key_columns)})")
        return True

    def _upsert_sql(self, names: Tuple[str, ...]) -> str:
        sink, dialect = self.sink, self.sink.dialect
        updates = [name for name in names if name not in sink.key_columns]
        conflict = (f"DO UPDATE SET {', '.join(f'{quote(n)} = excluded.{quote(n)}' for n in updates)}"
                    if updates else "DO NOTHING")
        return (f"INSERT INTO {quote(sink.table)} ({columns_sql(names)}) VALUES ({placeholders(dialect, len(names))}) "
                f"ON CONFLICT ({columns_sql(sink.key_columns)}) {conflict}")

    def _advance_offsets(self, cursor: Any, positions: Positions) -> Dict[TopicPartition, int]:
        """Store the task's next offsets; fail if another writer moved them since we read them."""
        sink, p = self.sink, self.sink.dialect.placeholder
        table = quote(sink.offsets_table)
        where = (f"{quote('group_id')} = {p} AND {quote('sink')} = {p} AND {quote('topic')} = {p} "
                 f"AND {quote('partition')} = {p}")
        stored = dict(self._stored)
        for tp, offset in positions.items():
            ids = (self.task.app_id, self.task.sink_name, tp.topic, tp.partition)
            expected = self._stored.get(tp)
            if expected is not None and offset < expected:
                offset = expected  # reprocessing below what was delivered: never move back
            if expected is None:
                try:
                    cursor.execute(f"INSERT INTO {table} ({columns_sql(OFFSETS_COLUMNS)}) "
                                   f"VALUES ({', '.join([p] * 5)})", (*ids, offset))
                except Exception as exc:
                    if sink.dialect.is_unique_violation(exc):
                        raise self._fenced(tp) from exc
                    raise
            else:
                cursor.execute(f"UPDATE {table} SET {quote('next_offset')} = {p} WHERE {where} "
                               f"AND {quote('next_offset')} = {p}", (offset, *ids, expected))
                if cursor.rowcount != 1:
                    raise self._fenced(tp)
            stored[tp] = offset
        return stored

    def _fenced(self, tp: TopicPartition) -> TaskMigratedError:
        return TaskMigratedError(f"{self.where()}: another writer stored offsets of {tp.topic}[{tp.partition}] "
                                 "since this task started; the task moved to another worker")
