"""Binding serdes to the topics they meet, once, before a backend runs a topology.

Some serdes write bytes that depend on the topic: a Schema Registry serde registers
its schema under ``<topic>-key``/``<topic>-value`` and finds ``registry="embedded"``
on the app's broker. :func:`bind_serdes` asks every serde of a topology for its copy
for each place it is used (:meth:`streamkit.serdes.Serde.for_topic`):

- source and sink nodes (user, repartition and ``to()`` topics): their topic;
- declared topics (``app.topic``, internal ones): their topic;
- stores: their changelog topic ``<app-id>-<store>-changelog`` (changelogged or not,
  as Kafka Streams names a store's serde topic);
- other nodes' serdes (joins, aggregations: they encode store contents): the
  changelog topic of the store they encode (``left_*``/``right_*``/``other_*`` fields
  that of the matching side's store, others the node's first store), keys as keys.

Plain serdes return themselves, so a topology without registry serdes comes back
unchanged (the same object).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Mapping, Optional

from ..core.names import changelog_topic
from ..serdes import Serde
from ..stores import StoreSpec
from ..topics import TopicSpec
from .model import Topology
from .nodes import Node, SinkNode, SourceNode

__all__ = ["bind_serdes"]


class _Binder:
    def __init__(self, app_id: str, broker: Optional[str]) -> None:
        self.app_id = app_id
        self.broker = broker
        self.changed = False

    def serde(self, serde: Optional[Serde], topic: str, is_key: bool) -> Optional[Serde]:
        if serde is None or not isinstance(serde, Serde):
            return serde
        bound = serde.for_topic(topic, is_key, broker=self.broker)
        if bound is not serde:
            self.changed = True
        return bound

    def node(self, node: Node) -> Node:
        if isinstance(node, (SourceNode, SinkNode)):
            if not node.topic:
                return node
            return dataclasses.replace(node, key_serde=self.serde(node.key_serde, node.topic, True),
                                       value_serde=self.serde(node.value_serde, node.topic, False))
        if not node.stores:
            return node
        changes = {}
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if isinstance(value, Serde):
                topic = changelog_topic(self.app_id, _store_of(node, f.name))
                bound = self.serde(value, topic, "key" in f.name)
                if bound is not value:
                    changes[f.name] = bound
        return dataclasses.replace(node, **changes) if changes else node

    def topic(self, spec: TopicSpec) -> TopicSpec:
        key, value = self.serde(spec.key_serde, spec.name, True), self.serde(spec.value_serde, spec.name, False)
        if key is spec.key_serde and value is spec.value_serde:
            return spec
        return dataclasses.replace(spec, key_serde=key, value_serde=value)

    def store(self, spec: StoreSpec) -> StoreSpec:
        topic = changelog_topic(self.app_id, spec.name)
        key, value = self.serde(spec.key_serde, topic, True), self.serde(spec.value_serde, topic, False)
        if key is spec.key_serde and value is spec.value_serde:
            return spec
        return dataclasses.replace(spec, key_serde=key, value_serde=value)


def _store_of(node: Node, field_name: str) -> str:
    """The store whose contents a node's serde field encodes: ``left_*``/``right_*`` fields
    that of the node's ``left_store``/``right_store``, ``other_*`` the right side's (a
    stream-stream join's second input), anything else the node's first store."""
    side = "right" if field_name.startswith("other_") else field_name.split("_", 1)[0]
    store = getattr(node, f"{side}_store", None) if side in ("left", "right") else None
    return store if isinstance(store, str) and store in node.stores else node.stores[0]


def bind_serdes(topology: Topology, broker: Optional[str]) -> Topology:
    """``topology`` with each serde replaced by its copy for the topic it is used on;
    ``broker`` is the URL of the broker the app runs on (where ``registry="embedded"``
    lives). Returns ``topology`` itself when no serde depends on its topic."""
    binder = _Binder(topology.app_id, broker)
    nodes: Dict[str, Node] = {name: binder.node(node) for name, node in topology.nodes.items()}
    logical: Dict[str, Node] = {name: binder.node(node) for name, node in topology.logical_nodes.items()}
    topics: Mapping[str, TopicSpec] = {name: binder.topic(spec) for name, spec in topology.topics.items()}
    stores: Mapping[str, StoreSpec] = {name: binder.store(spec) for name, spec in topology.stores.items()}
    if not binder.changed:
        return topology
    return dataclasses.replace(topology, nodes=nodes, logical_nodes=logical, topics=topics, stores=stores)
