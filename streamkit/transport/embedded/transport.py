"""The embedded broker behind the runtime's Transport interface."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple

from ..base import (Admin, Consumer, FetchedBatch, GroupPlan, Membership, OutgoingRecord, Producer, TaskAssignment,
                    TopicPartition, Transport)
from ..task_assignment import MemberState, assign_tasks, plan_fingerprint, task_order
from ...errors import TaskMigratedError
from ...broker.broker import EmbeddedBroker
from ...broker.errors import CorruptLogError, ProducerFencedError

log = logging.getLogger(__name__)

Admin.register(EmbeddedBroker)  # the broker implements the Admin interface without importing it

MAX_RECORDS_PER_FETCH = 10_000
FIRST_IDLE_SLEEP = 0.0005
"""s before the first look again at a log that had nothing new; doubled after each empty
look up to IDLE_SLEEP, back here once records come. A record written while the consumer
is following a busy log is seen within about a millisecond; an idle consumer looks about
100 times a second (the other processes appending to the log cannot wake it)."""
IDLE_SLEEP = 0.01
HOUSEKEEPING_INTERVAL = 30.0  # s between retention/compaction passes in a worker


class EmbeddedConsumer(Consumer):
    def __init__(self, broker: EmbeddedBroker, group: str, read_committed: bool) -> None:
        self._broker = broker
        self._group = group
        self._read_committed = read_committed
        self._readers: Dict[TopicPartition, object] = {}
        self._idle_sleep = FIRST_IDLE_SLEEP

    def assign(self, partitions: Sequence[TopicPartition], positions: Mapping[TopicPartition, int]) -> None:
        for tp in partitions:
            reader = self._broker.reader(tp.topic, tp.partition, read_committed=self._read_committed)
            start = positions.get(tp)
            if start is None:
                reader.seek_to_start()
            else:
                reader.seek(start)
            self._readers[tp] = reader

    def unassign(self, partitions: Sequence[TopicPartition]) -> None:
        for tp in partitions:
            reader = self._readers.pop(tp, None)
            if reader is not None:
                reader.close()

    def position(self, partition: TopicPartition) -> int:
        return self._readers[partition].position

    def has_unread(self, partition: TopicPartition) -> Optional[bool]:
        reader = self._readers.get(partition)
        if reader is None:
            return None
        return reader.position < self._broker.partition_offsets(*partition).end

    def take_lost(self) -> List[Tuple[TopicPartition, int, int]]:
        return [(tp, first, end) for tp, reader in self._readers.items()
                for first, end in reader.take_lost()]

    async def fetch(self, max_wait: float) -> List[FetchedBatch]:
        deadline = time.monotonic() + max_wait
        while True:
            out = []
            for tp, reader in self._readers.items():
                try:
                    records = reader.read(MAX_RECORDS_PER_FETCH)
                except CorruptLogError:
                    if out:
                        break  # deliver what was read; the damaged reader raises again next fetch
                    raise
                if records:
                    out.append(FetchedBatch(tp.topic, tp.partition, records))
            if out:
                self._idle_sleep = FIRST_IDLE_SLEEP
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            await asyncio.sleep(min(self._idle_sleep, left))
            self._idle_sleep = min(self._idle_sleep * 2, IDLE_SLEEP)

    async def commit(self, offsets: Mapping[TopicPartition, int],
                     metadata: Optional[Mapping[TopicPartition, str]] = None) -> None:
        if offsets:
            self._broker.commit_offsets(self._group, offsets, metadata)

    async def committed(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        stored = self._broker.committed_offsets(self._group)
        return {tp: stored[tp] for tp in partitions if tp in stored}

    async def committed_metadata(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, str]:
        stored = self._broker.committed_metadata(self._group)
        return {tp: stored[tp] for tp in partitions if tp in stored}

    def close(self) -> None:
        self.unassign(list(self._readers))


class EmbeddedProducer(Producer):
    """Appends directly; with a transactional id, inside the broker's transactions."""

    def __init__(self, broker: EmbeddedBroker, transactional_id: Optional[str] = None,
                 transaction_timeout_ms: Optional[int] = None) -> None:
        self._broker = broker
        self._transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._transaction = None

    async def send(self, batches: Sequence[Tuple[str, int, Sequence[OutgoingRecord]]]) -> Dict[TopicPartition, int]:
        append = self._transaction.append if self._transaction is not None else self._broker.append
        if self._transactional_id is not None and self._transaction is None:
            raise RuntimeError("transactional producer: call begin_transaction() before send()")
        ends = {}
        try:
            for topic, partition, records in batches:
                ends[TopicPartition(topic, partition)] = append(topic, partition, records) + len(records)
        except ProducerFencedError as exc:
            raise self._fenced(exc) from None
        return ends

    def _fenced(self, exc: ProducerFencedError) -> TaskMigratedError:
        self._transaction = None
        return TaskMigratedError(f"producer {self._transactional_id}: {exc}")

    async def flush(self) -> None:
        self._broker.sync()

    async def begin_transaction(self) -> None:
        if self._transactional_id is None:
            raise RuntimeError("this producer has no transactional id")
        try:
            self._transaction = self._broker.begin_transaction(self._transactional_id,
                                                               self.transaction_timeout_ms)
        except ProducerFencedError as exc:
            raise self._fenced(exc) from None

    async def commit_transaction(self, group: str, offsets: Mapping[TopicPartition, int],
                                 metadata: Optional[Mapping[TopicPartition, str]] = None) -> None:
        transaction, self._transaction = self._transaction, None
        try:
            if offsets:
                transaction.commit_offsets(group, offsets, metadata)
            transaction.commit()
        except ProducerFencedError as exc:
            raise self._fenced(exc) from None

    async def abort_transaction(self) -> None:
        transaction, self._transaction = self._transaction, None
        if transaction is not None:
            transaction.abort()

    def close(self) -> None:
        if self._transaction is not None:
            self._transaction.abort()
            self._transaction = None


