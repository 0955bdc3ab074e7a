"""Which member of an app's group runs which task: the rule both transports share.

On Kafka the group leader applies it in the group's assignor (kafka/assignor.py); on
the embedded broker every worker applies it to what the group's members published
(embedded/transport.py) and runs its own part. Members report which tasks they run
and which they hold local state for (:class:`MemberState`); :func:`assign_tasks`
balances stateful and stateless tasks each on its own and, within those quotas, keeps
tasks where they run, then places them where their state is, then on the least
loaded. Standby tasks go to other members than the active one, preferring members
that already hold the state.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import orjson

from ..core.names import parse_task_id
from .base import TaskAssignment, TopicPartition

VERSION = 1


@dataclass(frozen=True)
class MemberState:
    """What a member tells the group about itself."""

    active: FrozenSet[str] = frozenset()
    """Tasks it runs (on Kafka: ran before this rebalance)."""
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
        """The state in ``data``; an empty state when it is empty or unreadable."""
        try:
            raw = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError:
            raw = {}
        if not isinstance(raw, dict):
            raw = {}
        return cls(frozenset(raw.get("active", ())), frozenset(raw.get("local", ())), raw.get("plan", ""),
                   raw.get("endpoint"))


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
    holding its state, else to the least loaded. Deterministic: the same inputs give
    the same placement on every member that computes it.
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
    least loaded, among the members below their quota. A member over its quota keeps
    first the tasks no other member holds state for, so the tasks it gives up go where
    their state is when they can (a worker that rejoins gets back the tasks it has
    local state for, instead of restoring others from their changelogs)."""
    taken = {m: 0 for m in quota}

    def warm_elsewhere(task: str) -> int:
        return sum(1 for m in quota if task in members[m].local and task not in members[m].active)

    def put(task: str, candidates: Iterable[str]) -> None:
        open_ = [m for m in candidates if taken[m] < quota[m]]
        if open_:
            chosen = min(open_, key=lambda m: (len(active[m]), m))
            active[chosen].append(task)
            owner[task] = chosen
            taken[chosen] += 1

    for task in sorted(tasks, key=warm_elsewhere):  # 1. stay where it ran (stable: in order otherwise)
        put(task, (m for m in quota if task in members[m].active))
    for task in tasks:  # 2. go where its state is
        if task not in owner:
            put(task, (m for m in quota if task in members[m].local))
    for task in tasks:  # 3. balance the rest
        if task not in owner:
            put(task, quota)


def task_order(task_id: str) -> Tuple[int, int]:
    """Sort key of a task id ``<sub-topology>_<partition>``: numeric order."""
    return parse_task_id(task_id)


def plan_fingerprint(tasks: Mapping[str, Tuple[TopicPartition, ...]]) -> str:
    """A short stable digest of a task plan."""
    text = ";".join(f"{t}:{','.join(f'{tp.topic}/{tp.partition}' for tp in tps)}"
                    for t, tps in sorted(tasks.items()))
    return hashlib.sha1(text.encode()).hexdigest()[:12]
