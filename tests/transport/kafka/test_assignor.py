"""The task assignor: whole tasks, balanced, sticky, state-aware, with standbys."""
from __future__ import annotations

import random

import pytest
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from streamkit.transport.base import TopicPartition
from streamkit.transport.kafka.assignor import (MemberState, TaskAssignor, assign_tasks, decode_assignment,
                                                encode_assignment, plan_fingerprint)
from streamkit.transport.base import TaskAssignment

TASKS = [f"{sub}_{p}" for sub in range(2) for p in range(3)]


def _members(*states: MemberState) -> dict:
    return {f"m{i}": state for i, state in enumerate(states)}


def test_every_task_placed_once_and_balanced() -> None:
    placed = assign_tasks(TASKS, _members(MemberState(), MemberState(), MemberState(), MemberState()))
    actives = [t for a in placed.values() for t in a.active]
    assert sorted(actives) == sorted(TASKS)
    sizes = sorted(len(a.active) for a in placed.values())
    assert sizes[-1] - sizes[0] <= 1


def test_tasks_stay_with_their_previous_owner() -> None:
    first = assign_tasks(TASKS, _members(MemberState(), MemberState()))
    # a third member joins: the two old ones keep what they can and hand over the rest
    states = {m: MemberState(active=a.active) for m, a in first.items()}
    states["m2"] = MemberState()
    second = assign_tasks(TASKS, states)
    for member in ("m0", "m1"):
        assert second[member].active <= first[member].active
        assert len(second[member].active) == 2
    assert len(second["m2"].active) == 2


def test_unowned_tasks_go_where_their_state_is() -> None:
    placed = assign_tasks(["0_0", "0_1"], _members(MemberState(), MemberState(local=frozenset({"0_1"}))))
    assert placed["m1"].active == frozenset({"0_1"})
    assert placed["m0"].active == frozenset({"0_0"})


def test_standbys_on_other_members_only_for_stateful_tasks() -> None:
    placed = assign_tasks(TASKS, _members(MemberState(), MemberState(), MemberState()), standby_replicas=1,
                          stateful=["1_0", "1_1", "1_2"])
    standbys = {t: m for m, a in placed.items() for t in a.standby}
    assert set(standbys) == {"1_0", "1_1", "1_2"}
    for task, member in standbys.items():
        assert task not in placed[member].active


def test_standbys_prefer_members_holding_the_state() -> None:
    members = _members(MemberState(active=frozenset({"0_0"})), MemberState(), MemberState(local=frozenset({"0_0"})))
    placed = assign_tasks(["0_0"], members, standby_replicas=1)
    assert placed["m0"].active == frozenset({"0_0"})
    assert placed["m2"].standby == frozenset({"0_0"})


def test_a_single_member_gets_no_standbys() -> None:
    placed = assign_tasks(TASKS, _members(MemberState()), standby_replicas=2)
    assert placed["m0"].standby == frozenset()
    assert placed["m0"].active == frozenset(TASKS)


def _layout(subs: int, partitions: int, stateful_subs) -> tuple:
    tasks = [f"{sub}_{p}" for sub in range(subs) for p in range(partitions)]
    return tasks, [t for t in tasks if int(t.split("_")[0]) in stateful_subs]


def _spread(placed: dict, tasks) -> int:
    sizes = [sum(1 for t in a.active if t in tasks) for a in placed.values()]
    return max(sizes) - min(sizes)


@pytest.mark.parametrize("subs,partitions,stateful_subs", [
    (2, 3, {1}), (2, 3, {0}), (3, 4, {1, 2}), (3, 2, {0}), (4, 5, {0, 3}), (2, 1, {1}), (1, 6, set())])
