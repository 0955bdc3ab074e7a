"""The task assignor: whole tasks, balanced, sticky, state-aware, with standbys."""
from __future__ import annotations

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
