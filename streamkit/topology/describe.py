"""Human-readable views of a topology: text in the spirit of Kafka Streams, and mermaid."""
from __future__ import annotations

from typing import List

from .model import Topology
from .nodes import AggregateNode, Node, ProcessNode, SinkNode, SourceNode, TableAggregateNode


def _detail(node: Node) -> str:
    if isinstance(node, (AggregateNode, TableAggregateNode)):
        return f"{node.kind}: {node.operation}"
    if isinstance(node, ProcessNode):
        return f"process: {node.processor.display_name}"
    return node.kind


def describe_text(topology: Topology) -> str:
    """Sub-topologies with their sources, processors (and stores) and sinks."""
    lines: List[str] = [f"Topology: {topology.app_id}"]
    for sub in topology.sub_topologies:
        lines.append(f"  Sub-topology: {sub.id}")
        for name in sub.node_names:
            node = topology.nodes[name]
            if isinstance(node, SourceNode):
                lines.append(f"    Source: {name} (topic: {node.topic})")
            elif isinstance(node, SinkNode):
                lines.append(f"    Sink: {name} (topic: {node.topic})")
            else:
                stores = f", stores: [{', '.join(node.stores)}]" if node.stores else ""
                lines.append(f"    Processor: {name} ({_detail(node)}{stores})")
            children = topology.children[name]
            if children:
                lines.append(f"      --> {', '.join(children)}")
            if node.parents:
                lines.append(f"      <-- {', '.join(node.parents)}")
    if topology.stores:
        lines.append("  Stores:")
        for name, spec in topology.stores.items():
            log = (f"changelog: {topology.changelog_topic(name)}" if spec.changelog
                   else "no changelog (rebuilt from input on loss)")
            lines.append(f"    {name} ({spec.kind}, {log})")
    return "\n".join(lines) + "\n"


def _mermaid_id(prefix: str, name: str) -> str:
    return prefix + "".join(c if c.isalnum() else "_" for c in name)


def describe_mermaid(topology: Topology) -> str:
    """A ``flowchart LR``: topics as stadiums, stores as cylinders, a subgraph per sub-topology."""
    lines = ["flowchart LR"]
    topics = set()
    for sub in topology.sub_topologies:
        lines.append(f'  subgraph sub{sub.id}["Sub-topology {sub.id}"]')
        for name in sub.node_names:
            node = topology.nodes[name]
            lines.append(f'    {_mermaid_id("n_", name)}["{name}<br/>{_detail(node)}"]')
        lines.append("  end")
        for name in sub.node_names:
            node = topology.nodes[name]
            nid = _mermaid_id("n_", name)
            for parent in node.parents:
                lines.append(f"  {_mermaid_id('n_', parent)} --> {nid}")
            if isinstance(node, SourceNode):
                topics.add(node.topic)
                lines.append(f"  {_mermaid_id('t_', node.topic)} --> {nid}")
            elif isinstance(node, SinkNode):
                topics.add(node.topic)
                lines.append(f"  {nid} --> {_mermaid_id('t_', node.topic)}")
            for store in node.stores:
                lines.append(f"  {nid} -.- {_mermaid_id('s_', store)}")
    for topic in sorted(topics):
        lines.append(f'  {_mermaid_id("t_", topic)}(["{topic}"])')
    for store in topology.stores:
        lines.append(f'  {_mermaid_id("s_", store)}[("{store}")]')
    return "\n".join(lines) + "\n"
