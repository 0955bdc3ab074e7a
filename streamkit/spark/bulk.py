"""Bulk plans: windowed counts compiled to Spark SQL instead of a per-task loop.

A sub-topology ``source → windowed count (tumbling or hopping) [→ suppress until
the window closes] → stateless nodes → sinks`` is computed with DataFrame
operations, as the live runtime would compute it:

- the task's processing order is the sort key of :mod:`.ordering`;
- the aggregation's stream time is the running maximum of the timestamps of the
  records with a key in that order (a window function); records without one never
  reach it, so they do not move it;
- a record updates each of its windows whose end is after ``stream time - grace``,
  and is dropped as late when none is left (the live rule, evaluated per record);
- a window's count after each update is a row number per (task, key, window), its
  result timestamp the running maximum of its records' timestamps;
- with suppression, a window's final count goes out at the first record whose
  stream time reaches the window's end plus grace (found by sorting the task's
  stream-time steps together with the windows' due times); windows that never
  close stay buffered, as in a live run; several windows due at one record leave
  in the buffer's order (due time, then the buffer's key bytes).

Only what leaves the aggregation comes back to Python, where the sub-topology's
own compiled nodes after the aggregation (to_stream, map_values, sinks, ...) turn
it into records, numbered in the live output order. Every other sub-topology runs
through :mod:`.task_runner`. Records written by a bulk plan carry no headers.
"""
from __future__ import annotations

import pickle
from typing import Any, Iterator, List, Optional, Tuple

from ..runtime.collector import RecordCollector
from ..runtime.operators.late_records import LATE_HEADERS
from ..runtime.compiler import compile_nodes
from ..serdes import Bytes, Float, Int, Json, String
from ..topology import Topology
from ..topology import nodes as ir
from ..topology.model import SubTopology
from ..windowing import HoppingWindows, TumblingWindows, Windowed
from .task_runner import ReplayJob, _json_text, _Outputs, build_task, sink_rows

_STATELESS = (ir.ToStreamNode, ir.MapValuesNode, ir.MapNode, ir.FilterNode, ir.PeekNode, ir.SinkNode,
              ir.SelectKeyNode, ir.FlatMapNode, ir.FlatMapValuesNode, ir.SplitNode, ir.BranchNode,
              ir.ExternalSinkNode)
_NULL_AWARE_SERDES = (Json, String, Bytes, Int, Float)
LATE = "late"
"""Tags a record dropped as late among what leaves the aggregation."""
"""Value serdes for which "the value is None" can be told from the bytes alone."""


def bulk_plan(topology: Topology, sub: SubTopology) -> Optional["WindowedCountPlan"]:
    """A bulk plan for ``sub``, or None when it runs through the task runner."""
    nodes = [topology.nodes[name] for name in sub.node_names]
    sources = [n for n in nodes if isinstance(n, ir.SourceNode)]
    aggregates = [n for n in nodes if isinstance(n, ir.WindowedAggregateNode)]
    if len(sources) != 1 or len(aggregates) != 1:
        return None
    source, aggregate = sources[0], aggregates[0]
    windows = aggregate.windows
    if (source.timestamp_extractor is not None or not source.internal
            or topology.children[source.name] != (aggregate.name,)
            or not isinstance(windows, (TumblingWindows, HoppingWindows)) or aggregate.operation != "count"
            or type(source.key_serde) is not type(aggregate.key_serde)
            or not isinstance(source.value_serde, _NULL_AWARE_SERDES)):
        return None
    if (topology.stores[aggregate.store].retention_ms or 0) < windows.size_ms + windows.grace_ms:
        return None  # windows could expire while open: only the task runner has that rule
    after = aggregate.name
    suppress: Optional[ir.SuppressNode] = None
    children = topology.children[aggregate.name]
    if len(children) == 1 and isinstance(topology.nodes[children[0]], ir.SuppressNode):
        suppress = topology.nodes[children[0]]  # type: ignore[assignment]
        if not suppress.suppressed.final_results or suppress.suppressed.max_records or suppress.suppressed.max_bytes:
            return None
        after = suppress.name
    rest = [n for n in nodes if n.name not in (source.name, aggregate.name, after)]
    if not all(isinstance(n, _STATELESS) for n in rest):
        return None
    return WindowedCountPlan(sub.id, source, aggregate, suppress, after,
                             topology.stores[aggregate.store].retention_ms or 0)


