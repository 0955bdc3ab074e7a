"""Writes a replay's results: output topics, external sinks' records and final stores.

Parquet, under the output directory:

- ``topics/<topic>/``: ``partition, offset, timestamp, key, value, window_start,
  window_end, key_bytes, value_bytes``. ``key``/``value`` are JSON text (a windowed
  key's record key, with its window in ``window_start``/``window_end``; a Protobuf
  message as its fields, named as in the .proto); the
  ``*_bytes`` columns hold the record exactly as the live run would have sent it.
  ``offset`` numbers each partition in the order the live run would have written it.
- ``sinks/<node>/``: ``partition, sequence, timestamp, key, value`` (JSON text) of
  what ``stream.sink(...)`` nodes would have delivered.
- ``stores/<store>/``: ``partition, key, value`` (JSON text), each store's final contents.

With ``embedded:DIR`` as the output, topics are appended to the embedded broker in
``DIR`` instead (created with the replay's partition counts); sinks and stores
still go to Parquet, under ``DIR/replay``.

Sinks and stores go from the stages' kept rows to Parquet in Spark alone. A topic's
records are shuffled to one Spark partition per topic partition and sorted into the
live order there; one pass over Arrow batches in Python then numbers them and turns
keys and values into JSON text with the topic's serdes (or appends them to the broker).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, List, Optional, Tuple

import pyarrow as pa

from ..runtime.ordering.repartition_stamps import with_writer_header
from ..serdes import Bytes, Serde
from .arrow_map import map_in_arrow
from .arrow_rows import arrow_schema, column_values, headers_from_arrow, spark_schema
from .ordering import SENDER_RANK
from .routing import TaskRouting
from .stages import StagesRun
from .task_runner import ReplayJob, _json_text

EMBEDDED_PREFIX = "embedded:"

TOPIC_FIELDS = (("partition", pa.int32(), "int"), ("offset", pa.int64(), "bigint"),
                ("timestamp", pa.int64(), "bigint"), ("key", pa.string(), "string"), ("value", pa.string(), "string"),
                ("window_start", pa.int64(), "bigint"), ("window_end", pa.int64(), "bigint"),
                ("key_bytes", pa.binary(), "binary"), ("value_bytes", pa.binary(), "binary"))
"""An output topic's Parquet columns."""


@dataclass
class OutputSummary:
    """One written output: what and how much."""

    kind: str  # "topic" | "sink" | "store"
    name: str
    records: int
    path: str
    seconds: float = 0.0
    """Wall time to write it (the stages have all run before the first output is written)."""


def topic_serdes(job: ReplayJob, topic: str) -> Tuple[Serde, Serde]:
    spec = job.topology.topics.get(topic)
    if spec is None:  # the dead-letter topic: raw bytes
        return Bytes(), Bytes()
    return spec.key_serde, spec.value_serde


def output_topics(job: ReplayJob, names: Iterable[str]) -> List[str]:
    """The emitted topics that leave the topology (not repartition or other internal topics)."""
    topics = job.topology.topics
    return sorted(t for t in names if t not in topics or not topics[t].internal)


def parquet_root(output: str) -> str:
    """Where Parquet results go: ``output``, or ``DIR/replay`` for ``embedded:DIR``."""
    if output.startswith(EMBEDDED_PREFIX):
        return os.path.join(output[len(EMBEDDED_PREFIX):], "replay")
    return output


def write_outputs(job: ReplayJob, run: StagesRun, output: str) -> List[Any]:
    """Write every output topic, sink and store the stages of ``run`` emitted; one summary
    per output written."""
    from pyspark.sql import functions as F

    embedded_dir = output[len(EMBEDDED_PREFIX):] if output.startswith(EMBEDDED_PREFIX) else None
    root = parquet_root(output)
    os.makedirs(root, exist_ok=True)
    counts = run.counts
    summaries = []
    for topic in output_topics(job, [name for kind, name in counts if kind == "topic"]):
        started = time.monotonic()
        rows = run.rows_of("topic", topic)
        if embedded_dir is not None:
            path = write_embedded_topic(run.routing, job, rows, embedded_dir, topic)
        else:
            path = os.path.join(root, "topics", topic)
            write_topic_parquet(run.routing, job, rows, topic, path)
        summaries.append(OutputSummary("topic", topic, counts[("topic", topic)], path,
                                       time.monotonic() - started))
    for kind, folder, columns in (("sink", "sinks", ("partition", "sequence", "timestamp")),
                                  ("store", "stores", ("partition",))):
        for name in sorted(name for k, name in counts if k == kind):
            started = time.monotonic()
            path = os.path.join(root, folder, name)
            (run.rows_of(kind, name)
             .select(*columns, F.col("key_text").alias("key"), F.col("value_text").alias("value"))
             .write.mode("overwrite").parquet(path))
            summaries.append(OutputSummary(kind, name, counts[(kind, name)], path, time.monotonic() - started))
    return summaries


