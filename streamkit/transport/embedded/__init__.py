"""The embedded broker: streamkit's durable local log, shared by processes on one machine."""
from streamkit.transport.embedded.broker import EmbeddedBroker, validate_topic_name
from streamkit.transport.embedded.errors import (
    CorruptLogError, EmbeddedBrokerError, GroupNotEmptyError, PartitionCountMismatchError,
    ProducerFencedError, TopicExistsError, TransactionStateError, UnknownGroupError,
    UnknownPartitionError, UnknownTopicError)
from streamkit.transport.embedded.group_store import TaskLock
from streamkit.transport.embedded.reader import PartitionReader
from streamkit.transport.embedded.topic_config import VALID_KEYS as TOPIC_CONFIG_KEYS
from streamkit.transport.embedded.transactions import Transaction

__all__ = [
    "EmbeddedBroker", "PartitionReader", "TaskLock", "Transaction", "validate_topic_name",
    "TOPIC_CONFIG_KEYS", "ProducerFencedError", "TransactionStateError",
    "EmbeddedBrokerError", "UnknownTopicError", "TopicExistsError", "PartitionCountMismatchError",
    "UnknownPartitionError", "UnknownGroupError", "GroupNotEmptyError", "CorruptLogError",
]
