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

Only what leaves the aggregation comes back to Python (as Arrow batches, sorted by
task and due position in Spark), where the sub-topology's own compiled nodes after
the aggregation (to_stream, map_values, sinks, ...) turn it into records, numbered
in the live output order. Every other sub-topology runs
through :mod:`.task_runner`. Records written by a bulk plan carry no headers.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, List, Optional, Tuple

from ..runtime.context.collector import RecordCollector
from ..runtime.operators.late_records import LATE_HEADERS
from ..runtime.operators.compiler import compile_nodes
from ..serdes import Bytes, Float, Int, Json, String
from ..topology import Topology
from ..topology import nodes as ir
from ..topology.aggregations import Count
from ..topology.model import SubTopology
from ..windowing import HoppingWindows, TumblingWindows, Windowed
from .arrow_map import ArrowMap, map_in_arrow
from .arrow_rows import (EMITTED_FIELDS, HEADERS_DDL, EmittedRows, column_values, emitted_select,
                         headers_from_arrow, spark_schema)
from .ordering import SENDER_RANK
from .routing import TaskRouting
from .task_runner import ReplayJob, _json_text, _Outputs, add_sink_rows, build_task

_STATELESS = (ir.ToStreamNode, ir.MapValuesNode, ir.MapNode, ir.FilterNode, ir.PeekNode, ir.SinkNode,
              ir.SelectKeyNode, ir.FlatMapNode, ir.FlatMapValuesNode, ir.SplitNode, ir.BranchNode,
              ir.ExternalSinkNode)
_NULL_AWARE_SERDES = (Json, String, Bytes, Int, Float)
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
            or not isinstance(windows, (TumblingWindows, HoppingWindows))
            or not isinstance(aggregate.aggregation, Count)
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

    def run(self, spark: Any, job: ReplayJob, tasks: int, feed: Any, rank: int, routing: TaskRouting,
            cached: List[Any]) -> Any:
        """The sub-topology's emitted rows (:data:`~.arrow_rows.EMITTED_FIELDS`) from its
        input ``feed`` (see :mod:`.stages`); persisted frames are added to ``cached`` (the
        caller unpersists them once the outputs are written)."""
        from pyspark.sql import functions as F

        frame, updates, stream_times = self._updates(feed)
        cached.append(frame)
        if self.suppress is None:
            leaving = updates.select("task", F.col("pos").alias("at"), F.lit(0).cast("long").alias("due"), "w",
                                     "key", "start", "end", "count", "rt")
        else:
            leaving = self._finals(updates, stream_times)
        leaving = leaving.select("task", "at", "due", "w", "key", "start", "end", "count", "rt",
                                 F.lit(False).alias("late"), F.lit(None).cast("binary").alias("value"),
                                 F.lit(None).cast("long").alias("ts"),
                                 F.lit(None).cast(HEADERS_DDL).alias("headers"), F.lit(None).cast("long").alias("st"))
        if self.aggregate.late_records_topic is not None:
            late = self._late(frame).select(
                "task", F.col("pos").alias("at"), F.lit(-1).cast("long").alias("due"), F.lit(0).alias("w"), "key",
                F.lit(None).cast("long").alias("start"), F.lit(None).cast("long").alias("end"),
                F.lit(None).cast("long").alias("count"), F.lit(None).cast("long").alias("rt"),
                F.lit(True).alias("late"), "value", "ts", "headers", "st")
            leaving = leaving.union(late)
        ordered = routing.by_task(leaving, "task", tasks).sortWithinPartitions("task", "at", "due", "w")
        emitted = map_in_arrow(ordered, self._forward(job, rank), spark_schema(EMITTED_FIELDS))
        read = (frame.where(F.col("offset") >= 0).groupBy("topic", "task").count()
                .transform(lambda counts: emitted_select(counts, kind=F.lit("input"), name=F.col("topic"),
                                                         partition=F.col("task"), sequence=F.col("count"))))
        emitted = emitted.union(read)
        if not job.dump_stores:
            return emitted
        return emitted.union(self._store_rows(updates, stream_times))

    def _updates(self, feed: Any) -> Tuple[Any, Any, Any]:
        """The task's input with each record's position and stream time, every accepted
        (record, window) update with its running count, and each task's stream times."""
        from pyspark import StorageLevel
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        frame = feed.select("task", "pmax", F.col("index").alias("idx"), "sender", F.col("sequence").alias("seq"),
                            F.col("timestamp").alias("ts"), "key", "value", "headers", "topic", "offset")
        order = Window.partitionBy("task").orderBy("pmax", "idx", "sender", "seq")
        # The aggregation's own stream time: only records that reach it (with a key) move it.
        keyed_ts = F.when(F.col("key").isNotNull(), F.col("ts"))
        frame = (frame.withColumn("pos", F.row_number().over(order))
                 .withColumn("st", F.coalesce(F.max(keyed_ts).over(order.rowsBetween(Window.unboundedPreceding, 0)),
                                              F.lit(-1).cast("long"))))
        # Read by several branches (updates, stream-time steps, late records, input counts): computed once.
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

    def _forward(self, job: ReplayJob, rank: int) -> ArrowMap:
        """Runs what leaves the aggregation (batches sorted by task, then due position)
        through the sub-topology's nodes after it."""
        plan = self

        def forward(batches: Iterable[Any]) -> Iterator[Any]:
            rows = job.emitted_rows()
            current: Optional[_Forwarding] = None
            for batch in batches:
                columns = [column_values(batch, name) for name in
                           ("task", "at", "due", "late", "key", "start", "end", "count", "rt", "value", "ts", "st")]
                headers = headers_from_arrow(batch.column("headers"))
                for (task, at, due, late, key, start, end, count, rt, value, ts, st), record_headers in zip(
                        zip(*columns), headers):
                    if current is None or current.task_index != task:
                        if current is not None:
                            current.finish()
                        current = _Forwarding(plan, job, task, rows, rank)
                    if late:
                        current.late(at, due, key, value, ts, record_headers, st)
                    else:
                        current.update(at, due, key, start, end, count, rt)
                if rows.full:
                    yield from rows.take_batches()
            if current is not None:
                current.finish()
            rows.add_tallies()
            yield from rows.take_batches()
        return forward

    def _store_rows(self, updates: Any, stream_times: Any) -> Any:
        """The window store's final contents: the windows not yet expired at the task's
        final stream time (as ``store.all()`` shows them)."""
        from pyspark.sql import functions as F

        retention = self.retention_ms
        final_time = stream_times.groupBy("task").agg(F.max("st").alias("final_st"))
        windows = (updates.groupBy("task", "key", "start", "end").agg(F.max("count").alias("count"))
                   .join(final_time, "task").where(F.col("start") >= F.col("final_st") - retention))
        key_serde, store = self.aggregate.key_serde, self.aggregate.store

        def store_rows(batches: Iterable[Any]) -> Iterator[Any]:
            rows = EmittedRows()
            for batch in batches:
                columns = [column_values(batch, name) for name in ("task", "key", "start", "end", "count")]
                for task, key, start, end, count in zip(*columns):
                    windowed = Windowed(key_serde.deserialize(key), start, end)
                    rows.add_text_row("store", store, task, None, None, None, _json_text(windowed),
                                      _json_text(count))
                if rows.full:
                    yield from rows.take_batches()
            rows.add_tallies()
            yield from rows.take_batches()
        return map_in_arrow(windows.select("task", "key", "start", "end", "count"), store_rows,
                            spark_schema(EMITTED_FIELDS))


