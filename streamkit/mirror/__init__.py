"""``streamkit mirror``: copying topics, their position and consumer-group offsets from one
broker to another (embedded ↔ Apache Kafka, Kafka → Kafka), after MirrorMaker 2.

- :mod:`.selection`: which source topics are mirrored, and their target topics;
- :mod:`.offset_syncs`: the source → target offset map the mirror records as it copies;
- :mod:`.copier`: the copy loop, exactly once (records, offset syncs and the source
  position in one transaction on the target);
- :mod:`.groups`: translating consumer groups' committed offsets with that map;
- :mod:`.metrics`: the lag per partition, for ``/metrics``.
"""
from __future__ import annotations

from .copier import Mirror, MirrorOptions, MirrorProgress
from .groups import GroupTranslation, translate_groups
from .selection import MirroredTopic, mirror_group

__all__ = ["Mirror", "MirrorOptions", "MirrorProgress", "GroupTranslation", "translate_groups",
           "MirroredTopic", "mirror_group"]
