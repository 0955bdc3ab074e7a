"""Exceptions raised by streamkit. Every message says what went wrong and where."""
from __future__ import annotations

import errno
import os
from typing import Any, Optional, Tuple


class StreamkitError(Exception):
    """Base class of every streamkit error."""


class ConfigError(StreamkitError):
    """A setting is missing, malformed or contradicts another."""


class TopologyError(StreamkitError):
    """The topology cannot be built as written; the message says what to change."""


class SerializationError(StreamkitError):
    """A key or value could not be serialized or deserialized."""


class UserFunctionError(StreamkitError):
    """A user function passed to the DSL raised; carries the node that called it."""

    def __init__(self, node: str, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__} in node '{node}': {cause}")
        self.node = node
        self.cause = cause


class RecordError(StreamkitError):
    """A record could not be processed; names the record's origin and the cause.

    Raised by the ``fail`` error handler: the worker stops and its committed offset
    stays before this record.
    """

    def __init__(self, stage: str, topic: str, partition: int, offset: int,
                 cause: BaseException, node: Optional[str] = None) -> None:
        where = f"topic '{topic}', partition {partition}, offset {offset}"
        at_node = f" in node '{node}'" if node else ""
        super().__init__(f"{stage} failed at {where}{at_node}: {type(cause).__name__}: {cause}")
        self.stage = stage
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.node = node
        self.cause = cause


class BrokerUnavailableError(StreamkitError):
    """The broker could not be reached (after the configured retries)."""


class RebalanceInProgressError(StreamkitError):
    """The group is rebalancing: an offset commit was refused for now. The worker keeps its
    tasks and commits when the rebalance asks it to (before revoking them)."""


class TaskMigratedError(StreamkitError):
    """This worker lost tasks to another member of its group (a rebalance it missed, or a
    newer producer fenced it). The tasks' uncommitted work is discarded, never committed."""


class SuppressionBufferFullError(StreamkitError):
    """A strict suppression buffer (``until_window_closes``) reached its bound: emitting
    early would break its promise of final results, so the task stops."""


class SinkError(StreamkitError):
    """A sink could not deliver records (a permanent error, or a transient one that
    outlasted its retries). The worker stops; no offset is committed past those records."""


class TransientSinkError(StreamkitError):
    """Raised by a sink (or a ``Callback`` function) for an error worth retrying: the
    delivery is retried with backoff, up to the sink's bound."""


class ProducerUnusableError(StreamkitError):
    """A transactional producer can no longer be used: it could not abort its transaction
    (aiokafka cannot leave the state the failure left it in). The transaction may still be
    open on the broker, holding back ``read_committed`` readers of its partitions until the
    broker aborts it (``transaction_timeout_ms``) or a new producer with the same
    transactional id starts (its InitProducerId aborts it at once). Restart the task with a
    new producer."""


class AuthenticationError(StreamkitError):
    """The broker refused this client's credentials, or the client's security settings do
    not match the listener (TLS or SASL expected, certificate not trusted). Retrying cannot
    help: the message says which setting to change."""


class AuthorizationError(StreamkitError):
    """The broker's authorizer refused an operation (no ACL for it): the message names the
    resource (topic, group, transactional id), the operation and the principal."""


class StorageError(StreamkitError, OSError):
    """An OS error (disk full, file too large, I/O error, ...) while writing durable data:
    the message names what was written where (a topic-partition's log file, a state
    store) and the stage (append, fsync, transaction commit, offset commit, checkpoint,
    restore). ``errno``, ``strerror`` and ``filename`` are the original error's; the
    original is ``cause`` and is chained as ``__cause__`` where this is raised.

    ``cause`` may be a library's error that is no OSError but carries an OS error's
    text (RocksDB's "IO error: No space left on device: ..."): ``errno`` is then the
    error number whose standard text it contains, None if none."""

    def __init__(self, where: str, stage: str, cause: BaseException) -> None:
        if isinstance(cause, OSError):
            super().__init__(cause.errno, cause.strerror, cause.filename)
        else:
            number = errno_in_text(str(cause))
            super().__init__(number, os.strerror(number) if number is not None else str(cause))
        self.where = where
        self.stage = stage
        self.cause = cause

    def __str__(self) -> str:
        return f"{self.stage} failed for {self.where}: {_describe_cause(self.cause)}"

    def __reduce__(self) -> Tuple[Any, ...]:
        return type(self), (self.where, self.stage, self.cause)

    def within(self, where: str, stage: Optional[str] = None) -> "StorageError":
        """The same error with an outer context: ``where`` before this one's, and ``stage``
        (if given) in place of this one's."""
        return StorageError(f"{where} ({self.where})", stage or self.stage, self.cause)


def errno_in_text(text: str) -> Optional[int]:
    """The error number whose standard text (``os.strerror``) occurs in ``text``, if any."""
    for number in sorted(errno.errorcode):
        message = os.strerror(number)
        if not message.startswith("Unknown error") and message in text:
            return number
    return None


def _describe_cause(cause: BaseException) -> str:
    if isinstance(cause, StorageError):
        return _describe_cause(cause.cause)
    return f"{type(cause).__name__}: {cause}"
