"""Reading a Kafka topic's history through Spark's Kafka source.

Needs the ``spark-sql-kafka-0-10`` connector on Spark's classpath: ``scripts/ensure-spark-kafka``
fetches it (and the jars it needs that PySpark lacks) from Maven Central into a folder, and
``STREAMKIT_SPARK_JARS=<that folder>`` makes :func:`~.session.get_session` pass them as
``spark.jars``. Without it Spark fails with "Failed to find data source: kafka", which
:func:`kafka_frame` turns into a clear error.

The topic is read as a worker reads it: ``read_committed`` (records of aborted transactions
and transaction markers are skipped; the end is the last stable offset), from the earliest
offset of each partition to its end when the replay starts.
"""
from __future__ import annotations

from typing import Any, Dict

from ..errors import ConfigError
from .arrow_rows import encoded_headers_column
from .inputs import KafkaTopic
from .session import JARS_ENV_VAR

ISOLATION_LEVEL = "read_committed"
"""Spark's Kafka source reads ``read_uncommitted`` unless told otherwise: aborted records too."""
ADMIN_TIMEOUT_SECONDS = 60


def kafka_options(source: KafkaTopic) -> Dict[str, str]:
    """The options of Spark's Kafka source for reading ``source`` whole, committed records only."""
    return {"kafka.bootstrap.servers": source.bootstrap, "kafka.isolation.level": ISOLATION_LEVEL,
            "subscribe": source.topic, "startingOffsets": "earliest", "endingOffsets": "latest",
            "includeHeaders": "true"}


def kafka_frame(spark: Any, source: KafkaTopic) -> Any:
    """Spark's Kafka source over ``source``'s committed records (its own columns)."""
    try:
        return spark.read.format("kafka").options(**kafka_options(source)).load()
    except Exception as exc:  # noqa: BLE001 - Spark reports a missing source as a generic error
        if "kafka" in str(exc).lower() and "data source" in str(exc).lower():
            raise ConfigError(f"Spark's Kafka source (spark-sql-kafka-0-10) is not on Spark's classpath, so "
                              f"{source.describe()} cannot be read: run scripts/ensure-spark-kafka (from "
                              f"streamkit's source tree; it prints a folder of jars) and set "
                              f"{JARS_ENV_VAR}=<that folder> before Spark starts, or start Spark with "
                              f"spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:{spark.version}"
                              ) from None
        raise


def kafka_partition_count(spark: Any, source: KafkaTopic) -> int:
    """How many partitions ``source``'s topic has (its metadata, so that partitions without
    records count), asked with the Kafka client Spark's Kafka source brings along."""
    kafka_frame(spark, source)  # says what to install when the source is missing
    jvm = spark._jvm
    props = jvm.java.util.Properties()
    props.setProperty("bootstrap.servers", source.bootstrap)
    props.setProperty("request.timeout.ms", str(ADMIN_TIMEOUT_SECONDS * 1000))
    props.setProperty("default.api.timeout.ms", str(ADMIN_TIMEOUT_SECONDS * 1000))
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(props)
    try:
        described = admin.describeTopics(jvm.java.util.Collections.singletonList(source.topic)).allTopicNames()
        unit = jvm.java.util.concurrent.TimeUnit.SECONDS
        try:
            description = described.get(ADMIN_TIMEOUT_SECONDS, unit).get(source.topic)
        except Exception as exc:  # noqa: BLE001 - py4j wraps the client's ExecutionException
            if "UnknownTopicOrPartition" in str(exc):
                raise ConfigError(f"{source.describe()}: the topic does not exist") from None
            raise
    finally:
        admin.close()
    return int(description.partitions().size())


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
