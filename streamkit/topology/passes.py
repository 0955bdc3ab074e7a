"""Passes from the DSL's node list to a physical topology. Each is a plain function."""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..core.names import REPARTITION_SUFFIX, changelog_topic, internal_topic
from ..errors import TopologyError
from ..serdes import Bytes, Json
from ..stores import WINDOWED_KINDS, StoreSpec
from ..topics import TopicSpec
from .change_serde import ChangeSerde
from .model import SubTopology, Topology
from .nodes import (ForeignKeyJoinNode, ForeignKeySubscriptionNode, Node, RepartitionNode, SinkNode, SourceNode,
                    StreamStreamJoinNode, StreamTableJoinNode, TableAggregateNode, TableTableJoinNode)

JOINS = (StreamTableJoinNode, StreamStreamJoinNode, TableTableJoinNode, ForeignKeyJoinNode,
         ForeignKeySubscriptionNode)
"""Nodes whose inputs must be co-partitioned."""


def build_topology(app_id: str, nodes: Sequence[Node], stores: Mapping[str, StoreSpec],
                   topics: Mapping[str, TopicSpec], global_tables: Optional[Mapping[str, str]] = None) -> Topology:
    """Run every pass in order and return the immutable topology."""
    if not nodes:
        raise TopologyError(
            f"app '{app_id}' has an empty topology: decorate a function with @app.topology "
            "and read a topic in it with b.stream(...) or b.table(...)")
    check_unique_sources(nodes)
    logical = insert_repartitions(nodes)
    physical, sub_topologies = split_sub_topologies(app_id, logical)
    all_topics = dict(topics)
    for node in physical:
        if isinstance(node, SinkNode) and node.topic.startswith(f"{app_id}-") and node.topic not in all_topics:
            rep = next(n for n in logical if n.name == node.name)
            assert isinstance(rep, RepartitionNode)
            all_topics[node.topic] = TopicSpec(node.topic, node.key_serde, node.value_serde,
                                               partitions=rep.partitions, config=dict(REPARTITION_CONFIG),
                                               internal=True)
    for store in stores.values():
        if store.changelog:
            topic = changelog_topic(app_id, store.name)
            all_topics[topic] = TopicSpec(topic, Bytes(), Bytes(), config=changelog_config(store), internal=True)
    children: Dict[str, List[str]] = {n.name: [] for n in physical}
    for node in physical:
        for parent in node.parents:
            children[parent].append(node.name)
    return Topology(
        app_id=app_id,
        logical_nodes={n.name: n for n in logical},
        nodes={n.name: n for n in physical},
        children={k: tuple(v) for k, v in children.items()},
        sub_topologies=sub_topologies,
        stores=dict(stores),
        topics=all_topics,
        global_tables=dict(global_tables or {}),
    )


CHANGELOG_EXTRA_RETENTION_MS = 24 * 60 * 60 * 1000
"""How much longer than its store a window changelog keeps records (Kafka Streams' default)."""


REPARTITION_CONFIG: Mapping[str, str] = {"retention.ms": "-1"}
"""A repartition topic keeps its records until the app purges them below its committed
offsets (as Kafka Streams does): time retention never deletes one before it is read."""


def changelog_config(store: StoreSpec) -> Dict[str, str]:
    """A changelog is compacted; a window or session store's is also deleted after the
    store's retention (plus a day), as its windows are dropped by then anyway."""
    if store.kind in WINDOWED_KINDS:
        assert store.retention_ms is not None
        return {"cleanup.policy": "compact,delete",
                "retention.ms": str(store.retention_ms + CHANGELOG_EXTRA_RETENTION_MS)}
    return {"cleanup.policy": "compact"}


def check_unique_sources(nodes: Sequence[Node]) -> None:
    """A topic may be read by one source node only (reuse the stream object instead)."""
    seen: Dict[str, str] = {}
    for node in nodes:
        if isinstance(node, SourceNode):
            if node.topic in seen:
                raise TopologyError(
                    f"topic '{node.topic}' is read twice (nodes '{seen[node.topic]}' and '{node.name}'): "
                    "call b.stream()/b.table() once per topic and reuse the returned object")
            seen[node.topic] = node.name


