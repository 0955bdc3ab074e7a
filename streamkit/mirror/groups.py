"""Consumer groups moved with their topics: committed offsets translated source → target.

For each partition copied 1:1, a group's committed source offset ``c`` (the next record
it would read) becomes the target offset of the first copied record at or after ``c``
(:meth:`~.offset_syncs.PartitionOffsetMap.position`): the group reads on the target
exactly the records it had not read on the source. The commit metadata goes along;
streamkit's own (``sk1 ...``: the task's stream time and, on repartition topics, the
per-writer cursor of record offsets) gets its offsets translated too.

A partition is left out, and the reason reported, when:

- its topic is not mirrored, or mirrored with ``--repartition`` (no offset maps to one);
- the mirror has not copied the source up to ``c`` yet (run it until caught up first);
- the target group already committed an offset at or past the translation (it has
  moved on there: going back would read records twice).

A group with live members on the target is refused as a whole (Kafka refuses such a
commit too): stop its consumers there first. Stop them on the source before the last
mirror run as well, or the translation is of a position they have left since.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Sequence

from ..core.records import TopicPartition
from ..errors import StreamkitError
from ..runtime.ordering.writer_merge import CommitNote
from ..transport.base import Transport
from .checkpoints import read_positions
from .offset_syncs import PartitionOffsetMap, offset_map
from .selection import mirror_group, offset_syncs_topic

log = logging.getLogger(__name__)

SYNCS_FETCH_WAIT = 1.0


@dataclass
class GroupTranslation:
    """What translating one group did."""

    group: str
    offsets: Dict[TopicPartition, int] = field(default_factory=dict)
    """Per target partition, the offset committed."""
    skipped: Dict[TopicPartition, str] = field(default_factory=dict)
    """Per source partition left out, why."""
    refused: Optional[str] = None
    """Why the whole group was left alone."""


async def read_offset_map(target: Transport, name: str) -> Dict[TopicPartition, PartitionOffsetMap]:
    """Every offset sync mirror ``name`` recorded on ``target``, as a map per partition."""
    topic = offset_syncs_topic(name)
    if target.admin.topic(topic) is None:
        return {}
    end = target.admin.partition_offsets(topic, 0).end
    partition = TopicPartition(topic, 0)
    consumer = target.consumer(mirror_group(name), read_committed=True)
    values = []
    try:
        consumer.assign([partition], {})
        while True:
            batches = await consumer.fetch(SYNCS_FETCH_WAIT)
            values.extend(value for batch in batches for _o, _t, _k, value, _h in batch.records)
            if consumer.position(partition) >= end or (not batches and _only_markers_left(target, partition,
                                                                                          consumer, end)):
                break
    finally:
        await consumer.aclose()
    return offset_map(values)


def _only_markers_left(target: Transport, partition: TopicPartition, consumer, end: int) -> bool:
    """Whether nothing but the mirror's last transaction marker lies between the position and
    ``end`` (a read_committed consumer may stop before a trailing marker)."""
    return consumer.position(partition) >= end - 1


async def translate_group(source: Transport, target: Transport, name: str, group: str,
                          mirrored: Mapping[str, bool], maps: Mapping[TopicPartition, PartitionOffsetMap],
                          positions: Mapping[TopicPartition, int]) -> GroupTranslation:
    """Translate ``group``'s committed offsets (see the module docstring). ``mirrored``: the
    mirrored topics, True for those copied 1:1; ``positions``: the mirror's source positions."""
    result = GroupTranslation(group)
    members = target.admin.group_members(group)
    if members:
        result.refused = (f"group '{group}' has {len(members)} live member(s) on {target.url}: stop its "
                          "consumers there before translating its offsets")
        return result
    source_members = source.admin.group_members(group)
    if source_members:
        log.warning("group '%s' still has %d live member(s) on %s: the offsets translated are those it "
                    "committed so far", group, len(source_members), source.url)
    committed = {tp: offset for tp, offset in source.admin.committed_offsets(group).items()
                 if tp.topic in mirrored}
    metadata = await _committed_metadata(source, group, list(committed))
    existing = target.admin.committed_offsets(group)
    out_metadata: Dict[TopicPartition, str] = {}
    for tp, offset in sorted(committed.items()):
        if not mirrored[tp.topic]:
            result.skipped[tp] = "its topic is mirrored with --repartition: no offset on the target matches"
            continue
        reached = positions.get(tp, 0)
        note = CommitNote.decode(metadata.get(tp), offset)
        furthest = max([offset, *(o + 1 for o in note.cursor.values())])
        if furthest > reached:
            result.skipped[tp] = (f"the mirror copied it up to offset {reached} only, the group is at {furthest}: "
                                  "run the mirror until it is caught up")
            continue
        partition_map = maps.get(tp, PartitionOffsetMap())
        translated = partition_map.position(offset)
        if tp in existing and existing[tp] >= translated:
            if existing[tp] > translated:
                result.skipped[tp] = (f"the group is at {existing[tp]} on the target already, past the "
                                      f"translation {translated}: left there")
            continue
        result.offsets[tp] = translated
        out_metadata[tp] = _translate_metadata(metadata.get(tp, ""), note, translated, partition_map)
    if result.offsets:
        consumer = target.consumer(group)
        try:
            consumer.assign(list(result.offsets), result.offsets)
            await consumer.commit(result.offsets, out_metadata)
        finally:
            await consumer.aclose()
    return result


def _translate_metadata(metadata: str, note: CommitNote, position: int, partition_map: PartitionOffsetMap) -> str:
    """``metadata`` for the target: streamkit's commit note with its offsets translated,
    anything else as it was."""
    if not metadata.startswith("sk1 "):
        return metadata
    cursor = {}
    for rank, offset in note.cursor.items():
        translated = partition_map.record(offset)
        if translated is None:  # not a copied record (a marker's offset): the next record's place
            translated = partition_map.position(offset + 1) - 1
        cursor[rank] = translated
    return CommitNote(note.stream_time, cursor).encode(position)


async def _committed_metadata(source: Transport, group: str, partitions: Sequence[TopicPartition]
                              ) -> Dict[TopicPartition, str]:
    if not partitions:
        return {}
    consumer = source.consumer(group)
    try:
        await consumer.committed(partitions)  # connects
        return await consumer.committed_metadata(partitions)
    finally:
        await consumer.aclose()


async def translate_groups(source: Transport, target: Transport, name: str, groups: Sequence[str],
                           mirrored: Mapping[str, bool]) -> list:
    """Translate each of ``groups`` (see :func:`translate_group`) with mirror ``name``'s
    offset syncs and its committed position; a list of :class:`GroupTranslation`."""
    reader = target.consumer(mirror_group(name))
    try:
        positions = await read_positions(reader, list(mirrored))
    finally:
        await reader.aclose()
    maps = await read_offset_map(target, name)  # read after: it covers every position read
    results = []
    for group in groups:
        try:
            result = await translate_group(source, target, name, group, mirrored, maps, positions)
        except StreamkitError as exc:
            result = GroupTranslation(group, refused=str(exc))
        results.append(result)
        _report(result, target)
    return results


def _report(result: GroupTranslation, target: Transport) -> None:
    if result.refused:
        log.error("group '%s' not translated: %s", result.group, result.refused)
        return
    log.info("group '%s': %d committed offset(s) translated onto %s%s", result.group, len(result.offsets),
             target.url, "".join(f"; {tp.topic}[{tp.partition}] -> {o}" for tp, o in sorted(result.offsets.items())))
    for tp, why in sorted(result.skipped.items()):
        log.warning("group '%s': %s[%d] left out: %s", result.group, tp.topic, tp.partition, why)
