"""TopologyTestDriver: run an app's topology synchronously, with no broker.

It drives the very tasks the worker runs (same compiled chains, serdes, stores,
error handlers); only the transport differs. Where it differs from production:

- every topic has one partition, so the topology has one task per sub-topology;
- each piped record is processed to completion at once, including records it
  sends through repartition topics (a commit per record);
- every update is emitted (no caching), stores are in memory, nothing is
  changelogged, and the wall clock is manual
  (:meth:`TopologyTestDriver.advance_wall_clock`);
- external sinks (``stream.sink(...)``: a database, Parquet or JSON-lines files) are not
  written to unless asked (``deliver_external_sinks=True``): their records are kept for
  :meth:`TopologyTestDriver.sink_records`. A ``Callback`` sink, which runs in this
  process, is called as in a worker.

>>> import streamkit as sk
>>> app = sk.App("doc-driver")
>>> @app.topology
... def build(b):
...     b.stream("words").group_by_key().count(name="counts").to_stream().to("word-counts")
>>> driver = TopologyTestDriver(app)
>>> for word in ["a", "b", "a"]:
...     driver.input_topic("words").pipe_input(word, 1, timestamp=0)
>>> driver.output_topic("word-counts").read_key_values()
[('a', 1), ('b', 1), ('a', 2)]
>>> driver.store("counts").get("a")
2
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .app import App
from .errors import StreamkitError
from .runtime.task.factory import TaskSettings, create_task
from .runtime.context.collector import RecordCollector
from .runtime.task.global_tables import GlobalTables
from .runtime.ordering.repartition_stamps import strip_markers
from .runtime.task.task import Task
from .serdes import Serde
from .sinks.base import SinkRecord
from .sinks.collecting import CollectingSinkWriter
from .stores import KeyValueStore
from .topology import Topology
from .topology.serde_binding import bind_serdes
from .core.records import Headers

__all__ = ["TopologyTestDriver", "TestRecord", "TestInputTopic", "TestOutputTopic"]

_DRIVER_IDS = itertools.count(1)


@dataclass(frozen=True)
class TestRecord:
    """A record as piped in or read out: key, value, timestamp (ms), headers."""

    __test__ = False  # not a pytest test class

    key: Any
    value: Any
    timestamp: Optional[int] = None
    headers: Headers = None


class TopologyTestDriver:
    """Pipe records into an app's input topics and read what its sinks wrote.

    ``deliver_external_sinks``: deliver to the app's external sinks (write the database
    rows, the files) as a worker does; by default their records are only collected."""

    __test__ = False

    def __init__(self, app: App, *, initial_wall_clock: Union[int, datetime] = 0,
                 deliver_external_sinks: bool = False) -> None:
        self.app = app
        # No broker here: registry="embedded" serdes share an in-memory registry per driver.
        self._registry_broker = f"memory://driver-{next(_DRIVER_IDS)}"
        self.topology: Topology = bind_serdes(app.build(), self._registry_broker)
        self._wall_clock = _millis(initial_wall_clock)
        self._collector = RecordCollector()
        self._offsets: Dict[str, int] = {}
        self._outputs: Dict[str, List[Tuple[int, Optional[bytes], Optional[bytes], int, Headers]]] = {}
        partitions = {topic: 1 for topic in self.topology.topics}
        partitions[f"{app.id}-dlq"] = 1
        settings = TaskSettings(deserialization_error_handler=app.deserialization_error_handler,
                                processing_error_handler=app.processing_error_handler,
                                store_backend="memory", caching=False,
                                close_idle_windows_after_ms=app.close_idle_windows_after_ms)
        self._tasks: Dict[str, Task] = {}
        self._task_of_topic: Dict[str, Task] = {}
        self._repartition_topics = frozenset(self.topology.repartition_topics)
        self._globals = GlobalTables(self.topology, backend="memory", state_dir=None)
        for sub in self.topology.sub_topologies:
            task = create_task(self.topology, sub, 0, partitions=partitions, collector=self._collector,
                               wall_clock=lambda: self._wall_clock, settings=settings,
                               global_stores=self._globals.stores,
                               task_class=Task if deliver_external_sinks else _SinkCollectingTask)
            self._tasks[task.id] = task
            for topic in sub.source_topics:
                self._task_of_topic[topic] = task

    # -- input ----------------------------------------------------------------------

    def input_topic(self, name: str, *, key_serde: Optional[Serde] = None,
                    value_serde: Optional[Serde] = None) -> "TestInputTopic":
        """A handle to pipe records into ``name``, which the topology must read."""
        if name not in self._task_of_topic and name not in self._globals.by_topic:
            reads = ", ".join(sorted(t for t in self._task_of_topic if t in self.topology.topics
                                     and not self.topology.topics[t].internal))
            raise StreamkitError(f"topic '{name}' is not read by app '{self.app.id}' (it reads: {reads})")
        spec = self.topology.topics[name]
        return TestInputTopic(self, name, self._bound(key_serde, name, True) or spec.key_serde,
                              self._bound(value_serde, name, False) or spec.value_serde)

    def _bound(self, serde: Optional[Serde], topic: str, is_key: bool) -> Optional[Serde]:
        """A serde given to input_topic/output_topic, bound to ``topic`` as the app's are."""
        return None if serde is None else serde.for_topic(topic, is_key, broker=self._registry_broker)

    def _pipe(self, topic: str, key: Optional[bytes], value: Optional[bytes], timestamp: int,
              headers: Headers) -> None:
        try:
            self._deliver(topic, [(key, value, timestamp, headers)])
        finally:
            self._drain()

    def _drain(self) -> None:
        """Deliver what the tasks sent, processing records sent to topics the topology reads
        (repartition topics) at once, until nothing is left. On a failure, what was sent
        before it is still delivered, so a test can see how far processing got."""
        try:
            while True:
                batches = self._collector.drain()
                if not batches:
                    return
                for out_topic, _partition, records in batches:
                    self._deliver(out_topic, records)
        finally:
            self._collector.discard()
            for task in self._tasks.values():  # a commit after every record
                task.prepare_commit()
                task.stores.persist({})
                task.commit_sinks()

    def _deliver(self, topic: str, records: Sequence[Tuple[Optional[bytes], Optional[bytes], int, Headers]]) -> None:
        base = self._offsets.get(topic, 0)
        raw = [(base + i, ts, k, v, h) for i, (k, v, ts, h) in enumerate(records)]
        if topic in self._repartition_topics:
            raw = strip_markers(raw)  # one writer, one record at a time: already in merge order
        self._offsets[topic] = base + len(raw)
        self._outputs.setdefault(topic, []).extend(raw)
        global_store = self._globals.by_topic.get(topic)
        if global_store is not None and raw:
            global_store.apply(0, raw, base + len(raw))
        task = self._task_of_topic.get(topic)
        if task is not None:
            task.process(topic, raw)

    # -- output ---------------------------------------------------------------------

    def output_topic(self, name: str, *, key_serde: Optional[Serde] = None,
                     value_serde: Optional[Serde] = None) -> "TestOutputTopic":
        """A handle to read records written to ``name`` (reading consumes them)."""
        spec = self.topology.topics.get(name)
        if spec is None and (key_serde is None or value_serde is None):
            if name == f"{self.app.id}-dlq":
                from .serdes import Bytes
                return TestOutputTopic(self, name, Bytes(), Bytes())
            writes = ", ".join(sorted(self.topology.topics))
            raise StreamkitError(f"topic '{name}' is not written by app '{self.app.id}' (its topics: {writes})")
        return TestOutputTopic(self, name, self._bound(key_serde, name, True) or spec.key_serde,
                               self._bound(value_serde, name, False) or spec.value_serde)

    def _take(self, topic: str) -> list:
        records = self._outputs.get(topic, [])
        self._outputs[topic] = []
        return records

    # -- state and time -------------------------------------------------------------

    def store(self, name: str) -> KeyValueStore:
        """The store ``name`` (of the single task that owns it)."""
        for task in self._tasks.values():
            if name in task.stores.by_name:
                return task.stores.by_name[name]
        if name in self._globals.stores:
            return self._globals.stores[name]  # type: ignore[return-value]
        raise StreamkitError(f"no store named '{name}' (stores: {', '.join(self.topology.stores) or 'none'})")

    def advance_wall_clock(self, delta: timedelta) -> None:
        """Move the manual wall clock forward and fire due wall-clock punctuations."""
        if delta < timedelta(0):
            raise ValueError("the wall clock cannot go backwards")
        self._wall_clock += int(delta.total_seconds() * 1000)
        try:
            for task in self._tasks.values():
                task.punctuate_wall_clock()
        finally:
            self._drain()

    @property
    def wall_clock(self) -> int:
        return self._wall_clock

    def metrics(self) -> Dict[str, int]:
        """Counters summed over the tasks (records processed, skipped, dead-lettered, …)."""
        total: Dict[str, int] = {}
        for task in self._tasks.values():
            for name, value in task.metrics.as_dict().items():
                total[name] = total.get(name, 0) + value
        return total

    def sink_records(self, name: str) -> List[SinkRecord]:
        """What the topology wrote to the external sink node ``name`` (``stream.sink(sink,
        name=...)``), in order, when the driver collects rather than delivers it."""
        for task in self._tasks.values():
            writer = task.sinks.get(name)
            if writer is not None:
                if not isinstance(writer, CollectingSinkWriter):
                    raise StreamkitError(f"sink '{name}' is delivered, not collected (deliver_external_sinks=True, "
                                         "or a Callback sink): read its destination instead")
                return list(writer.records)
        sinks = sorted(n for task in self._tasks.values() for n in task.sinks)
        raise StreamkitError(f"app '{self.app.id}' has no external sink node '{name}' (it has: "
                             f"{', '.join(sinks) or 'none'})")

    def close(self) -> None:
        for task in self._tasks.values():
            task.close_sinks(dirty=False)
        self._tasks.clear()

    def __enter__(self) -> "TopologyTestDriver":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TestInputTopic:
    """Serializes and pipes records into one input topic of the driver."""

    __test__ = False

    def __init__(self, driver: TopologyTestDriver, name: str, key_serde: Serde, value_serde: Serde) -> None:
        self._driver = driver
        self.name = name
        self._key_serde = key_serde
        self._value_serde = value_serde

    def pipe_input(self, key: Any, value: Any, timestamp: Union[int, datetime, None] = None,
                   headers: Headers = None) -> None:
        """Pipe one record; ``timestamp`` defaults to the driver's wall clock."""
        ts = self._driver.wall_clock if timestamp is None else _millis(timestamp)
        self._driver._pipe(self.name, self._key_serde.serialize(key), self._value_serde.serialize(value),
                           ts, headers)

    def pipe_value(self, value: Any, timestamp: Union[int, datetime, None] = None) -> None:
        """Pipe one record without a key."""
        self.pipe_input(None, value, timestamp)

    def pipe_raw(self, key: Optional[bytes], value: Optional[bytes], timestamp: int = 0,
                 headers: Headers = None) -> None:
        """Pipe bytes as they would arrive from a topic, bypassing serdes (for bad-input tests)."""
        self._driver._pipe(self.name, key, value, timestamp, headers)

    def pipe_records(self, records: Iterable[Union[TestRecord, Tuple[Any, ...]]]) -> None:
        """Pipe many records: TestRecords or (key, value[, timestamp[, headers]]) tuples."""
        for record in records:
            if isinstance(record, TestRecord):
                self.pipe_input(record.key, record.value, record.timestamp, record.headers)
            else:
                self.pipe_input(*record)