class WindowedCountPlan:
    """A windowed count (optionally suppressed) of one sub-topology, in Spark SQL."""

    def __init__(self, sub_id: int, source: ir.SourceNode, aggregate: ir.WindowedAggregateNode,
                 suppress: Optional[ir.SuppressNode], after: str, retention_ms: int) -> None:
        self.sub_id = sub_id
        self.source = source
        self.aggregate = aggregate
        self.suppress = suppress
        self.after = after
        """The node whose children receive what leaves the aggregation."""
        self.retention_ms = retention_ms

    def run(self, spark: Any, job: ReplayJob, sub: SubTopology, tasks: int, items: Any,
            cached: List[Any]) -> Any:
        """The sub-topology's emitted records; persisted frames are added to ``cached``
        (the caller unpersists them once the outputs are written)."""
        from pyspark.sql import functions as F

        frame, updates, stream_times = self._updates(spark, items)
        cached.append(frame)
        if self.suppress is None:
            leaving = updates.select("task", F.col("pos").alias("at"), "w", "key", "start", "end", "count", "rt",
                                     F.lit(0).cast("long").alias("due"))
        else:
            leaving = self._finals(updates, stream_times)
        plan = self
        rows = leaving.rdd.map(lambda r: ((r.task, r.at, r.due, r.w), (r.key, r.start, r.end, r["count"], r.rt)))
        if self.aggregate.late_records_topic is not None:
            late = self._late(frame)
            rows = rows.union(late.rdd.map(
                lambda r: ((r.task, r.pos, -1, 0), (LATE, r.key, r.value, r.ts, r.headers, r.st))))
        emitted = (rows.repartitionAndSortWithinPartitions(tasks, lambda key: key[0])
                   .mapPartitionsWithIndex(lambda task, it: plan._forward(job, task, it)))
        if not job.dump_stores:
            return emitted
        return emitted.union(self._store_rows(updates, stream_times))

    def _updates(self, spark: Any, items: Any) -> Tuple[Any, Any, Any]:
        """The task's input with each record's position and stream time, every accepted
        (record, window) update with its running count, and each task's stream times."""
        from pyspark import StorageLevel
        from pyspark.sql import Window
        from pyspark.sql import functions as F
        from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

        schema = StructType([StructField("task", IntegerType(), False), StructField("pmax", LongType(), False),
                             StructField("idx", IntegerType(), False), StructField("sender", LongType(), False),
                             StructField("seq", LongType(), False), StructField("ts", LongType(), False),
                             StructField("key", BinaryType(), True), StructField("value", BinaryType(), True),
                             StructField("headers", BinaryType(), True)])
        frame = spark.createDataFrame(
            items.map(lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3], kv[0][4], kv[1][2], kv[1][3], kv[1][4],
                                  None if not kv[1][5] else pickle.dumps(tuple(kv[1][5])))),
            schema)
        order = Window.partitionBy("task").orderBy("pmax", "idx", "sender", "seq")
        # The aggregation's own stream time: only records that reach it (with a key) move it.
        keyed_ts = F.when(F.col("key").isNotNull(), F.col("ts"))
        frame = (frame.withColumn("pos", F.row_number().over(order))
                 .withColumn("st", F.coalesce(F.max(keyed_ts).over(order.rowsBetween(Window.unboundedPreceding, 0)),
                                              F.lit(-1).cast("long"))))
        # Read by several branches (updates, stream-time steps, late records): computed once.
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
        stream_times = frame.select("task", "pos", "st")
        windows = self.aggregate.windows
        size, advance, grace = windows.size_ms, windows.advance_ms, windows.grace_ms
        kept = self._aggregated(frame)
        first = F.greatest(F.lit(0).cast("long"), F.col("ts") - size + advance)
        kept = (kept.withColumn("first", first - F.pmod(first, F.lit(advance)))
                .select("task", "pos", "st", "ts", "key",
                        F.posexplode(F.sequence(F.col("first"), F.col("ts"), F.lit(advance).cast("long")))
                        .alias("w", "start"))
                .withColumn("end", F.col("start") + size)
                .where(F.col("end") > F.col("st") - grace))
        per_window = Window.partitionBy("task", "key", "start").orderBy("pos")
        updates = (kept.withColumn("count", F.row_number().over(per_window).cast("long"))
                   .withColumn("rt", F.max("ts").over(per_window.rowsBetween(Window.unboundedPreceding, 0))))
        return frame, updates, stream_times

    def _aggregated(self, frame: Any) -> Any:
        """The records the aggregation takes: those with a key (a None value is counted)."""
        from pyspark.sql import functions as F

        return frame.where(F.col("key").isNotNull())

    def _late(self, frame: Any) -> Any:
        """The records with no open window left: a record's last window (the one starting
        at ``ts - ts % advance``) ends at or before ``stream time - grace``."""
        from pyspark.sql import functions as F

        windows = self.aggregate.windows
        size, advance, grace = windows.size_ms, windows.advance_ms, windows.grace_ms
        last_end = F.col("ts") - F.pmod(F.col("ts"), F.lit(advance)) + size
        return self._aggregated(frame).where(last_end <= F.col("st") - grace)

    def _finals(self, updates: Any, stream_times: Any) -> Any:
        """Each window's final count with the position of the record at which it is due."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        grace = self.aggregate.windows.grace_ms
        finals = (updates.groupBy("task", "key", "start", "end")
                  .agg(F.max("count").alias("count"), F.max("rt").alias("rt"))
                  .withColumn("due", F.col("end") + grace))
        steps = stream_times.select("task", F.col("st").alias("at_time"), F.col("pos"), F.lit(1).alias("kind"))
        due = finals.select("task", F.col("due").alias("at_time"), F.lit(None).cast("long").alias("pos"),
                            F.lit(0).alias("kind"), "key", "start", "end", "count", "rt", "due")
        both = steps.withColumn("key", F.lit(None).cast("binary")).select(
            "task", "at_time", "pos", "kind", "key", F.lit(None).cast("long").alias("start"),
            F.lit(None).cast("long").alias("end"), F.lit(None).cast("long").alias("count"),
            F.lit(None).cast("long").alias("rt"), F.lit(None).cast("long").alias("due")).unionByName(due)
        # The first step at or after each due time: a running minimum in descending order
        # (Spark recomputes an unbounded-following frame for every row: quadratic).
        ahead = (Window.partitionBy("task")
                 .orderBy(F.col("at_time").desc(), F.col("kind").desc(), F.col("pos").desc())
                 .rowsBetween(Window.unboundedPreceding, 0))
        return (both.withColumn("at", F.min("pos").over(ahead)).where((F.col("kind") == 0) & F.col("at").isNotNull())
                .select("task", "at", F.lit(0).alias("w"), "key", "start", "end", "count", "rt", "due"))

    def _forward(self, job: ReplayJob, task_index: int, rows: Iterator[Any]) -> Iterator[Any]:
        """Run what leaves the aggregation through the sub-topology's nodes after it."""
        topology = job.topology
        sub = topology.sub_topologies[self.sub_id]
        collector = RecordCollector()
        task = build_task(job, sub, task_index, collector)
        _compiled, downstreams = compile_nodes(topology, sub, task.context)
        downstream = downstreams[self.after]
        key_serde = self.aggregate.key_serde
        buffer_key = (topology.stores[self.suppress.store].key_serde.serialize
                      if self.suppress is not None else None)
        outputs = _Outputs(task_index)
        change = ir.Change
        group: List[Tuple[Any, Any, Any]] = []
        group_at: Any = None

        def flush() -> Iterator[Any]:
            if buffer_key is not None:
                group.sort(key=lambda item: buffer_key(item[0]))  # the buffer's order among equal due times
            for windowed, value, rt in group:
                downstream(windowed, value, rt)
            group.clear()
            return iter(outputs.take(collector))

        late_topic = self.aggregate.late_records_topic
        source_topic, node_name = self.source.topic, self.aggregate.name
        for (_task, at, due, _w), item in rows:
            if (at, due) != group_at:
                yield from flush()
                group_at = (at, due)
            if item[0] == LATE:
                # Dropped as late: written as it came, with the headers the live runtime adds.
                _tag, key, value, ts, headers, st = item
                extra = tuple(zip(LATE_HEADERS, (node_name.encode(), source_topic.encode(), str(task_index).encode(),
                                                 str(at - 1).encode(), str(ts).encode(), str(st).encode())))
                collector.send(late_topic, task_index % job.partitions[late_topic], key, value, ts,
                               (pickle.loads(headers) if headers else ()) + extra)
                continue
            key, start, end, count, rt = item
            windowed = Windowed(key_serde.deserialize(key), start, end)
            group.append((windowed, change(count, count - 1 if count > 1 else None), rt))
        yield from flush()
        yield from sink_rows(task, outputs)

    def _store_rows(self, updates: Any, stream_times: Any) -> Any:
        """The window store's final contents: the windows not yet expired at the task's
        final stream time (as ``store.all()`` shows them)."""
        from pyspark.sql import functions as F

        retention = self.retention_ms
        final_time = stream_times.groupBy("task").agg(F.max("st").alias("final_st"))
        windows = (updates.groupBy("task", "key", "start", "end").agg(F.max("count").alias("count"))
                   .join(final_time, "task").where(F.col("start") >= F.col("final_st") - retention))
        key_serde, store = self.aggregate.key_serde, self.aggregate.store

        def row(r: Any) -> Tuple[Any, ...]:
            windowed = Windowed(key_serde.deserialize(r.key), r.start, r.end)
            return ("store", store, r.task, _json_text(windowed), _json_text(r["count"]))
        return windows.rdd.map(row)
