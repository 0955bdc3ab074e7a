"""The names streamkit derives (streamkit.core.names): one rule each, used by the DSL, the
IR passes, the stores and the runtime alike."""
import pytest

from streamkit import App
from streamkit.core.names import (changelog_topic, is_changelog_topic, is_repartition_topic, parse_task_id,
                                  repartition_suffix, task_id)


@pytest.mark.parametrize("sub_topology, partition", [(0, 0), (1, 2), (12, 345), (0, 2 ** 24 - 1)])
def test_task_ids_round_trip(sub_topology: int, partition: int) -> None:
    assert parse_task_id(task_id(sub_topology, partition)) == (sub_topology, partition)


def test_task_ids_sort_numerically_by_their_parsed_form() -> None:
    ids = [task_id(s, p) for s, p in [(10, 1), (2, 10), (2, 9), (1, 0)]]
    assert sorted(ids, key=parse_task_id) == ["1_0", "2_9", "2_10", "10_1"]


def test_a_changelog_topic_is_a_changelog_and_never_a_repartition_topic() -> None:
    for store in ("counts", "by-user-repartition", "x.repartition"):
        topic = changelog_topic("shop", store)
        assert topic == f"shop-{store}-changelog"
        assert is_changelog_topic(topic) and not is_repartition_topic(topic)


@pytest.mark.parametrize("name", [None, "re", "by-id-repartition", "my_repartition", "orders.repartition"])
def test_every_repartition_node_gets_a_topic_the_topology_knows_as_a_repartition_topic(name) -> None:
    """The DSL names the topic, the topology recognises it: one rule on both sides (an
    automatically named ``.repartition()``, ``<parent>.repartition``, was named by the
    DSL but not recognised by the topology, so it got no writer merge nor purge)."""
    app = App("app")
    app.topology(lambda b: b.stream("in").repartition(name=name).to("out"))
    topology = app.build()
    assert len(topology.internal_topics) == 1
    assert topology.repartition_topics == topology.internal_topics
    assert topology.changelog_topics == ()
    (topic,) = topology.repartition_topics
    node = name or "in.repartition"
    assert topic == f"app-{repartition_suffix(node)}"


def test_store_changelogs_are_the_topologys_changelog_topics() -> None:
    app = App("app")
    app.topology(lambda b: b.stream("in").group_by_key().count(name="counts").to_stream().to("out"))
    topology = app.build()
    assert topology.changelog_topics == (changelog_topic("app", "counts"),)
    assert topology.changelog_topic("counts") == changelog_topic("app", "counts")
    assert topology.repartition_topics == ()
