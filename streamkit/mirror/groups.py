"""Consumer groups moved with their topics: committed offsets translated source → target.

For each partition copied 1:1, a group's committed source offset ``c`` (the next record
it would read) becomes the target offset of the first copied record at or after ``c``
(:meth:`~.offset_syncs.PartitionOffsetMap.position`): the group reads on the target
exactly the records it had not read on the source. The commit metadata goes along;
streamkit's own (``sk1 ...``: the task's stream time and, on repartition topics, the
per-writer cursor of record offsets) gets its offsets translated too.

A translation may run once (after ``--until-caught-up``) or again and again while the
mirror copies (``--continuous``, as MirrorMaker 2's checkpoints): each run translates
the group's latest source commit, so the target group follows it. The rules that make
repeated runs safe:

- **Never past what was mirrored.** A source offset beyond the mirror's committed
  position ``p`` (the group read records the mirror has not copied yet) is translated
  as ``p``: the position after the last record copied, so no record is skipped on the
  target; the records from ``p`` on are read there again unless a later run (once the
  mirror copied them) moves the group on. Cursor entries of a streamkit note at or past
  ``p`` are dropped for the same reason.
- **Never backwards.** A partition where the target group already committed at or past
  the translation is left where it is (it has moved on there, or the source group went
  back): going back would read records twice.
- **Never under a live group.** A group with live members on the target is left alone
  as a whole (Kafka refuses such a commit too): its consumers there own its offsets.

A partition is also left out, and the reason reported, when its topic is not mirrored
or mirrored with ``--repartition`` (no offset maps to one), or when the mirror has not
committed a position for it yet (a partition just added on the source).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..core.records import TopicPartition
from ..errors import StreamkitError
from ..runtime.ordering.writer_merge import CommitNote
from ..transport.base import Consumer, Transport
from .checkpoints import read_positions
from .copier import MirrorProgress
from .offset_syncs import PartitionOffsetMap, decode_sync
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
    held_back: Dict[TopicPartition, Tuple[int, int]] = field(default_factory=dict)
    """Per partition translated short of the group's source offset: (that offset, the
    mirror's position it was translated as)."""
    refused: Optional[str] = None
    """Why the whole group was left alone."""
    live_on_source: int = 0
    """The group's live members on the source (its offsets there may move on)."""


class OffsetSyncReader:
    """Reads mirror ``name``'s offset syncs on ``target``; each :meth:`read` adds those
    written since the last one to the map it keeps (a long-running mirror reads each once)."""

    def __init__(self, target: Transport, name: str) -> None:
        self._target = target
        self._name = name
        self._partition = TopicPartition(offset_syncs_topic(name), 0)
        self._consumer: Optional[Consumer] = None
        self.maps: Dict[TopicPartition, PartitionOffsetMap] = {}

    async def read(self) -> Dict[TopicPartition, PartitionOffsetMap]:
        """The map per partition, up to the syncs committed when called."""
        topic = self._partition.topic
        if self._consumer is None:
            if self._target.admin.topic(topic) is None:
                return self.maps
            self._consumer = self._target.consumer(mirror_group(self._name), read_committed=True)
            self._consumer.assign([self._partition], {})
        consumer = self._consumer
        end = self._target.admin.partition_offsets(topic, 0).end
        while consumer.position(self._partition) < end:
            batches = await consumer.fetch(SYNCS_FETCH_WAIT)
            for batch in batches:
                for _offset, _timestamp, _key, value, _headers in batch.records:
                    partition, runs = decode_sync(value)
                    self.maps.setdefault(partition, PartitionOffsetMap()).add(runs)
            # A read_committed consumer may stop before a trailing transaction marker.
            if not batches and consumer.position(self._partition) >= end - 1:
                break
        return self.maps

    async def aclose(self) -> None:
        if self._consumer is not None:
            await self._consumer.aclose()
            self._consumer = None


