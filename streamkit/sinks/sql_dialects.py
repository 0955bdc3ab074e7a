"""The SQL differences between the databases ``Database`` writes to: connecting,
placeholders, column types, which errors are worth a retry."""
from __future__ import annotations

import os
import sqlite3
from typing import Any, Tuple
from urllib.parse import urlparse

from ..errors import ConfigError


class Dialect:
    """One database family."""

    name = ""
    placeholder = "?"
    types = {bool: "BOOLEAN", int: "BIGINT", float: "DOUBLE PRECISION", str: "TEXT"}

    def connect(self) -> Any:
        raise NotImplementedError

    def begin(self, connection: Any) -> None:
        """Start a transaction that takes the write lock up front."""

    def is_transient(self, exc: BaseException) -> bool:
        return False

    def is_unique_violation(self, exc: BaseException) -> bool:
        return False

    def is_duplicate_table(self, exc: BaseException) -> bool:
        """A concurrent CREATE TABLE IF NOT EXISTS lost the race."""
        return False

    def column_type(self, value: Any) -> str:
        return self.types.get(type(value), "TEXT")

    def table_exists(self, cursor: Any, table: str) -> bool:
        raise NotImplementedError


class SQLiteDialect(Dialect):
    """SQLite through the standard library; the file is created if missing."""

    name = "sqlite"
    placeholder = "?"
    types = {bool: "INTEGER", int: "INTEGER", float: "REAL", str: "TEXT"}

    def __init__(self, path: str) -> None:
        self.path = path

    def connect(self) -> Any:
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        # Autocommit mode: transactions are begun explicitly (BEGIN IMMEDIATE takes the
        # write lock at once, so two writers wait for each other instead of deadlocking).
        connection = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        return connection

    def begin(self, connection: Any) -> None:
        connection.execute("BEGIN IMMEDIATE")

    def table_exists(self, cursor: Any, table: str) -> bool:
        cursor.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
        return cursor.fetchone() is not None

    def is_transient(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and any(
            word in str(exc).lower() for word in ("locked", "busy", "disk i/o"))

    def is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "unique" in str(exc).lower()


class PostgresDialect(Dialect):
    """PostgreSQL through psycopg 3 (``pip install 'streamkit[postgres]'``)."""

    name = "postgresql"
    placeholder = "%s"

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise ConfigError("Database sink: a postgresql:// URL needs psycopg; install it with "
                              "pip install 'streamkit[postgres]'") from None

    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.url, autocommit=False, connect_timeout=10)

    def table_exists(self, cursor: Any, table: str) -> bool:
        cursor.execute("SELECT to_regclass(%s)", (quote(table),))
        return cursor.fetchone()[0] is not None

    def is_transient(self, exc: BaseException) -> bool:
        import psycopg
        from psycopg import errors

        return isinstance(exc, (psycopg.OperationalError, errors.SerializationFailure, errors.DeadlockDetected))

    def is_unique_violation(self, exc: BaseException) -> bool:
        from psycopg import errors

        return isinstance(exc, errors.UniqueViolation)

    def is_duplicate_table(self, exc: BaseException) -> bool:
        from psycopg import errors

        return isinstance(exc, (errors.UniqueViolation, errors.DuplicateTable))


def dialect_for(url: str) -> Dialect:
    """``sqlite:///relative.db``, ``sqlite:////absolute.db`` or ``postgresql://…``."""
    if not isinstance(url, str):
        raise ConfigError(f"Database sink: url must be a string, got {url!r}")
    scheme = urlparse(url).scheme
    if scheme == "sqlite":
        path = url[len("sqlite:///"):] if url.startswith("sqlite:///") else ""
        if not path:
            raise ConfigError(f"Database sink: {url!r}: write sqlite:///relative/path.db or "
                              "sqlite:////absolute/path.db")
        return SQLiteDialect(path)
    if scheme in ("postgresql", "postgres"):
        return PostgresDialect(url)
    raise ConfigError(f"Database sink: unsupported URL {url!r}: use sqlite:///path.db or postgresql://user@host/db")


def quote(identifier: str) -> str:
    """A SQL identifier, double-quoted (letters, digits and underscores only)."""
    if not identifier or not all(c.isalnum() or c == "_" for c in identifier):
        raise ConfigError(f"Database sink: {identifier!r} is not a valid table or column name "
                          "(use letters, digits and underscores)")
    return f'"{identifier}"'


def create_if_missing(connection: Any, dialect: Dialect, table: str, definition: str) -> None:
    """``CREATE TABLE IF NOT EXISTS`` in its own transaction. Two tasks creating the same
    table at once may race (PostgreSQL then reports a duplicate): the loser finds it exists."""
    try:
        dialect.begin(connection)
        connection.cursor().execute(f"CREATE TABLE IF NOT EXISTS {quote(table)} ({definition})")
        connection.commit()
    except Exception as exc:
        connection.rollback()
        if not dialect.is_duplicate_table(exc):
            raise


def placeholders(dialect: Dialect, count: int) -> str:
    return ", ".join([dialect.placeholder] * count)


def columns_sql(names: Tuple[str, ...]) -> str:
    return ", ".join(quote(name) for name in names)
