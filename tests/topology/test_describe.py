"""describe(): Kafka Streams-style text and a mermaid flowchart."""
from __future__ import annotations

import pytest

import streamkit as sk

PAGEVIEWS_TEXT = """\
Topology: pageviews
  Sub-topology: 0
    Source: pageviews (topic: pageviews)
      --> pageviews.filter
    Processor: pageviews.filter (filter)
      --> pageviews.filter.map_values
      <-- pageviews
    Processor: pageviews.filter.map_values (map_values)
      --> pageviews.filter.map_values.group_by
      <-- pageviews.filter
    Processor: pageviews.filter.map_values.group_by (select_key)
      --> page-counts-repartition
      <-- pageviews.filter.map_values
    Sink: page-counts-repartition (topic: pageviews-page-counts-repartition)
      <-- pageviews.filter.map_values.group_by
  Sub-topology: 1
    Source: page-counts-repartition-source (topic: pageviews-page-counts-repartition)
      --> page-counts
    Processor: page-counts (aggregate: count, stores: [page-counts])
      --> page-counts.to_stream
      <-- page-counts-repartition-source
    Processor: page-counts.to_stream (to_stream)
      --> page-counts.to_stream.to-page-counts
      <-- page-counts
    Sink: page-counts.to_stream.to-page-counts (topic: page-counts)
      <-- page-counts.to_stream
  Stores:
    page-counts (key_value, changelog: pageviews-page-counts-changelog)
"""


def pageviews_app() -> sk.App:
    """The example of the issue, verbatim."""
    app = sk.App("pageviews")
    views = app.topic("pageviews", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=3)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream(views, timestamp=lambda key, value: value["ts"])
           .filter(lambda key, value: value["amount"] > 10)
           .map_values(lambda value: {**value, "page": value["page"].lower()})
           .group_by(lambda key, value: value["page"])
           .count(name="page-counts")
           .to_stream()
           .to("page-counts"))
    return app


def test_pageviews_text() -> None:
    app = pageviews_app()
    assert app.describe() == PAGEVIEWS_TEXT
    assert app.describe("text") == app.build().describe() == PAGEVIEWS_TEXT


SHIPPED_PAGEVIEWS_TEXT = """\
Topology: pageviews
  Sub-topology: 0
    Source: pageviews (topic: pageviews)
      --> pageviews.filter
    Processor: pageviews.filter (filter)
      --> pageviews.filter.map_values
      <-- pageviews
    Processor: pageviews.filter.map_values (map_values)
      --> pageviews.filter.map_values.group_by
      <-- pageviews.filter
    Processor: pageviews.filter.map_values.group_by (select_key)
      --> page-counts-repartition, page-counts-per-minute-repartition
      <-- pageviews.filter.map_values
    Sink: page-counts-repartition (topic: pageviews-page-counts-repartition)
      <-- pageviews.filter.map_values.group_by
    Sink: page-counts-per-minute-repartition (topic: pageviews-page-counts-per-minute-repartition)
      <-- pageviews.filter.map_values.group_by
  Sub-topology: 1
    Source: page-counts-repartition-source (topic: pageviews-page-counts-repartition)
      --> page-counts
    Processor: page-counts (aggregate: count, stores: [page-counts])
      --> page-counts.to_stream
      <-- page-counts-repartition-source
    Processor: page-counts.to_stream (to_stream)
      --> page-counts.to_stream.to-page-counts
      <-- page-counts
    Sink: page-counts.to_stream.to-page-counts (topic: page-counts)
      <-- page-counts.to_stream
  Sub-topology: 2
    Source: page-counts-per-minute-repartition-source (topic: pageviews-page-counts-per-minute-repartition)
      --> page-counts-per-minute
    Processor: page-counts-per-minute (windowed_aggregate: count, TumblingWindows(size=1m, grace=10s), stores: [page-counts-per-minute])
      --> minute-finals
      <-- page-counts-per-minute-repartition-source
    Processor: minute-finals (suppress: until_window_closes, stores: [minute-finals])
      --> minute-finals.to_stream
      <-- page-counts-per-minute
    Processor: minute-finals.to_stream (to_stream)
      --> minute-finals.to_stream.to-page-counts-per-minute, minutes-to-sqlite
      <-- minute-finals
    Sink: minute-finals.to_stream.to-page-counts-per-minute (topic: page-counts-per-minute)
      <-- minute-finals.to_stream
    Sink: minutes-to-sqlite (Database(<DB>, table page_counts_per_minute))
      <-- minute-finals.to_stream
  Stores:
    page-counts (key_value, changelog: pageviews-page-counts-changelog)
    page-counts-per-minute (window, changelog: pageviews-page-counts-per-minute-changelog)
    minute-finals (suppression, changelog: pageviews-minute-finals-changelog)
"""