class _Forwarding:
    """One task's nodes after the aggregation, fed what leaves it in order: the updates
    due at one record (one group) go out together, in the suppression buffer's order."""

    def __init__(self, plan: WindowedCountPlan, job: ReplayJob, task_index: int, rows: EmittedRows,
                 rank: int) -> None:
        topology = job.topology
        self.plan = plan
        self.task_index = task_index
        self.late_topic = plan.aggregate.late_records_topic
        self.late_partitions = job.partitions[self.late_topic] if self.late_topic is not None else 1
        self.collector = RecordCollector()
        self.task = build_task(job, topology.sub_topologies[plan.sub_id], task_index, self.collector)
        _compiled, downstreams = compile_nodes(topology, job.topology.sub_topologies[plan.sub_id], self.task.context)
        self.downstream = downstreams[plan.after]
        self.key_deserialize = plan.aggregate.key_serde.deserialize
        self.buffer_key = (topology.stores[plan.suppress.store].key_serde.serialize
                           if plan.suppress is not None else None)
        self.outputs = _Outputs(rank * SENDER_RANK + task_index, rows)
        self.group: List[Tuple[Any, Any, Any]] = []
        self.group_at: Any = None

    def _next(self, at: int, due: int) -> None:
        if (at, due) != self.group_at:
            self.flush()
            self.group_at = (at, due)

    def update(self, at: int, due: int, key: bytes, start: int, end: int, count: int, rt: int) -> None:
        self._next(at, due)
        windowed = Windowed(self.key_deserialize(key), start, end)
        self.group.append((windowed, ir.Change(count, count - 1 if count > 1 else None), rt))

    def late(self, at: int, due: int, key: bytes, value: Optional[bytes], ts: int, headers: Any, st: int) -> None:
        """A record dropped as late: written as it came, with the headers the live runtime adds."""
        self._next(at, due)
        plan = self.plan
        extra = tuple(zip(LATE_HEADERS, (plan.aggregate.name.encode(), plan.source.topic.encode(),
                                         str(self.task_index).encode(), str(at - 1).encode(), str(ts).encode(),
                                         str(st).encode())))
        self.collector.send(self.late_topic, self.task_index % self.late_partitions, key, value, ts,
                            (headers or ()) + extra)

    def flush(self) -> None:
        if self.buffer_key is not None:
            buffer_key = self.buffer_key
            self.group.sort(key=lambda item: buffer_key(item[0]))  # the buffer's order among equal due times
        for windowed, value, rt in self.group:
            self.downstream(windowed, value, rt)
        self.group.clear()
        self.outputs.take(self.collector)

    def finish(self) -> None:
        self.flush()
        add_sink_rows(self.task, self.outputs)
