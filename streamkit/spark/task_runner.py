"""Runs a sub-topology's task inside a Spark executor, over its input in processing order.

This is the streaming runtime's own :class:`~streamkit.runtime.task.task.Task` (same
compiled chain, serdes, stores, error handlers and stream-time punctuations) with
in-memory stores, fed by Spark instead of a consumer (:mod:`.task_functions` turns
Spark's Arrow batches into its input). Whatever it sends is gathered as
:class:`~.arrow_rows.EmittedRows` carrying its place in the task's output order, from
which the planner builds the input of the next sub-topology (and the output topics).

Differences from a live worker, by design: every update is emitted (no caching),
nothing is changelogged, and the wall clock stands still (the planner refuses
wall-clock punctuators and idle window closing up front, see :mod:`.fidelity`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from ..core.records import RawRecord
from ..runtime.task.factory import TaskSettings, create_task
from ..runtime.context.collector import RecordCollector
from ..runtime.task.global_tables import GlobalTables
from ..runtime.ordering.repartition_stamps import merged_topics
from ..runtime.task.task import Task
from ..serdes import compact_json
from ..topology import Topology
from ..topology.model import SubTopology
from ..topology.serde_binding import bind_serdes
from .arrow_rows import EmittedRows


@dataclass
class ReplayJob:
    """What every executor needs to run tasks: shipped once per stage by pickling."""

    app: Any
    partitions: Dict[str, int]
    global_inputs: Dict[str, Any] = field(default_factory=dict)
    """Replay inputs of the global tables' topics, read by each task itself."""
    dump_stores: bool = True
    broker: Optional[str] = None
    """The app's broker URL, to which the topology's serdes are bound as a worker binds
    them (:func:`~streamkit.topology.serde_binding.bind_serdes`): registry serdes get
    their topics' subjects, and ``registry="embedded"`` the registry on this broker,
    reached from every executor. None: serdes stay as the app built them."""
    _topology: Optional[Topology] = None
    _stamped: Optional[FrozenSet[str]] = None

    @property
    def topology(self) -> Topology:
        """The app's topology with its serdes bound to ``broker`` (built once per process
        the job is unpickled in; registry serdes connect on first use, see
        :class:`~streamkit.serdes.registry_serde.RegistrySerde`)."""
        if self._topology is None:
            self._topology = bind_serdes(self.app.build(), self.broker)
        return self._topology

    @property
    def stamped_topics(self) -> FrozenSet[str]:
        """The repartition topics whose records carry their writer's stamp (see
        :mod:`streamkit.runtime.ordering.repartition_stamps`)."""
        if self._stamped is None:
            self._stamped = merged_topics(self.topology)
        return self._stamped

    def emitted_rows(self) -> EmittedRows:
        """An empty :class:`~.arrow_rows.EmittedRows` for this job's tasks."""
        return EmittedRows(self.stamped_topics)

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_topology"] = None  # rebuilt on the executor: compiled closures need not pickle
        state["_stamped"] = None
        return state


class ReplayTask(Task):
    """A task whose external sinks collect their records instead of delivering them (a
    replay must not touch the live database or archive; its sinks' records become output)."""

    def delivers_to(self, sink: Any) -> bool:
        return False


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
    """Numbers what a task sends, per destination, into :class:`~.arrow_rows.EmittedRows`
    (``sender``: the stage's rank times SENDER_RANK plus the task, see :mod:`.ordering`)."""

    def __init__(self, sender: int, rows: EmittedRows) -> None:
        self.sender = sender
        self.rows = rows
        self._next: Dict[Tuple[str, int], Tuple[int, int]] = {}

    def sent(self) -> Dict[Tuple[str, int], Tuple[int, int]]:
        """Per (topic, partition) sent to: how many records, and the largest of their timestamps."""
        return dict(self._next)

    def take(self, collector: RecordCollector) -> None:
        add = self.rows.add_topic_records
        for topic, partition, records in collector.drain():
            sequence, pmax = self._next.get((topic, partition), (0, -1))
            self._next[(topic, partition)] = add(topic, partition, self.sender, sequence, pmax, records)


class TaskRun:
    """One task of a stage, fed its input in processing order, one run of consecutive
    records of one topic at a time; what it sends goes to ``rows``."""

    def __init__(self, job: ReplayJob, sub: SubTopology, partition: int, rows: EmittedRows, sender: int,
                 global_stores: Optional[Mapping[str, Any]] = None) -> None:
        self.collector = RecordCollector()
        self.task = build_task(job, sub, partition, self.collector, global_stores)
        self.outputs = _Outputs(sender, rows)
        self.rows = rows
        self.read: Dict[str, int] = {}
        """Records of replayed topics taken, per topic (not those another stage sent)."""
        self._next_offset: Dict[str, int] = {}

    def process(self, topic: str, records: List[RawRecord]) -> None:
        """Consecutive records of replayed topic ``topic``, with their offsets."""
        self.read[topic] = self.read.get(topic, 0) + len(records)
        self.task.process(topic, records)
        self.outputs.take(self.collector)

    def process_sent(self, topic: str, timestamps: Sequence[int], keys: Sequence[Optional[bytes]],
                     values: Sequence[Optional[bytes]], headers: Sequence[Any]) -> None:
        """Consecutive records another stage sent to ``topic`` (a repartition or through
        topic): each one's offset is its rank in the task's input of that topic."""
        base = self._next_offset.get(topic, 0)
        self._next_offset[topic] = base + len(timestamps)
        records = list(zip(range(base, base + len(timestamps)), timestamps, keys, values, headers))
        self.task.process(topic, records)  # type: ignore[arg-type]
        self.outputs.take(self.collector)

    def finish(self, dump_stores: bool) -> None:
        """End of input: commit as a worker would, then add the sink records and final stores."""
        self.task.prepare_commit()
        self.outputs.take(self.collector)
        add_sink_rows(self.task, self.outputs)
        if dump_stores:
            add_store_rows(self.task, self.rows)


