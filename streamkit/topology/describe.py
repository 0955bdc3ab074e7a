"""Human-readable views of a topology: text in the spirit of Kafka Streams, and mermaid.

Imported by :mod:`.model` (``Topology.describe``), so it reads a topology through the
:class:`DescribedTopology` protocol rather than importing the model back.
"""
from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any, List, Mapping, Protocol, Sequence, Tuple

from ..core.units import duration_text
from .nodes import (AggregateNode, ExternalSinkNode, ForeignKeySubscribeNode, GlobalTableJoinNode, Node, ProcessNode, SinkNode,
                    SourceNode, StreamStreamJoinNode, StreamTableJoinNode, SuppressNode, TableAggregateNode,
                    TableTableJoinNode, WindowAggregationNode)


class DescribedTopology(Protocol):
    """What describing reads of a :class:`~streamkit.topology.model.Topology`."""

    @property
    def app_id(self) -> str: ...
    @property
    def nodes(self) -> Mapping[str, Node]: ...
    @property
    def children(self) -> Mapping[str, Tuple[str, ...]]: ...
    @property
    def sub_topologies(self) -> Sequence[Any]: ...
    @property
    def stores(self) -> Mapping[str, Any]: ...
    @property
    def global_tables(self) -> Mapping[str, str]: ...

    def changelog_topic(self, store: str) -> str: ...


def _windows_text(windows: object) -> str:
    """``TumblingWindows(size=1m, grace=3650d)``: the window's timedelta fields in exact human units."""
    parts = []
    for field in dataclasses.fields(windows):  # type: ignore[arg-type]
        value = getattr(windows, field.name)
        if field.init and isinstance(value, timedelta):
            parts.append(f"{field.name}={duration_text(value.total_seconds(), exact=True)}")
    return f"{type(windows).__name__}({', '.join(parts)})"


def _ms_text(milliseconds: int) -> str:
    return duration_text(milliseconds / 1000, exact=True)


def _detail(node: Node) -> str:
    if isinstance(node, (AggregateNode, TableAggregateNode)):
        return f"{node.kind}: {node.aggregation.name}"
    if isinstance(node, WindowAggregationNode):
        return f"{node.kind}: {node.aggregation.name}, {_windows_text(node.windows)}"
    if isinstance(node, SuppressNode):
        return f"{node.kind}: {node.suppressed.mode}"
    if isinstance(node, StreamTableJoinNode):
        return f"{'left ' if node.left else ''}join with table {node.table}"
    if isinstance(node, StreamStreamJoinNode):
        w = node.windows
        return (f"{node.how} join of streams, JoinWindows(before={_ms_text(w.before_ms)}, "
                f"after={_ms_text(w.after_ms)}, grace={_ms_text(w.grace_ms)})")
    if isinstance(node, TableTableJoinNode):
        return f"{node.how} join of tables"
    if isinstance(node, GlobalTableJoinNode):
        return f"{'left ' if node.left else ''}join with global table {node.global_store}"
    if isinstance(node, ForeignKeySubscribeNode):
        return "foreign-key join: subscribe"
    if isinstance(node, ProcessNode):
        return f"process: {node.processor.display_name}"
    if isinstance(node, ExternalSinkNode):
        return f"sink: {node.sink.describe()}"
    return node.kind


def describe_text(topology: DescribedTopology) -> str:
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
            elif isinstance(node, ExternalSinkNode):
                lines.append(f"    Sink: {name} ({node.sink.describe()})")
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
                   else "no changelog: rebuilt from the input topics when local state is lost")
            lines.append(f"    {name} ({spec.kind}, {log})")
    if topology.global_tables:
        lines.append("  Global tables (every partition on every worker):")
        for name, topic in topology.global_tables.items():
            lines.append(f"    {name} (topic: {topic})")
    return "\n".join(lines) + "\n"


def describe_mermaid(topology: DescribedTopology) -> str:
    """A ``flowchart LR``: topics as stadiums, stores as cylinders, a subgraph per sub-topology;
    a global table is a cylinder fed by its topic (all partitions), with a dotted lookup edge
    to each join that reads it."""
    ids: dict = {}
    used: set = set()

    def mid(kind: str, name: str) -> str:
        """A readable id (``n_page_counts``); a suffix keeps distinct names apart."""
        if (kind, name) not in ids:
            base = f"{kind}_" + "".join(c if c.isalnum() else "_" for c in name)
            candidate, n = base, 1
            while candidate in used:
                n += 1
                candidate = f"{base}_{n}"
            used.add(candidate)
            ids[(kind, name)] = candidate
        return ids[(kind, name)]

    lines = ["flowchart LR"]
    topics: List[str] = []
    externals: List[tuple] = []
    edges: List[str] = []
    for sub in topology.sub_topologies:
        lines.append(f'  subgraph sub{sub.id}["Sub-topology {sub.id}"]')
        for name in sub.node_names:
            node = topology.nodes[name]
            lines.append(f'    {mid("n", name)}["{name}<br/>{_detail(node)}"]')
            for parent in node.parents:
                edges.append(f"  {mid('n', parent)} --> {mid('n', name)}")
            if isinstance(node, SourceNode):
                topics.append(node.topic)
                edges.append(f"  {mid('t', node.topic)} --> {mid('n', name)}")
            elif isinstance(node, SinkNode):
                topics.append(node.topic)
                edges.append(f"  {mid('n', name)} --> {mid('t', node.topic)}")
            elif isinstance(node, ExternalSinkNode):
                externals.append((mid("x", name), node.sink.describe()))
                edges.append(f"  {mid('n', name)} --> {mid('x', name)}")
            for store in node.stores:
                edges.append(f"  {mid('n', name)} -.- {mid('s', store)}")
            global_store = getattr(node, "global_store", "")
            if global_store:  # a join reads a global table: every partition, on every worker
                edges.append(f"  {mid('g', global_store)} -.->|lookup| {mid('n', name)}")
        lines.append("  end")
    for name, topic in topology.global_tables.items():
        topics.append(topic)
        edges.append(f"  {mid('t', topic)} -->|all partitions| {mid('g', name)}")
    for topic in sorted(set(topics)):
        lines.append(f'  {mid("t", topic)}(["{topic}"])')
    for store in topology.stores:
        lines.append(f'  {mid("s", store)}[("{store}")]')
    for name in topology.global_tables:
        lines.append(f'  {mid("g", name)}[("{name}<br/>global table")]')
    for node_id, text in externals:
        lines.append(f'  {node_id}[/"{text}"/]')
    return "\n".join(lines + edges) + "\n"