def test_the_shipped_pageviews_app_is_the_issue_example_plus_its_per_minute_counts_and_sqlite_copy() -> None:
    from apps import pageviews
    assert pageviews.app.describe() == SHIPPED_PAGEVIEWS_TEXT.replace("<DB>", pageviews.DATABASE)


def test_pageviews_example_counts_pages() -> None:
    from streamkit.testing import TopologyTestDriver
    driver = TopologyTestDriver(pageviews_app())
    views = driver.input_topic("pageviews")
    views.pipe_input("u1", {"page": "Home", "amount": 20, "ts": 1000})
    views.pipe_input("u2", {"page": "home", "amount": 5, "ts": 2000})     # filtered out
    views.pipe_input("u3", {"page": "HOME", "amount": 50, "ts": 3000})
    views.pipe_input("u1", {"page": "About", "amount": 11, "ts": 4000})
    out = driver.output_topic("page-counts").read_records()
    assert [(r.key, r.value, r.timestamp) for r in out] == [("home", 1, 1000), ("home", 2, 3000),
                                                            ("about", 1, 4000)]


def test_pageviews_mermaid() -> None:
    mermaid = pageviews_app().describe("mermaid")
    lines = mermaid.splitlines()
    assert lines[0] == "flowchart LR"
    # one subgraph per sub-topology, each closed
    assert '  subgraph sub0["Sub-topology 0"]' in lines
    assert '  subgraph sub1["Sub-topology 1"]' in lines
    assert lines.count("  end") == 2
    # nodes with their kind
    assert '    n_pageviews_filter["pageviews.filter<br/>filter"]' in lines
    assert '    n_page_counts["page-counts<br/>aggregate: count"]' in lines
    # topics are stadiums, stores cylinders
    for topic in ["pageviews", "page-counts", "pageviews-page-counts-repartition"]:
        node_id = "t_" + "".join(c if c.isalnum() else "_" for c in topic)
        assert f'  {node_id}(["{topic}"])' in lines
    assert '  s_page_counts[("page-counts")]' in lines
    # edges: topic -> source, node -> node, sink -> topic, node -.- store
    assert "  t_pageviews --> n_pageviews" in lines
    assert "  n_pageviews --> n_pageviews_filter" in lines
    assert "  n_page_counts_repartition --> t_pageviews_page_counts_repartition" in lines
    assert "  t_pageviews_page_counts_repartition --> n_page_counts_repartition_source" in lines
    assert "  n_page_counts -.- s_page_counts" in lines
    assert "  n_page_counts_to_stream_to_page_counts --> t_page_counts" in lines
    assert mermaid.endswith("\n")


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown describe format 'dot': use 'text' or 'mermaid'"):
        pageviews_app().describe("dot")