class EmbeddedMembership(Membership):
    """Task ownership through OS file locks, placed by the rule Kafka's group leader applies.

    Every worker of the app is a live member of its group (see broker.group_members) and
    publishes the tasks it runs and those it holds local state for. Every
    ``poll_interval`` it places the app's tasks over the live members with
    :func:`~streamkit.transport.task_assignment.assign_tasks` (stateful and stateless
    tasks balanced each on its own; a task stays where it runs, else goes where its
    state is, else to the least loaded) and runs its own part: it takes those of its
    tasks nobody holds, and gives back the tasks placed on others once it has committed
    them (:meth:`revocation_pending`); their new owner takes them at its next poll.
    Every worker computes the same placement from what the members published, so a
    worker joining gets its share of the stateful and of the stateless tasks, and a
    stopped or killed worker's tasks are shared among the survivors the same way. The
    task locks guard each task: a stale view can delay a hand-over, never let two
    workers run one task.
    """

    def __init__(self, broker: EmbeddedBroker, group: str, plan: GroupPlan, poll_interval: float = 0.25) -> None:
        self._broker = broker
        self._group = group
        self._tasks = sorted(plan.tasks, key=task_order)
        self._stateful = frozenset(plan.stateful)
        self._local_state = plan.local_state
        self._plan = plan_fingerprint(plan.tasks)
        self._locks: Dict[str, object] = {}
        """The tasks assigned to this worker."""
        self._giving_back: Dict[str, object] = {}
        """Tasks dropped from the assignment whose locks go when the worker closes them."""
        self._surplus: List[str] = []
        """Tasks placed on other members, given back once the worker committed them."""
        self._target: FrozenSet[str] = frozenset()
        """This worker's part of the group's latest placement."""
        self._placement: Set[FrozenSet[str]] = set()
        """The task sets of the group's latest placement."""
        self._changed = False
        self._poll_interval = poll_interval
        self._next_poll = 0.0
        self._next_share_check = 0.0
        self._published = b""
        self._strangers: FrozenSet[str] = frozenset()
        self._member = broker.join_group(group)
        self._endpoint = plan.endpoint

    def _own_state(self) -> MemberState:
        running = frozenset(self._locks)
        return MemberState(running, frozenset(self._local_state()) | running, self._plan, self._endpoint)

    def _publish(self) -> MemberState:
        """Tell the group what this worker runs and holds state for (when that changed)."""
        state = self._own_state()
        data = state.encode()
        if data != self._published:
            self._member.publish(data)
            self._published = data
        return state

    def _place(self) -> None:
        """Place the group's tasks over its live members; keep this worker's part in ``_target``."""
        mine = self._publish()
        # A member that has not published yet is still starting (its state directory not yet
        # known): it joins the placement with its first publication, so the tasks it holds
        # state for are not handed to it as if it held none.
        states = {member: MemberState.decode(data)
                  for member, data in self._broker.group_member_data(self._group).items() if data}
        states[self._member.member_id] = mine
        strangers = frozenset(m for m, s in states.items() if s.plan and s.plan != self._plan)
        if strangers != self._strangers and strangers:
            log.error("group %s: members %s run a different topology than this worker (plan %s): their "
                      "tasks would not line up; placing tasks as if they were not there", self._group,
                      ", ".join(sorted(strangers)), self._plan)
        self._strangers = strangers
        for member in strangers:
            del states[member]
        placement = assign_tasks(self._tasks, states, stateful=self._stateful)
        target = placement[self._member.member_id].active
        moved = {frozenset(a.active) for a in placement.values()} != self._placement
        if moved and self._placement and self._locks:
            # Tasks moved between other members: hand this worker its (unchanged) assignment
            # again, as a Kafka rebalance would, so it announces its progress to their readers.
            self._changed = True
        self._placement = {frozenset(a.active) for a in placement.values()}
        if target != self._target:
            stateful = len(target & self._stateful)
            log.info("group %s of %d member(s): this worker's share is %d task(s), %d stateful and %d "
                     "stateless", self._group, len(states), len(target), stateful, len(target) - stateful)
        self._target = target

    def revocation_pending(self) -> bool:
        if not self._surplus and self._locks:
            now = time.monotonic()
            if now >= self._next_share_check:
                self._next_share_check = now + self._poll_interval
                self._place()
                self._surplus = sorted((t for t in self._locks if t not in self._target), key=task_order)
        return bool(self._surplus)

    def revocation_committed(self) -> None:
        for task_id in self._surplus:
            lock = self._locks.pop(task_id, None)
            if lock is not None:
                self._giving_back[task_id] = lock
        self._surplus = []
        self._changed = True
        self._publish()

    async def poll(self) -> Optional[TaskAssignment]:
        if self._changed:
            self._changed = False
            return TaskAssignment(frozenset(self._locks))
        now = time.monotonic()
        if now < self._next_poll:
            return None
        self._next_poll = now + self._poll_interval
        self._place()
        taken = self.acquire([t for t in self._tasks if t in self._target and t not in self._locks])
        if not taken:
            return None
        self._publish()
        return TaskAssignment(frozenset(self._locks))

    async def aclose(self) -> None:
        for task_id in list(self._locks) + list(self._giving_back):
            self.release(task_id)
        self._member.leave()

    def acquire(self, task_ids: Sequence[str], limit: Optional[int] = None) -> List[str]:
        """Take those of ``task_ids`` nobody holds, at most ``limit`` of them."""
        taken: List[str] = []
        for task_id in task_ids:
            if limit is not None and len(taken) >= limit:
                break
            if task_id in self._locks:
                continue
            lock = self._broker.try_lock_task(self._group, task_id, self._endpoint)
            if lock is not None:
                self._locks[task_id] = lock
                taken.append(task_id)
        return taken

    def release(self, task_id: str) -> None:
        lock = self._locks.pop(task_id, None) or self._giving_back.pop(task_id, None)
        if lock is not None:
            lock.release()

    def owner_of(self, task_id: str) -> Optional[str]:
        owner = self._broker.task_owner(self._group, task_id)
        return None if owner is None else f"pid {owner.get('pid')} on {owner.get('host')}"

    def endpoint_of(self, task_id: str) -> Optional[str]:
        owner = self._broker.task_owner(self._group, task_id)
        return None if owner is None else owner.get("endpoint")


