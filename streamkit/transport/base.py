"""The interface between the streaming runtime and a transport (embedded log, Kafka).

The runtime never imports a concrete transport. It fetches raw records in
batches, hands output records to a producer that buffers them, and commits input
offsets through the transport. Records stay bytes here: serdes are applied by the
runtime.

Records and topic-partitions are defined in :mod:`streamkit.core.records` (every
layer uses them) and re-exported here.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Callable, FrozenSet, Mapping, NamedTuple, Optional, Sequence, Tuple

from ..core.records import (Headers, OutgoingRecord, PartitionOffsets, RawRecord,  # noqa: F401 (re-exported)
                            TopicMetadata, TopicPartition, partition_counts)


class FetchedBatch(NamedTuple):
    """Records of one partition, in offset order."""

    topic: str
    partition: int
    records: Sequence[RawRecord]


class ChangelogChunk(NamedTuple):
    """What a run of records of one (changelog) partition leaves behind: the last value per
    key (None: deleted), as a store restored from them must hold it."""

    topic: str
    partition: int
    latest: Mapping[bytes, Optional[bytes]]
    records: int
    """How many records the chunk covers (several of one key count each)."""
    first_offset: int
    last_offset: int
    """The offsets the chunk covers, from its first record to its last (or to the end of the
    record batch holding that: a store restored from it reflects the log up to here)."""


class Admin(abc.ABC):
    """Topic and consumer-group administration."""

    @abc.abstractmethod
    def create_topic(self, name: str, partitions: int, config: Optional[Mapping[str, str]] = None,
                     *, exist_ok: bool = False) -> TopicMetadata: ...

    @abc.abstractmethod
    def delete_topic(self, name: str) -> None: ...

    @abc.abstractmethod
    def topic(self, name: str) -> Optional[TopicMetadata]: ...

    @abc.abstractmethod
    def list_topics(self) -> list[TopicMetadata]: ...

    def partition_counts(self, topics: Sequence[str]) -> dict[str, Optional[int]]:
        """Each topic's partition count, None for a topic that does not exist."""
        return partition_counts(self.topic, topics)

    @abc.abstractmethod
    def partition_offsets(self, topic: str, partition: int) -> PartitionOffsets: ...

    @abc.abstractmethod
    def list_groups(self) -> list[str]: ...

    @abc.abstractmethod
    def committed_offsets(self, group: str) -> dict[TopicPartition, int]: ...

    def group_members(self, group: str) -> Optional[list[str]]:
        """The ids of ``group``'s live members (consumers in the group now), sorted; None
        when the broker cannot tell."""
        return None

    @abc.abstractmethod
    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None: ...

    @abc.abstractmethod
    def reset_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Set these committed offsets, moving them backwards if need be."""

    @abc.abstractmethod
    def delete_records(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Delete every record below ``offsets`` (move the log start), as Kafka's DeleteRecords.

        Idempotent: a start is never moved backwards (a lower offset changes nothing).
        An offset past a partition's end is an error. A broker that cannot delete records
        logs a WARNING once and keeps them (deleting is an optimisation, never needed
        for correctness)."""


