"""Writes a replay's results: output topics, external sinks' records and final stores.

Parquet, under the output directory:

- ``topics/<topic>/``: ``partition, offset, timestamp, key, value, window_start,
  window_end, key_bytes, value_bytes``. ``key``/``value`` are JSON text (a windowed
  key's record key, with its window in ``window_start``/``window_end``); the
  ``*_bytes`` columns hold the record exactly as the live run would have sent it.
  ``offset`` numbers each partition in the order the live run would have written it.
- ``sinks/<node>/``: ``partition, sequence, timestamp, key, value`` (JSON text) of
  what ``stream.sink(...)`` nodes would have delivered.
- ``stores/<store>/``: ``partition, key, value`` (JSON text), each store's final contents.

With ``embedded:DIR`` as the output, topics are appended to the embedded broker in
``DIR`` instead (created with the replay's partition counts); sinks and stores
still go to Parquet, under ``DIR/replay``.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ..serdes import Bytes, Serde
from .ordering import SENDER_RANK
from .task_runner import ReplayJob, _json_text

EMBEDDED_PREFIX = "embedded:"


def _topic_schema() -> Any:
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType
    return StructType([
        StructField("partition", IntegerType(), False), StructField("pmax", LongType(), False),
        StructField("sender", IntegerType(), False), StructField("sequence", LongType(), False),
        StructField("timestamp", LongType(), False), StructField("key", StringType(), True),
        StructField("value", StringType(), True), StructField("window_start", LongType(), True),
        StructField("window_end", LongType(), True), StructField("key_bytes", BinaryType(), True),
        StructField("value_bytes", BinaryType(), True)])


def topic_serdes(job: ReplayJob, topic: str) -> Tuple[Serde, Serde]:
    spec = job.topology.topics.get(topic)
    if spec is None:  # the dead-letter topic: raw bytes
        return Bytes(), Bytes()
    return spec.key_serde, spec.value_serde


def output_topics(job: ReplayJob, names: List[str]) -> List[str]:
    """The emitted topics that leave the topology (not repartition or other internal topics)."""
    topics = job.topology.topics
    return sorted(t for t in names if t not in topics or not topics[t].internal)


def parquet_root(output: str) -> str:
    """Where Parquet results go: ``output``, or ``DIR/replay`` for ``embedded:DIR``."""
    if output.startswith(EMBEDDED_PREFIX):
        return os.path.join(output[len(EMBEDDED_PREFIX):], "replay")
    return output


def write_outputs(spark: Any, job: ReplayJob, emitted: List[Any], output: str) -> List[Any]:
    from .replay import OutputSummary

    embedded_dir = output[len(EMBEDDED_PREFIX):] if output.startswith(EMBEDDED_PREFIX) else None
    root = parquet_root(output)
    os.makedirs(root, exist_ok=True)
    if not emitted:
        return []
    everything = emitted[0] if len(emitted) == 1 else spark.sparkContext.union(emitted)
    # The one action that runs every stage (their results are persisted for the writes below).
    counts: Dict[Tuple[str, str], int] = dict(everything.map(lambda row: (row[0], row[1])).countByValue())
    summaries = []
    for topic in output_topics(job, [name for kind, name in counts if kind == "topic"]):
        started = time.monotonic()
        rows = everything.filter(lambda row, t=topic: row[0] == "topic" and row[1] == t)
        if embedded_dir is not None:
            path = write_embedded_topic(job, rows, embedded_dir, topic)
        else:
            path = os.path.join(root, "topics", topic)
            write_topic_parquet(spark, job, rows, topic, path)
        summaries.append(OutputSummary("topic", topic, counts[("topic", topic)], path,
                                       time.monotonic() - started))
    for kind, folder in (("sink", "sinks"), ("store", "stores")):
        for name in sorted(name for k, name in counts if k == kind):
            started = time.monotonic()
            rows = everything.filter(lambda row, k=kind, n=name: row[0] == k and row[1] == n)
            path = os.path.join(root, folder, name)
            if kind == "sink":
                _write_sink(spark, rows, path)
            else:
                _write_store(spark, rows, path)
            summaries.append(OutputSummary(kind, name, counts[(kind, name)], path, time.monotonic() - started))
    return summaries


def write_topic_parquet(spark: Any, job: ReplayJob, rows: Any, topic: str, path: str) -> None:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    key_serde, value_serde = topic_serdes(job, topic)

    def to_row(row: Tuple[Any, ...]) -> Tuple[Any, ...]:
        _kind, _topic, partition, pmax, sender, sequence, ts, key, value, _headers = row
        key_text, start, end = _key_text(key_serde, key)
        value_text = _json_text(value_serde.deserialize(value)) if value is not None else None
        return partition, pmax, sender, sequence, ts, key_text, value_text, start, end, key, value

    frame = spark.createDataFrame(rows.map(to_row), _topic_schema())
    stage = F.floor(F.col("sender") / SENDER_RANK)  # the sending stage first: see replay._ranked
    order = Window.partitionBy("partition").orderBy(stage, "pmax", "sender", "sequence")
    (frame.withColumn("offset", F.row_number().over(order) - 1)
          .select("partition", "offset", "timestamp", "key", "value", "window_start", "window_end",
                  "key_bytes", "value_bytes")
          .write.mode("overwrite").parquet(path))


def _key_text(serde: Serde, key: Optional[bytes]) -> Tuple[Optional[str], Optional[int], Optional[int]]:
    from ..windowing.windowed_keys import Windowed

    if key is None:
        return None, None, None
    obj = serde.deserialize(key)
    if isinstance(obj, Windowed):
        return _json_text(obj.key), obj.start, obj.end
    return _json_text(obj), None, None


def _write_sink(spark: Any, rows: Any, path: str) -> None:
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    schema = StructType([StructField("partition", IntegerType(), False), StructField("sequence", LongType(), False),
                         StructField("timestamp", LongType(), False), StructField("key", StringType(), True),
                         StructField("value", StringType(), True)])
    frame = spark.createDataFrame(rows.map(lambda r: (r[2], r[5], r[6], r[7], r[8])), schema)
    frame.write.mode("overwrite").parquet(path)


def _write_store(spark: Any, rows: Any, path: str) -> None:
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    schema = StructType([StructField("partition", IntegerType(), False), StructField("key", StringType(), True),
                         StructField("value", StringType(), True)])
    spark.createDataFrame(rows.map(lambda r: (r[2], r[3], r[4])), schema).write.mode("overwrite").parquet(path)


def write_embedded_topic(job: ReplayJob, rows: Any, directory: str, topic: str) -> str:
    """Append ``rows`` to ``topic`` of the embedded broker in ``directory``, each
    partition in its live order (one Spark task per partition)."""
    from ..broker import EmbeddedBroker

    partitions = job.partitions[topic]
    with EmbeddedBroker(directory) as broker:
        spec = job.topology.topics.get(topic)
        broker.create_topic(topic, partitions, dict(spec.config) if spec is not None else {}, exist_ok=True)

    def append(items: Iterator[Any]) -> None:
        batch: List[Any] = []
        current: Optional[int] = None
        with EmbeddedBroker(directory) as target:
            for (partition, *_order), record in items:
                if partition != current or len(batch) >= 5000:
                    if batch:
                        target.append(topic, current, batch)  # type: ignore[arg-type]
                    batch, current = [], partition
                batch.append(record)
            if batch:
                target.append(topic, current, batch)  # type: ignore[arg-type]

    (rows.map(lambda r: ((r[2], r[4] // SENDER_RANK, r[3], r[4], r[5]), (r[7], r[8], r[6], r[9])))
         .repartitionAndSortWithinPartitions(partitions, lambda key: key[0])
         .foreachPartition(append))
    return f"{EMBEDDED_PREFIX}{directory} topic {topic}"
