"""A task closed dirty while the group still assigns it to this worker (its
transactional producer was fenced: a transaction ran past its timeout) is restarted
(issue 19 item 1): ``release`` makes the next ``poll`` offer the assignment again, once
an offset commit shows the coordinator still accepts this member's generation. Run on
the test broker with the real group protocol (no transactions needed for this part)."""
from __future__ import annotations

import asyncio
import time

from streamkit.transport.base import GroupPlan, TopicPartition
from streamkit.transport.kafka.membership import KafkaGroupMembership

from .topics import create_test_topic, kafka_transport


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
        # With a committed offset, the generation check is a real commit to the coordinator.
        await membership.consumer().commit({TopicPartition(topic, 1): 0}, {TopicPartition(topic, 1): "sk1"})
        membership.release("0_1")
        again = await membership.poll()
        assert again is not None and again.active == first.active
        assert await membership.poll() is None                 # offered once
        membership.release("9_9")                              # not assigned here: nothing to restart
        assert await membership.poll() is None
    finally:
        await membership.aclose()
