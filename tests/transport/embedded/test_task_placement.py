"""The placement rule the embedded workers share with Kafka's group leader
(transport/task_assignment.py), applied by EmbeddedMembership instances on one broker
directory: they converge on one placement, balanced for stateful and for stateless
tasks, the tasks a member holds state for go back to it, and a leaving member's tasks
are shared among the others the same way."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Dict, FrozenSet, List

import pytest

from streamkit.transport.base import GroupPlan, TopicPartition
from streamkit.transport.embedded.transport import EmbeddedMembership, EmbeddedTransport
from streamkit.transport.task_assignment import MemberState, assign_tasks

PARTITIONS = 4
PLAN = {f"{sub}_{p}": (TopicPartition(f"topic-{sub}", p),) for sub in range(2) for p in range(PARTITIONS)}
STATEFUL = frozenset(t for t in PLAN if t.startswith("1_"))
STATELESS = frozenset(PLAN) - STATEFUL


class FakeWorker:
    """Follows a membership as the worker loop does: commits (instantly) when asked, applies
    each assignment, and releases the tasks it stops running."""

    def __init__(self, transport: EmbeddedTransport, local: FrozenSet[str] = frozenset()) -> None:
        self.running: FrozenSet[str] = frozenset()
        self.local = set(local)
        self.membership = EmbeddedMembership(transport.broker, "app", GroupPlan(
            tasks=PLAN, stateful=STATEFUL, local_state=lambda: frozenset(self.local)), poll_interval=0.0)

    async def step(self) -> None:
        if self.membership.revocation_pending():
            self.membership.revocation_committed()
        assignment = await self.membership.poll()
        if assignment is not None:
            for task in self.running - assignment.active:
                self.membership.release(task)
            self.running = assignment.active
            self.local |= assignment.active & STATEFUL


async def _settle(workers: List[FakeWorker]) -> Dict[int, FrozenSet[str]]:
    """Step every worker until the placement stays the same for several rounds."""
    last, same = None, 0
    for _ in range(400):
        for worker in workers:
            await worker.step()
        placement = {i: w.running for i, w in enumerate(workers)}
        same = same + 1 if placement == last else 0
        last = placement
        if same >= 5 and sorted(t for ts in placement.values() for t in ts) == sorted(PLAN):
            return placement
    raise AssertionError(f"no stable placement: {last}")


def _assert_balanced(placement: Dict[int, FrozenSet[str]]) -> None:
    for kind in (STATEFUL, STATELESS, frozenset(PLAN)):
        sizes = [len(tasks & kind) for tasks in placement.values()]
        assert max(sizes) - min(sizes) <= 1, (sorted(kind), placement)


@pytest.mark.parametrize("joiners", [1, 2, 3])
def test_members_joining_one_by_one_converge_on_a_balanced_placement(tmp_path: Path, joiners: int) -> None:
    transport = EmbeddedTransport(str(tmp_path))

    async def run() -> None:
        workers = [FakeWorker(transport)]
        assert (await _settle(workers))[0] == frozenset(PLAN)
        for _ in range(joiners):
            workers.append(FakeWorker(transport))
            _assert_balanced(await _settle(workers))
        while len(workers) > 1:  # leaving one by one: the rest share their tasks the same way
            await workers.pop(0).membership.aclose()
            _assert_balanced(await _settle(workers))
        for worker in workers:
            await worker.membership.aclose()
    try:
        asyncio.run(run())
    finally:
        transport.close()


def test_a_rejoining_member_gets_back_the_tasks_it_holds_state_for(tmp_path: Path) -> None:
    transport = EmbeddedTransport(str(tmp_path))

    async def run() -> None:
        first = FakeWorker(transport, local=STATEFUL)
        await _settle([first])
        for warm in (frozenset({"1_2", "1_3"}), frozenset({"1_0", "1_3"}), frozenset({"1_1", "1_2"})):
            second = FakeWorker(transport, local=warm)
            placement = await _settle([first, second])
            assert placement[1] & STATEFUL == warm, placement
            _assert_balanced(placement)
            await second.membership.aclose()
            await _settle([first])
        await first.membership.aclose()
    try:
        asyncio.run(run())
    finally:
        transport.close()


@pytest.mark.parametrize("warm", [{"1_0"}, {"1_2"}, {"1_1", "1_3"}, {"1_0", "1_1", "1_2"}])
def test_an_over_quota_member_gives_up_first_the_tasks_another_member_holds_state_for(warm) -> None:
    """Within the quotas; a member warm for more than its share gets its share of them."""
    tasks = sorted(PLAN)
    members = {"a": MemberState(active=frozenset(PLAN), local=frozenset(PLAN)),
               "b": MemberState(local=frozenset(warm))}
    placed = assign_tasks(tasks, members, stateful=STATEFUL)
    got = placed["b"].active & STATEFUL
    assert len(got) == 2 and len(got & warm) == min(len(warm), 2), placed
    assert placed["a"].active | placed["b"].active == frozenset(PLAN)
