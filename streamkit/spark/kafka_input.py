"""Reading a Kafka topic's history through Spark's Kafka source.

Needs the ``spark-sql-kafka-0-10`` package on Spark's classpath (e.g.
``spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``);
without it Spark fails with "Failed to find data source: kafka", which
:func:`read_kafka` turns into a clear error.
"""
from __future__ import annotations

from typing import Any, Iterator, Tuple

from ..errors import ConfigError
from .inputs import KafkaTopic
from .ordering import with_running_max


def kafka_frame(spark: Any, source: KafkaTopic) -> Any:
    try:
        return (spark.read.format("kafka").option("kafka.bootstrap.servers", source.bootstrap)
                .option("subscribe", source.topic).option("startingOffsets", "earliest")
                .option("endingOffsets", "latest").option("includeHeaders", "true").load())
    except Exception as exc:  # noqa: BLE001 - Spark reports a missing source as a generic error
        if "kafka" in str(exc).lower() and "data source" in str(exc).lower():
            raise ConfigError("Spark's Kafka source is not on the classpath: start Spark with "
                              "spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version> "
                              f"(reading {source.describe()})") from None
        raise


def kafka_partition_count(spark: Any, source: KafkaTopic) -> int:
    from pyspark.sql import functions as F

    row = kafka_frame(spark, source).agg(F.max("partition").alias("last")).collect()[0]
    if row["last"] is None:
        raise ConfigError(f"{source.describe()}: the topic is empty or missing")
    return int(row["last"]) + 1


def read_kafka(spark: Any, source: KafkaTopic, partitions: int) -> Any:
    """The topic (of ``partitions`` partitions) as (partition, pmax, offset, timestamp, key,
    value, headers) rows, one Spark partition per topic partition, in offset order."""
    from pyspark.sql import functions as F

    frame = kafka_frame(spark, source).select(
        "partition", "offset", F.expr("unix_millis(timestamp)").alias("ts"), "key", "value", "headers")

    def keyed(row: Any) -> Tuple[Tuple[int, int], Tuple[Any, ...]]:
        headers = tuple((h["key"], bytes(h["value"]) if h["value"] is not None else None)
                        for h in row["headers"]) if row["headers"] else None
        key = bytes(row["key"]) if row["key"] is not None else None
        value = bytes(row["value"]) if row["value"] is not None else None
        return (row["partition"], row["offset"]), (row["offset"], row["ts"], key, value, headers)

    def with_pmax(partition: int, items: Iterator[Any]) -> Iterator[Any]:
        records = (record for _key, record in items)
        for pmax, (offset, ts, key, value, headers) in with_running_max(records):
            yield partition, pmax, offset, ts, key, value, headers

    return (frame.rdd.map(keyed).repartitionAndSortWithinPartitions(partitions, lambda key: key[0])
            .mapPartitionsWithIndex(with_pmax))