class Consumer(abc.ABC):
    """Reads assigned partitions in batches and commits a group's offsets."""

    @abc.abstractmethod
    def assign(self, partitions: Sequence[TopicPartition], positions: Mapping[TopicPartition, int]) -> None:
        """Start reading ``partitions`` at ``positions`` (earliest where absent)."""

    @abc.abstractmethod
    def unassign(self, partitions: Sequence[TopicPartition]) -> None: ...

    @abc.abstractmethod
    async def fetch(self, max_wait: float) -> list[FetchedBatch]:
        """Records available now, waiting up to ``max_wait`` seconds for some."""

    async def fetch_changes(self, max_wait: float) -> list[ChangelogChunk]:
        """As :meth:`fetch`, each partition's records reduced to the last value per key (for
        restoring a store from its changelog; headers and timestamps are not kept). A
        transport may read these faster than :meth:`fetch` (no per-record objects)."""
        return [ChangelogChunk(batch.topic, batch.partition,
                               {key: value for _offset, _ts, key, value, _headers in batch.records},
                               len(batch.records), batch.records[0][0], batch.records[-1][0])
                for batch in await self.fetch(max_wait) if batch.records]

    @abc.abstractmethod
    async def commit(self, offsets: Mapping[TopicPartition, int],
                     metadata: Optional[Mapping[TopicPartition, str]] = None) -> None:
        """Durably record the next offset to read per partition, each with its
        ``metadata`` string (Kafka's offset commit metadata; "" where absent)."""

    @abc.abstractmethod
    async def committed(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``partitions`` (absent where none)."""

    async def committed_metadata(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, str]:
        """The metadata committed with the offsets of ``partitions`` (absent where none)."""
        return {}

    def has_unread(self, partition: TopicPartition) -> Optional[bool]:
        """Whether the broker holds records of ``partition`` past what was fetched (None:
        unknown). A task with several inputs waits briefly for one that has them."""
        return None

    @abc.abstractmethod
    def position(self, partition: TopicPartition) -> int:
        """The next offset a fetch of ``partition`` would return (past skipped markers)."""

    def take_lost(self) -> list[Tuple[TopicPartition, int, int]]:
        """Ranges [first, end) of offsets of assigned partitions that were deleted before this
        consumer read them, since the last call.

        A range is lost when the offset the consumer was to read next (an assigned
        position, a committed offset, the end of the previous fetch) is below the
        partition's log start (retention, delete_records, a reset below the start); the
        consumer then goes on from the log start. Holes that compaction leaves inside a
        compacted log are not losses. Reading from the earliest offset (no position
        given) loses nothing."""
        return []

    def close(self) -> None:
        """Release resources."""

    async def aclose(self) -> None:
        """Release resources, waiting for network clients to shut down."""
        self.close()


class Producer(abc.ABC):
    """Appends output records; transactional when made with a transactional id."""

    @abc.abstractmethod
    async def send(self, batches: Sequence[Tuple[str, int, Sequence[OutgoingRecord]]]) -> dict[TopicPartition, int]:
        """Append each (topic, partition, records) batch (inside the open transaction, if
        transactional); return, per partition written, the offset after its last record."""

    async def delivered(self) -> dict[TopicPartition, int]:
        """Wait until the broker accepted everything sent so far; return, per partition, the
        offset after its last record, for records whose offsets ``send`` could not return
        yet (producers that pipeline). Delivery errors surface here."""
        return {}

    @abc.abstractmethod
    async def flush(self) -> None:
        """Wait until everything sent is durable/acknowledged."""

    async def begin_transaction(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} is not transactional")

    async def commit_transaction(self, group: str, offsets: Mapping[TopicPartition, int],
                                 metadata: Optional[Mapping[TopicPartition, str]] = None) -> None:
        """Make what was sent since ``begin_transaction`` and the group's ``offsets`` (each
        with its ``metadata`` string) visible together."""
        raise NotImplementedError(f"{type(self).__name__} is not transactional")

    async def abort_transaction(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} is not transactional")

    def close(self) -> None:
        """Release resources."""

    async def aclose(self) -> None:
        """Release resources, waiting for network clients to shut down."""
        self.close()


@dataclass(frozen=True)
class TaskAssignment:
    """The tasks a worker runs, and those it keeps warm standby copies of."""

    active: FrozenSet[str] = frozenset()
    standby: FrozenSet[str] = frozenset()
    error: Optional[str] = None
    """Why the group cannot run the app as planned (e.g. a source topic was deleted)."""
    endpoints: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Per task of the whole app: the HTTP address of the member running it (members
    without one left out), so any worker can route an interactive query."""
    standby_endpoints: Mapping[str, Tuple[str, ...]] = field(default_factory=dict, compare=False)
    """Per task: the HTTP addresses of the members keeping a standby copy of it."""


