"""``sk.spark.replay``: run an app's topology over historical data on Spark.

The physical topology is already cut into sub-topologies at every topic
(repartition, through and foreign-key topics). The replay runs them in dependency
order, each as one Spark stage:

1. its input: the replayed topics (read in parallel, one Spark partition per topic
   partition) and the records earlier stages sent to its topics;
2. a shuffle to its tasks, sorted into the live processing order (:mod:`.ordering`);
3. the task, per Spark partition (:mod:`.bulk` when the sub-topology has a bulk
   plan, else :mod:`.task_runner`);
4. its output, persisted for the stages and outputs that read it.

Sub-topologies that feed each other in a cycle (a foreign-key join) run together
in one Spark task. Nothing is collected to the driver except counts.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ..errors import ConfigError
from ..runtime.progress import read_stamp
from ..topology import Topology
from ..topology.passes import resolve_partitions
from .fidelity import check_replayable
from .inputs import KafkaTopic, resolve_input
from .ordering import SENDER_RANK, with_running_max
from .task_runner import ReplayJob, run_component, run_task_partition

log = logging.getLogger(__name__)


@dataclass
class OutputSummary:
    """One written output: what and how much."""

    kind: str  # "topic" | "sink" | "store"
    name: str
    records: int
    path: str
    seconds: float = 0.0
    """Time to write it (the replay's stages run before the first output is written)."""


@dataclass
class ReplayResult:
    """What a replay wrote, where, and how long it took."""

    output: str
    outputs: List[OutputSummary] = field(default_factory=list)
    input_records: int = 0
    """Records read from the replayed topics, global tables' topics not counted."""
    seconds: float = 0.0
    approximations: List[str] = field(default_factory=list)

    def output_path(self, topic: str) -> str:
        """Where the Parquet of output topic ``topic`` is (for a Parquet output)."""
        return os.path.join(self.output, "topics", topic)

    def summary(self) -> str:
        lines = [f"{o.kind} {o.name}: {o.records} record(s) in {o.seconds:.1f} s -> {o.path}" for o in self.outputs]
        lines.append(f"replayed {self.input_records} input record(s) in {self.seconds:.1f} s"
                     " (global tables' records, which every task reads whole, not counted)")
        return "\n".join(lines)


def replay(app: Any, *, inputs: Optional[Mapping[str, Any]] = None, output: str, spark: Any = None,
           master: Optional[str] = None, allow_approximate: bool = False, output_stores: bool = True,
           bulk: bool = False) -> ReplayResult:
    """Replay ``app`` over ``inputs`` (topic → embedded broker directory, archive, files,
    Kafka, or a ``--input`` string) and write every output topic, external sink and
    final store as Parquet under ``output`` (``output/topics/<topic>``,
    ``output/sinks/<node>``, ``output/stores/<store>``); topics the app reads without
    an input come from the app's own embedded broker. ``spark``: a SparkSession
    (default: a new local one, or on ``master``). ``bulk=True`` compiles the
    sub-topologies that have a bulk plan to Spark SQL (see :mod:`.bulk`); by default
    every stage runs the task runner, which measured faster (bench/spark_replay.py)."""
    from .outputs import parquet_root, write_outputs
    from .session import get_session

    started = time.monotonic()
    topology = app.build()
    sources = _resolve_inputs(app, topology, dict(inputs or {}))
    if spark is None:
        spark = get_session(master)
    existing = {topic: _partition_count(spark, source) for topic, source in sources.items()}
    partitions = resolve_partitions(topology, existing)
    partitions[f"{app.id}-dlq"] = max(partitions.values())
    notes = check_replayable(app, topology, partitions, allow_approximate=allow_approximate)
    for note in notes:
        log.warning("approximate replay: %s", note)
    globals_ = {topic: sources[topic] for topic in topology.global_tables.values()}
    if any(isinstance(s, KafkaTopic) for s in globals_.values()):
        raise ConfigError("a global table's topic cannot be replayed from Kafka (each task reads it whole): "
                          "archive it or give an embedded broker directory")
    job = ReplayJob(app=app, partitions=partitions, global_inputs=globals_, dump_stores=output_stores,
                    _topology=topology)
    stage = _Stages(spark, job, sources, bulk)
    emitted = stage.run_all()
    result = ReplayResult(output=output, approximations=notes)
    result.outputs = write_outputs(spark, job, emitted, output)
    result.input_records = stage.input_records()
    result.seconds = time.monotonic() - started
    for persisted in emitted + stage.cached:
        persisted.unpersist()
    with open(os.path.join(parquet_root(output), "_replay.json"), "w") as f:
        json.dump({"app": app.id, "input_records": result.input_records, "seconds": round(result.seconds, 3),
                   "approximations": notes,
                   "outputs": [o.__dict__ for o in result.outputs]}, f, indent=2)
    return result


def _resolve_inputs(app: Any, topology: Topology, given: Dict[str, Any]) -> Dict[str, Any]:
    from ..runtime.external_sources import external_sources

    produced = {t for sub in topology.sub_topologies for t in sub.sink_topics}
    needed = [t for sub in topology.sub_topologies for t in sub.source_topics if t not in produced]
    needed += [t for t in topology.global_tables.values() if t not in needed]
    unknown = sorted(set(given) - set(needed))
    if unknown:
        raise ConfigError(f"--input names topic(s) {', '.join(unknown)} that app '{app.id}' does not read "
                          f"from outside (it reads: {', '.join(sorted(set(needed)))})")
    anchors = external_sources(topology)
    default_dir = _default_embedded_dir(app)
    sources: Dict[str, Any] = {}
    for topic in dict.fromkeys(needed):
        spec = topology.topics[topic]
        chosen = given.get(topic) or anchors.get(topic)
        if chosen is None:
            if default_dir is None:
                raise ConfigError(f"no input for topic '{topic}': pass --input {topic}=SOURCE")
            chosen = default_dir
        sources[topic] = resolve_input(topic, chosen, spec.key_serde, spec.value_serde)
    return sources


def _default_embedded_dir(app: Any) -> Optional[str]:
    url = app.resolve_broker()
    if url.startswith("embedded://"):
        return url[len("embedded://"):]
    return None


def _partition_count(spark: Any, source: Any) -> int:
    if isinstance(source, KafkaTopic):
        from .kafka_input import kafka_partition_count
        return kafka_partition_count(spark, source)
    return source.partitions()


class _Stages:
    """Runs the sub-topologies in dependency order and keeps what each one sent."""

    def __init__(self, spark: Any, job: ReplayJob, sources: Mapping[str, Any], bulk: bool) -> None:
        self.spark = spark
        self.sc = spark.sparkContext
        self.job = job
        self.sources = sources
        self.bulk = bulk
        self._inputs: Dict[str, Any] = {}
        self.cached: List[Any] = []
        """DataFrames the bulk plans persisted: released after the outputs are written."""
        self._counters: Dict[str, Any] = {}

    def input_records(self) -> int:
        return sum(counter.value for counter in self._counters.values())

    def read(self, topic: str) -> Any:
        """The replayed topic as (partition, pmax, offset, timestamp, key, value, headers) rows."""
        rdd = self._inputs.get(topic)
        if rdd is not None:
            return rdd
        source = self.sources[topic]
        counter = self._counters[topic] = self.sc.accumulator(0)
        if isinstance(source, KafkaTopic):
            from .kafka_input import read_kafka
            rdd = read_kafka(self.spark, source, self.job.partitions[topic])
        else:
            count = source.partitions()

            def read_partition(partition: int, source: Any = source) -> Any:
                for pmax, (offset, ts, key, value, headers) in with_running_max(source.read(partition)):
                    yield partition, pmax, offset, ts, key, value, headers

            rdd = self.sc.parallelize(range(count), count).flatMap(read_partition)

        def counted(rows: Any, counter: Any = counter) -> Any:
            n = 0
            for row in rows:
                n += 1
                yield row
            counter.add(n)

        rdd = rdd.mapPartitions(counted)
        self._inputs[topic] = rdd
        return rdd

    def run_all(self) -> List[Any]:
        """Every stage's emitted RDD (persisted), in dependency order."""
        topology = self.job.topology
        emitted: List[Any] = []
        by_topic: Dict[str, List[Any]] = {}
        for rank, component in enumerate(components(topology)):
            feeds = []
            for sub_id in component:
                sub = topology.sub_topologies[sub_id]
                order = list(topology.source_nodes(sub))
                for index, topic in enumerate(order):
                    if topic in self.sources:
                        feeds.append(self._external_feed(topic, index))
                    for upstream in by_topic.get(topic, []):
                        feeds.append(self._internal_feed(upstream, topic, index))
            if not feeds:
                continue
            items = feeds[0] if len(feeds) == 1 else self.sc.union(feeds)
            in_order = self._offset_ordered(component, len(feeds))
            if in_order is not None:
                # One replayed topic: each Spark partition already is one task's input, in
                # offset order, so no shuffle is needed.
                sub_id = in_order
                job = self.job
                out = items.mapPartitionsWithIndex(
                    lambda partition, it: run_task_partition(job, sub_id, partition, it))
            else:
                out = self._run(component, items)
            if rank:
                out = out.map(lambda row, rank=rank: _ranked(row, rank))
            out = out.persist(_storage_level())
            emitted.append(out)
            for sub_id in component:
                for topic in topology.sub_topologies[sub_id].sink_topics:
                    by_topic.setdefault(topic, []).append(out)
        return emitted

    def _offset_ordered(self, component: Sequence[int], feeds: int) -> Optional[int]:
        """The sub-topology id if ``component`` is one sub-topology reading exactly one
        replayed topic (not through Kafka), else None."""
        if len(component) != 1 or feeds != 1:
            return None
        sub = self.job.topology.sub_topologies[component[0]]
        if len(sub.source_topics) != 1 or sub.source_topics[0] not in self.sources:
            return None
        if isinstance(self.sources[sub.source_topics[0]], KafkaTopic):
            return None
        return sub.id

    def _external_feed(self, topic: str, index: int) -> Any:
        def keyed(row: Tuple[Any, ...], topic: str = topic, index: int = index) -> Any:
            partition, pmax, offset, ts, key, value, headers = row
            return (partition, pmax, index, 0, offset), (topic, offset, ts, key, value, headers)
        return self.read(topic).map(keyed)

    @staticmethod
    def _internal_feed(upstream: Any, topic: str, index: int) -> Any:
        def keyed(row: Tuple[Any, ...], index: int = index) -> Any:
            _kind, _topic, partition, pmax, sender, sequence, ts, key, value, headers = row
            stamp = read_stamp((-1, ts, key, value, headers)) if headers else None
            if stamp is not None:
                # A repartition record: the live reader merges its writers by (writer stream
                # time, writer rank, offset) (runtime.writer_merge); so does the replay.
                pmax, sender, headers = stamp.stream_time, stamp.rank, headers[:-1] or None
            return (partition, pmax, index, sender, sequence), (_topic, -1, ts, key, value, headers)
        return upstream.filter(lambda row, topic=topic: row[0] == "topic" and row[1] == topic).map(keyed)

    def _run(self, component: Sequence[int], items: Any) -> Any:
        job = self.job
        topology = job.topology
        if len(component) > 1:
            def cycle_order(item: Any) -> Any:
                (partition, pmax, index, sender, sequence), (topic, *rest) = item
                return (0, pmax, index, partition, sender, sequence), (partition, topic, *rest)
            ids = tuple(component)
            return (items.map(cycle_order)
                    .repartitionAndSortWithinPartitions(1, lambda _k: 0)
                    .mapPartitions(lambda it: run_component(job, ids, it)))
        sub = topology.sub_topologies[component[0]]
        tasks = max(job.partitions[t] for t in sub.source_topics)
        if self.bulk and job.app.processing_error_handler == "fail":
            # (other handlers act per input record: only the task runner has the record)
            from .bulk import bulk_plan
            plan = bulk_plan(topology, sub)
            if plan is not None:
                return plan.run(self.spark, job, sub, tasks, items, self.cached)
        sub_id = sub.id
        return (items.repartitionAndSortWithinPartitions(tasks, lambda key: key[0])
                .mapPartitionsWithIndex(lambda partition, it: run_task_partition(job, sub_id, partition, it)))


def _ranked(row: Tuple[Any, ...], rank: int) -> Tuple[Any, ...]:
    """Tag what a stage sent with the stage's rank. Where several sub-topologies write one
    output topic, the upstream one's records go first: a live downstream task can only
    have sent after the upstream task it reads from (the only order all live runs share)."""
    if row[0] == "store":
        return row
    return row[:4] + (rank * SENDER_RANK + row[4],) + row[5:]


def _storage_level() -> Any:
    from pyspark import StorageLevel
    return StorageLevel.MEMORY_AND_DISK


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
