"""Consumer-group membership on Kafka: the group's consumer reads the tasks' inputs, and a
rebalance listener hands revocations and assignments to the worker's loop.

Revocation is a handshake: aiokafka awaits ``on_partitions_revoked`` before the
rebalance goes on, so the listener waits (bounded, see :func:`revoke_wait`) until the
worker loop has committed every task, then lets it proceed. The member joins the new
generation only then, so its rebalance timeout is ``max_poll_interval_ms`` (as in Kafka
Streams), not aiokafka's default, the session timeout: a worker busy with a slow
processing slice would be removed from the group and its producers fenced. Assignments
arrive paused; the worker resumes each task's partitions once its stores are restored.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka.errors import (CommitFailedError, GroupCoordinatorNotAvailableError, IllegalGenerationError,
                             IllegalStateError, KafkaError, NotCoordinatorForGroupError, RebalanceInProgressError,
                             UnknownMemberIdError)
from aiokafka.errors import NoError as NoKafkaError
from aiokafka.errors import for_code as kafka_error_for_code
from aiokafka.protocol.group import HeartbeatRequest

from ...errors import RebalanceInProgressError as GroupRebalancing
from ...errors import StreamkitError, TaskMigratedError
from ..base import Consumer, FetchedBatch, GroupPlan, Membership, TaskAssignment, TopicPartition
from .assignor import MemberState, TaskAssignor, plan_fingerprint
from .config import KafkaClientConfig
from .connect import start_with_retry
from .no_auto_create import no_topic_auto_creation
from .consumer import committed_metadata, committed_offsets, describe_partitions, kafka_offsets, stable_offsets_wait
from .records import Lost, fetch_batches

log = logging.getLogger(__name__)

REVOKE_TIMEOUT = 60.0
"""Longest (s) a rebalance waits for the worker to commit revoked tasks; less when the
rebalance timeout is short (see :func:`revoke_wait`)."""
COMMIT_TIMEOUT = 15.0  # s an offset commit may take before the worker gives up with an error
GENERATION_CHECK_TIMEOUT = 15.0
"""Longest (s) the coordinator may take to confirm this member's generation before a
restart of fenced tasks is put off to a later poll."""
GENERATION_CHECK_BACKOFF = 1.0  # s between two such checks the coordinator did not answer
_MIGRATED = (CommitFailedError, IllegalGenerationError, UnknownMemberIdError, RebalanceInProgressError)


def revoke_wait(config: KafkaClientConfig) -> float:
    """How long (s) a revocation waits for the worker's commit: REVOKE_TIMEOUT, or less so
    that the member still rejoins within the rebalance timeout. It learns of a rebalance
    up to a heartbeat interval after the rebalance began; the wait takes at most half of
    what remains, leaving the rest for the join itself (else the coordinator removes the
    member and its producers are fenced)."""
    remaining_ms = config.rebalance_timeout_ms - config.heartbeat_interval_ms
    return min(REVOKE_TIMEOUT, max(remaining_ms, 0) / 2000)


class KafkaGroupConsumer(Consumer):
    """The group member's consumer. ``assign`` seeks and resumes partitions the group gave
    this worker; ``unassign`` pauses them; commits fail with TaskMigratedError once the
    group has moved on without us."""

    def __init__(self, kafka: AIOKafkaConsumer, group: str, stable_within: float) -> None:
        self._kafka = kafka
        self._group = group
        self._stable_within = stable_within
        self._seeks: Dict[TopicPartition, Optional[int]] = {}
        self._lost: Lost = []

    def assign(self, partitions: Sequence[TopicPartition], positions: Mapping[TopicPartition, int]) -> None:
        for tp in partitions:
            self._seeks[tp] = positions.get(tp)

    def unassign(self, partitions: Sequence[TopicPartition]) -> None:
        assigned = self._kafka.assignment()
        pause = [KafkaTopicPartition(*tp) for tp in partitions if KafkaTopicPartition(*tp) in assigned]
        for tp in partitions:
            self._seeks.pop(tp, None)
        if pause:
            self._kafka.pause(*pause)

    def position(self, partition: TopicPartition) -> int:
        raise NotImplementedError("the worker tracks its tasks' positions itself")

    def has_unread(self, partition: TopicPartition) -> Optional[bool]:
        """Whether the last fetch response's last stable offset (else high watermark) is
        past the fetch position. A partition with no response or position yet counts as
        unread, as Kafka Streams treats unknown lag: at start-up a join's table side is
        waited for briefly (LAG_WAIT) instead of losing the race to its stream side."""
        state = self._partition_state(KafkaTopicPartition(*partition))
        if state is None:
            return None  # not assigned to this member (now)
        end = state.lso if state.lso is not None and state.lso >= 0 else state.highwater
        if end is None or not state.has_valid_position:
            return True
        return state.position < end

    def _partition_state(self, ktp: KafkaTopicPartition) -> Any:
        """aiokafka's fetch state of ``ktp`` (high watermark, last stable offset, position past
        transaction markers), None if not assigned. Read directly: ``highwater()`` and
        ``last_stable_offset()`` assert the assignment, and ``position()`` waits for an
        offset reset."""
        try:
            return self._kafka._subscription.subscription.assignment.state_value(ktp)
        except AttributeError:  # no subscription or assignment yet
            return None

    async def _apply_seeks(self) -> None:
        assigned = self._kafka.assignment()
        resume = []
        for tp, offset in self._seeks.items():
            ktp = KafkaTopicPartition(*tp)
            if ktp not in assigned:
                continue  # revoked meanwhile; the next assignment decides
            if offset is None:
                await self._kafka.seek_to_beginning(ktp)
            else:
                self._kafka.seek(ktp, offset)
            resume.append(ktp)
        self._seeks.clear()
        if resume:
            self._kafka.resume(*resume)

    async def fetch(self, max_wait: float) -> List[FetchedBatch]:
        if self._seeks:
            await self._apply_seeks()
        return await fetch_batches(self._kafka, max_wait, f"group {self._group}: fetching "
                                   f"{describe_partitions(self._kafka.assignment())}", self._lost)

    def take_lost(self) -> List[Tuple[TopicPartition, int, int]]:
        lost, self._lost = self._lost, []
        return lost

    async def commit(self, offsets: Mapping[TopicPartition, int],
                     metadata: Optional[Mapping[TopicPartition, str]] = None) -> None:
        if not offsets:
            return
        try:
            await asyncio.wait_for(self._kafka.commit(kafka_offsets(offsets, metadata)), COMMIT_TIMEOUT)
        except asyncio.TimeoutError:
            # aiokafka retries retriable errors forever (a deleted topic among them).
            raise StreamkitError(f"group {self._group}: committing offsets of "
                                 f"{', '.join(sorted(f'{tp.topic}[{tp.partition}]' for tp in offsets))} did not "
                                 f"complete within {COMMIT_TIMEOUT:g} s") from None
        except IllegalStateError as exc:  # a partition no longer assigned to this member
            raise TaskMigratedError(f"group {self._group}: {exc}; its tasks now belong to other members") from None
        except _MIGRATED as exc:
            cause = exc.__cause__ if isinstance(exc, CommitFailedError) and exc.__cause__ else exc
            if isinstance(cause, RebalanceInProgressError):
                raise GroupRebalancing(f"group {self._group} is rebalancing; offsets are committed when it "
                                       "revokes this worker's tasks") from None
            raise TaskMigratedError(f"group {self._group} rebalanced without this worker "
                                    f"({type(cause).__name__}): its tasks now belong to other members") from None

    async def committed(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        """The committed offsets, once no transaction committing offsets of ``partitions`` is
        pending: a task taking over from a fenced or revoked owner must not start from the
        offsets that owner's last, still completing, transaction replaces."""
        return await committed_offsets(self._kafka, partitions, stable_within=self._stable_within)

    async def committed_metadata(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, str]:
        return await committed_metadata(self._kafka, partitions, stable_within=self._stable_within)


