"""Where a replay reads a topic's history: one reader per topic partition, in offset order.

Every input is a small picklable description; Spark ships it to the executors, and
each executor reads its own partitions (nothing passes through the driver):

- :class:`EmbeddedTopic`: a topic of an embedded broker directory (committed records).
- ``sk.sources.ParquetArchive`` / ``sk.sources.Files``: archives and files. Their keys
  and values are JSON; they are re-encoded with the replayed topic's serdes, bound as
  the worker binds them (a registry serde registers or looks up its schema under the
  topic's subject, from the executor, and writes Confluent's wire format).
- :class:`KafkaTopic`: a Kafka topic through Spark's Kafka source, ``read_committed``
  (needs the ``spark-sql-kafka-0-10`` jars on Spark's classpath: see :mod:`.kafka_input`).

``parse_input("DIR")``, ``"archive:DIR"``, ``"files:GLOB"``, ``"kafka:HOST:PORT"`` turn
the CLI's ``--input TOPIC=SOURCE`` into one of these.
"""
from __future__ import annotations

import abc
import os
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Tuple

from ..errors import ConfigError
from ..serdes import Json, Serde
from ..sources.base import Source
from ..sources.files import Files
from ..sources.parquet_archive import ParquetArchive
from ..core.records import RawRecord

READ_BATCH = 5000


class ReplayInput(abc.ABC):
    """The history of one topic, readable partition by partition on any executor."""

    topic: str

    @abc.abstractmethod
    def partitions(self) -> int:
        """How many partitions the topic had."""

    @abc.abstractmethod
    def read_chunks(self, partition: int) -> Iterator[List[RawRecord]]:
        """The partition's records in offset order, (offset, timestamp, key, value, headers),
        in consecutive non-empty lists."""

    def read(self, partition: int) -> Iterator[RawRecord]:
        """The partition's records in offset order."""
        for chunk in self.read_chunks(partition):
            yield from chunk

    def offset_range(self, partition: int) -> Optional[Tuple[int, int]]:
        """[first, end) offsets of the partition's records, for an input that can be read
        in offset ranges (:meth:`read_range_chunks`); None for one that cannot."""
        return None

    def read_range_chunks(self, partition: int, start: int, end: int) -> Iterator[List[RawRecord]]:
        """The partition's records with offsets in [start, end), in offset order, in
        consecutive non-empty lists (only where :meth:`offset_range` is not None)."""
        raise NotImplementedError(f"{self.describe()} cannot be read in offset ranges")

    @abc.abstractmethod
    def describe(self) -> str: ...


@dataclass(frozen=True)
class EmbeddedTopic(ReplayInput):
    """``topic`` of the embedded broker in ``directory`` (read_committed)."""

    directory: str
    topic: str

    def _broker(self) -> Any:
        from ..broker import EmbeddedBroker

        if not os.path.isdir(os.path.join(self.directory, "topics")):
            raise ConfigError(f"{self.directory} is not an embedded broker directory (it has no topics/ folder)")
        return EmbeddedBroker(self.directory)

    def partitions(self) -> int:
        broker = self._broker()
        try:
            meta = broker.topic(self.topic)
        finally:
            broker.close()
        if meta is None:
            raise ConfigError(f"embedded broker {self.directory} has no topic '{self.topic}'")
        return meta.partitions

    def read_chunks(self, partition: int) -> Iterator[List[RawRecord]]:
        broker = self._broker()
        try:
            reader = broker.reader(self.topic, partition)
            try:
                while True:
                    records = reader.read(READ_BATCH)
                    if not records:
                        return
                    yield records
            finally:
                reader.close()
        finally:
            broker.close()

    def offset_range(self, partition: int) -> Optional[Tuple[int, int]]:
        """From the log start to the last stable offset (the committed records)."""
        broker = self._broker()
        try:
            start = broker.partition_offsets(self.topic, partition).start
            return start, max(start, broker.last_stable_offset(self.topic, partition))
        finally:
            broker.close()

    def read_range_chunks(self, partition: int, start: int, end: int) -> Iterator[List[RawRecord]]:
        broker = self._broker()
        try:
            reader = broker.reader(self.topic, partition)
            try:
                reader.seek(start)
                while reader.position < end:
                    records = reader.read(min(READ_BATCH, end - reader.position))
                    if not records:
                        return
                    if records[-1][0] >= end:
                        records = [r for r in records if r[0] < end]
                        if records:
                            yield records
                        return
                    yield records
            finally:
                reader.close()
        finally:
            broker.close()

    def describe(self) -> str:
        return f"embedded broker {self.directory}, topic {self.topic}"