class EmbeddedTransport(Transport):
    """``embedded://<directory>``: streamkit's local durable log."""

    def __init__(self, directory: str, *, transactional_id_per_task: bool = False,
                 transaction_timeout_ms: Optional[int] = None) -> None:
        """``transactional_id_per_task``: exactly_once uses one transactional producer per
        task, as on Kafka (the path Kafka's fencing needs, testable here);
        ``transaction_timeout_ms``: transactions open longer are aborted and fenced."""
        self.url = f"embedded://{directory}"
        self.directory = directory
        self.broker = EmbeddedBroker(directory)
        self.admin = self.broker
        self._per_task = transactional_id_per_task
        self.transaction_timeout_ms = transaction_timeout_ms

    def transactional_id_per_task(self) -> bool:
        return self._per_task

    def consumer(self, group: str, *, read_committed: bool = True) -> Consumer:
        return EmbeddedConsumer(self.broker, group, read_committed)

    def producer(self, *, transactional_id: Optional[str] = None) -> Producer:
        return EmbeddedProducer(self.broker, transactional_id, self.transaction_timeout_ms)

    def membership(self, group: str, plan: GroupPlan) -> Membership:
        return EmbeddedMembership(self.broker, group, plan)

    def resolve_abandoned_transactions(self) -> int:
        return self.broker.resolve_abandoned_transactions()

    def start_housekeeping(self) -> None:
        self.broker.start_housekeeping(HOUSEKEEPING_INTERVAL)

    def stop_housekeeping(self) -> None:
        self.broker.stop_housekeeping()

    def close(self) -> None:
        self.broker.close()
