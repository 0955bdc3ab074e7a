"""The embedded broker: streamkit's durable local log, shared by processes on one machine."""
from streamkit.transport.embedded.broker import EmbeddedBroker, validate_topic_name
from streamkit.transport.embedded.errors import (
    CorruptLogError, EmbeddedBrokerError, GroupNotEmptyError, PartitionCountMismatchError,
    TopicExistsError, UnknownGroupError, UnknownPartitionError, UnknownTopicError)
from streamkit.transport.embedded.group_store import TaskLock
from streamkit.transport.embedded.partition_log import PartitionReader

__all__ = [
    "EmbeddedBroker", "PartitionReader", "TaskLock", "validate_topic_name",
    "EmbeddedBrokerError", "UnknownTopicError", "TopicExistsError", "PartitionCountMismatchError",
    "UnknownPartitionError", "UnknownGroupError", "GroupNotEmptyError", "CorruptLogError",
]