def insert_repartitions(nodes: Sequence[Node]) -> List[Node]:
    """Put a repartition node before each stateful node whose input may have a new key.

    A key is "changed" after map/flat_map/select_key/group_by and stays changed
    through stateless nodes (and merges, if any input changed it) until a source,
    a repartition or a stateful node.
    """
    key_changed: Dict[str, bool] = {}
    out: List[Node] = []
    for node in nodes:
        if isinstance(node, StreamStreamJoinNode) and any(key_changed.get(p, False) for p in node.parents):
            parents = []
            for side, parent, values in zip(("left", "right"), node.parents,
                                            (node.value_serde, node.other_value_serde)):
                if not key_changed.get(parent, False):
                    parents.append(parent)
                    continue
                rep_name = f"{node.name}-{side}-{REPARTITION_SUFFIX}"
                out.append(RepartitionNode(rep_name, (parent,), topic_suffix=rep_name,
                                           key_serde=node.key_serde or Json(), value_serde=values or Json()))
                key_changed[rep_name] = False
                parents.append(rep_name)
            node = dataclasses.replace(node, parents=tuple(parents))
        elif node.stateful and any(key_changed.get(p, False) for p in node.parents):
            rep_name = f"{node.name}-{REPARTITION_SUFFIX}"
            carries_changes = isinstance(node, TableAggregateNode)
            key_serde = getattr(node, "key_serde", None) or Json()
            value_serde = getattr(node, "value_serde", None) or Json()
            rep = RepartitionNode(rep_name, node.parents, topic_suffix=rep_name, key_serde=key_serde,
                                  value_serde=value_serde, carries_changes=carries_changes)
            out.append(rep)
            key_changed[rep_name] = False
            node = dataclasses.replace(node, parents=(rep_name,))
        if isinstance(node, (SourceNode, RepartitionNode)) or node.stateful:
            key_changed[node.name] = False
        elif node.changes_key:
            key_changed[node.name] = True
        else:
            key_changed[node.name] = any(key_changed.get(p, False) for p in node.parents)
        out.append(node)
    return out


def split_sub_topologies(app_id: str, nodes: Sequence[Node]) -> Tuple[List[Node], Tuple[SubTopology, ...]]:
    """Cut the graph at repartition nodes and number the connected parts.

    Each repartition node becomes a sink to ``<app-id>-<name>`` (same node name)
    and a source ``<name>-source`` reading it. Sub-topologies are numbered in
    the order their first node was defined; nodes sharing a store stay together.
    """
    physical: List[Node] = []
    renamed: Dict[str, str] = {}
    for node in nodes:
        if isinstance(node, RepartitionNode):
            topic = internal_topic(app_id, node.topic_suffix)
            value_serde = ChangeSerde(node.value_serde) if node.carries_changes else node.value_serde
            physical.append(SinkNode(node.name, node.parents, topic=topic, key_serde=node.key_serde,
                                     value_serde=value_serde))
            source_name = f"{node.name}-source"
            physical.append(SourceNode(source_name, (), topic=topic, key_serde=node.key_serde,
                                       value_serde=value_serde, internal=True,
                                       carries_changes=node.carries_changes))
            renamed[node.name] = source_name
        elif any(p in renamed for p in node.parents):
            physical.append(dataclasses.replace(node, parents=tuple(renamed.get(p, p) for p in node.parents)))
        else:
            physical.append(node)

    parent_of: Dict[str, str] = {n.name: n.name for n in physical}

    def find(name: str) -> str:
        while parent_of[name] != name:
            parent_of[name] = parent_of[parent_of[name]]
            name = parent_of[name]
        return name

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent_of[rb] = ra

    store_owner: Dict[str, str] = {}
    for node in physical:
        for parent in node.parents:
            union(node.name, parent)
        for store in node.stores:
            if store in store_owner:
                union(node.name, store_owner[store])
            else:
                store_owner[store] = node.name

    groups: Dict[str, List[Node]] = {}
    for node in physical:
        groups.setdefault(find(node.name), []).append(node)
    subs = []
    for index, members in enumerate(groups.values()):  # dict order = first definition order
        subs.append(SubTopology(
            id=index,
            node_names=tuple(n.name for n in members),
            source_topics=tuple(n.topic for n in members if isinstance(n, SourceNode)),
            sink_topics=tuple(dict.fromkeys(n.topic for n in members if isinstance(n, SinkNode))),
            store_names=tuple(dict.fromkeys(s for n in members for s in n.stores)),
        ))
    return physical, tuple(subs)


def resolve_partitions(topology: Topology, existing: Mapping[str, int]) -> Dict[str, int]:
    """The partition count of every topic the topology touches.

    ``existing`` holds the counts of topics already on the broker. Sources must
    exist or be declared with ``partitions=``; a repartition topic gets its
    declared count or its upstream task count; an undeclared sink topic gets the
    task count of the sub-topology writing it. Repartition topics feeding one join
    get one count: the largest of them.
    """
    forced: Dict[str, int] = {}
    while True:
        try:
            return _resolve_partitions(topology, existing, forced)
        except _Widen as widen:
            forced.update(widen.counts)