@dataclass(frozen=True)
class SourceInput(ReplayInput):
    """A file source (archive or files) replayed as ``topic``: its JSON keys and values
    re-encoded with the topic's serdes (kept as they are for JSON serdes)."""

    source: Source
    topic: str
    key_serde: Optional[Serde] = None
    value_serde: Optional[Serde] = None

    def partitions(self) -> int:
        return self.source.partitions()

    def read_chunks(self, partition: int) -> Iterator[List[RawRecord]]:
        reader = self.source.open_partition(partition)
        key_codec = _reencoder(self.key_serde)
        value_codec = _reencoder(self.value_serde)
        try:
            while True:
                records = reader.read(READ_BATCH)
                if not records:
                    return
                if key_codec is None and value_codec is None:
                    yield records
                    continue
                chunk = []
                for offset, timestamp, key, value, headers in records:
                    if key_codec is not None and key is not None:
                        key = key_codec(key)
                    if value_codec is not None and value is not None:
                        value = value_codec(value)
                    chunk.append((offset, timestamp, key, value, headers))
                yield chunk
        finally:
            reader.close()

    def describe(self) -> str:
        return self.source.describe()


def _reencoder(serde: Optional[Serde]) -> Any:
    if serde is None or isinstance(serde, Json):
        return None
    decode, encode = Json().deserialize, serde.serialize
    return lambda data: encode(decode(data))


@dataclass(frozen=True)
class KafkaTopic:
    """``topic`` on the Kafka cluster at ``bootstrap``, read whole with Spark's Kafka source
    (``spark.read.format("kafka")``), committed records only, as a worker reads it. The
    ``spark-sql-kafka-0-10`` jars must be on Spark's classpath: ``scripts/ensure-spark-kafka``
    fetches them and ``STREAMKIT_SPARK_JARS`` points :func:`~.session.get_session` at them."""

    bootstrap: str
    topic: str

    def describe(self) -> str:
        return f"Kafka {self.bootstrap}, topic {self.topic}"


InputSpec = Any
"""An :class:`EmbeddedTopic`, :class:`KafkaTopic`, ``sk.sources.ParquetArchive``,
``sk.sources.Files``, or a string for :func:`parse_input`."""


def parse_input(topic: str, spec: str) -> Any:
    """The input named by the CLI's ``TOPIC=SOURCE``:

    - ``DIR`` or ``embedded:DIR``: an embedded broker directory;
    - ``archive:DIR``: a Parquet archive written by ``sk.sinks.ParquetArchive``;
    - ``files:GLOB`` (JSON lines) or ``parquet-files:GLOB``;
    - ``kafka:HOST:PORT[,HOST:PORT]``.
    """
    kind, sep, rest = spec.partition(":")
    if not sep or len(kind) == 1:  # a plain path (or a Windows drive letter)
        kind, rest = "embedded", spec
    if kind == "embedded":
        return EmbeddedTopic(rest, topic)
    if kind == "archive":
        return ParquetArchive(rest, topic=topic)
    if kind == "files":
        return Files(rest, format="jsonl")
    if kind == "parquet-files":
        return Files(rest, format="parquet")
    if kind == "kafka":
        return KafkaTopic(rest, topic)
    raise ConfigError(f"--input {topic}={spec}: unknown source kind '{kind}' "
                      "(use DIR, embedded:DIR, archive:DIR, files:GLOB, parquet-files:GLOB or kafka:HOST:PORT)")


def resolve_input(topic: str, spec: Any, key_serde: Serde, value_serde: Serde) -> Any:
    """``spec`` as a :class:`ReplayInput` (or :class:`KafkaTopic`) for ``topic``."""
    if isinstance(spec, str):
        spec = parse_input(topic, spec)
    if isinstance(spec, (ReplayInput, KafkaTopic)):
        return spec
    if isinstance(spec, Source):
        if isinstance(spec, ParquetArchive) and spec._topic is None:
            found = {f.topic for f in spec.files()}
            if topic in found:
                spec = ParquetArchive(spec.path, topic=topic)
        return SourceInput(spec, topic, key_serde, value_serde)
    raise ConfigError(f"input of topic '{topic}': expected an embedded broker directory, "
                      f"sk.sources.ParquetArchive, sk.sources.Files or sk.spark.KafkaTopic, got {spec!r}")
