"""Topic declarations: a name with its serdes, partition count and configs."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Optional

from .serdes import Serde

__all__ = ["TopicSpec", "check_topic_name"]

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def check_topic_name(name: str) -> str:
    """Return ``name`` if Kafka would accept it as a topic name, else raise ValueError."""
    if not isinstance(name, str) or not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise ValueError(
            f"invalid topic name {name!r}: use 1-249 of the characters [A-Za-z0-9._-], not '.' or '..'")
    return name


@dataclass(frozen=True)
class TopicSpec:
    """A topic the app reads or writes, declared with ``app.topic(...)``.

    ``partitions`` is used when streamkit creates the topic; an existing topic keeps
    its own count (and a mismatch is reported at start-up).
    """

    name: str
    key_serde: Serde
    value_serde: Serde
    partitions: Optional[int] = None
    config: Mapping[str, str] = field(default_factory=dict)
    internal: bool = False

    def __post_init__(self) -> None:
        check_topic_name(self.name)
        if self.partitions is not None and (not isinstance(self.partitions, int) or self.partitions < 1):
            raise ValueError(f"topic '{self.name}': partitions must be a positive int, got {self.partitions!r}")
