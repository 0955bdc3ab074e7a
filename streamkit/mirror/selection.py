"""Which source topics a mirror copies, and their topics on the target.

A topic is mirrored when its name matches one of the ``include`` patterns (all topics
when none is given) and none of the ``exclude`` patterns, matched against the whole
name (as MirrorMaker 2's topic patterns). Two kinds are skipped unless asked for, and
the skip is reported:

- streamkit apps' internal topics (``<app>-<store>-changelog``, ``...-repartition``):
  only with ``include_internal`` (moving an app needs them; copying a topic needs not);
- the mirrors' own topics (``streamkit-mirror.*``): never, so a mirror back (Kafka →
  embedded after embedded → Kafka) does not copy the first mirror's bookkeeping.

Target topics get the source's partition count and configs; an existing target topic
is used as it is, after checking its partition count.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError
from ..transport.base import Admin, TopicMetadata

log = logging.getLogger(__name__)

MIRROR_PREFIX = "streamkit-mirror."
"""Names of the mirrors' own topics and groups start so."""
INTERNAL_SUFFIXES = ("-changelog", "-repartition")
EMBEDDED_TOPIC_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes",
                          "delete.retention.ms", "min.compaction.lag.ms")
"""The topic configs the embedded broker understands (others of a Kafka topic are dropped, and said)."""


def mirror_group(name: str) -> str:
    """The consumer group on the target under which mirror ``name`` records its source position."""
    return f"{MIRROR_PREFIX}{name}"


def transactional_id(name: str) -> str:
    """The transactional id of mirror ``name``'s producer: a restarted mirror fences the old one."""
    return f"{MIRROR_PREFIX}{name}"


def offset_syncs_topic(name: str) -> str:
    """The target topic where mirror ``name`` records its source → target offset map."""
    return f"{MIRROR_PREFIX}{name}.offset-syncs"


@dataclass(frozen=True)
class TopicSelection:
    """Full-name regular expressions choosing the topics to mirror."""

    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    include_internal: bool = False

    def __post_init__(self) -> None:
        for pattern in (*self.include, *self.exclude):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"topic pattern {pattern!r} is not a regular expression: {exc}") from None

    def skip_reason(self, topic: str) -> Optional[str]:
        """Why ``topic`` is not mirrored, None when it is."""
        if topic.startswith(MIRROR_PREFIX):
            return "a mirror's own topic"
        if self.include and not any(re.fullmatch(p, topic) for p in self.include):
            return "matches no --include pattern"
        excluded = next((p for p in self.exclude if re.fullmatch(p, topic)), None)
        if excluded is not None:
            return f"matches --exclude {excluded!r}"
        if not self.include_internal and topic.endswith(INTERNAL_SUFFIXES):
            return "an app's internal topic (changelog or repartition): add --include-internal to mirror it"
        return None


@dataclass(frozen=True)
class MirroredTopic:
    """A source topic and its counterpart on the target."""

    name: str
    source_partitions: int
    target_partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    """The configs the target topic was created with (empty for a topic that existed)."""


def select_topics(admin: Admin, selection: TopicSelection) -> Tuple[List[TopicMetadata], Dict[str, str]]:
    """The source topics to mirror (with their configs), and the skipped ones with why."""
    chosen: List[TopicMetadata] = []
    skipped: Dict[str, str] = {}
    for listed in admin.list_topics():
        reason = selection.skip_reason(listed.name)
        if reason is not None:
            skipped[listed.name] = reason
            continue
        meta = admin.topic(listed.name)  # list_topics may leave configs out (Kafka does)
        if meta is not None:
            chosen.append(meta)
    return chosen, skipped


def target_config(source_config: Mapping[str, str], *, embedded_target: bool) -> Tuple[Dict[str, str], List[str]]:
    """The configs to create a source topic's counterpart with, and the source keys left out.

    Into the embedded log only the keys it understands are kept. Into Kafka every key is
    kept, but ``message.timestamp.type`` is always ``CreateTime``: with ``LogAppendTime``
    Kafka would overwrite the copied records' timestamps."""
    config, dropped = {}, []
    for key, value in source_config.items():
        if embedded_target and key not in EMBEDDED_TOPIC_CONFIGS:
            dropped.append(key)
        elif key == "message.timestamp.type":
            continue
        else:
            config[key] = value
    if not embedded_target:
        config["message.timestamp.type"] = "CreateTime"
    return config, sorted(dropped)


def prepare_target_topics(sources: Sequence[TopicMetadata], target: Admin, *, embedded_target: bool,
                          repartition: bool) -> List[MirroredTopic]:
    """Create each source topic on the target (same partition count and configs) unless it
    exists; check the partition count of those that exist (equal, unless ``repartition``)."""
    out = []
    for source in sources:
        existing = target.topic(source.name)
        if existing is not None:
            if not repartition and existing.partitions != source.partitions:
                raise ConfigError(
                    f"topic '{source.name}' has {source.partitions} partition(s) on the source but "
                    f"{existing.partitions} on the target: records keep their partition only between equal "
                    f"counts; delete the target topic, or mirror with --repartition (by key)")
            out.append(MirroredTopic(source.name, source.partitions, existing.partitions))
            continue
        config, dropped = target_config(source.config, embedded_target=embedded_target)
        if dropped:
            log.warning("topic '%s': configs %s are not understood by the target and are left out",
                        source.name, ", ".join(f"{k}={source.config[k]}" for k in dropped))
        created = target.create_topic(source.name, source.partitions, config, exist_ok=True)
        log.info("created topic '%s' on the target: %d partition(s), configs %s", source.name,
                 created.partitions, config or "{}")
        out.append(MirroredTopic(source.name, source.partitions, created.partitions, config))
    return out