class GroupTranslator:
    """Translates consumer groups' committed offsets with mirror ``name``'s offset syncs
    and committed position, as often as asked (see the module docstring). Reports each
    partition's outcome when it changes, so a translation repeated every few seconds
    does not repeat its warnings."""

    def __init__(self, source: Transport, target: Transport, name: str,
                 progress: Optional[MirrorProgress] = None) -> None:
        self.source = source
        self.target = target
        self.name = name
        self.progress = progress or MirrorProgress()
        """Where each translation's outcome is counted (``/metrics``)."""
        self._syncs = OffsetSyncReader(target, name)
        self._reported: Dict[Tuple[str, str], str] = {}
        """The last message said per (group, subject), not said again while unchanged."""

    async def translate(self, groups: Sequence[str], mirrored: Mapping[str, bool]) -> List[GroupTranslation]:
        """Translate each of ``groups``; ``mirrored``: the mirrored topics, True for those
        copied 1:1. One :class:`GroupTranslation` per group."""
        reader = self.target.consumer(mirror_group(self.name))
        try:
            positions = await read_positions(reader, list(mirrored))
        finally:
            await reader.aclose()
        maps = await self._syncs.read()  # read after: it covers every position read
        results = []
        for group in groups:
            try:
                result = await translate_group(self.source, self.target, group, mirrored, maps, positions)
            except StreamkitError as exc:
                result = GroupTranslation(group, refused=str(exc))
            results.append(result)
            self._report(result)
            outcome = "refused" if result.refused else "moved" if result.offsets else "unchanged"
            counts = self.progress.translations
            counts[(group, outcome)] = counts.get((group, outcome), 0) + 1
        return results

    async def aclose(self) -> None:
        await self._syncs.aclose()

    def _report(self, result: GroupTranslation) -> None:
        group = result.group
        if result.refused:
            self._say(group, "group", logging.WARNING, f"group '{group}' not translated: {result.refused}")
            return
        self._reported.pop((group, "group"), None)
        if result.live_on_source:
            self._say(group, "source members", logging.WARNING,
                      f"group '{group}' still has {result.live_on_source} live member(s) on {self.source.url}: the "
                      "offsets translated are those it committed so far")
        for tp in result.offsets:
            if tp not in result.held_back:
                self._reported.pop((group, f"{tp.topic}[{tp.partition}]"), None)
        if result.offsets:
            log.info("group '%s': %d committed offset(s) translated onto %s%s", group, len(result.offsets),
                     self.target.url,
                     "".join(f"; {tp.topic}[{tp.partition}] -> {o}" for tp, o in sorted(result.offsets.items())))
        for tp, (offset, position) in sorted(result.held_back.items()):
            self._say(group, f"{tp.topic}[{tp.partition}]", logging.INFO,
                      f"group '{group}': {tp.topic}[{tp.partition}] is at {offset} on the source, past the mirror's "
                      f"position {position}: translated as {position} (those records are read again on the target "
                      "unless a later translation moves it on)")
        for tp, why in sorted(result.skipped.items()):
            self._say(group, f"{tp.topic}[{tp.partition}]", logging.WARNING, f"group '{group}': {tp.topic}[{tp.partition}] left out: {why}")

    def _say(self, group: str, subject: str, level: int, message: str) -> None:
        if self._reported.get((group, subject)) != message:
            self._reported[(group, subject)] = message
            log.log(level, "%s", message)


async def translate_group(source: Transport, target: Transport, group: str, mirrored: Mapping[str, bool],
                          maps: Mapping[TopicPartition, PartitionOffsetMap],
                          positions: Mapping[TopicPartition, int]) -> GroupTranslation:
    """Translate ``group``'s committed offsets (see the module docstring). ``mirrored``: the
    mirrored topics, True for those copied 1:1; ``positions``: the mirror's source positions."""
    result = GroupTranslation(group)
    members = target.admin.group_members(group)
    if members:
        result.refused = (f"group '{group}' has {len(members)} live member(s) on {target.url}: stop its "
                          "consumers there before translating its offsets")
        return result
    result.live_on_source = len(source.admin.group_members(group) or ())
    committed = {tp: offset for tp, offset in source.admin.committed_offsets(group).items()
                 if tp.topic in mirrored}
    metadata = await _committed_metadata(source, group, list(committed))
    existing = target.admin.committed_offsets(group)
    out_metadata: Dict[TopicPartition, str] = {}
    for tp, offset in sorted(committed.items()):
        if not mirrored[tp.topic]:
            result.skipped[tp] = "its topic is mirrored with --repartition: no offset on the target matches"
            continue
        if tp not in positions:
            result.skipped[tp] = "the mirror has not copied this partition yet (added on the source lately?)"
            continue
        reached = positions[tp]
        note = CommitNote.decode(metadata.get(tp), offset)
        if offset > reached:
            result.held_back[tp] = (offset, reached)
            offset = reached
            note = CommitNote(note.stream_time, {r: o for r, o in note.cursor.items() if o < reached})
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
                           mirrored: Mapping[str, bool]) -> List[GroupTranslation]:
    """Translate ``groups`` once (see :class:`GroupTranslator`)."""
    translator = GroupTranslator(source, target, name)
    try:
        return await translator.translate(groups, mirrored)
    finally:
        await translator.aclose()