class KafkaGroupMembership(Membership):
    """One member of the app's consumer group, assigning whole tasks (see assignor.py)."""

    group_managed = True

    def __init__(self, config: KafkaClientConfig, group: str, plan: GroupPlan) -> None:
        self._group = group
        self._plan = plan
        self._servers = ",".join(config.bootstrap_servers)
        self._connect_timeout = config.connect_timeout_s
        fingerprint = plan_fingerprint(plan.tasks)
        self._assignor = TaskAssignor(
            tasks=plan.tasks, standby_replicas=plan.standby_replicas, stateful=plan.stateful,
            state=lambda: MemberState(frozenset(plan.running()), frozenset(plan.local_state()), fingerprint,
                                      plan.endpoint))
        self._revoke_wait = revoke_wait(config)
        self._kafka = no_topic_auto_creation(AIOKafkaConsumer(
            **config.consumer_kwargs(), group_id=group, enable_auto_commit=False,
            rebalance_timeout_ms=config.rebalance_timeout_ms,
            auto_offset_reset="none",  # a position outside the log is handled by fetch_batches
            isolation_level="read_committed", partition_assignment_strategy=(self._assignor,)))
        self._consumer = KafkaGroupConsumer(self._kafka, group, stable_offsets_wait(config))
        self._started = False
        self._pending: Optional[TaskAssignment] = None
        self._revoking: Optional[asyncio.Event] = None
        self._closing = False
        self._restart: Set[str] = set()
        """Tasks closed dirty while the group still assigns them here (see release)."""
        self._assigned_in: Optional[Tuple[int, str]] = None
        """(generation, member id) in which the group gave this member its current assignment."""
        self._next_generation_check = 0.0
        self.topics = sorted({tp.topic for tps in plan.tasks.values() for tp in tps})

    def consumer(self) -> Consumer:
        return self._consumer

    async def poll(self) -> Optional[TaskAssignment]:
        if not self._started:
            await start_with_retry(self._kafka.start, self._servers, self._connect_timeout, "group member")
            self._kafka.subscribe(self.topics, listener=_Listener(self))
            self._started = True
            log.info("joining group %s (topics %s)", self._group, ", ".join(self.topics))
        if self._pending is None and self._restart and not self.revocation_pending() \
                and time.monotonic() >= self._next_generation_check:
            restart = sorted(self._restart)
            current = await self._generation_is_current()
            if current is None:  # the coordinator could not tell: ask again later
                self._next_generation_check = time.monotonic() + GENERATION_CHECK_BACKOFF
            elif self._pending is None and current:
                self._restart.clear()
                log.info("group %s still assigns task(s) %s here: restarting them from their committed "
                         "offsets with new producers", self._group, ", ".join(restart))
                return self._assignor.received
            else:
                # The group moved on (or an assignment arrived during the check): the next
                # assignment decides which tasks run here.
                self._restart.clear()
                if self._pending is None:
                    log.warning("group %s: not restarting task(s) %s here: the group moved on from the "
                                "generation that assigned them; waiting for the new assignment", self._group,
                                ", ".join(restart))
        pending, self._pending = self._pending, None
        if pending is not None:
            self._restart.clear()  # the new assignment decides
        return pending

    def endpoint_of(self, task_id: str) -> Optional[str]:
        received = self._assignor.received
        return None if received is None else received.endpoints.get(task_id)

    def standby_endpoints_of(self, task_id: str) -> Tuple[str, ...]:
        received = self._assignor.received
        return () if received is None else tuple(received.standby_endpoints.get(task_id, ()))

    def release(self, task_id: str) -> None:
        """The worker closed ``task_id``. If the group still assigns it here, the task was
        closed dirty (its transactional producer was fenced: a transaction ran past its
        timeout, or the broker bumped its epoch): the next poll offers the assignment
        again, once the coordinator accepted this member's generation, so the worker
        restarts the task instead of leaving its partitions paused until some rebalance."""
        received = self._assignor.received
        if not self._closing and received is not None and task_id in received.active:
            self._restart.add(task_id)

    async def _generation_is_current(self) -> Optional[bool]:
        """Whether the coordinator still has this member in the generation that gave it its
        current assignment (a heartbeat of that generation, which writes nothing); None if
        it could not be asked. A member the group moved on without must not restart tasks:
        a new producer would fence the real owner's. Never an offset commit: a stale
        offset written by a member that does not own the partition in the current
        generation would move it backwards (and under exactly_once only transactions may
        write offsets)."""
        coordinator = self._kafka._coordinator
        if coordinator is None or self._assigned_in is None:
            return None
        generation, member_id = self._assigned_in
        if (coordinator.generation, coordinator.member_id) != self._assigned_in:
            return False  # aiokafka already left that generation: a new assignment follows
        try:
            response = await asyncio.wait_for(self._heartbeat(coordinator, generation, member_id),
                                              GENERATION_CHECK_TIMEOUT)
        except (KafkaError, asyncio.TimeoutError) as exc:
            log.info("group %s: could not confirm this worker's generation %d with the coordinator (%s); "
                     "asking again", self._group, generation, type(exc).__name__)
            return None
        error = kafka_error_for_code(response.error_code)
        if error is NoKafkaError:
            return (coordinator.generation, coordinator.member_id) == self._assigned_in
        if error in (IllegalGenerationError, UnknownMemberIdError, RebalanceInProgressError) \
                or error.__name__ == "FencedInstanceIdError":
            return False
        if error in (NotCoordinatorForGroupError, GroupCoordinatorNotAvailableError):
            coordinator.coordinator_dead()
        log.info("group %s: the coordinator answered %s to this worker's generation check; asking again",
                 self._group, error.__name__)
        return None

    @staticmethod
    async def _heartbeat(coordinator: Any, generation: int, member_id: str) -> Any:
        await coordinator.ensure_coordinator_known()
        return await coordinator._send_req(HeartbeatRequest(coordinator.group_id, generation, member_id))

    def revocation_pending(self) -> bool:
        return self._revoking is not None and not self._revoking.is_set()

    def revocation_committed(self) -> None:
        if self._revoking is not None:
            self._revoking.set()

    async def _on_revoked(self, revoked: Set[KafkaTopicPartition]) -> None:
        if not revoked or not self._plan.running() or self._closing:
            return
        self._revoking = asyncio.Event()
        try:
            await asyncio.wait_for(self._revoking.wait(), self._revoke_wait)
        except asyncio.TimeoutError:
            log.warning("group %s: the worker did not commit its tasks within %.0f s of a rebalance; the "
                        "rebalance goes on and their uncommitted work will be redone by the next owner",
                        self._group, self._revoke_wait)
        finally:
            self._revoking = None

    def _on_assigned(self, assigned: Set[KafkaTopicPartition]) -> None:
        coordinator = self._kafka._coordinator
        self._assigned_in = (coordinator.generation, coordinator.member_id)
        if assigned:
            self._kafka.pause(*assigned)  # resumed per task once its stores are restored
        self._pending = self._assignor.received
        log.info("group %s assigned this worker task(s) %s%s", self._group,
                 ", ".join(sorted(self._pending.active)) or "none",
                 f"; standby {', '.join(sorted(self._pending.standby))}" if self._pending.standby else "")

    async def aclose(self) -> None:
        # A rebalance may be waiting for the worker loop, which has ended: its tasks are
        # committed and closed, so let the rebalance go on (else stop() would wait for it).
        self.revocation_committed()
        self._closing = True
        self._started = False
        await self._kafka.stop()


class _Listener(ConsumerRebalanceListener):
    def __init__(self, membership: KafkaGroupMembership) -> None:
        self._membership = membership

    async def on_partitions_revoked(self, revoked) -> None:
        await self._membership._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned) -> None:
        self._membership._on_assigned(set(assigned))
