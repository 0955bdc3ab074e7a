"""The IR passes: repartition insertion, sub-topology split, internal topics, partition counts."""
from __future__ import annotations

from typing import Callable, Dict, List, Tuple

import pytest

import streamkit as sk
from streamkit.errors import TopologyError
from streamkit.serdes import Json, String
from streamkit.topology import Topology
from streamkit.topology.change_serde import ChangeSerde
from streamkit.topology.nodes import (AggregateNode, RepartitionNode, SinkNode, SourceNode,
                                      TableAggregateNode)
from streamkit.topology.passes import build_topology, resolve_partitions, tasks_of


def build(fn: Callable[[sk.StreamsBuilder], None], app_id: str = "app",
          topics: Dict[str, int] | None = None) -> Topology:
    app = sk.App(app_id)
    for name, partitions in (topics or {}).items():
        app.topic(name, partitions=partitions)
    app.topology(fn)
    return app.build()


def repartitions(topology: Topology) -> List[Tuple[str, Tuple[str, ...]]]:
    """(name, parents) of every repartition node in the logical graph."""
    return [(n.name, n.parents) for n in topology.logical_nodes.values() if isinstance(n, RepartitionNode)]


# -- repartition insertion --------------------------------------------------------------------

CASES = {
    "group_by+count": (
        lambda b: b.stream("in").group_by(lambda k, v: v).count(name="c"),
        [("c-repartition", ("in.group_by",))]),
    "group_by_key-on-unchanged-key": (
        lambda b: b.stream("in").filter(lambda k, v: v).map_values(str).group_by_key().count(name="c"),
        []),
    "map_values-after-select_key": (
        lambda b: b.stream("in").select_key(lambda k, v: v).map_values(str).group_by_key().count(name="c"),
        [("c-repartition", ("in.select_key.map_values",))]),
    "filter-peek-after-map": (
        lambda b: (b.stream("in").map(lambda k, v: (v, k)).filter(lambda k, v: v).peek(print)
                   .group_by_key().reduce(max, name="c")),
        [("c-repartition", ("in.map.filter.peek",))]),
    "flat_map": (
        lambda b: b.stream("in").flat_map(lambda k, v: [(v, k)]).group_by_key().count(name="c"),
        [("c-repartition", ("in.flat_map",))]),
    "flat_map_values": (
        lambda b: b.stream("in").flat_map_values(lambda v: [v]).group_by_key().count(name="c"),
        []),
    "merge-rekeyed-and-plain": (
        lambda b: (b.stream("a").select_key(lambda k, v: v).merge(b.stream("b"), name="m")
                   .group_by_key().count(name="c")),
        [("c-repartition", ("m",))]),
    "merge-plain-and-rekeyed": (
        lambda b: (b.stream("a").merge(b.stream("b").map(lambda k, v: (v, v)), name="m")
                   .group_by_key().count(name="c")),
        [("c-repartition", ("m",))]),
    "merge-two-plain": (
        lambda b: b.stream("a").merge(b.stream("b"), name="m").group_by_key().count(name="c"),
        []),
    "split-branch-after-select_key": (
        lambda b: (b.stream("in").select_key(lambda k, v: v).split(name="s").branch(bool, name="x")
                   .default_branch()["x"].group_by_key().count(name="c")),
        [("c-repartition", ("s-x",))]),
    "explicit-repartition-instead": (
        lambda b: (b.stream("in").select_key(lambda k, v: v).repartition(name="re")
                   .group_by_key().count(name="c")),
        [("re", ("in.select_key",))]),
    "aggregate-output-is-keyed": (
        lambda b: (b.stream("in").group_by(lambda k, v: v).count(name="c").to_stream()
                   .group_by_key().count(name="c2")),
        [("c-repartition", ("in.group_by",))]),
    "stateless-only-after-select_key": (
        lambda b: b.stream("in").select_key(lambda k, v: v).to("out"),
        []),
    "table-source-aggregate": (
        lambda b: b.table("t").to_stream().group_by_key().count(name="c"),
        []),
    "table-group_by": (
        lambda b: b.table("t").group_by(lambda k, v: (v, k)).count(name="c"),
        [("c-repartition", ("t-table.group_by",))]),
    "process-after-select_key": (
        lambda b: b.stream("in").select_key(lambda k, v: v).process(_noop_processor()),
        []),
}


