"""The functions Spark runs in its Python workers, over Arrow record batches (``mapInArrow``).

- :func:`read_topic`: a replayed topic's partitions as :data:`~.arrow_rows.INPUT_FIELDS` batches;
- :func:`read_and_run`: a stage that reads exactly one replayed topic: each task reads
  its own partition and runs over it in offset order (no input crosses to the JVM);
- :func:`read_slices_and_run`: the same for a stateless stage, each task in slices of
  its partition's offsets (:mod:`.slicing`);
- :func:`run_sorted`: a stage's tasks over their input, sorted into processing order
  by Spark (:mod:`.ordering`); one Spark partition may hold several tasks;
- :func:`run_cycle`: sub-topologies that feed each other, over their sorted input.

Each returns a function of an iterator of batches that yields
:data:`~.arrow_rows.EMITTED_FIELDS` batches: what the tasks sent, their sink
records, their final stores and how many replayed records they read.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc

from .arrow_rows import INPUT_SCHEMA, column_values, headers_from_arrow, headers_to_arrow
from .arrow_map import ArrowMap
from .ordering import SENDER_RANK, running_max
from .slicing import Slice
from .task_runner import ComponentRun, ReplayJob, TaskRun, load_global_tables

Batches = Iterable[Any]


def read_topic(source: Any) -> ArrowMap:
    """For ``spark.range(partitions)``: each id's topic partition of ``source`` in offset
    order, with its running maximum timestamp (``pmax``)."""
    def read(batches: Batches) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for partition in batch.column(0).to_pylist():
                pmax = -1
                for chunk in source.read_chunks(partition):
                    offsets, timestamps, keys, values, headers = (list(c) for c in zip(*chunk))
                    pmaxes = running_max(timestamps, pmax)
                    pmax = pmaxes[-1]
                    yield pa.RecordBatch.from_arrays(
                        [pa.array([partition] * len(chunk), pa.int32()), pa.array(pmaxes, pa.int64()),
                         pa.array(offsets, pa.int64()), pa.array(timestamps, pa.int64()),
                         pa.array(keys, pa.binary()), pa.array(values, pa.binary()), headers_to_arrow(headers)],
                        schema=INPUT_SCHEMA)
    return read


def read_and_run(job: ReplayJob, sub_id: int, topic: str, source: Any, rank: int) -> ArrowMap:
    """For ``spark.range(partitions)``: task ``id`` of sub-topology ``sub_id`` over partition
    ``id`` of replayed topic ``topic``, read from ``source`` (its only input) in offset order."""
    def run(batches: Batches) -> Iterator[pa.RecordBatch]:
        sub = job.topology.sub_topologies[sub_id]
        rows = job.emitted_rows()
        global_stores = _global_stores(job)
        for batch in batches:
            for partition in batch.column(0).to_pylist():
                task = TaskRun(job, sub, partition, rows, rank * SENDER_RANK + partition, global_stores)
                for chunk in source.read_chunks(partition):
                    task.process(topic, chunk)
                    if rows.full:
                        yield from rows.take_batches()
                task.finish(job.dump_stores)
                rows.add_input_count(topic, partition, task.read.get(topic, 0))
        rows.add_tallies()
        yield from rows.take_batches()
    return run


def read_slices_and_run(job: ReplayJob, sub_id: int, topic: str, source: Any, rank: int,
                        slices: Sequence[Slice]) -> ArrowMap:
    """For ``spark.range(len(slices))``: slice ``id`` of stateless sub-topology ``sub_id``'s
    task over its offsets of replayed topic ``topic`` (its only input), from an empty
    state, ending with its ``slice`` rows (see :mod:`.slicing`)."""
    def run(batches: Batches) -> Iterator[pa.RecordBatch]:
        sub = job.topology.sub_topologies[sub_id]
        rows = job.emitted_rows()
        for batch in batches:
            for number in batch.column(0).to_pylist():
                piece = slices[number]
                rows.slice = piece.number
                task = TaskRun(job, sub, piece.partition, rows, rank * SENDER_RANK + piece.partition)
                for chunk in source.read_range_chunks(piece.partition, piece.start, piece.end):
                    task.process(topic, chunk)
                    if rows.full:
                        yield from rows.take_batches()
                task.finish(job.dump_stores)
                rows.add_input_count(topic, piece.partition, task.read.get(topic, 0))
                for (sent_to, partition), (records, largest) in sorted(task.outputs.sent().items()):
                    rows.add_slice_stat(f"topic:{sent_to}", partition, records, largest)
                for name, writer in sorted(task.task.sinks.items()):
                    rows.add_slice_stat(f"sink:{name}", piece.partition, len(writer.records), -1)
                rows.add_slice_stat("stream_time", piece.partition, 0, task.task.stream_time)
                rows.slice = None
        rows.add_tallies()
        yield from rows.take_batches()
    return run


def run_sorted(job: ReplayJob, sub_id: int, topics: Sequence[str], rank: int) -> ArrowMap:
    """Sub-topology ``sub_id``'s tasks over batches of :data:`~.arrow_rows.TASK_INPUT_COLUMNS`
    (``source``: an index into ``topics``), each task's records in its processing order
    (tasks may interleave)."""
    def run(batches: Batches) -> Iterator[pa.RecordBatch]:
        sub = job.topology.sub_topologies[sub_id]
        rows = job.emitted_rows()
        global_stores = _global_stores(job)
        tasks: Dict[int, TaskRun] = {}
        for batch in batches:
            task_ids, sources, offsets = (batch.column(name) for name in ("task", "source", "offset"))
            timestamps = column_values(batch, "timestamp")
            keys = column_values(batch, "key")
            values = column_values(batch, "value")
            headers = headers_from_arrow(batch.column("headers"))
            for start, end in _runs(batch):
                task_id = task_ids[start].as_py()
                task = tasks.get(task_id)
                if task is None:
                    task = tasks[task_id] = TaskRun(job, sub, task_id, rows, rank * SENDER_RANK + task_id,
                                                    global_stores)
                topic = topics[sources[start].as_py()]
                if offsets[start].as_py() < 0:
                    task.process_sent(topic, timestamps[start:end], keys[start:end], values[start:end],
                                      headers[start:end])
                else:
                    task.process(topic, list(zip(offsets.slice(start, end - start).to_pylist(),
                                                 timestamps[start:end], keys[start:end], values[start:end],
                                                 headers[start:end])))
            if rows.full:
                yield from rows.take_batches()
        for task_id in sorted(tasks):
            task = tasks[task_id]
            task.finish(job.dump_stores)
            for topic, count in sorted(task.read.items()):
                rows.add_input_count(topic, task_id, count)
            if rows.full:
                yield from rows.take_batches()
        rows.add_tallies()
        yield from rows.take_batches()
    return run


def run_cycle(job: ReplayJob, sub_ids: Sequence[int], topics: Sequence[str], rank: int) -> ArrowMap:
    """Sub-topologies ``sub_ids`` (a cycle), all their tasks in one Spark partition, over
    batches of :data:`~.arrow_rows.TASK_INPUT_COLUMNS` (``source``: an index into
    ``topics``) in the cycle's processing order."""
    def run(batches: Batches) -> Iterator[pa.RecordBatch]:
        rows = job.emitted_rows()
        component = ComponentRun(job, sub_ids, rows, rank * SENDER_RANK)
        for batch in batches:
            names = [topics[source] for source in column_values(batch, "source")]
            columns = [column_values(batch, name) for name in ("offset", "timestamp", "key", "value")]
            for record in zip(column_values(batch, "task"), names, *columns,
                              headers_from_arrow(batch.column("headers"))):
                component.add(record)
            if rows.full:
                yield from rows.take_batches()
        component.finish()
        for topic, count in sorted(component.read.items()):
            rows.add_input_count(topic, 0, count)
        rows.add_tallies()
        yield from rows.take_batches()
    return run


def _global_stores(job: ReplayJob) -> Any:
    """The global tables, loaded once per Spark partition and shared by its tasks (as a
    worker's tasks share them: a task only reads them)."""
    tables = load_global_tables(job)
    return tables.stores if tables is not None else None


def _runs(batch: Any) -> List[Tuple[int, int]]:
    """(start, end) of the batch's runs of consecutive rows of one task and one topic."""
    n = batch.num_rows
    if n == 0:
        return []
    task, source = batch.column("task"), batch.column("source")
    changed = pc.or_(pc.not_equal(task.slice(1), task.slice(0, n - 1)),
                     pc.not_equal(source.slice(1), source.slice(0, n - 1)))
    cuts = [i + 1 for i in pc.indices_nonzero(changed).to_pylist()]
    bounds = [0] + cuts + [n]
    return list(zip(bounds[:-1], bounds[1:]))
