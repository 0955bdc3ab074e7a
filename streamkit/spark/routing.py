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

SPARK_HASH_SEED = 42
"""The seed of Spark SQL's ``hash()`` (Murmur3, 32 bits), which ``repartition`` uses."""

_MASK = 0xFFFFFFFF


class TaskRouting:
    """The routing values of a session, per partition count (computed on the driver)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._routes: Dict[int, List[int]] = {}

    def routes(self, partitions: int) -> List[int]:
        """For each ``p < partitions``: a bigint whose Spark hash partition is ``p``."""
        found = self._routes.get(partitions)
        if found is None:
            found = self._routes[partitions] = find_routes(partitions)
        return found

    def by_task(self, frame: Any, column: str, partitions: int) -> Any:
        """``frame`` in ``partitions`` Spark partitions, the rows whose ``column`` is p in partition p."""
        from pyspark.sql import functions as F

        routes = F.array(*[F.lit(value).cast("bigint") for value in self.routes(partitions)])
        return frame.repartition(partitions, F.element_at(routes, F.pmod(F.col(column), F.lit(partitions)) + 1))


def find_routes(partitions: int) -> List[int]:
    """For each ``p < partitions``: the smallest non-negative bigint whose Spark hash
    partition (``pmod(hash(value), partitions)``) is ``p``; ``p`` itself for a partition
    none of the candidates reaches (correct, maybe uneven)."""
    found: Dict[int, int] = {}
    for value in range(CANDIDATES_PER_PARTITION * partitions):
        found.setdefault(spark_hash_long(value) % partitions, value)
        if len(found) == partitions:
            break
    return [found.get(p, p) for p in range(partitions)]


def spark_hash_long(value: int) -> int:
    """Spark SQL's ``hash()`` of a bigint: Murmur3 x86 32-bit over its two 32-bit halves
    (low first), seed 42, as a signed int."""
    h1 = SPARK_HASH_SEED
    for half in (value & _MASK, (value >> 32) & _MASK):
        k1 = (half * 0xCC9E2D51) & _MASK
        k1 = ((k1 << 15) | (k1 >> 17)) & _MASK
        k1 = (k1 * 0x1B873593) & _MASK
        h1 ^= k1
        h1 = ((h1 << 13) | (h1 >> 19)) & _MASK
        h1 = (h1 * 5 + 0xE6546B64) & _MASK
    h1 ^= 8
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1
