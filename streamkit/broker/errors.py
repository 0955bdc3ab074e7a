"""Errors raised by the embedded broker. Every message says what and where."""
from __future__ import annotations

from streamkit.errors import StreamkitError


class EmbeddedBrokerError(StreamkitError):
    """Base class of every embedded-broker error."""


class UnknownTopicError(EmbeddedBrokerError):
    """The topic does not exist (or was deleted)."""


class TopicExistsError(EmbeddedBrokerError):
    """create_topic() of a topic that already exists, without exist_ok."""


class PartitionCountMismatchError(EmbeddedBrokerError):
    """create_topic(exist_ok=True) of an existing topic with another partition count."""


class UnknownPartitionError(EmbeddedBrokerError):
    """The partition number is out of the topic's range."""


class UnknownGroupError(EmbeddedBrokerError):
    """The consumer group has no directory (never committed, never locked a task)."""


class GroupNotEmptyError(EmbeddedBrokerError):
    """delete_group() while a live process still owns one of the group's tasks."""


class CorruptLogError(EmbeddedBrokerError):
    """Damaged committed data: a batch failing its checksum, or unreadable data that is
    not a torn tail left by a crashed writer. Nothing is truncated or skipped for it."""


class SegmentGapError(CorruptLogError):
    """A partition's segment files do not form one contiguous log: a segment is missing,
    misnamed, or does not start where the one before it ends."""


class ProducerFencedError(EmbeddedBrokerError):
    """Another owner began transactions with this transactional id: this one is a zombie."""


class TransactionStateError(EmbeddedBrokerError):
    """A transaction used out of order (append after commit, two open at once, ...)."""