def add_sink_rows(task: Task, outputs: _Outputs) -> None:
    """The records a task wrote to external sinks, as rows named after the sink node."""
    for name, writer in task.sinks.items():
        for sequence, record in enumerate(writer.records):
            outputs.rows.add_text_row("sink", name, task.partition, outputs.sender, sequence, record.timestamp,
                                      _json_text(record.key), _json_text(record.value))


def add_store_rows(task: Task, rows: EmittedRows) -> None:
    """Each store's final contents as JSON text (a windowed key as its key, start and end)."""
    for open_store in task.stores.open_stores:
        name, store = open_store.spec.name, open_store.store
        if open_store.spec.kind == "suppression" or not hasattr(store, "all"):
            continue  # a suppression buffer is the operator's internal queue, not state to inspect
        for key, value in store.all():
            rows.add_text_row("store", name, task.partition, None, None, None, _json_text(key), _json_text(value))


def _json_text(obj: Any) -> Any:
    """``obj`` as compact JSON text for the Parquet outputs' text columns: a windowed key
    as ``{"key", "start", "end"}``, a Protobuf message as its dict (field names as in
    the .proto, Protobuf's JSON mapping otherwise, as ``streamkit consume`` prints it),
    anything JSON cannot hold as the JSON string of its repr."""
    from ..windowing.windowed_keys import Windowed

    if obj is None:
        return None
    if isinstance(obj, Windowed):
        obj = {"key": _json_ready(obj.key), "start": obj.start, "end": obj.end}
    else:
        obj = _json_ready(obj)
    try:
        return compact_json(obj).decode()
    except TypeError:
        return compact_json(repr(obj)).decode()


def _json_ready(obj: Any) -> Any:
    if hasattr(obj, "DESCRIPTOR") and hasattr(obj, "SerializeToString"):  # a Protobuf message
        from google.protobuf.json_format import MessageToDict

        return MessageToDict(obj, preserving_proto_field_name=True)
    return obj


CycleRecord = Tuple[int, str, int, int, Optional[bytes], Optional[bytes], Any]
"""(partition, topic, offset, timestamp, key, value, headers): an input record of a cycle's tasks."""


class ComponentRun:
    """Sub-topologies that feed each other in a cycle (a foreign-key join's subscription
    and response topics), every partition of each in one executor: each input record is
    processed to completion, the records it causes on the cycle's own topics included,
    before the next (as the test driver does). What leaves the cycle is numbered as one
    sender's output (``sender``): the cycle runs as one."""

    def __init__(self, job: ReplayJob, sub_ids: Sequence[int], rows: EmittedRows, sender: int) -> None:
        self.job = job
        self.rows = rows
        self.collector = RecordCollector()
        tables = load_global_tables(job)
        self._global_stores = tables.stores if tables is not None else None
        self.tasks: Dict[Tuple[int, int], Task] = {}
        self.read: Dict[str, int] = {}
        """Records of replayed topics taken, per topic."""
        self._reads: Dict[str, int] = {}
        for sub_id in sub_ids:
            for topic in job.topology.sub_topologies[sub_id].source_topics:
                self._reads[topic] = sub_id
        self._outputs: Dict[Tuple[int, int], _Outputs] = {}
        self._next_offset: Dict[Tuple[str, int], int] = {}
        self._leaving = RecordCollector()
        self._sender = _Outputs(sender, rows)

    def _task(self, sub_id: int, partition: int) -> Task:
        task = self.tasks.get((sub_id, partition))
        if task is None:
            task = self.tasks[(sub_id, partition)] = build_task(
                self.job, self.job.topology.sub_topologies[sub_id], partition, self.collector, self._global_stores)
            self._outputs[(sub_id, partition)] = _Outputs(self._sender.sender, self.rows)
        return task

    def add(self, record: CycleRecord) -> None:
        """The cycle's next input record (in the order of :mod:`.ordering`), processed to completion."""
        partition, topic, offset, timestamp, key, value, headers = record
        if offset < 0:
            offset = self._next_offset.get((topic, partition), 0)
            self._next_offset[(topic, partition)] = offset + 1
        else:
            self.read[topic] = self.read.get(topic, 0) + 1
        self._deliver(topic, partition, [(offset, timestamp, key, value, headers)])
        while True:
            batches = self.collector.drain()
            if not batches:
                break
            for out_topic, out_partition, records in batches:
                if out_topic in self._reads:
                    base = self._next_offset.get((out_topic, out_partition), 0)
                    self._next_offset[(out_topic, out_partition)] = base + len(records)
                    self._deliver(out_topic, out_partition,
                                  [(base + i, ts, k, v, h) for i, (k, v, ts, h) in enumerate(records)])
                else:  # leaves the cycle
                    self._leaving.send_batch(out_topic, out_partition, records)
            self._sender.take(self._leaving)

    def _deliver(self, topic: str, partition: int, records: List[Any]) -> None:
        self._task(self._reads[topic], partition).process(topic, records)

    def finish(self) -> None:
        """End of input: commit every task, then add the sink records and final stores."""
        for key in sorted(self.tasks):
            task = self.tasks[key]
            task.prepare_commit()
            add_sink_rows(task, self._outputs[key])
            if self.job.dump_stores:
                add_store_rows(task, self.rows)
