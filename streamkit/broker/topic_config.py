"""Topic configuration of the embedded broker: the Kafka keys it understands, checked.

``create_topic(..., config)`` stores the keys as given (strings); ``TopicConfig``
is their parsed form, with Kafka's defaults for keys that are absent.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

logger = logging.getLogger(__name__)

DAY_MS = 24 * 60 * 60 * 1000
CLEANUP_POLICIES = {"delete": frozenset({"delete"}), "compact": frozenset({"compact"}),
                    "compact,delete": frozenset({"compact", "delete"}),
                    "delete,compact": frozenset({"compact", "delete"})}


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise ValueError(f"must be >= {minimum}")
        return value
    return parse


def _policy(text: str) -> frozenset:
    try:
        return CLEANUP_POLICIES[text.replace(" ", "").lower()]
    except KeyError:
        raise ValueError("must be delete, compact or compact,delete") from None


# key -> (parser, default, description)
_KEYS: dict[str, tuple[Callable[[str], object], object, str]] = {
    "cleanup.policy": (_policy, frozenset({"delete"}), "delete | compact | compact,delete"),
    "retention.ms": (_int_at_least(-1), 7 * DAY_MS, "ms to keep a segment, -1 = forever"),
    "retention.bytes": (_int_at_least(-1), -1, "bytes per partition, -1 = no limit"),
    "segment.bytes": (_int_at_least(1), None, "segment file size (default: the broker's)"),
    "segment.ms": (_int_at_least(1), 7 * DAY_MS, "ms of record time an active segment may span before "
                   "housekeeping seals it, so retention can delete it"),
    "delete.retention.ms": (_int_at_least(0), DAY_MS, "ms tombstones survive compaction"),
    "min.compaction.lag.ms": (_int_at_least(0), 0, "ms before a record may be compacted"),
}
VALID_KEYS = tuple(_KEYS)


def _describe_valid() -> str:
    return "; ".join(f"{key} ({desc})" for key, (_, _, desc) in _KEYS.items())


def validate_topic_config(config: Optional[Mapping[str, object]]) -> dict[str, str]:
    """`config` as {key: str}; ValueError naming a bad key or value and the valid keys."""
    out: dict[str, str] = {}
    for key, value in (config or {}).items():
        key = str(key)
        if key not in _KEYS:
            raise ValueError(f"unknown topic config {key!r}; valid keys: {_describe_valid()}")
        text = str(value)
        try:
            _KEYS[key][0](text.strip())
        except ValueError as exc:
            raise ValueError(f"topic config {key}={value!r} is invalid ({exc}); "
                             f"valid keys: {_describe_valid()}") from None
        out[key] = text
    return out


@dataclass(frozen=True)
class TopicConfig:
    """Parsed topic configuration, defaults filled in."""

    cleanup_policy: frozenset
    retention_ms: int
    retention_bytes: int
    segment_bytes: Optional[int]
    segment_ms: int
    delete_retention_ms: int
    min_compaction_lag_ms: int

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @classmethod
    def parse(cls, config: Mapping[str, str], topic: str = "?") -> "TopicConfig":
        """Parse stored config; keys or values that are not understood are ignored
        with a warning (topics created before validation existed)."""
        values = {}
        for key, (parser, default, _) in _KEYS.items():
            value = default
            if key in config:
                try:
                    value = parser(str(config[key]).strip())
                except ValueError as exc:
                    logger.warning("topic '%s': ignoring %s=%r (%s)", topic, key, config[key], exc)
            values[key.replace(".", "_")] = value
        for key in config:
            if key not in _KEYS:
                logger.warning("topic '%s': ignoring unknown config %r", topic, key)
        return cls(**values)