def _noop_processor():
    app = sk.App("helper")

    @app.processor()
    def noop(ctx, key, value):
        ctx.forward(key, value)
    return noop


@pytest.mark.parametrize("case", CASES)
def test_repartition_inserted_where_and_only_where_needed(case) -> None:
    fn, expected = CASES[case]
    assert repartitions(build(fn)) == expected


def test_repartition_rewires_the_stateful_node() -> None:
    topology = build(lambda b: b.stream("in").group_by(lambda k, v: v).count(name="c"))
    names = list(topology.logical_nodes)
    assert names == ["in", "in.group_by", "c-repartition", "c"]
    assert topology.logical_nodes["c"].parents == ("c-repartition",)
    rep = topology.logical_nodes["c-repartition"]
    assert (rep.topic_suffix, rep.key_serde, rep.value_serde, rep.carries_changes) == (
        "c-repartition", Json(), Json(), False)


def test_repartition_uses_the_grouping_serdes() -> None:
    topology = build(lambda b: b.stream("in").group_by(lambda k, v: v, key_serde=String()).count(name="c"))
    assert topology.logical_nodes["c-repartition"].key_serde == String()
    assert topology.topics["app-c-repartition"].key_serde == String()


def test_table_repartition_carries_changes() -> None:
    topology = build(lambda b: b.table("t").group_by(lambda k, v: (v, k)).count(name="c"), app_id="x")
    assert topology.logical_nodes["c-repartition"].carries_changes
    source = topology.nodes["c-repartition-source"]
    assert isinstance(source, SourceNode) and source.carries_changes and source.internal
    assert isinstance(source.value_serde, ChangeSerde)
    assert isinstance(topology.nodes["c"], TableAggregateNode)


def test_stateful_op_after_process_is_repartitioned() -> None:
    topology = build(lambda b: b.stream("in").process(_noop_processor()).group_by_key().count(name="c"))
    assert repartitions(topology) == [("c-repartition", ("in.noop",))]


# -- sub-topologies ---------------------------------------------------------------------------

def _subs(topology: Topology) -> List[tuple]:
    return [(s.id, s.node_names, s.source_topics, s.sink_topics, s.store_names) for s in topology.sub_topologies]


def test_split_at_the_repartition_topic() -> None:
    topology = build(lambda b: b.stream("in").group_by(lambda k, v: v).count(name="c").to_stream().to("out"),
                     app_id="wc")
    assert _subs(topology) == [
        (0, ("in", "in.group_by", "c-repartition"), ("in",), ("wc-c-repartition",), ()),
        (1, ("c-repartition-source", "c", "c.to_stream", "c.to_stream.to-out"), ("wc-c-repartition",),
         ("out",), ("c",)),
    ]
    sink, source = topology.nodes["c-repartition"], topology.nodes["c-repartition-source"]
    assert isinstance(sink, SinkNode) and sink.topic == "wc-c-repartition" and sink.parents == ("in.group_by",)
    assert isinstance(source, SourceNode) and source.topic == "wc-c-repartition" and source.parents == ()
    assert source.internal and not source.carries_changes
    assert topology.nodes["c"].parents == ("c-repartition-source",)
    assert topology.children["in.group_by"] == ("c-repartition",)
    assert topology.children["c-repartition"] == ()
    assert topology.children["c-repartition-source"] == ("c",)


