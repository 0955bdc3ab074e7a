"""The built topology: immutable data every backend walks."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple

from ..core.names import changelog_topic, is_changelog_topic, is_repartition_topic
from ..stores import StoreSpec
from ..topics import TopicSpec
from .describe import describe_mermaid, describe_text
from .nodes import Node, SinkNode, SourceNode


@dataclass(frozen=True)
class SubTopology:
    """Nodes connected without a topic in between; one task per input partition."""

    id: int
    node_names: Tuple[str, ...]
    source_topics: Tuple[str, ...]
    sink_topics: Tuple[str, ...]
    store_names: Tuple[str, ...]


@dataclass(frozen=True)
class Topology:
    """An app's dataflow, before and after the physical rewrite.

    ``logical_nodes`` is the DAG as the DSL built it (with repartition nodes);
    ``nodes`` is the physical graph, where each repartition became a sink and a
    source, split into ``sub_topologies``.
    """

    app_id: str
    logical_nodes: Mapping[str, Node]
    nodes: Mapping[str, Node]
    children: Mapping[str, Tuple[str, ...]]
    sub_topologies: Tuple[SubTopology, ...]
    stores: Mapping[str, StoreSpec]
    topics: Mapping[str, TopicSpec]
    """Every topic the topology reads or writes, internal ones included."""
    global_tables: Mapping[str, str] = field(default_factory=dict)
    """Global table stores by name: the topic each one replicates (read by every worker)."""

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def sub_topology_of_topic(self, topic: str) -> Optional[SubTopology]:
        for sub in self.sub_topologies:
            if topic in sub.source_topics:
                return sub
        return None

    def source_nodes(self, sub: SubTopology) -> Dict[str, SourceNode]:
        """Source nodes of a sub-topology by topic."""
        out: Dict[str, SourceNode] = {}
        for name in sub.node_names:
            node = self.nodes[name]
            if isinstance(node, SourceNode):
                out[node.topic] = node
        return out

    def sink_nodes(self, sub: SubTopology) -> Tuple[SinkNode, ...]:
        return tuple(n for n in (self.nodes[name] for name in sub.node_names) if isinstance(n, SinkNode))

    @property
    def internal_topics(self) -> Tuple[str, ...]:
        """Repartition and changelog topics."""
        return tuple(name for name, spec in self.topics.items() if spec.internal)

    @property
    def repartition_topics(self) -> Tuple[str, ...]:
        return tuple(name for name in self.internal_topics if is_repartition_topic(name))

    @property
    def changelog_topics(self) -> Tuple[str, ...]:
        return tuple(name for name in self.internal_topics if is_changelog_topic(name))

    def changelog_topic(self, store: str) -> str:
        return changelog_topic(self.app_id, store)

    def describe(self, format: str = "text") -> str:
        """The topology as text (like Kafka Streams' describe) or a mermaid flowchart."""
        if format == "text":
            return describe_text(self)
        if format == "mermaid":
            return describe_mermaid(self)
        raise ValueError(f"unknown describe format {format!r}: use 'text' or 'mermaid'")
