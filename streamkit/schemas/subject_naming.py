"""Subject name strategies: under which subject a serde registers and looks up its schema.

As Confluent's serializers name them (``TopicNameStrategy`` and friends):

- ``topic`` (default): ``<topic>-key`` or ``<topic>-value``; one schema lineage per topic.
- ``record``: the record's full name (Avro ``namespace.Name``, a JSON Schema's
  ``title``, a Protobuf message's full name); one lineage per type, any topic.
- ``topic_record``: ``<topic>-<record full name>``; several types on one topic.

A ``.proto`` file's imports are registered under their import path
(``google/protobuf/timestamp.proto``), as Confluent's default reference naming does.

>>> subject_name("topic", "orders", is_key=False, record_name="shop.Order")
'orders-value'
>>> subject_name("topic_record", "orders", is_key=True, record_name="shop.Order")
'orders-shop.Order'
>>> subject_name("record", None, is_key=False, record_name="shop.Order")
'shop.Order'
"""
from __future__ import annotations

from typing import Optional

from ..errors import ConfigError

__all__ = ["STRATEGIES", "check_strategy", "needs_topic", "subject_name"]

STRATEGIES = ("topic", "record", "topic_record")


def check_strategy(strategy: str) -> str:
    """``strategy`` if known, else ConfigError listing the known ones."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown subject_name_strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    return strategy


def needs_topic(strategy: str) -> bool:
    """Whether the subject depends on the topic (so the serde must be bound to one)."""
    return strategy != "record"


def subject_name(strategy: str, topic: Optional[str], *, is_key: bool, record_name: Optional[str]) -> str:
    """The subject for a key (``is_key``) or value of ``topic`` whose schema names
    ``record_name``; ConfigError when the strategy needs what is missing."""
    if strategy == "topic":
        if topic is None:
            raise ConfigError("subject_name_strategy 'topic' needs the topic: bind the serde with "
                              "serde.for_topic(topic, is_key) or use it on a declared topic")
        return f"{topic}-{'key' if is_key else 'value'}"
    if not record_name:
        raise ConfigError(f"subject_name_strategy {strategy!r} needs a record name (an Avro record's full "
                          "name, a JSON Schema 'title', a Protobuf message name); the schema has none")
    if strategy == "record":
        return record_name
    if strategy == "topic_record":
        if topic is None:
            raise ConfigError("subject_name_strategy 'topic_record' needs the topic: bind the serde with "
                              "serde.for_topic(topic, is_key) or use it on a declared topic")
        return f"{topic}-{record_name}"
    raise ConfigError(f"unknown subject_name_strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