def live_order() -> List[Any]:
    """The order a topic partition's records were written in live: the sending stage first
    (see :mod:`.stages`), then the merge order of :mod:`.ordering`."""
    from pyspark.sql import functions as F

    return [F.floor(F.col("sender") / SENDER_RANK), F.col("pmax"), F.col("sender"), F.col("sequence")]


def write_topic_parquet(routing: TaskRouting, job: ReplayJob, rows: Any, topic: str, path: str) -> None:
    """``rows`` (emitted records of ``topic``) as Parquet, each partition numbered in live order."""
    key_serde, value_serde = topic_serdes(job, topic)
    ordered = (routing.by_task(rows, "partition", job.partitions[topic])
               .sortWithinPartitions("partition", *live_order()).select("partition", "timestamp", "key", "value"))
    (map_in_arrow(ordered, _numbered_texts(key_serde, value_serde), spark_schema(TOPIC_FIELDS))
     .write.mode("overwrite").parquet(path))


def _numbered_texts(key_serde: Serde, value_serde: Serde) -> Any:
    """Batches of records (each partition's in live order) with their offset, and their key
    and value decoded to JSON text."""
    schema = arrow_schema(TOPIC_FIELDS)

    def texts(batches: Iterable[Any]) -> Iterator[pa.RecordBatch]:
        next_offset: dict = {}
        for batch in batches:
            partitions = column_values(batch, "partition")
            offsets = []
            for partition in partitions:
                offset = next_offset.get(partition, 0)
                next_offset[partition] = offset + 1
                offsets.append(offset)
            key_texts, starts, ends = [], [], []
            for key in column_values(batch, "key"):
                text, start, end = _key_text(key_serde, key)
                key_texts.append(text)
                starts.append(start)
                ends.append(end)
            value_texts = [None if value is None else _json_text(value_serde.deserialize(value))
                           for value in column_values(batch, "value")]
            yield pa.RecordBatch.from_arrays(
                [batch.column("partition"), pa.array(offsets, pa.int64()), batch.column("timestamp"),
                 pa.array(key_texts, pa.string()), pa.array(value_texts, pa.string()), pa.array(starts, pa.int64()),
                 pa.array(ends, pa.int64()), batch.column("key"), batch.column("value")], schema=schema)
    return texts


def _key_text(serde: Serde, key: Optional[bytes]) -> Tuple[Optional[str], Optional[int], Optional[int]]:
    from ..windowing.windowed_keys import Windowed

    if key is None:
        return None, None, None
    obj = serde.deserialize(key)
    if isinstance(obj, Windowed):
        return _json_text(obj.key), obj.start, obj.end
    return _json_text(obj), None, None


def write_embedded_topic(routing: TaskRouting, job: ReplayJob, rows: Any, directory: str, topic: str) -> str:
    """Append ``rows`` to ``topic`` of the embedded broker in ``directory``, each
    partition in its live order (one Spark task per partition)."""
    from ..broker import EmbeddedBroker

    partitions = job.partitions[topic]
    with EmbeddedBroker(directory) as broker:
        spec = job.topology.topics.get(topic)
        broker.create_topic(topic, partitions, dict(spec.config) if spec is not None else {}, exist_ok=True)
    ordered = (routing.by_task(rows, "partition", partitions)
               .sortWithinPartitions("partition", *live_order())
               .select("partition", "timestamp", "key", "value", "headers", "writer", "writer_time"))
    appended = map_in_arrow(ordered, _appender(directory, topic), "appended bigint")
    appended.groupBy().sum("appended").collect()
    return f"{EMBEDDED_PREFIX}{directory} topic {topic}"


def _appender(directory: str, topic: str) -> Any:
    """Appends batches of records (each partition's in order) to ``topic``; yields how many."""
    def append(batches: Iterable[Any]) -> Iterator[pa.RecordBatch]:
        from ..broker import EmbeddedBroker

        count = 0
        with EmbeddedBroker(directory) as target:
            for batch in batches:
                partitions = column_values(batch, "partition")
                records = list(zip(column_values(batch, "key"), column_values(batch, "value"),
                                   column_values(batch, "timestamp"), _headers_with_stamps(batch)))
                start = 0
                for end in range(1, len(records) + 1):
                    if end == len(records) or partitions[end] != partitions[start]:
                        target.append(topic, partitions[start], records[start:end])
                        start = end
                count += len(records)
        yield pa.RecordBatch.from_arrays([pa.array([count], pa.int64())], names=["appended"])
    return append


def _headers_with_stamps(batch: Any) -> List[Any]:
    """The records' headers as sent, a writer stamp (kept apart while replaying) last again."""
    headers = headers_from_arrow(batch.column("headers"))
    writers, times = column_values(batch, "writer"), column_values(batch, "writer_time")
    return [h if writer is None else with_writer_header(h, writer, time_)
            for h, writer, time_ in zip(headers, writers, times)]
