"""Runs a sub-topology's task inside a Spark executor, over its input in processing order.

This is the streaming runtime's own :class:`~streamkit.runtime.task.Task` (same
compiled chain, serdes, stores, error handlers and stream-time punctuations) with
in-memory stores, fed by Spark instead of a consumer. Whatever it sends comes out as
:data:`Emitted` tuples carrying their place in the task's output order, from which
the planner builds the input of the next sub-topology (and the output topics).

Differences from a live worker, by design: every update is emitted (no caching),
nothing is changelogged, and the wall clock stands still (the planner refuses
wall-clock punctuators and idle window closing up front, see :mod:`.plan`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..runtime.assembly import TaskSettings, create_task
from ..runtime.collector import RecordCollector
from ..runtime.global_tables import GlobalTables
from ..runtime.task import Task
from ..serdes import compact_json
from ..sinks.base import SinkRecord
from ..topology import Topology
from ..topology.model import SubTopology

RUN_LENGTH = 500
"""Records handed to the task per call (one topic's consecutive records)."""

Emitted = Tuple[str, str, int, int, int, int, int, Optional[bytes], Optional[bytes], Any]
"""("topic" | "sink", topic or sink node, partition, pmax, task, sequence, timestamp, key,
value, headers): one record sent by a task, in order: ``sequence`` counts the task's
records to that destination, ``pmax`` is the running maximum of their timestamps."""

StoreRow = Tuple[str, str, int, Optional[str], Optional[str]]
"""("store", store name, partition, key JSON, value JSON): a final store entry."""

Ordered = Tuple[Tuple[int, int, int, int, int], Tuple[str, int, int, Optional[bytes], Optional[bytes], Any]]
"""((task, pmax, input index, source, sequence), (topic, offset, timestamp, key, value, headers)):
a record of a task's input; sorting by the first item gives the task's processing order."""


@dataclass
class ReplayJob:
    """What every executor needs to run tasks: shipped once per stage by pickling."""

    app: Any
    partitions: Dict[str, int]
    global_inputs: Dict[str, Any] = field(default_factory=dict)
    """Replay inputs of the global tables' topics, read by each task itself."""
    dump_stores: bool = True
    _topology: Optional[Topology] = None

    @property
    def topology(self) -> Topology:
        if self._topology is None:
            self._topology = self.app.build()
        return self._topology

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_topology"] = None  # rebuilt on the executor: compiled closures need not pickle
        return state


class _CollectingWriter:
    """Stands in for an external sink's writer: a replay writes sink records as output
    instead of delivering them (the replay must not touch the live database or archive)."""

    def __init__(self) -> None:
        self.records: List[SinkRecord] = []

    def write(self, record: SinkRecord) -> None:
        self.records.append(record)

    def start(self) -> None:
        pass

    def commit(self, positions: Any) -> None:
        pass

    def discard(self) -> int:
        return 0

    def close(self) -> None:
        pass


class ReplayTask(Task):
    """A task whose external sinks collect their records instead of delivering them."""

    def _open_sinks(self, topology: Topology, sub: SubTopology, partitions: Mapping[str, int]) -> Dict[str, Any]:
        from ..topology.nodes import ExternalSinkNode

        return {name: _CollectingWriter() for name in sub.node_names
                if isinstance(topology.nodes[name], ExternalSinkNode)}


def build_task(job: ReplayJob, sub: SubTopology, partition: int, collector: RecordCollector,
               global_stores: Optional[Mapping[str, Any]] = None) -> ReplayTask:
    """The task as a worker would build it, with stores in memory, no caching and a still clock."""
    settings = TaskSettings(deserialization_error_handler=job.app.deserialization_error_handler,
                            processing_error_handler=job.app.processing_error_handler,
                            store_backend="memory", caching=False)
    return create_task(job.topology, sub, partition, partitions=job.partitions, collector=collector,
                       wall_clock=lambda: 0, settings=settings, global_stores=global_stores,
                       task_class=ReplayTask)  # type: ignore[return-value]


def load_global_tables(job: ReplayJob) -> Optional[GlobalTables]:
    """Global tables loaded whole from their inputs, as a worker loads them before any task runs."""
    topology = job.topology
    if not topology.global_tables:
        return None
    tables = GlobalTables(topology, backend="memory", state_dir=None)
    for topic, store in tables.by_topic.items():
        source = job.global_inputs[topic]
        for partition in range(source.partitions()):
            batch: List[Any] = []
            for record in source.read(partition):
                batch.append(record)
                if len(batch) >= 5000:
                    store.apply(partition, batch, batch[-1][0] + 1)
                    batch = []
            if batch:
                store.apply(partition, batch, batch[-1][0] + 1)
    return tables


class _Outputs:
    """Numbers what tasks send, per destination, and keeps each destination's running
    maximum timestamp (the merge order of :mod:`.ordering`)."""

    def __init__(self, task_index: int) -> None:
        self.task_index = task_index
        self._next: Dict[Tuple[str, int], Tuple[int, int]] = {}

    def take(self, collector: RecordCollector) -> List[Emitted]:
        out: List[Emitted] = []
        for topic, partition, records in collector.drain():
            sequence, pmax = self._next.get((topic, partition), (0, -1))
            for key, value, timestamp, headers in records:
                if timestamp > pmax:
                    pmax = timestamp
                out.append(("topic", topic, partition, pmax, self.task_index, sequence, timestamp, key, value,
                            headers))
                sequence += 1
            self._next[(topic, partition)] = (sequence, pmax)
        return out


def run_task_partition(job: ReplayJob, sub_id: int, partition: int, items: Iterable[Ordered]) -> Iterator[Any]:
    """Run task ``sub_id``_``partition`` over ``items`` (sorted: the task's processing
    order) and yield what it sent, then its sink records and final store contents."""
    topology = job.topology
    sub = topology.sub_topologies[sub_id]
    collector = RecordCollector()
    tables = load_global_tables(job)
    task = build_task(job, sub, partition, collector, tables.stores if tables is not None else None)
    outputs = _Outputs(partition)
    next_offset: Dict[str, int] = {}
    run: List[Any] = []
    run_topic: Optional[str] = None
    for _order, (topic, offset, timestamp, key, value, headers) in items:
        if offset < 0:  # a record of a repartition (or through) topic: its offset is its rank
            offset = next_offset.get(topic, 0)
            next_offset[topic] = offset + 1
        if topic != run_topic or len(run) >= RUN_LENGTH:
            if run:
                task.process(run_topic, run)  # type: ignore[arg-type]
                yield from outputs.take(collector)
            run, run_topic = [], topic
        run.append((offset, timestamp, key, value, headers))
    if run:
        task.process(run_topic, run)  # type: ignore[arg-type]
    task.prepare_commit()
    yield from outputs.take(collector)
    yield from sink_rows(task, outputs)
    if job.dump_stores:
        yield from store_rows(task)


def sink_rows(task: Task, outputs: _Outputs) -> Iterator[Emitted]:
    """The records a task wrote to external sinks, as outputs named after the sink node."""
    for name, writer in task.sinks.items():
        for sequence, record in enumerate(writer.records):
            yield ("sink", name, task.partition, -1, outputs.task_index, sequence, record.timestamp,
                   _json_text(record.key), _json_text(record.value), None)


def store_rows(task: Task) -> Iterator[StoreRow]:
    """Each store's final contents as JSON text (a windowed key as its key, start and end)."""
    for open_store in task.store_set.open_stores:
        name, store = open_store.spec.name, open_store.store
        if open_store.spec.kind == "suppression" or not hasattr(store, "all"):
            continue  # a suppression buffer is the operator's internal queue, not state to inspect
        for key, value in store.all():
            yield ("store", name, task.partition, _json_text(key), _json_text(value))


def _json_text(obj: Any) -> Any:
    from ..windowing.windowed_keys import Windowed

    if obj is None:
        return None
    if isinstance(obj, Windowed):
        obj = {"key": obj.key, "start": obj.start, "end": obj.end}
    try:
        return compact_json(obj).decode()
    except TypeError:
        return compact_json(repr(obj)).decode()


def run_component(job: ReplayJob, sub_ids: Sequence[int], items: Iterable[Tuple[Any, Tuple[Any, ...]]]
                  ) -> Iterator[Any]:
    """Run sub-topologies that feed each other in a cycle (a foreign-key join's
    subscription and response topics) together, every partition of each in one
    executor: each input record is processed to completion, the records it causes
    on the cycle's own topics included, before the next (as the test driver does).
    ``items`` are sorted across tasks and carry their partition first:
    ``(order, (partition, topic, offset, timestamp, key, value, headers))``."""
    topology = job.topology
    collector = RecordCollector()
    tables = load_global_tables(job)
    global_stores = tables.stores if tables is not None else None
    tasks: Dict[Tuple[int, int], Task] = {}
    reads: Dict[str, int] = {}
    for sub_id in sub_ids:
        sub = topology.sub_topologies[sub_id]
        for topic in sub.source_topics:
            reads[topic] = sub_id
    outputs: Dict[Tuple[int, int], _Outputs] = {}
    next_offset: Dict[Tuple[str, int], int] = {}
    leaving = RecordCollector()
    sender = _Outputs(0)
    """What leaves the cycle is numbered as one sender's output: the cycle runs as one."""

    def task_for(sub_id: int, partition: int) -> Task:
        task = tasks.get((sub_id, partition))
        if task is None:
            task = tasks[(sub_id, partition)] = build_task(job, topology.sub_topologies[sub_id], partition,
                                                           collector, global_stores)
            outputs[(sub_id, partition)] = _Outputs(partition)
        return task

    def deliver(topic: str, partition: int, records: List[Any]) -> None:
        task_for(reads[topic], partition).process(topic, records)

    for _order, (partition, topic, offset, timestamp, key, value, headers) in items:
        if offset < 0:
            offset = next_offset.get((topic, partition), 0)
            next_offset[(topic, partition)] = offset + 1
        deliver(topic, partition, [(offset, timestamp, key, value, headers)])
        while True:
            batches = collector.drain()
            if not batches:
                break
            for out_topic, out_partition, records in batches:
                if out_topic in reads:
                    base = next_offset.get((out_topic, out_partition), 0)
                    next_offset[(out_topic, out_partition)] = base + len(records)
                    deliver(out_topic, out_partition,
                            [(base + i, ts, k, v, h) for i, (k, v, ts, h) in enumerate(records)])
                else:  # leaves the cycle
                    leaving.send_batch(out_topic, out_partition, records)
            yield from sender.take(leaving)
    for task in tasks.values():
        task.prepare_commit()
        yield from sink_rows(task, outputs[(task.sub_topology.id, task.partition)])
        if job.dump_stores:
            yield from store_rows(task)