class TestOutputTopic:
    """Reads (and consumes) the records the topology wrote to one topic."""

    __test__ = False

    def __init__(self, driver: TopologyTestDriver, name: str, key_serde: Serde, value_serde: Serde) -> None:
        self._driver = driver
        self.name = name
        self._key_serde = key_serde
        self._value_serde = value_serde

    def read_records(self) -> List[TestRecord]:
        kdes, vdes = self._key_serde.deserialize, self._value_serde.deserialize
        return [TestRecord(kdes(k), vdes(v), ts, h) for _o, ts, k, v, h in self._driver._take(self.name)]

    def read_key_values(self) -> List[Tuple[Any, Any]]:
        return [(r.key, r.value) for r in self.read_records()]

    def read_values(self) -> List[Any]:
        return [r.value for r in self.read_records()]

    def read_key_values_to_map(self) -> Dict[Any, Any]:
        """The last value per key (a table's final state)."""
        return dict(self.read_key_values())

    def is_empty(self) -> bool:
        return not self._driver._outputs.get(self.name)

    def queue_size(self) -> int:
        return len(self._driver._outputs.get(self.name, []))


def _millis(ts: Union[int, datetime]) -> int:
    if isinstance(ts, datetime):
        return int(ts.timestamp() * 1000)
    return int(ts)


class _SinkCollectingTask(Task):
    """The driver's task: external sinks are collected, in-process ones (Callback) delivered."""

    def delivers_to(self, sink: Any) -> bool:
        return not getattr(sink, "external", True)