@pytest.mark.parametrize("old", [1, 2, 3])
def test_a_member_joining_late_gets_its_share_of_the_stateful_tasks(subs, partitions, stateful_subs, old) -> None:
    """The first members ran every task (Apache Kafka completes a group's first join at once);
    after the newcomer joins, stateful and stateless tasks are each balanced to within one,
    and the old members keep as many of the tasks they ran as those quotas allow."""
    tasks, stateful = _layout(subs, partitions, stateful_subs)
    first = assign_tasks(tasks, _members(*[MemberState()] * old), stateful=stateful)
    states = {m: MemberState(active=a.active, local=a.active | a.standby) for m, a in first.items()}
    states["new"] = MemberState()
    second = assign_tasks(tasks, states, standby_replicas=1, stateful=stateful)

    assert sorted(t for a in second.values() for t in a.active) == sorted(tasks)
    stateless = [t for t in tasks if t not in stateful]
    for kind in (stateful, stateless, tasks):
        assert _spread(second, kind) <= 1, (kind, second)
    members = old + 1
    for kind in (stateful, stateless):
        assert len(second["new"].active & set(kind)) >= len(kind) // members
        for member, assignment in first.items():
            kept = second[member].active & assignment.active & set(kind)
            assert len(kept) >= min(len(assignment.active & set(kind)), len(kind) // members)


@pytest.mark.parametrize("seed", range(40))
def test_stateful_and_stateless_tasks_are_balanced_each_on_its_own(seed) -> None:
    """Whatever the members ran and hold: every task placed once, and each member runs
    ⌊S/n⌋ or ⌈S/n⌉ of the S stateful tasks and ⌊T/n⌋ or ⌈T/n⌉ of all T tasks."""
    rng = random.Random(seed)
    tasks, stateful = _layout(rng.randint(1, 4), rng.randint(1, 6), {s for s in range(4) if rng.random() < 0.5})
    states = []
    for _ in range(rng.randint(1, 6)):
        ran = frozenset(t for t in tasks if rng.random() < 0.4)
        states.append(MemberState(active=ran, local=ran | {t for t in tasks if rng.random() < 0.3}))
    placed = assign_tasks(tasks, _members(*states), standby_replicas=rng.randint(0, 2), stateful=stateful)

    assert sorted(t for a in placed.values() for t in a.active) == sorted(tasks)
    assert _spread(placed, stateful) <= 1 and _spread(placed, tasks) <= 1, placed
    for assignment in placed.values():
        assert not assignment.active & assignment.standby and assignment.standby <= set(stateful)


@pytest.mark.parametrize("tasks,old,sizes", [(4, 2, (2, 2)), (5, 2, (3, 2)), (7, 3, (3, 2, 2)), (9, 4, (3, 2, 2, 2))])
def test_balance_holds_when_the_old_members_hold_full_shares(tasks, old, sizes) -> None:
    """Stickiness never leaves a newcomer short: members that each ran ⌈T/old⌉ tasks give
    up enough for every member to end within one of the others."""
    ids = [f"0_{p}" for p in range(tasks)]
    ran, start = [], 0
    for size in sizes:
        ran.append(MemberState(active=frozenset(ids[start:start + size])))
        start += size
    placed = assign_tasks(ids, _members(*ran, MemberState()))
    assert _spread(placed, ids) <= 1, placed
    assert len(placed[f"m{old}"].active) == tasks // (old + 1)


def test_the_member_holding_the_state_keeps_the_larger_stateful_share() -> None:
    """With an odd number of stateful tasks, the extra one stays where it ran: the member
    that ran them all keeps two of three, the newcomer restores one."""
    tasks, stateful = _layout(2, 3, {1})
    states = {"a": MemberState(active=frozenset(tasks), local=frozenset(tasks)), "b": MemberState()}
    placed = assign_tasks(tasks, states, standby_replicas=1, stateful=stateful)
    assert len(placed["a"].active & set(stateful)) == 2 and len(placed["b"].active & set(stateful)) == 1
    assert len(placed["a"].active) == len(placed["b"].active) == 3
    assert placed["a"].standby | placed["b"].standby == set(stateful)


def test_codecs_round_trip() -> None:
    state = MemberState(frozenset({"0_1"}), frozenset({"0_1", "1_2"}), "abc")
    assert MemberState.decode(state.encode()) == state
    assert MemberState.decode(b"garbage") == MemberState()
    assignment = TaskAssignment(frozenset({"0_0"}), frozenset({"1_1"}), None)
    assert decode_assignment(encode_assignment(assignment)) == assignment


def _cluster(partitions: dict) -> ClusterMetadata:
    cluster = ClusterMetadata()
    cluster._partitions = {topic: {p: None for p in range(n)} for topic, n in partitions.items()}
    return cluster


def _plan(topics_partitions=(("in", 3), ("rep", 3))) -> dict:
    tasks = {}
    for sub, (topic, n) in enumerate(topics_partitions):
        for p in range(n):
            tasks[f"{sub}_{p}"] = (TopicPartition(topic, p),)
    return tasks


def test_assignor_gives_each_member_its_tasks_partitions() -> None:
    plan = _plan()
    assignor = TaskAssignor(tasks=plan, state=lambda: MemberState(plan=plan_fingerprint(plan)))
    members = {m: ConsumerProtocolMemberMetadata(1, ["in", "rep"], MemberState(plan=plan_fingerprint(plan)).encode())
               for m in ("a", "b")}
    out = assignor.assign(_cluster({"in": 3, "rep": 3}), members)
    tasks_by_member = {m: decode_assignment(a.user_data).active for m, a in out.items()}
    for member, assignment in out.items():
        partitions = {(tp.topic, tp.partition) for tp in assignment.partitions()}
        expected = {(tp.topic, tp.partition) for t in tasks_by_member[member] for tp in plan[t]}
        assert partitions == expected
    assert sorted(t for ts in tasks_by_member.values() for t in ts) == sorted(plan)


def test_assignor_reports_missing_topics_and_skips_strangers() -> None:
    plan = _plan()
    mine = MemberState(plan=plan_fingerprint(plan))
    assignor = TaskAssignor(tasks=plan, state=lambda: mine)
    members = {"a": ConsumerProtocolMemberMetadata(1, ["in", "rep"], mine.encode()),
               "z": ConsumerProtocolMemberMetadata(1, ["in"], MemberState(plan="other").encode())}
    out = assignor.assign(_cluster({"in": 3}), members)  # "rep" was deleted
    a = decode_assignment(out["a"].user_data)
    assert a.error is not None and "rep[0]" in a.error
    assert a.active == frozenset({"0_0", "0_1", "0_2"})
    assert decode_assignment(out["z"].user_data).active == frozenset()
