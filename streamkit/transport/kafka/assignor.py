"""The group's partition assignor: assigns whole tasks, sticky, with standby replicas.

Kafka's own assignors hand out partitions one by one; a streamkit task reads one
partition of every input topic of its sub-topology (co-partitioned), so the
leader assigns tasks and gives each member all of its tasks' input partitions.
Members tell the leader (in their JoinGroup user data) which tasks they ran and
which they hold local state for; the leader places the tasks by the rule the
embedded broker's workers share (see ../task_assignment.py).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple

import orjson
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

from ..base import TaskAssignment, TopicPartition
from ..task_assignment import VERSION, MemberState, assign_tasks, plan_fingerprint, task_order

__all__ = ["PROTOCOL_NAME", "MemberState", "TaskAssignor", "assign_tasks", "decode_assignment",
           "encode_assignment", "endpoint_maps", "plan_fingerprint"]

log = logging.getLogger(__name__)

PROTOCOL_NAME = "streamkit-tasks"


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
        placed = assign_tasks(sorted(usable, key=task_order), states, self.standby_replicas, self.stateful)
        endpoints, standby_endpoints = endpoint_maps(placed, states)
        out = {}
        for member in members:
            assignment = placed.get(member, TaskAssignment())
            assignment = TaskAssignment(assignment.active, assignment.standby, error, endpoints, standby_endpoints)
            by_topic: Dict[str, List[int]] = {}
            for task in sorted(assignment.active, key=task_order):
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