def test_internal_topic_names_and_specs() -> None:
    topology = build(lambda b: (b.stream("in").select_key(lambda k, v: v).group_by_key().count(name="page-counts")
                                .to_stream().map(lambda k, v: (v, k)).group_by_key().reduce(max, name="top")),
                     app_id="pageviews")
    assert topology.repartition_topics == ("pageviews-page-counts-repartition", "pageviews-top-repartition")
    spec = topology.topics["pageviews-top-repartition"]
    assert spec.internal and spec.partitions is None
    assert spec.config == {"retention.ms": "-1"}  # purged by the app, never by time (as Kafka Streams)
    assert not topology.topics["in"].internal
    assert [s.id for s in topology.sub_topologies] == [0, 1, 2]
    assert topology.changelog_topic("top") == "pageviews-top-changelog"


def test_explicit_repartition_topic_and_partitions() -> None:
    topology = build(lambda b: b.stream("in").repartition(name="by-user", partitions=6).to("out"), app_id="a")
    [internal] = topology.repartition_topics
    assert internal.startswith("a-by-user")
    assert topology.topics[internal].partitions == 6
    assert len(topology.sub_topologies) == 2


def test_independent_streams_are_numbered_in_definition_order() -> None:
    def fn(b: sk.StreamsBuilder) -> None:
        b.stream("z").to("z-out")
        b.stream("a").to("a-out")
        b.stream("m").to("m-out")
    topology = build(fn)
    assert [(s.id, s.source_topics) for s in topology.sub_topologies] == [(0, ("z",)), (1, ("a",)), (2, ("m",))]


def test_merged_sources_share_a_sub_topology() -> None:
    topology = build(lambda b: b.stream("a").merge(b.stream("b")).to("out"))
    assert [(s.id, s.source_topics, s.sink_topics) for s in topology.sub_topologies] == [
        (0, ("a", "b"), ("out",))]


def test_nodes_sharing_a_store_share_a_sub_topology() -> None:
    app = sk.App("app")
    store = sk.stores.key_value("s")

    @app.processor(stores=[store])
    def p1(ctx, key, value):
        pass

    @app.processor(stores=[store])
    def p2(ctx, key, value):
        pass

    app.topology(lambda b: (b.stream("a").process(p1), b.stream("b").process(p2)))
    assert [(s.source_topics, s.store_names) for s in app.build().sub_topologies] == [(("a", "b"), ("s",))]


def test_sub_topology_helpers() -> None:
    topology = build(lambda b: b.stream("in").group_by(lambda k, v: v).count(name="c").to_stream().to("out"))
    sub0, sub1 = topology.sub_topologies
    assert topology.sub_topology_of_topic("app-c-repartition") is sub1
    assert topology.sub_topology_of_topic("in") is sub0
    assert topology.sub_topology_of_topic("out") is None
    assert list(topology.source_nodes(sub1)) == ["app-c-repartition"]
    assert [n.name for n in topology.sink_nodes(sub1)] == ["c.to_stream.to-out"]
    assert isinstance(topology.node("c"), AggregateNode)


def test_build_topology_rejects_an_empty_node_list() -> None:
    with pytest.raises(TopologyError, match="app 'x' has an empty topology"):
        build_topology("x", [], {}, {})


def test_topology_is_cached_until_the_app_changes() -> None:
    app = sk.App("app")
    app.topology(lambda b: b.stream("in").to("out"))
    first = app.build()
    assert app.build() is first
    app.topic("extra")
    assert app.build() is not first


# -- partition counts ----------------------------------------------------------------------

def test_changelog_with_another_partition_count_than_its_tasks_is_an_error() -> None:
    topology = build(lambda b: b.stream("in").group_by_key().count(name="c").to_stream().to("out"),
                     topics={"in": 3})
    with pytest.raises(TopologyError, match="changelog topic 'app-c-changelog' has 2 partitions but its "
                                            "sub-topology has 3 tasks"):
        resolve_partitions(topology, {"in": 3, "app-c-changelog": 2})


def test_unknown_source_topic_is_an_error_that_says_how_to_fix_it() -> None:
    topology = build(lambda b: b.stream("clicks").to("out"))
    with pytest.raises(TopologyError) as excinfo:
        resolve_partitions(topology, {})
    assert str(excinfo.value) == (
        "unknown topic 'clicks': it does not exist on the broker and has no partition count; "
        "create it (streamkit topics create clicks --partitions N) or declare it with "
        "app.topic('clicks', partitions=N)")


