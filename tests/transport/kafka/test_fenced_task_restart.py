"""A task closed dirty while the group still assigns it to this worker (its
transactional producer was fenced: a transaction ran past its timeout) is restarted
(issue 19 item 1): ``release`` makes the next ``poll`` offer the assignment again, once
a heartbeat of the generation that assigned it shows the coordinator still has this
member there (the check writes no offsets). Run on the test broker with the real group
protocol (no transactions needed for this part)."""
from __future__ import annotations

import asyncio
import time

from streamkit.transport.base import GroupPlan, TopicPartition
from streamkit.transport.kafka.membership import KafkaGroupMembership

from tests.kafka.topics import create_test_topic, kafka_transport


async def _assignment(membership: KafkaGroupMembership, timeout: float = 60):
    deadline = time.monotonic() + timeout
    consumer = membership.consumer()
    while time.monotonic() < deadline:
        assignment = await membership.poll()
        if assignment is not None:
            return assignment
        await consumer.fetch(0.2)  # the group protocol runs while the member fetches
    raise AssertionError(f"no assignment within {timeout:g} s")


def test_a_released_task_the_group_still_assigns_here_is_offered_again(kafka, unique_name) -> None:
    topic, group = unique_name("fenced-in"), unique_name("fenced-group")
    plan = GroupPlan(tasks={f"0_{p}": (TopicPartition(topic, p),) for p in range(2)})
    with kafka_transport(kafka) as transport:
        create_test_topic(transport.admin, topic, 2)
        asyncio.run(_scenario(transport, group, topic, plan))


async def _scenario(transport, group: str, topic: str, plan: GroupPlan) -> None:
    membership = transport.membership(group, plan)
    try:
        first = await _assignment(membership)
        assert first.active == frozenset(plan.tasks)
        assert await membership.poll() is None                 # nothing new
        # The generation check is a real heartbeat to the coordinator; it leaves offsets alone.
        await membership.consumer().commit({TopicPartition(topic, 1): 0}, {TopicPartition(topic, 1): "sk1"})
        membership.release("0_1")
        again = await membership.poll()
        assert again is not None and again.active == first.active
        assert await membership.consumer().committed([TopicPartition(topic, 1)]) == {TopicPartition(topic, 1): 0}
        assert await membership.poll() is None                 # offered once
        membership.release("9_9")                              # not assigned here: nothing to restart
        assert await membership.poll() is None
    finally:
        await membership.aclose()


def test_a_released_task_is_not_restarted_under_a_generation_the_group_left(kafka, unique_name) -> None:
    """The member asks the coordinator about the generation that assigned it the task, and
    writes nothing: while the group rebalances that generation is no longer current, and
    the new assignment, not the old one, decides what runs here (issue 32)."""
    topic, group = unique_name("left-in"), unique_name("left-group")
    tasks = {f"0_{p}": (TopicPartition(topic, p),) for p in range(2)}
    with kafka_transport(kafka) as transport:
        create_test_topic(transport.admin, topic, 2)
        asyncio.run(_left_generation(transport, group, topic, tasks))


async def _left_generation(transport, group: str, topic: str, tasks) -> None:
    running: set = set()
    first = transport.membership(group, GroupPlan(tasks=tasks, running=lambda: frozenset(running)))
    second = transport.membership(group, GroupPlan(tasks=tasks))
    joining = None
    try:
        assigned = await _assignment(first)
        assert assigned.active == frozenset(tasks)
        running.update(assigned.active)
        tp = TopicPartition(topic, 1)
        await first.consumer().commit({tp: 3}, {tp: "sk1"})
        first.release("0_1")                                   # as if its producer was fenced
        joining = asyncio.ensure_future(_assignment(second))   # the group rebalances
        deadline = time.monotonic() + 60
        while not first.revocation_pending():
            assert time.monotonic() < deadline, "the second member's join did not start a rebalance"
            await first.consumer().fetch(0.2)
        assert await first.poll() is None                      # no check while a revocation waits
        assert await first._generation_is_current() is False   # the coordinator is rebalancing
        running.clear()
        first.revocation_committed()
        mine = await _assignment(first)
        theirs = await joining
        assert len(mine.active) == 1 and mine.active | theirs.active == frozenset(tasks), (mine, theirs)
        assert await first.poll() is None                      # the queued restart was dropped
        assert await first.consumer().committed([tp]) == {tp: 3}
    finally:
        if joining is not None and not joining.done():
            joining.cancel()
        await second.aclose()
        await first.aclose()