@dataclass(frozen=True)
class GroupPlan:
    """What a worker brings to its group: the app's tasks and its own state."""

    tasks: Mapping[str, Tuple[TopicPartition, ...]]
    """Every task of the app and the input partitions it reads (co-partitioned)."""
    standby_replicas: int = 0
    stateful: FrozenSet[str] = frozenset()
    """Tasks with stores: the only ones worth standby copies."""
    running: Callable[[], FrozenSet[str]] = frozenset
    """The tasks this worker runs now (kept where they are when the group rebalances)."""
    local_state: Callable[[], FrozenSet[str]] = frozenset
    """The tasks this worker holds local state for (preferred when placing tasks)."""
    endpoint: Optional[str] = None
    """This worker's HTTP address, advertised to the group for interactive queries."""


class Membership(abc.ABC):
    """Decides which of the app's tasks this worker runs.

    Two styles fit behind it: the embedded log's, where a worker takes tasks nobody
    holds (file locks) and never loses one while it lives; and Kafka's consumer
    groups, where the group moves tasks in rebalances: the worker is asked to commit
    before its tasks are revoked (:meth:`revocation_pending`) and then gets its new
    assignment from :meth:`poll`.
    """

    group_managed: bool = False
    """True when the group's consumer (:meth:`consumer`) also reads the tasks' inputs."""

    @abc.abstractmethod
    async def poll(self) -> Optional[TaskAssignment]:
        """A new assignment when it changed since the last call, else None."""

    def consumer(self) -> Optional["Consumer"]:
        """The consumer that carries the group membership, when inputs must be read with it."""
        return None

    def revocation_pending(self) -> bool:
        """A rebalance waits for this worker to commit its tasks."""
        return False

    def revocation_committed(self) -> None:
        """The worker committed everything: the rebalance may proceed."""

    def release(self, task_id: str) -> None:
        """This worker stopped running ``task_id``."""

    def owner_of(self, task_id: str) -> Optional[str]:
        """A description of the worker holding ``task_id``, if known."""
        return None

    def endpoint_of(self, task_id: str) -> Optional[str]:
        """The HTTP address the worker running ``task_id`` advertised, if known."""
        return None

    def standby_endpoints_of(self, task_id: str) -> Tuple[str, ...]:
        """The HTTP addresses of the workers keeping a standby copy of ``task_id``."""
        return ()

    async def aclose(self) -> None:
        """Leave the group."""


class Transport(abc.ABC):
    """A broker connection: admin, consumers, producers and group membership."""

    url: str
    admin: Admin
    transaction_timeout_ms: Optional[int] = None
    """How long a transaction may stay open before the broker aborts it (None: no limit)."""

    @property
    def auto_creates_sources(self) -> bool:
        """Whether missing source topics declared with partitions= may be created."""
        return True

    @abc.abstractmethod
    def consumer(self, group: str, *, read_committed: bool = True) -> Consumer:
        """A consumer of ``group``; read_committed ones never see aborted or open transactions."""

    @abc.abstractmethod
    def producer(self, *, transactional_id: Optional[str] = None) -> Producer:
        """A producer; with ``transactional_id``, a transactional one (fencing older ones with that id)."""

    def resolve_abandoned_transactions(self) -> int:
        """Settle transactions whose producer died (roll forward or abort); return how many."""
        return 0

    def start_housekeeping(self) -> None:
        """Start the broker-side upkeep this process is responsible for (embedded: retention
        and compaction in a background thread; a real broker does its own)."""

    def stop_housekeeping(self) -> None:
        """Stop what :meth:`start_housekeeping` started (the worker that started it stops)."""

    @abc.abstractmethod
    def membership(self, group: str, plan: GroupPlan) -> Membership: ...

    def transactional_id_per_task(self) -> bool:
        """True when exactly_once needs one transactional producer per task (Kafka's
        zombie fencing without KIP-447), False when one per worker suffices."""
        return False

    def close(self) -> None:
        """Release resources."""
