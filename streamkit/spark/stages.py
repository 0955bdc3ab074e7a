"""The replay's stages: each sub-topology (or cycle of them) as one Spark computation.

A stage's input, as a DataFrame of the task input order's columns
(``task, pmax, index, sender, sequence``, see :mod:`.ordering`) and the record
(``source``: its topic's place in the stage's input topics, ``offset, timestamp,
key, value, headers``), is the union of

- its replayed topics (:func:`.task_functions.read_topic`, or Spark's Kafka source), and
- the records earlier stages sent to its topics (a repartition record's writer stamp
  gives its ``pmax`` and ``sender``).

Spark shuffles it to the tasks (:mod:`.routing`: task p in Spark partition p),
sorts each partition in the JVM and hands it to the Python tasks as Arrow batches
(:mod:`.task_functions`). A stage that reads exactly one replayed topic needs no
shuffle: each task reads its own partition in offset order. Sub-topologies that
feed each other (a foreign-key join) run together in one Spark partition.

What each stage emits is kept in Spark's block store (``localCheckpoint``: the rows
as they are, far cheaper to store than a DataFrame's columnar cache) for the
stages and outputs that read it, and counted from its ``tally`` rows by the action
that computes it, which times the stage. The rows are kept on local disk only: in
the JVM's memory a 5M-record stage took gigabytes of heap, and collecting its
garbage cost more CPU than reading the rows back (bench/spark_replay.py). A kept
stage no longer has its lineage: on a cluster, losing an executor fails the replay
instead of recomputing the lost part (rerun it).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ..topology import Topology
from .arrow_map import map_in_arrow
from .arrow_rows import EMITTED_FIELDS, INPUT_FIELDS, TASK_INPUT_COLUMNS, spark_schema
from .inputs import KafkaTopic
from .ordering import ORDER_COLUMNS
from .routing import TaskRouting
from .slicing import Slice, SliceStat, apply_fixes, fixes, plan_slices, sliceable
from .task_functions import read_and_run, read_slices_and_run, read_topic, run_cycle, run_sorted
from .task_runner import ReplayJob

log = logging.getLogger(__name__)


@dataclass
class StageSummary:
    """One stage of a replay: what it ran, read and sent, and its wall time."""

    sub_topologies: List[int]
    how: str
    """"offset order" (one replayed topic, no shuffle), "sorted" (shuffled and sorted in
    Spark), "cycle" (sub-topologies feeding each other) or "bulk" (a bulk plan)."""
    reads: List[str]
    input_records: int = 0
    """Records read from replayed topics."""
    sent: int = 0
    """Records sent to topics."""
    seconds: float = 0.0
    """Wall time of the stage (its input's shuffle and sort, the tasks, keeping what they sent)."""
    slices: int = 0
    """Spark tasks the stage's tasks ran in when it ran them in slices (:mod:`.slicing`), else 0."""

    @property
    def name(self) -> str:
        ids = "+".join(str(i) for i in self.sub_topologies)
        return f"sub-topolog{'ies' if len(self.sub_topologies) > 1 else 'y'} {ids}"


@dataclass
class StagesRun:
    """Every stage's kept emitted rows, with what was counted on the way."""

    routing: TaskRouting
    """How the stages put tasks into Spark partitions (the outputs' writers do the same)."""
    emitted: List[Any] = field(default_factory=list)
    contents: List[Set[Tuple[str, str]]] = field(default_factory=list)
    """The (kind, name) pairs of each of ``emitted``."""
    cached: List[Any] = field(default_factory=list)
    """DataFrames persisted on the way (bulk plans): released with ``emitted``."""
    summaries: List[StageSummary] = field(default_factory=list)
    counts: Dict[Tuple[str, str], int] = field(default_factory=dict)
    """Rows per (kind, name) over all stages ("topic", "sink", "store")."""
    input_records: Dict[str, int] = field(default_factory=dict)
    """Records read per replayed topic (every stage reading a topic reads all of it)."""
    kept_before: Set[int] = field(default_factory=set)
    """The ids of the RDDs the session kept before the replay."""

    def rows_of(self, kind: str, name: str) -> Any:
        """The emitted rows of one kind and name (read from the stages that emitted some)."""
        from pyspark.sql import functions as F

        frames = [frame.where((F.col("kind") == kind) & (F.col("name") == name))
                  for frame, contents in zip(self.emitted, self.contents) if (kind, name) in contents]
        rows = frames[0]
        for frame in frames[1:]:
            rows = rows.union(frame)
        return rows

    def release(self, spark: Any) -> None:
        """Drop everything the session kept since the stages started (what ``localCheckpoint``
        keeps has no handle but its RDD's id)."""
        for frame in self.cached:
            frame.unpersist()
        for rdd_id, rdd in _kept_rdds(spark).items():
            if rdd_id not in self.kept_before:
                rdd.unpersist(True)


def _kept_level() -> Any:
    """Where a stage's rows are kept: on local disk only (see the module docstring)."""
    from pyspark import StorageLevel

    return StorageLevel.DISK_ONLY


def _kept_rdds(spark: Any) -> Dict[int, Any]:
    """The session's persisted RDDs (JVM handles) by id."""
    return {int(rdd_id): rdd for rdd_id, rdd in spark.sparkContext._jsc.getPersistentRDDs().items()}


class Stages:
    """Runs the sub-topologies in dependency order (:func:`components`)."""

    def __init__(self, spark: Any, job: ReplayJob, sources: Mapping[str, Any], bulk: bool,
                 routing: Optional[TaskRouting] = None, slice_records: Optional[int] = None) -> None:
        self.spark = spark
        self.job = job
        self.sources = sources
        self.bulk = bulk
        self.slice_records = slice_records
        """Offsets per slice of a stateless stage (:mod:`.slicing`); None: chosen from the
        input and Spark's parallelism; 0: never sliced."""
        self.routing = routing or TaskRouting(spark)
        self._inputs: Dict[str, Any] = {}

    def run_all(self) -> StagesRun:
        topology = self.job.topology
        run = StagesRun(self.routing, kept_before=set(_kept_rdds(self.spark)))
        by_topic: Dict[str, List[Any]] = {}
        for rank, component in enumerate(components(topology)):
            reads = [t for sub_id in component for t in topology.source_nodes(topology.sub_topologies[sub_id])]
            if not any(t in self.sources or t in by_topic for t in reads):
                continue
            summary = StageSummary(list(component), "", reads)
            started = time.monotonic()
            stage, slices = self._stage(component, rank, by_topic, summary, run.cached)
            out = stage.localCheckpoint(eager=False, storageLevel=_kept_level())
            contents, slice_stats = self._count(out, summary, run)
            run.contents.append(contents)
            if slices is not None:
                out = apply_fixes(self.spark, out, fixes(slices, slice_stats))
            summary.seconds = time.monotonic() - started
            log.info("stage %s (%s, reads %s): %.1f s, %d replayed record(s) read, %d record(s) sent",
                     summary.name, summary.how, ", ".join(reads), summary.seconds, summary.input_records,
                     summary.sent)
            run.emitted.append(out)
            run.summaries.append(summary)
            for sub_id in component:
                for topic in topology.sub_topologies[sub_id].sink_topics:
                    by_topic.setdefault(topic, []).append(out)
        return run

    def _stage(self, component: Sequence[int], rank: int, by_topic: Mapping[str, List[Any]],
               summary: StageSummary, cached: List[Any]) -> Tuple[Any, Optional[List[Slice]]]:
        """The stage's emitted rows (:data:`~.arrow_rows.EMITTED_FIELDS`), not computed yet,
        and the slices its tasks run in (None: one Spark task per task)."""
        emitted = spark_schema(EMITTED_FIELDS)
        single = self._offset_ordered(component, by_topic)
        if single is not None:
            summary.how = "offset order"
            sub_id, topic = single
            source = self.sources[topic]
            slices = self._slices(sub_id, source)
            if slices is not None:
                summary.slices = len(slices)
                return map_in_arrow(self.spark.range(len(slices), numPartitions=len(slices)),
                                    read_slices_and_run(self.job, sub_id, topic, source, rank, slices),
                                    emitted), slices
            count = self.job.partitions[topic]
            return map_in_arrow(self.spark.range(count, numPartitions=count),
                                read_and_run(self.job, sub_id, topic, source, rank), emitted), None
        return self._shuffled_stage(component, rank, by_topic, summary, cached), None

    def _slices(self, sub_id: int, source: Any) -> Optional[List[Slice]]:
        """The slices a stateless stage over ``source`` runs in, or None (see :mod:`.slicing`)."""
        if self.slice_records == 0 or not sliceable(self.job.topology, self.job.topology.sub_topologies[sub_id]):
            return None
        ranges = {}
        for partition in range(source.partitions()):
            found = source.offset_range(partition)
            if found is None:
                return None
            ranges[partition] = found
        return plan_slices(ranges, self.spark.sparkContext.defaultParallelism, self.slice_records)

    def _shuffled_stage(self, component: Sequence[int], rank: int, by_topic: Mapping[str, List[Any]],
                        summary: StageSummary, cached: List[Any]) -> Any:
        emitted = spark_schema(EMITTED_FIELDS)
        topics, feed = self._feed(component, by_topic)
        if len(component) > 1:
            summary.how = "cycle"
            ordered = feed.repartition(1).sortWithinPartitions("pmax", "index", "task", "sender", "sequence")
            return map_in_arrow(ordered.select(*TASK_INPUT_COLUMNS),
                                run_cycle(self.job, tuple(component), topics, rank), emitted)
        sub = self.job.topology.sub_topologies[component[0]]
        tasks = max(self.job.partitions[t] for t in sub.source_topics)
        if self.bulk and self.job.app.processing_error_handler == "fail":
            # (other handlers act per input record: only the task runner has the record)
            from .bulk import bulk_plan
            plan = bulk_plan(self.job.topology, sub)
            if plan is not None:
                summary.how = "bulk"
                return plan.run(self.spark, self.job, tasks, feed, rank, self.routing, cached)
        summary.how = "sorted"
        ordered = self.routing.by_task(feed, "task", tasks).sortWithinPartitions(*ORDER_COLUMNS)
        return map_in_arrow(ordered.select(*TASK_INPUT_COLUMNS), run_sorted(self.job, sub.id, topics, rank),
                            emitted)

    def _offset_ordered(self, component: Sequence[int], by_topic: Mapping[str, List[Any]]
                        ) -> Optional[Tuple[int, str]]:
        """(sub-topology, topic) if ``component`` is one sub-topology whose only input is
        one replayed topic (not read through Kafka), else None."""
        if len(component) != 1:
            return None
        sub = self.job.topology.sub_topologies[component[0]]
        if len(sub.source_topics) != 1:
            return None
        topic = sub.source_topics[0]
        if topic not in self.sources or topic in by_topic or isinstance(self.sources[topic], KafkaTopic):
            return None
        return sub.id, topic

    def _feed(self, component: Sequence[int], by_topic: Mapping[str, List[Any]]) -> Tuple[List[str], Any]:
        """The stage's input topics and its input (the union of their records)."""
        topology = self.job.topology
        topics: List[str] = []
        feeds = []
        for sub_id in component:
            for index, topic in enumerate(topology.source_nodes(topology.sub_topologies[sub_id])):
                source = len(topics)
                topics.append(topic)
                if topic in self.sources:
                    feeds.append(_external_feed(self._input(topic), topic, index, source))
                for upstream in by_topic.get(topic, []):
                    feeds.append(_internal_feed(upstream, topic, index, source))
        feed = feeds[0]
        for other in feeds[1:]:
            feed = feed.union(other)
        return topics, feed

    def _input(self, topic: str) -> Any:
        """Replayed topic ``topic`` as :data:`~.arrow_rows.INPUT_FIELDS` rows."""
        frame = self._inputs.get(topic)
        if frame is None:
            source = self.sources[topic]
            if isinstance(source, KafkaTopic):
                from .kafka_input import read_kafka
                frame = read_kafka(self.spark, source)
            else:
                count = source.partitions()
                frame = map_in_arrow(self.spark.range(count, numPartitions=count), read_topic(source),
                                     spark_schema(INPUT_FIELDS))
            self._inputs[topic] = frame
        return frame

    @staticmethod
    def _count(out: Any, summary: StageSummary, run: StagesRun) -> Tuple[Set[Tuple[str, str]], List[SliceStat]]:
        """Compute ``out`` (into its kept form) and add up its ``input`` and ``tally`` rows;
        the (kind, name) pairs it holds, and its ``slice`` rows."""
        from pyspark.sql import functions as F

        contents: Set[Tuple[str, str]] = set()
        read: Dict[str, int] = {}
        slice_stats: List[SliceStat] = []
        for row in (out.where(F.col("kind").isin("input", "tally", "slice"))
                    .select("kind", "name", "partition", "sequence", "pmax", "slice").collect()):
            if row["kind"] == "slice":
                slice_stats.append((row["slice"], row["name"], row["partition"], row["sequence"], row["pmax"]))
                continue
            if row["kind"] == "input":
                read[row["name"]] = read.get(row["name"], 0) + row["sequence"]
                continue
            kind, _sep, name = row["name"].partition(":")
            contents.add((kind, name))
            run.counts[(kind, name)] = run.counts.get((kind, name), 0) + row["sequence"]
            if kind == "topic":
                summary.sent += row["sequence"]
        summary.input_records = sum(read.values())
        for topic, records in read.items():
            run.input_records[topic] = max(run.input_records.get(topic, 0), records)
        return contents, slice_stats


def _external_feed(frame: Any, topic: str, index: int, source: int) -> Any:
    from pyspark.sql import functions as F

    return frame.select(F.col("partition").alias("task"), "pmax", F.lit(index).alias("index"),
                        F.lit(0).cast("bigint").alias("sender"), F.col("offset").alias("sequence"),
                        F.lit(source).alias("source"), F.lit(topic).alias("topic"), "offset", "timestamp", "key",
                        "value", "headers")


def _internal_feed(upstream: Any, topic: str, index: int, source: int) -> Any:
    """What an earlier stage sent to ``topic``. A repartition record's reader merges its
    writers by (writer stream time, writer rank, offset) (runtime.writer_merge); so does
    the replay, from the stamp the record carried."""
    from pyspark.sql import functions as F

    sent = upstream.where((F.col("kind") == "topic") & (F.col("name") == topic))
    return sent.select(F.col("partition").alias("task"), F.coalesce("writer_time", "pmax").alias("pmax"),
                       F.lit(index).alias("index"), F.coalesce("writer", "sender").alias("sender"), "sequence",
                       F.lit(source).alias("source"), F.lit(topic).alias("topic"),
                       F.lit(-1).cast("bigint").alias("offset"), "timestamp", "key", "value", "headers")


def components(topology: Topology) -> List[List[int]]:
    """The sub-topologies grouped into strongly connected components (cycles through
    topics), in dependency order."""
    subs = topology.sub_topologies
    readers: Dict[str, List[int]] = {}
    for sub in subs:
        for topic in sub.source_topics:
            readers.setdefault(topic, []).append(sub.id)
    edges: Dict[int, Set[int]] = {sub.id: {r for t in sub.sink_topics for r in readers.get(t, [])} for sub in subs}
    index: Dict[int, int] = {}
    low: Dict[int, int] = {}
    stack: List[int] = []
    on_stack: Set[int] = set()
    found: List[List[int]] = []
    counter = [0]

    def visit(v: int) -> None:  # Tarjan: emits components in reverse dependency order
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            found.append(sorted(component))

    for sub in subs:
        if sub.id not in index:
            visit(sub.id)
    return list(reversed(found))
