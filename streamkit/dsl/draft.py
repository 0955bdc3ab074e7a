"""The mutable list of IR nodes the DSL appends to while a topology function runs."""
from __future__ import annotations

import inspect
from typing import Dict, List, Mapping, Optional, Sequence, Union

from ..errors import TopologyError
from ..serdes import Serde
from ..stores import StoreSpec
from ..topics import TopicSpec, check_topic_name
from ..topology.nodes import Node


class TopologyDraft:
    """Collects nodes, stores and topics; enforces unique names."""

    def __init__(self, app_id: str, declared_topics: Mapping[str, TopicSpec],
                 default_key_serde: Serde, default_value_serde: Serde) -> None:
        self.app_id = app_id
        self.declared_topics = declared_topics
        self.default_key_serde = default_key_serde
        self.default_value_serde = default_value_serde
        self.nodes: List[Node] = []
        self.names: Dict[str, Node] = {}
        self.stores: Dict[str, StoreSpec] = {}
        self.topics: Dict[str, TopicSpec] = {}
        self.global_tables: Dict[str, str] = {}
        """Global table stores by name: the topic each one replicates."""

    def append(self, node: Node) -> Node:
        if node.name in self.names:
            raise TopologyError(
                f"name '{node.name}' is used twice in app '{self.app_id}' "
                f"({self.names[node.name].kind} and {node.kind}): give each operation a distinct name=")
        self.names[node.name] = node
        self.nodes.append(node)
        return node

    def add_source(self, node: Node) -> Node:
        """Append a source node; a topic may be read once (reuse the stream object instead)."""
        topic = getattr(node, "topic")
        for store, global_topic in self.global_tables.items():
            if global_topic == topic:
                raise TopologyError(f"topic '{topic}' is read both as a stream/table and as a global table "
                                    f"('{store}'): read it once")
        for existing in self.nodes:
            if getattr(existing, "topic", None) == getattr(node, "topic") and existing.kind == "source":
                raise TopologyError(
                    f"topic '{node.topic}' is read twice (nodes '{existing.name}' and '{node.name}'): call "  # type: ignore[attr-defined]
                    "b.stream()/b.table() once per topic and reuse the returned object")
        return self.append(node)

    def add_global_table(self, store: str, topic: str) -> None:
        """Register a global table; a topic is read once, and store names are unique."""
        for existing_store, existing_topic in self.global_tables.items():
            if existing_topic == topic:
                raise TopologyError(f"topic '{topic}' is read as a global table twice ('{existing_store}' and "
                                    f"'{store}'): call b.global_table() once and reuse the returned object")
        if store in self.global_tables or store in self.stores:
            raise TopologyError(f"store name '{store}' is used twice: give the global table another name=")
        if any(getattr(node, "topic", None) == topic and node.kind == "source" for node in self.nodes):
            raise TopologyError(f"topic '{topic}' is read both as a stream/table and as a global table")
        self.global_tables[store] = topic

    def source_key_serde(self, node_name: str) -> Optional[Serde]:
        """The key serde of the topic the keys of ``node_name`` come from unchanged, or None
        if an operation on the way may have changed them (or the inputs disagree)."""
        node = self.names[node_name]
        if node.kind == "source":
            return getattr(node, "key_serde", None)
        if node.changes_key or node.stateful or not node.parents:
            return None
        found = [self.source_key_serde(parent) for parent in node.parents]
        return found[0] if all(serde is not None and serde == found[0] for serde in found) else None

    def name_for(self, explicit: Optional[str], parent: str, kind: str) -> str:
        """``explicit`` if given, else ``<parent>.<kind>`` (``-2``, ``-3`` … for siblings)."""
        if explicit is not None:
            if not isinstance(explicit, str) or not explicit:
                raise TopologyError(f"name= must be a non-empty string, got {explicit!r}")
            return explicit
        base = f"{parent}.{kind}"
        name, n = base, 1
        while name in self.names:
            n += 1
            name = f"{base}-{n}"
        return name

    def add_store(self, spec: StoreSpec, owner: str) -> None:
        if spec.name in self.global_tables:
            raise TopologyError(f"store name '{spec.name}' is used twice: it is the global table of topic "
                                f"'{self.global_tables[spec.name]}' (at '{owner}'); give the store another name")
        existing = self.stores.get(spec.name)
        if existing is not None and existing != spec:
            raise TopologyError(
                f"store '{spec.name}' is declared twice with different settings (at '{owner}'): "
                "give each store a distinct name")
        self.stores[spec.name] = spec

    def resolve_topic(self, topic: Union[str, TopicSpec], key_serde: Optional[Serde] = None,
                      value_serde: Optional[Serde] = None) -> TopicSpec:
        """The spec of a topic given by name or spec; explicit serdes win over declared ones."""
        if isinstance(topic, TopicSpec):
            spec = topic
        elif isinstance(topic, str):
            check_topic_name(topic)
            spec = self.declared_topics.get(topic) or TopicSpec(
                topic, self.default_key_serde, self.default_value_serde)
        else:
            raise TopologyError(f"expected a topic name or app.topic(...), got {topic!r}")
        if key_serde is not None or value_serde is not None:
            spec = TopicSpec(spec.name, key_serde or spec.key_serde, value_serde or spec.value_serde,
                             spec.partitions, spec.config)
        self.topics.setdefault(spec.name, spec)
        return spec


def check_callable(fn: object, what: str, params: Sequence[str], node: str) -> None:
    """Fail early, naming the operation, if ``fn`` cannot be called with ``params``."""
    if not callable(fn):
        raise TopologyError(f"{node}: {what} must be callable, got {fn!r}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature: trust them
        return
    try:
        signature.bind(*params)
    except TypeError:
        raise TopologyError(
            f"{node}: {what} must accept ({', '.join(params)}), but its signature is {signature}") from None


def check_value_of(value_of: object, node: str) -> None:
    """Fail early unless ``value_of`` names a field (a non-empty str) or is ``fn(value)``."""
    if isinstance(value_of, str):
        if not value_of:
            raise TopologyError(f"{node}: the field name must not be empty")
        return
    check_callable(value_of, "value function", ("value",), node)


def check_serde(serde: object, what: str) -> None:
    if serde is not None and not isinstance(serde, Serde):
        raise TopologyError(f"{what} must be a serde such as sk.serdes.Json(), got {serde!r}")