class _Widen(Exception):
    """Join inputs that are all repartition topics came out with different counts: retry
    with each set to the largest."""

    def __init__(self, counts: Dict[str, int]) -> None:
        super().__init__()
        self.counts = counts


def _resolve_partitions(topology: Topology, existing: Mapping[str, int], forced: Mapping[str, int]) -> Dict[str, int]:
    counts: Dict[str, int] = dict(forced)

    def known(topic: str) -> int | None:
        if topic in existing:
            return existing[topic]
        if topic in counts:
            return counts[topic]
        spec = topology.topics.get(topic)
        return spec.partitions if spec is not None else None

    # A join's repartition input takes the partition count of the join's other inputs
    # (co-partitioning), unless it declares its own.
    joins = [sub for sub in topology.sub_topologies if _join_in(topology, sub) is not None]
    for sub in joins:
        external = [known(t) for t in sub.source_topics if not _internal(topology, t)]
        if external and all(n is not None for n in external):
            for topic in sub.source_topics:
                if _internal(topology, topic) and topology.topics[topic].partitions is None:
                    counts[topic] = max(external)  # type: ignore[type-var]

    for store, topic in topology.global_tables.items():
        count = known(topic)
        if count is None:
            raise TopologyError(
                f"global table '{store}' reads topic '{topic}', which does not exist on the broker and has "
                f"no partition count; create it or declare it with app.topic('{topic}', partitions=N)")
        counts[topic] = count

    # Visit sub-topologies once their inputs are known: a repartition topic's count
    # comes from the sub-topology writing it, which may have a higher id.
    pending = list(topology.sub_topologies)
    while pending:
        ready = [sub for sub in pending if all(known(t) is not None for t in sub.source_topics)]
        if not ready:
            sub = pending[0]
            topic = next(t for t in sub.source_topics if known(t) is None)
            raise TopologyError(
                f"unknown topic '{topic}': it does not exist on the broker and has no partition count; "
                f"create it (streamkit topics create {topic} --partitions N) or declare it with "
                f"app.topic('{topic}', partitions=N)")
        for sub in ready:
            pending.remove(sub)
            for topic in sub.source_topics:
                counts[topic] = known(topic)  # type: ignore[assignment]
            join = _join_in(topology, sub)
            if join is not None and len({counts[t] for t in sub.source_topics}) > 1:
                widest = max(counts[t] for t in sub.source_topics)
                narrow = [t for t in sub.source_topics if counts[t] != widest]
                if all(_internal(topology, t) and topology.topics[t].partitions is None and t not in forced
                       for t in narrow):
                    raise _Widen({t: widest for t in narrow})
                inputs = " and ".join(f"'{t}' ({counts[t]} partitions)" for t in sub.source_topics)
                raise TopologyError(
                    f"join '{join}' reads {inputs}: joined inputs must have the same partition count "
                    "(co-partitioned) so that a key meets its partner on one task; write "
                    f".repartition(partitions={max(counts[t] for t in sub.source_topics)}) before the join, "
                    "or recreate a topic with the other's count")
            tasks = max(counts[t] for t in sub.source_topics)
            written = [node.topic for node in topology.sink_nodes(sub)]
            written += [topology.nodes[name].late_records_topic for name in sub.node_names  # type: ignore[attr-defined]
                        if getattr(topology.nodes[name], "late_records_topic", None)]
            for topic in written:
                count = known(topic)
                counts[topic] = count if count is not None else tasks
            for store in sub.store_names:
                if topology.stores[store].changelog:
                    changelog = topology.changelog_topic(store)
                    if changelog in existing and existing[changelog] != tasks:
                        raise TopologyError(
                            f"changelog topic '{changelog}' has {existing[changelog]} partitions but its "
                            f"sub-topology has {tasks} tasks: the input's partition count changed; "
                            "delete the changelog topic and the app's state directory to rebuild it")
                    counts[changelog] = tasks
    return counts


def _join_in(topology: Topology, sub: SubTopology) -> Optional[str]:
    """The name of a join in ``sub``, if it has one."""
    return next((name for name in sub.node_names if isinstance(topology.nodes[name], JOINS)), None)


def _internal(topology: Topology, topic: str) -> bool:
    spec = topology.topics.get(topic)
    return spec is not None and spec.internal


def tasks_of(topology: Topology, partitions: Mapping[str, int]) -> List[Tuple[int, int]]:
    """Every (sub-topology id, partition) task: one per partition of its widest source."""
    out = []
    for sub in topology.sub_topologies:
        for partition in range(max(partitions[t] for t in sub.source_topics)):
            out.append((sub.id, partition))
    return out
