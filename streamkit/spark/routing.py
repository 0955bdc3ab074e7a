"""A shuffle that puts task ``p``'s rows into Spark partition ``p``.

``DataFrame.repartition(n, column)`` sends a row to Spark partition
``pmod(hash(column), n)``, which spreads a few small task numbers unevenly (with 3
tasks, two of them share a partition and one partition stays empty: one Spark task
then runs two replay tasks while a core idles). Repartitioning instead by a value
chosen per task, whose hash lands on the task's own number, gives each task its own
Spark partition. The functions reading the result still accept several tasks per
partition, so an unexpected placement only costs time, never correctness.
"""
from __future__ import annotations

from typing import Any, Dict, List

CANDIDATES_PER_PARTITION = 64
"""Values tried per partition: a partition is missed with probability about e^-64."""


class TaskRouting:
    """The routing values of a session, per partition count (found once, by a tiny Spark job)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._routes: Dict[int, List[int]] = {}

    def routes(self, partitions: int) -> List[int]:
        """For each ``p < partitions``: a bigint whose Spark hash partition is ``p``."""
        found = self._routes.get(partitions)
        if found is None:
            found = self._routes[partitions] = _find_routes(self.spark, partitions)
        return found

    def by_task(self, frame: Any, column: str, partitions: int) -> Any:
        """``frame`` in ``partitions`` Spark partitions, the rows whose ``column`` is p in partition p."""
        from pyspark.sql import functions as F

        routes = F.array(*[F.lit(value).cast("bigint") for value in self.routes(partitions)])
        return frame.repartition(partitions, F.element_at(routes, F.pmod(F.col(column), F.lit(partitions)) + 1))


def _find_routes(spark: Any, partitions: int) -> List[int]:
    from pyspark.sql import functions as F

    candidates = spark.range(0, CANDIDATES_PER_PARTITION * partitions, numPartitions=1)
    rows = (candidates.select(F.pmod(F.hash("id"), F.lit(partitions)).alias("p"), "id")
            .groupBy("p").agg(F.min("id").alias("value")).collect())
    by_partition = {row["p"]: row["value"] for row in rows}
    missing = [p for p in range(partitions) if p not in by_partition]
    if missing:  # never seen in practice: fall back to the plain hash (correct, maybe uneven)
        return [by_partition.get(p, p) for p in range(partitions)]
    return [by_partition[p] for p in range(partitions)]
