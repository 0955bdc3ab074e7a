"""The group's partition assignor: assigns whole tasks, sticky, with standby replicas.

Kafka's own assignors hand out partitions one by one; a streamkit task reads one
partition of every input topic of its sub-topology (co-partitioned), so the
leader assigns tasks and gives each member all of its tasks' input partitions.
Members tell the leader (in their JoinGroup user data) which tasks they ran and
which they hold local state for; the leader balances stateful and stateless tasks
each on its own and, within those quotas, keeps tasks where they were, then places
them where their state is, then on the least loaded. Standby tasks go to other
members than the active one, preferring members that already hold the state.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import orjson
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

from ..base import TaskAssignment, TopicPartition

log = logging.getLogger(__name__)

PROTOCOL_NAME = "streamkit-tasks"
VERSION = 1


@dataclass(frozen=True)
class MemberState:
    """What a member reports when it joins."""

    active: FrozenSet[str] = frozenset()
    """Tasks it ran before this rebalance."""
    local: FrozenSet[str] = frozenset()
    """Tasks it holds local state for (standbys included)."""
    plan: str = ""
    """A fingerprint of its task plan: members running different topologies are an error."""
    endpoint: Optional[str] = None
    """Its HTTP address for interactive queries (like Kafka Streams' application.server)."""

    def encode(self) -> bytes:
        return orjson.dumps({"v": VERSION, "active": sorted(self.active), "local": sorted(self.local),
                             "plan": self.plan, "endpoint": self.endpoint})

    @classmethod
    def decode(cls, data: bytes) -> "MemberState":
        try:
            raw = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError:
            raw = {}
        return cls(frozenset(raw.get("active", ())), frozenset(raw.get("local", ())), raw.get("plan", ""),
                   raw.get("endpoint"))


def encode_assignment(assignment: TaskAssignment) -> bytes:
    return orjson.dumps({"v": VERSION, "active": sorted(assignment.active), "standby": sorted(assignment.standby),
                         "error": assignment.error, "endpoints": dict(assignment.endpoints),
                         "standby_endpoints": {t: list(e) for t, e in assignment.standby_endpoints.items()}})


def decode_assignment(data: bytes) -> TaskAssignment:
    raw = orjson.loads(data) if data else {}
    return TaskAssignment(frozenset(raw.get("active", ())), frozenset(raw.get("standby", ())), raw.get("error"),
                          dict(raw.get("endpoints") or {}),
                          {t: tuple(e) for t, e in (raw.get("standby_endpoints") or {}).items()})


def endpoint_maps(placed: Mapping[str, TaskAssignment], states: Mapping[str, MemberState]
                  ) -> Tuple[Dict[str, str], Dict[str, Tuple[str, ...]]]:
    """Per task, the advertised HTTP address of its active member and of its standbys'."""
    active: Dict[str, str] = {}
    standby: Dict[str, List[str]] = {}
    for member, assignment in placed.items():
        endpoint = states[member].endpoint if member in states else None
        if not endpoint:
            continue
        for task in assignment.active:
            active[task] = endpoint
        for task in assignment.standby:
            standby.setdefault(task, []).append(endpoint)
    return active, {task: tuple(sorted(endpoints)) for task, endpoints in standby.items()}


def assign_tasks(tasks: Sequence[str], members: Mapping[str, MemberState],
                 standby_replicas: int = 0, stateful: Optional[Iterable[str]] = None) -> Dict[str, TaskAssignment]:
    """Place every task on one member, and up to ``standby_replicas`` standbys of each
    ``stateful`` task (default: all) on others.

    Stateful and stateless tasks are balanced each on its own, as in Kafka Streams' task
    assignors: of S stateful tasks over n members every member runs ⌊S/n⌋ or ⌈S/n⌉,
    then the stateless ones even out the total, so every member runs ⌊T/n⌋ or ⌈T/n⌉ of
    all T tasks. Balancing only the total would let a member that kept its stateless
    tasks push every stateful task (all the state, restores and queries) onto another.
    Within those quotas a task stays with its previous owner, else goes to a member
    holding its state, else to the least loaded.
    """
    member_ids = sorted(members)
    if not member_ids:
        return {}
    with_state = set(tasks if stateful is None else stateful)
    stateful_tasks = [t for t in tasks if t in with_state]
    stateless_tasks = [t for t in tasks if t not in with_state]
    active: Dict[str, List[str]] = {m: [] for m in member_ids}
    owner: Dict[str, str] = {}

    def ran(member: str, of: Sequence[str]) -> int:
        return sum(1 for t in of if t in members[member].active)

    # 1. stateful: the members that ran the most of them (then hold the most state) get the larger share
    stateful_quota = _shares(len(stateful_tasks), member_ids, lambda m: (
        ran(m, stateful_tasks), sum(1 for t in stateful_tasks if t in members[m].local)))
    _place(stateful_tasks, stateful_quota, members, active, owner)
    # 2. stateless: the larger total shares go first to the members with the larger stateful share;
    # there are at least as many larger total shares as larger stateful ones, so no quota is negative
    total_quota = _shares(len(tasks), member_ids, lambda m: (len(active[m]), ran(m, stateless_tasks)))
    _place(stateless_tasks, {m: total_quota[m] - len(active[m]) for m in member_ids}, members, active, owner)

    standby: Dict[str, List[str]] = {m: [] for m in member_ids}
    replicas = min(standby_replicas, len(member_ids) - 1)
    for task in stateful_tasks:
        placed: Set[str] = {owner[task]}
        for _ in range(replicas):
            candidates = [m for m in member_ids if m not in placed]
            holders = [m for m in candidates if task in members[m].local]
            pool = holders or candidates
            chosen = min(pool, key=lambda m: (len(standby[m]) + len(active[m]), m))
            standby[chosen].append(task)
            placed.add(chosen)
    return {m: TaskAssignment(frozenset(active[m]), frozenset(standby[m])) for m in member_ids}


def _shares(count: int, member_ids: Sequence[str], preference: Callable[[str], Tuple[int, ...]]) -> Dict[str, int]:
    """Split ``count`` tasks into per-member quotas of ⌊count/n⌋ or ⌈count/n⌉; the larger
    ones go to the members ``preference`` ranks highest (ties by member id)."""
    base, extra = divmod(count, len(member_ids))
    ranked = sorted(member_ids, key=lambda m: (tuple(-p for p in preference(m)), m))
    return {m: base + (1 if rank < extra else 0) for rank, m in enumerate(ranked)}


def _place(tasks: Sequence[str], quota: Mapping[str, int], members: Mapping[str, MemberState],
           active: Dict[str, List[str]], owner: Dict[str, str]) -> None:
    """Give each member ``quota[member]`` of ``tasks`` (the quotas add up to their number):
    each stays with a member that ran it, else goes to one holding its state, else to the
    least loaded, among the members below their quota."""
    taken = {m: 0 for m in quota}

    def put(task: str, candidates: Iterable[str]) -> None:
        open_ = [m for m in candidates if taken[m] < quota[m]]
        if open_:
            chosen = min(open_, key=lambda m: (len(active[m]), m))
            active[chosen].append(task)
            owner[task] = chosen
            taken[chosen] += 1

    for task in tasks:  # 1. stay where it ran
        put(task, (m for m in quota if task in members[m].active))
    for task in tasks:  # 2. go where its state is
        if task not in owner:
            put(task, (m for m in quota if task in members[m].local))
    for task in tasks:  # 3. balance the rest
        if task not in owner:
            put(task, quota)


@dataclass
class TaskAssignor(AbstractPartitionAssignor):
    """An aiokafka assignor instance bound to one worker's task plan.

    ``tasks`` maps each task id to its input partitions; ``state`` reports this
    member's :class:`MemberState` when it (re)joins; the latest assignment received
    is in :attr:`received`.
    """

    tasks: Mapping[str, Tuple[TopicPartition, ...]]
    state: Callable[[], MemberState]
    standby_replicas: int = 0
    stateful: FrozenSet[str] = frozenset()
    received: TaskAssignment = field(default_factory=TaskAssignment)

    @property
    def name(self) -> str:  # type: ignore[override]
        return PROTOCOL_NAME

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:  # type: ignore[override]
        return ConsumerProtocolMemberMetadata(VERSION, sorted(topics), self.state().encode())

    def assign(self, cluster, members: Mapping[str, ConsumerProtocolMemberMetadata]  # type: ignore[override]
               ) -> Dict[str, ConsumerProtocolMemberAssignment]:
        states = {member: MemberState.decode(meta.user_data) for member, meta in members.items()}
        mine = self.state().plan
        strangers = sorted(m for m, s in states.items() if s.plan and s.plan != mine)
        if strangers:
            log.error("group members %s run a different topology than this worker (plan %s): their tasks "
                      "would not line up; assigning them nothing until they run the same app version",
                      ", ".join(strangers), mine)
            for member in strangers:
                states.pop(member)
        usable = [t for t, tps in self.tasks.items() if all(_exists(cluster, tp) for tp in tps)]
        missing = sorted(set(self.tasks) - set(usable))
        error = None
        if missing:
            gone = sorted({f"{tp.topic}[{tp.partition}]" for t in missing for tp in self.tasks[t]
                           if not _exists(cluster, tp)})
            error = (f"input partitions {', '.join(gone)} are missing from the cluster (topic deleted or "
                     f"shrunk while the app ran?): tasks {', '.join(missing)} cannot run")
            log.error("%s", error)
        placed = assign_tasks(sorted(usable, key=_task_order), states, self.standby_replicas, self.stateful)
        endpoints, standby_endpoints = endpoint_maps(placed, states)
        out = {}
        for member in members:
            assignment = placed.get(member, TaskAssignment())
            assignment = TaskAssignment(assignment.active, assignment.standby, error, endpoints, standby_endpoints)
            by_topic: Dict[str, List[int]] = {}
            for task in sorted(assignment.active, key=_task_order):
                for tp in self.tasks[task]:
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
            out[member] = ConsumerProtocolMemberAssignment(
                VERSION, sorted((topic, sorted(parts)) for topic, parts in by_topic.items()),
                encode_assignment(assignment))
        log.info("assigned %d task(s) to %d member(s)%s", len(usable), len(placed),
                 f" with {self.standby_replicas} standby replica(s)" if self.standby_replicas else "")
        return out

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:  # type: ignore[override]
        self.received = decode_assignment(assignment.user_data)


def _exists(cluster, tp: TopicPartition) -> bool:
    partitions = cluster.partitions_for_topic(tp.topic)
    return partitions is not None and tp.partition in partitions


def _task_order(task_id: str) -> Tuple[int, int]:
    sub, partition = task_id.split("_")
    return int(sub), int(partition)


def plan_fingerprint(tasks: Mapping[str, Tuple[TopicPartition, ...]]) -> str:
    """A short stable digest of a task plan."""
    import hashlib

    text = ";".join(f"{t}:{','.join(f'{tp.topic}/{tp.partition}' for tp in tps)}"
                    for t, tps in sorted(tasks.items()))
    return hashlib.sha1(text.encode()).hexdigest()[:12]
