"""The embedded broker: streamkit's durable local log, shared by processes on one
machine (a broker of its own; ``streamkit.transport.embedded`` adapts it to the
runtime's Transport interface)."""
from streamkit.broker.broker import EmbeddedBroker, validate_topic_name
from streamkit.broker.errors import (
    CorruptLogError, EmbeddedBrokerError, GroupNotEmptyError, PartitionCountMismatchError,
    ProducerFencedError, SegmentGapError, TopicExistsError, TransactionStateError, UnknownGroupError,
    UnknownPartitionError, UnknownTopicError)
from streamkit.broker.group_store import TaskLock
from streamkit.broker.reader import PartitionReader
from streamkit.broker.topic_config import VALID_KEYS as TOPIC_CONFIG_KEYS
from streamkit.broker.transactions import Transaction

__all__ = [
    "EmbeddedBroker", "PartitionReader", "TaskLock", "Transaction", "validate_topic_name",
    "TOPIC_CONFIG_KEYS", "ProducerFencedError", "TransactionStateError",
    "EmbeddedBrokerError", "UnknownTopicError", "TopicExistsError", "PartitionCountMismatchError",
    "UnknownPartitionError", "UnknownGroupError", "GroupNotEmptyError", "CorruptLogError",
    "SegmentGapError",
]