def test_partitions_of_existing_declared_and_derived_topics() -> None:
    topology = build(lambda b: b.stream("in").group_by(lambda k, v: v).count(name="c").to_stream().to("out"),
                     topics={"in": 3})
    assert resolve_partitions(topology, {}) == {"in": 3, "app-c-repartition": 3, "out": 3,
                                                "app-c-changelog": 3}
    # an existing topic's own count wins over the declaration
    assert resolve_partitions(topology, {"in": 5, "out": 2}) == {"in": 5, "app-c-repartition": 5, "out": 2,
                                                                 "app-c-changelog": 5}
    assert tasks_of(topology, resolve_partitions(topology, {})) == [(0, 0), (0, 1), (0, 2),
                                                                   (1, 0), (1, 1), (1, 2)]


def test_repartition_count_is_the_upstream_task_count() -> None:
    topology = build(lambda b: (b.stream("a").merge(b.stream("b")).select_key(lambda k, v: v)
                                .group_by_key().count(name="c").to_stream().to("out")),
                     topics={"a": 2, "b": 6})
    counts = resolve_partitions(topology, {})
    assert counts["app-c-repartition"] == 6
    assert counts["out"] == 6


def test_declared_repartition_partitions_win() -> None:
    topology = build(lambda b: b.stream("in").repartition(name="re", partitions=8).to("out"), topics={"in": 2})
    [internal] = topology.repartition_topics
    assert resolve_partitions(topology, {}) == {"in": 2, internal: 8, "out": 8}


def test_declared_sink_partitions_are_kept() -> None:
    topology = build(lambda b: b.stream("in").to("out"), topics={"in": 4, "out": 1})
    assert resolve_partitions(topology, {}) == {"in": 4, "out": 1}


def test_repartition_count_when_the_reader_is_numbered_first() -> None:
    def fn(b: sk.StreamsBuilder) -> None:
        clicks = b.stream("clicks")
        counts = b.stream("views").select_key(lambda k, v: v).group_by_key().count(name="c")
        clicks.merge(counts.to_stream()).to("out")
    topology = build(fn, topics={"clicks": 2, "views": 3})
    # the merge puts the repartition's reader in the sub-topology of 'clicks', numbered first
    assert topology.sub_topologies[0].source_topics == ("clicks", "app-c-repartition")
    counts = resolve_partitions(topology, {})
    assert counts["app-c-repartition"] == 3


def test_default_names_come_from_the_definition() -> None:
    def fn(b: sk.StreamsBuilder) -> None:
        s = b.stream("in")
        s.filter(bool).to("a")
        s.filter(bool).map_values(str).to("b")
        s.group_by_key().count()
    topology = build(fn)
    assert list(topology.logical_nodes) == [
        "in", "in.filter", "in.filter.to-a", "in.filter-2", "in.filter-2.map_values",
        "in.filter-2.map_values.to-b", "in.count"]
    assert list(topology.stores) == ["in.count"]


def test_explicit_repartition_topic_follows_the_internal_naming_convention() -> None:
    topology = build(lambda b: b.stream("in").repartition(name="dlq").to("out"), app_id="orders")
    assert topology.repartition_topics == ("orders-dlq-repartition",)


def test_aggregation_changelog_can_be_turned_off() -> None:
    topology = build(lambda b: b.stream("in").group_by_key().count(name="local", changelog=False)
                     .to_stream().to("out"), topics={"in": 2})
    assert topology.stores["local"].changelog is False
    assert topology.changelog_topics == ()
    assert "no changelog: rebuilt from the input topics" in topology.describe()
    logged = build(lambda b: b.stream("in").group_by_key().reduce(lambda a, v: a + v, name="sum")
                   .to_stream().to("out"), topics={"in": 2})
    assert logged.changelog_topics == ("app-sum-changelog",)
