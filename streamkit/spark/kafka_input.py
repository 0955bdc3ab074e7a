"""Reading a Kafka topic's history through Spark's Kafka source.

Needs the ``spark-sql-kafka-0-10`` package on Spark's classpath (e.g.
``spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``);
without it Spark fails with "Failed to find data source: kafka", which
:func:`read_kafka` turns into a clear error.
"""
from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .arrow_rows import encoded_headers_column
from .inputs import KafkaTopic


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


def read_kafka(spark: Any, source: KafkaTopic) -> Any:
    """The topic as :data:`~.arrow_rows.INPUT_FIELDS` rows."""
    return kafka_records(kafka_frame(spark, source))


def kafka_records(frame: Any) -> Any:
    """Rows of Spark's Kafka source (``partition, offset, timestamp, key, value, headers``)
    as :data:`~.arrow_rows.INPUT_FIELDS` rows, each with its partition's running maximum
    timestamp in offset order (``pmax``), all computed in Spark. A record without headers
    has none (null), as the other inputs give it."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    upto = Window.partitionBy("partition").orderBy("offset").rowsBetween(Window.unboundedPreceding, 0)
    timestamp = F.expr("unix_millis(timestamp)")
    headers = encoded_headers_column(F.col("headers"))
    return frame.select(F.col("partition").cast("int").alias("partition"),
                        F.max(timestamp).over(upto).alias("pmax"), F.col("offset").cast("bigint").alias("offset"),
                        timestamp.alias("timestamp"), "key", "value", headers.alias("headers"))