def test_text_of_processors_tables_splits_and_stores() -> None:
    app = sk.App("shop")

    @app.processor(stores=[sk.stores.key_value("seen", changelog=False)], name="dedupe")
    def dedupe(ctx, key, value):
        pass

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        branches = (b.stream("orders").process(dedupe).split(name="route")
                    .branch(lambda k, v: v["big"], name="big").default_branch(name="small"))
        branches["big"].merge(branches["small"], name="all").to("audited")
        b.table("prices").to_stream().to("price-changes")

    assert app.describe() == """\
Topology: shop
  Sub-topology: 0
    Source: orders (topic: orders)
      --> orders.dedupe
    Processor: orders.dedupe (process: dedupe, stores: [seen])
      --> route
      <-- orders
    Processor: route (split)
      --> route-big, route-small
      <-- orders.dedupe
    Processor: route-big (branch)
      --> all
      <-- route
    Processor: route-small (branch)
      --> all
      <-- route
    Processor: all (merge)
      --> all.to-audited
      <-- route-big, route-small
    Sink: all.to-audited (topic: audited)
      <-- all
  Sub-topology: 1
    Source: prices (topic: prices)
      --> prices-table
    Processor: prices-table (table_source, stores: [prices-table])
      --> prices-table.to_stream
      <-- prices
    Processor: prices-table.to_stream (to_stream)
      --> prices-table.to_stream.to-price-changes
      <-- prices-table
    Sink: prices-table.to_stream.to-price-changes (topic: price-changes)
      <-- prices-table.to_stream
  Stores:
    seen (key_value, no changelog: rebuilt from the input topics when local state is lost)
    prices-table (key_value, changelog: shop-prices-table-changelog)
"""


def test_mermaid_of_a_merge_has_both_edges() -> None:
    app = sk.App("m")
    app.topology(lambda b: b.stream("a").merge(b.stream("b"), name="both").to("out"))
    lines = app.describe("mermaid").splitlines()
    assert "  n_a --> n_both" in lines and "  n_b --> n_both" in lines
    assert sum(1 for line in lines if line.startswith("  subgraph")) == 1
    assert not any(line.strip().startswith("s_") for line in lines)  # no stores


def test_describe_without_stores_has_no_stores_section() -> None:
    app = sk.App("doc-app")
    app.topology(lambda b: b.stream("lines").filter(lambda k, v: v).to("non-empty"))
    assert app.describe() == """\
Topology: doc-app
  Sub-topology: 0
    Source: lines (topic: lines)
      --> lines.filter
    Processor: lines.filter (filter)
      --> lines.filter.to-non-empty
      <-- lines
    Sink: lines.filter.to-non-empty (topic: non-empty)
      <-- lines.filter
"""


def test_mermaid_ids_are_unique() -> None:
    app = sk.App("mm")
    app.topology(lambda b: (b.stream("orders.v1").to("x"), b.stream("orders-v1").to("y")))
    lines = app.describe("mermaid").splitlines()
    topic_ids = [line.split("(")[0].strip() for line in lines if '(["' in line]
    node_ids = [line.split("[")[0].strip() for line in lines if line.startswith("    n_")]
    assert len(topic_ids) == len(set(topic_ids)) == 4
    assert len(node_ids) == len(set(node_ids)) == 4


def test_mermaid_draws_a_global_table_fed_by_its_topic_and_the_joins_that_read_it() -> None:
    app = sk.App("gt")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        pages = b.global_table("pages", name="pages-table")
        views = b.stream("views")
        views.join(pages, key_selector=lambda k, v: v["page"], joiner=lambda v, p: (v, p)).to("enriched")
        views.left_join(pages, key_selector=lambda k, v: v["page"], joiner=lambda v, p: (v, p),
                        name="maybe").to("maybe-enriched")

    lines = app.describe("mermaid").splitlines()
    assert '  g_pages_table[("pages-table<br/>global table")]' in lines
    assert '  t_pages(["pages"])' in lines
    assert "  t_pages -->|all partitions| g_pages_table" in lines
    assert "  g_pages_table -.->|lookup| n_views_join" in lines
    assert "  g_pages_table -.->|lookup| n_maybe" in lines
    assert not any(line.strip().startswith("s_") for line in lines)  # not drawn as a task's store
