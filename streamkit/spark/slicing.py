"""Stateless stages in slices: more Spark tasks than the topic has partitions.

A stage that reads one replayed topic runs one task per partition (:mod:`.stages`),
so a topic of 3 partitions keeps at most 3 cores busy, and on 2 cores its third
task runs alone while the other core idles. A *stateless* sub-topology (no store,
no user processor, no stream-time punctuation, no timestamp extractor) treats
each record on its own: only three things carry from one record to the next,
and all three are running counts or maxima:

- the task's stream time (the largest timestamp so far), which the writer stamp
  of a repartition record carries (:mod:`streamkit.runtime.ordering.repartition_stamps`);
- per topic partition sent to, the number of records sent before (``sequence``)
  and the largest of their timestamps (``pmax``), the record's place in the live
  output order (:class:`~.arrow_rows.EmittedRows`);
- per external sink, the number of records written before.

So each partition's offsets are cut into slices, each slice runs as a task of its
own from an empty state, and reports what it ended with (``slice`` rows: its
stream time, and per topic partition and sink how many records and their largest
timestamp). The driver adds up what the earlier slices of the same partition
reported and corrects each row: ``sequence`` plus the records sent before,
``pmax`` and ``writer_time`` at least the earlier maxima. The corrected rows equal
what one task over the whole partition emits, row for row.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..topology import Topology
from ..topology import nodes as ir
from ..topology.model import SubTopology

SLICE_WAVES = 8
"""Slices per Spark task slot, about: the last wave of a stage then leaves a slot
idle for at most an eighth of it."""
MIN_SLICE_RECORDS = 100_000
"""No slice is planned smaller than this (each one builds its task afresh)."""

_STATELESS_NODES = (ir.SourceNode, ir.SinkNode, ir.ExternalSinkNode, ir.RepartitionNode, ir.FilterNode,
                    ir.MapNode, ir.MapValuesNode, ir.FlatMapNode, ir.FlatMapValuesNode, ir.SelectKeyNode,
                    ir.PeekNode, ir.SplitNode, ir.BranchNode, ir.MergeNode)


@dataclass(frozen=True)
class Slice:
    """Offsets [start, end) of ``partition``: the ``index``-th slice of that partition's task."""

    number: int
    """Its place among all the stage's slices (the Spark partition that runs it)."""
    partition: int
    index: int
    start: int
    end: int


def sliceable(topology: Topology, sub: SubTopology) -> bool:
    """Whether ``sub`` treats each record on its own (see the module docstring): no
    store, only stateless nodes, and stream time taken from the record timestamps."""
    if sub.store_names:
        return False
    for name in sub.node_names:
        node = topology.nodes[name]
        if type(node) not in _STATELESS_NODES or node.stores:
            return False
        if isinstance(node, ir.SourceNode) and (node.timestamp_extractor is not None or node.external is not None):
            return False
    return True


def plan_slices(ranges: Mapping[int, Tuple[int, int]], slots: int,
                slice_records: Optional[int] = None) -> Optional[List[Slice]]:
    """Slices of the partitions' offset ranges ([first, end) per partition) for ``slots``
    concurrent Spark tasks: about ``slice_records`` offsets each (default: the whole
    input over :data:`SLICE_WAVES` waves of ``slots`` tasks, at least
    :data:`MIN_SLICE_RECORDS`). None when every partition would be one slice."""
    total = sum(end - start for start, end in ranges.values())
    if slice_records is None:
        slice_records = max(MIN_SLICE_RECORDS, math.ceil(total / (max(1, slots) * SLICE_WAVES)))
    slice_records = max(1, slice_records)
    slices: List[Slice] = []
    for partition in sorted(ranges):
        start, end = ranges[partition]
        count = max(1, round((end - start) / slice_records))
        bounds = [start + (end - start) * i // count for i in range(count)] + [end]
        for index in range(count):
            slices.append(Slice(len(slices), partition, index, bounds[index], bounds[index + 1]))
    if len(slices) == len(ranges):
        return None
    return slices


@dataclass(frozen=True)
class SliceFix:
    """What corrects the rows of one (slice, kind, name, partition): see :func:`fixes`."""

    slice: int
    kind: str
    name: str
    partition: int
    sent_before: int
    """Added to ``sequence``."""
    pmax_floor: Optional[int]
    """``pmax`` is at least this (the earlier slices' largest timestamp sent there)."""
    stream_time_floor: Optional[int]
    """``writer_time`` is at least this (the earlier slices' stream time)."""


SliceStat = Tuple[int, str, int, int, int]
"""(slice number, name, partition, records, largest time): a ``slice`` row."""


def fixes(slices: Sequence[Slice], stats: Sequence[SliceStat]) -> List[SliceFix]:
    """The corrections of every slice's rows, from the ``slice`` rows all slices emitted:
    per slice, the sums and maxima of what the earlier slices of its partition reported."""
    reported: Dict[int, List[Tuple[str, int, int, int]]] = {}
    for number, name, partition, records, largest in stats:
        reported.setdefault(number, []).append((name, partition, records, largest))
    out: List[SliceFix] = []
    for partition in sorted({s.partition for s in slices}):
        sent: Dict[Tuple[str, int], Tuple[int, int]] = {}  # (name, partition) -> (records, largest time)
        stream_time = -1
        for piece in sorted((s for s in slices if s.partition == partition), key=lambda s: s.index):
            mine = reported.get(piece.number, [])
            for name, dest, _records, _largest in mine:
                if name == "stream_time":
                    continue
                kind, _sep, target = name.partition(":")
                before, floor = sent.get((name, dest), (0, -1))
                if before or floor >= 0 or stream_time >= 0:
                    out.append(SliceFix(piece.number, kind, target, dest, before, floor if floor >= 0 else None,
                                        stream_time if kind == "topic" and stream_time >= 0 else None))
            for name, dest, records, largest in mine:
                if name == "stream_time":
                    stream_time = max(stream_time, largest)
                    continue
                before, floor = sent.get((name, dest), (0, -1))
                sent[(name, dest)] = (before + records, max(floor, largest))
    return out


def apply_fixes(spark: Any, emitted: Any, corrections: Sequence[SliceFix]) -> Any:
    """``emitted`` (a sliced stage's rows) with each slice's rows corrected, in the same
    columns; the ``slice`` rows stay as they are."""
    from pyspark.sql import functions as F

    from .arrow_rows import EMITTED_FIELDS

    if not corrections:
        return emitted
    table = spark.createDataFrame(
        [(c.slice, c.kind, c.name, c.partition, c.sent_before, c.pmax_floor, c.stream_time_floor)
         for c in corrections],
        "slice int, kind string, name string, partition int, sent_before bigint, pmax_floor bigint, "
        "stream_time_floor bigint")
    joined = emitted.join(F.broadcast(table), ["slice", "kind", "name", "partition"], "left")
    corrected = {
        "sequence": F.col("sequence") + F.coalesce(F.col("sent_before"), F.lit(0).cast("bigint")),
        "pmax": F.greatest(F.col("pmax"), F.col("pmax_floor")),
        "writer_time": F.when(F.col("writer_time").isNotNull(),
                              F.greatest(F.col("writer_time"), F.col("stream_time_floor"))),
    }
    return joined.select(*[corrected[name].alias(name) if name in corrected else F.col(name)
                           for name, _arrow_type, _ddl in EMITTED_FIELDS])
