"""``--compare TOPIC``: does the replay's output equal what the live run wrote?

Both sides are reduced per key, in Spark, and joined on the key bytes:

- ``latest`` (default): the last value per key, i.e. the table the topic describes.
  This is the comparison for table outputs, where a live run with caching on
  forwards fewer intermediate updates than a replay (which forwards every one).
- ``records``: every value per key, in offset order (stream outputs, suppressed
  final results).

Only the differing keys (up to ``limit`` of them) come back to the driver.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

from ..errors import ConfigError
from ..serdes import Serde
from .inputs import resolve_input

MODES = ("latest", "records")
SHOWN_VALUES = 6  # per differing key, in records mode


@dataclass
class CompareReport:
    """The outcome of comparing one topic."""

    topic: str
    mode: str
    live_keys: int
    replay_keys: int
    differing: int
    examples: List[Tuple[str, Any, Any]] = field(default_factory=list)
    """(key, live, replay) of some differing keys; a side without the key shows None."""

    @property
    def equal(self) -> bool:
        return self.differing == 0

    def render(self) -> str:
        head = (f"compare {self.topic} ({self.mode}): {self.live_keys} key(s) live, {self.replay_keys} replayed, "
                f"{self.differing} differ")
        if self.live_keys == 0 and self.replay_keys == 0:
            head += " (both sides are empty: nothing was compared)"
        lines = [head]
        for key, live, replayed in self.examples:
            lines.append(f"  key {key}: live={live} replay={replayed}")
        if self.differing > len(self.examples):
            lines.append(f"  ... and {self.differing - len(self.examples)} more")
        return "\n".join(lines)


def compare_topic(spark: Any, replay_output: str, topic: str, live: Any, *, key_serde: Serde, value_serde: Serde,
                  mode: str = "latest", limit: int = 20) -> CompareReport:
    """Compare ``topic`` as replayed under ``replay_output`` with the live topic ``live``
    (an embedded broker directory, archive, or any replay input)."""
    if mode not in MODES:
        raise ConfigError(f"compare mode must be one of {', '.join(MODES)}, got {mode!r}")
    path = os.path.join(replay_output, "topics", topic)
    source = resolve_input(topic, live, key_serde, value_serde)
    count = source.partitions()

    def read_live(partition: int, source: Any = source) -> Any:
        for offset, _ts, key, value, _headers in source.read(partition):
            yield key, ((partition, offset), value)

    live_rows = spark.sparkContext.parallelize(range(count), count).flatMap(read_live)
    if os.path.isdir(path):
        replay_rows = (spark.read.parquet(path).select("key_bytes", "partition", "offset", "value_bytes").rdd
                       .map(lambda r: (_bytes(r[0]), ((r[1], r[2]), _bytes(r[3])))))
    else:  # the replay wrote nothing to this topic
        replay_rows = spark.sparkContext.emptyRDD()
    live_side, replay_side = _per_key(live_rows, mode), _per_key(replay_rows, mode)
    joined = live_side.fullOuterJoin(replay_side).filter(lambda kv: kv[1][0] != kv[1][1]).persist()
    try:
        differing = joined.count()
        sample = joined.take(limit)
        live_keys, replay_keys = live_side.count(), replay_side.count()
    finally:
        joined.unpersist()
    examples = [(_show(key_serde, key), _show_values(value_serde, a), _show_values(value_serde, b))
                for key, (a, b) in sample]
    return CompareReport(topic, mode, live_keys, replay_keys, differing, examples)


def _bytes(data: Optional[Any]) -> Optional[bytes]:
    return None if data is None else bytes(data)


def _per_key(rows: Any, mode: str) -> Any:
    if mode == "latest":
        return rows.reduceByKey(lambda a, b: a if a[0] > b[0] else b).mapValues(lambda v: v[1])
    return rows.groupByKey().mapValues(lambda values: tuple(v for _, v in sorted(values, key=lambda x: x[0])))


def _show(serde: Serde, data: Optional[bytes]) -> str:
    if data is None:
        return "null"
    try:
        return repr(serde.deserialize(data))
    except Exception:  # noqa: BLE001 - show what is there
        return repr(data)


def _show_values(serde: Serde, values: Any) -> Any:
    if values is None:
        return None
    if isinstance(values, tuple):
        shown = [_show(serde, v) for v in values[:SHOWN_VALUES]]
        if len(values) > SHOWN_VALUES:
            shown.append(f"... {len(values)} values")
        return shown
    return _show(serde, values)
