"""Sinks beyond topics: ``stream.sink(sk.sinks.ParquetArchive(path))`` and friends.

Every sink delivers at the task's commit, before the input offsets are committed,
retries transient errors with a bound, and stops the worker with a clear error
otherwise. ``ParquetArchive``, ``JsonLines`` and ``Database`` are exactly once
under either processing guarantee; ``Callback`` is at least once.
"""
from ..errors import SinkError, TransientSinkError
from .base import RetryPolicy, Sink, SinkRecord, SinkTask, SinkWriter
from .callback import Callback
from .database import Database
from .json_lines import JsonLines
from .parquet_archive import ParquetArchive

__all__ = ["Sink", "SinkWriter", "SinkRecord", "SinkTask", "RetryPolicy", "ParquetArchive", "JsonLines",
           "Database", "Callback", "SinkError", "TransientSinkError"]
