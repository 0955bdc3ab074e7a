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
is used as it is, after checking its partition count: copied 1:1, one with fewer
partitions than the source (the source grew) gets the missing ones added, one with more
is refused. With ``repartition`` the target keeps its own count.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError
from ..transport.base import Admin, TopicMetadata, Transport

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
    target_grew: bool = False
    """Whether the target topic just got more partitions than the mirror knew of (added
    by the mirror, or found added)."""


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


def add_partitions(target: Transport, topic: str, partitions: int) -> TopicMetadata:
    """Grow ``topic`` on ``target`` to ``partitions`` partitions (nothing when it has as many)."""
    from ..transport.embedded.transport import EmbeddedTransport

    if isinstance(target, EmbeddedTransport):
        from ..transport.embedded.admin import add_partitions as add_embedded

        return add_embedded(target.broker, topic, partitions)
    return target.admin.add_partitions(topic, partitions)  # type: ignore[attr-defined]


def grow_target_topic(topic: MirroredTopic, source_partitions: int, target: Transport, *,
                      repartition: bool) -> MirroredTopic:
    """``topic`` after its source grew to ``source_partitions`` partitions: copied 1:1, the
    target gets as many (CreatePartitions); with ``repartition`` it keeps its own count."""
    if repartition:
        log.info("topic '%s' grew from %d to %d partition(s) on the source: the new ones are copied by key "
                 "into the target's %d", topic.name, topic.source_partitions, source_partitions,
                 topic.target_partitions)
        return MirroredTopic(topic.name, source_partitions, topic.target_partitions, topic.config)
    before = target.admin.topic(topic.name)
    missing = before is None or before.partitions < source_partitions
    if missing:
        add_partitions(target, topic.name, source_partitions)
    log.info("topic '%s' grew from %d to %d partition(s) on the source: %s on the target", topic.name,
             topic.source_partitions, source_partitions, "added" if missing else "there already")
    return MirroredTopic(topic.name, source_partitions, source_partitions, topic.config, target_grew=True)


def prepare_target_topics(sources: Sequence[TopicMetadata], target: Transport, *, embedded_target: bool,
                          repartition: bool) -> List[MirroredTopic]:
    """Create each source topic on the target (same partition count and configs) unless it
    exists; check the partition count of those that exist (equal, unless ``repartition``;
    fewer are added, as the source grew while the mirror was stopped)."""
    out = []
    for source in sources:
        existing = target.admin.topic(source.name)
        if existing is not None:
            if not repartition and existing.partitions > source.partitions:
                raise ConfigError(
                    f"topic '{source.name}' has {source.partitions} partition(s) on the source but "
                    f"{existing.partitions} on the target: records keep their partition only between equal "
                    f"counts; delete the target topic, or mirror with --repartition (by key)")
            if not repartition and existing.partitions < source.partitions:
                out.append(grow_target_topic(MirroredTopic(source.name, existing.partitions, existing.partitions),
                                             source.partitions, target, repartition=False))
                continue
            out.append(MirroredTopic(source.name, source.partitions, existing.partitions))
            continue
        config, dropped = target_config(source.config, embedded_target=embedded_target)
        if dropped:
            log.warning("topic '%s': configs %s are not understood by the target and are left out",
                        source.name, ", ".join(f"{k}={source.config[k]}" for k in dropped))
        created = target.admin.create_topic(source.name, source.partitions, config, exist_ok=True)
        log.info("created topic '%s' on the target: %d partition(s), configs %s", source.name,
                 created.partitions, config or "{}")
        out.append(MirroredTopic(source.name, source.partitions, created.partitions, config))
    return out
