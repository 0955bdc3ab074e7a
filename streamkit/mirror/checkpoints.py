"""Where a mirror keeps its source position: on the target, committed with the records.

Each transaction of the mirror commits, for the mirror's group on the target
(``streamkit-mirror.<name>``), one offset per mirrored topic: partition 0 of the target
topic, at offset 0, whose commit metadata lists the next source offset to copy of every
source partition of the topic (``smp1 0:120 1:97 ...``). Committed through the
transaction that writes the records, it moves exactly when they become visible; a
restarted mirror reads it back and goes on from there. Keeping the positions in the
metadata (not as the offsets of the same-numbered partitions) lets a mirror that
re-partitions by key copy into fewer partitions than the source has.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Tuple

from ..core.records import TopicPartition
from ..errors import ConfigError
from ..transport.base import Consumer

POSITIONS_FORMAT = "smp1"
MAX_METADATA = 4000
"""Characters of commit metadata (Kafka's ``offset.metadata.max.bytes`` is 4096 by default)."""


def encode_positions(positions: Mapping[int, int]) -> str:
    """``smp1 <partition>:<next offset> ...`` in partition order."""
    return " ".join([POSITIONS_FORMAT, *(f"{p}:{o}" for p, o in sorted(positions.items()))])


def decode_positions(metadata: Optional[str]) -> Dict[int, int]:
    """The positions of :func:`encode_positions` (empty for anything else)."""
    if not metadata or not metadata.startswith(POSITIONS_FORMAT + " "):
        return {}
    out = {}
    for item in metadata[len(POSITIONS_FORMAT) + 1:].split():
        partition, _, offset = item.partition(":")
        out[int(partition)] = int(offset)
    return out


def check_fits(topic: str, partitions: int) -> None:
    """ConfigError when the positions of ``partitions`` partitions may not fit Kafka's metadata."""
    widest = len(encode_positions({p: 10 ** 15 for p in range(partitions)}))
    if widest > MAX_METADATA:
        raise ConfigError(f"topic '{topic}' has {partitions} partitions: the mirror's position of that many "
                          f"does not fit Kafka's offset commit metadata ({MAX_METADATA} characters); mirror "
                          "topics of up to about 200 partitions")


def checkpoint(positions: Mapping[TopicPartition, int]) -> Tuple[Dict[TopicPartition, int], Dict[TopicPartition, str]]:
    """The (offsets, metadata) to commit for the mirror's group recording ``positions``
    (the next source offset of every partition of each topic concerned)."""
    per_topic: Dict[str, Dict[int, int]] = {}
    for tp, offset in positions.items():
        per_topic.setdefault(tp.topic, {})[tp.partition] = offset
    offsets = {TopicPartition(topic, 0): 0 for topic in per_topic}
    metadata = {TopicPartition(topic, 0): encode_positions(p) for topic, p in per_topic.items()}
    return offsets, metadata


async def read_positions(consumer: Consumer, topics: Sequence[str]) -> Dict[TopicPartition, int]:
    """The source positions the mirror's group (``consumer``'s, on the target) last committed."""
    partitions = [TopicPartition(topic, 0) for topic in topics]
    await consumer.committed(partitions)  # connects, and waits out a pending transactional commit
    metadata = await consumer.committed_metadata(partitions)
    return {TopicPartition(tp.topic, partition): offset for tp, text in metadata.items()
            for partition, offset in decode_positions(text).items()}
